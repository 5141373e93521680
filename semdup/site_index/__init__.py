"""A site's own index connected to semdup: ``semdup enable`` (its companion index) and ``semdup upgrade`` (a new
model's companion, one alias switch). Run by the operator, not by the workers. See README.md in this folder."""

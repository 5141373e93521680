"""Training losses, one per file, each with a pure ``compute_*`` function tested on hand-built tensors.

Importing a loss imports torch; the registry names the loss class of each architecture.
Other helpers' losses (contrastive, max-margin) live beside these and are imported by their models.
"""

from __future__ import annotations

__all__: list[str] = []

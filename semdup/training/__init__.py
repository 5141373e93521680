"""Training (torch): models, losses, the trainer, recipes per data set, pairs, pre-training, word
vectors and checkpoints. Nothing that serves imports this package."""

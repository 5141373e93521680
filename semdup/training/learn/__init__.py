"""``semdup learn``'s training core: a sentence encoder fine-tuned on a site's own duplicate links, on a budget.

:mod:`~semdup.training.learn.data` turns labelled links into ranking groups, :mod:`~semdup.training.learn.trainer`
fine-tunes the encoder with the in-batch softmax loss inside a time budget (checkpointed, resumable). Export, the
fusion fit and the gate that decides whether the result may replace the current bundle are in
:mod:`semdup.learn.learned_bundle` (they need the export layer).
"""

"""The moderators' side of duplicate flags: the review page, verdicts, and calibration from verdicts.

Workers flag likely duplicates (:mod:`semdup.alerts`); here a moderator sees each flagged pair side by side at
``/review`` of ``semdup serve`` (:mod:`.router`, composed into the service by :mod:`.app`), says "duplicate" or
"not a duplicate" (:mod:`.verdicts`, index ``semdup-verdicts``), and ``semdup calibrate`` fits the site's flagging
threshold from those verdicts (:mod:`.calibrate`), which the workers pick up at their next task. ``semdup
verdicts`` (or ``/review/api/verdicts.jsonl``) exports the verdicts as labelled pairs (:mod:`.export`).

Above ``semdup.alerts`` in the layers: it reads the flag store and the reranker's settings, and nothing below
imports it. Like every serving package it never imports torch.
"""

from semdup.review.verdicts import DUPLICATE, NOT_DUPLICATE, VERDICTS, VERDICTS_INDEX, Verdict, record_verdict

__all__ = ["DUPLICATE", "NOT_DUPLICATE", "VERDICTS", "VERDICTS_INDEX", "Verdict", "record_verdict"]

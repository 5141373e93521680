"""Duplicate alerts: flag the likely duplicates of posts as they are indexed, and keep them where moderators look.

``flag_duplicates`` ranks posts against their index with the :class:`~semdup.reranker.Reranker` and records the
candidates past the decision threshold in ``semdup-duplicates`` (:mod:`semdup.alerts.store`); the Celery task
``FLAG_DUPLICATES`` (:mod:`semdup.alerts.tasks`, loaded by the worker app of :mod:`semdup.apps.worker`, not
imported here) runs it after indexing; ``list_flags`` reads them back (``semdup duplicates``).
"""

from semdup.alerts.flag import decision_threshold, flag_duplicates
from semdup.alerts.settings import AlertSettings
from semdup.alerts.store import FLAGS_INDEX, Flag, list_flags

__all__ = [
    "AlertSettings",
    "FLAGS_INDEX",
    "Flag",
    "decision_threshold",
    "flag_duplicates",
    "list_flags",
]

"""Names of semdup's Celery tasks, for code that sends them by name without importing the worker's modules.

The reranker's HTTP ingest and the indexer's chaining of the duplicate flagging send tasks across package
boundaries (``indexer`` and ``reranker`` never import each other), so the names live here, once.
"""

from __future__ import annotations

__all__ = ["INDEXER_QUEUE", "INDEX_POSTS", "BACKFILL_BATCH", "SYNC_POSTS", "DELETE_POSTS", "FLAG_DUPLICATES"]

INDEXER_QUEUE = "semdup.indexer"  # the indexing workers' queue: semdup.ingest.celery_app.QUEUE (a test checks)
INDEX_POSTS = "semdup.indexer.index_posts"  # (index, posts as JSON, model_version, job=None)
BACKFILL_BATCH = "semdup.indexer.backfill_batch"  # (index, ids, model_version, job=None)
SYNC_POSTS = "semdup.indexer.sync_posts"  # (site index or alias, ids, model_version, job=None): re-read, encode, write
DELETE_POSTS = "semdup.indexer.delete_posts"  # (index, ids, job=None)
FLAG_DUPLICATES = "semdup.alerts.flag_duplicates"  # (index, ids, model_version): record likely duplicates

"""The write side's way in: index jobs, from whichever producer, to the workers' queue, and back as counted outcomes.

Every producer (``semdup index-posts``, ``backfill``, ``watch``, and ``POST /v1/posts``, ``/sync``, ``/delete``)
submits a job through :func:`semdup.ingest.jobs.submit`: its batches recorded in a ledger before they are published
(:mod:`.ledger`), each task's outcome recorded as its last step (:mod:`.outcomes`), a wait that counts them
(:mod:`.jobs`, :mod:`.waiting`), a sweeper that sends again what a worker lost (:mod:`.sweeper`, reading the
broker through :mod:`.backlog`), the queue's Celery app (:mod:`.celery_app`), the posts that could not be written
(:mod:`.parking`), and the jobs that find what to send: :mod:`.backfill` (a semdup index) and :mod:`.reconcile` (a
site's index, by content hash). :mod:`.lexical_index` creates a semdup index. The workers that run the tasks are
:mod:`semdup.indexer`, above this package. Nothing is imported here: import the module you need. README.md in this
folder tells who may import the package and what it imports.
"""

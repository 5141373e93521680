"""Indexing: the index schema and bulk writer, and the Celery workers that write semdup's fields.

Nothing heavy is imported here (no Celery app, no onnxruntime): import the module you need, e.g.
``semdup.indexer.tasks`` to enqueue work or ``semdup.indexer.batch_writer`` to index without a broker.
See README.md in this folder for the delivery guarantees, the parking store, and the sync of a site's posts to its
companion (``semdup enable`` and ``upgrade`` are :mod:`semdup.site_index`'s).
"""

"""``semdup demo`` as a library: :func:`semdup.demo.run.run` builds, indexes, reranks and returns the table
(:class:`semdup.demo.result.DemoResult`); :mod:`semdup.demo.review` serves the review page after it."""

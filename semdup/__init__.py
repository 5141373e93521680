"""semdup: semantic duplicate-question detection for OpenSearch clusters.

Data flow, one package per layer (imports only point down; ``lint-imports`` checks the contracts in
pyproject.toml)::

    post -> core.text_pipeline -> training (torch: models, losses, trainer) -> export (checkpoint -> ONNX)
         -> bundle (verified, onnxruntime) -> indexer (Celery workers -> OpenSearch bulk, index_format fields)
    query -> search_templates (BM25/LMJ/DFR/IB/...) -> reranker (candidates, fusion over stored fields) -> decision

    core (posts, settings, text pipeline, scoring maths, measures) < data | devstack < index_format < bundle
    < search_templates < training | indexer | reranker < export < evaluation < cli;  experiments/ on top, not installed
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]

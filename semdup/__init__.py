"""semdup: semantic duplicate-question detection for OpenSearch clusters.

Data flow, one package per verb::

    post -> encoders.text_pipeline -> encoders (torch, training) -> export (ONNX bundle)
         -> indexer (Celery + onnxruntime -> OpenSearch bulk)
    query -> search_templates (BM25/LMJ/DFR/IB/...) -> candidates -> reranker (fusion) -> decision
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]

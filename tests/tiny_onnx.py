"""A tiny wordpiece bundle built without torch: a real ONNX encoder (embedding lookup, masked mean pooling, a dense
layer) behind a word-level tokenizer, sealed with ``write_bundle`` as ``semdup export`` seals one.

Each row's vector depends only on its own unmasked tokens, as a transformer's does under its attention mask, so
length batching must not change it. ``scale`` multiplies the embeddings: at 1 the encoder is well inside fp16's
range; at 1e5 most embeddings lie beyond what the fp16 converter keeps (it clips weights to ±1e4), so the fp16
variant's vectors point elsewhere (cosine about 0.86: a variant that must be refused).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace
from tokenizers.processors import TemplateProcessing

from semdup.bundle.bundle import write_bundle
from semdup.core.text_pipeline import TextPipeline, TextPipelineSettings, Vocabulary

WORDS = [f"w{i}" for i in range(60)] + "visa usb drive water train bus flight battery laptop list".split()
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
DIM = 16
MAX_LEN = 32


def tiny_tokenizer() -> Tokenizer:
    vocab = {t: i for i, t in enumerate(SPECIAL + WORDS)}
    tok = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    tok.post_processor = TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tok.enable_truncation(max_length=MAX_LEN)
    return tok


def tiny_encoder(vocab_size: int, dim: int = DIM, scale: float = 1.0, seed: int = 0) -> bytes:
    """ONNX bytes: vector = (mean over unmasked positions of E[input_ids]) @ W, float32 [B, dim]."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    emb = (rng.standard_normal((vocab_size, dim)) * scale).astype(np.float32)
    w = (rng.standard_normal((dim, dim)) / np.sqrt(dim)).astype(np.float32)
    nodes = [
        helper.make_node("Gather", ["E", "input_ids"], ["x"]),  # [B, L, D]
        helper.make_node("Cast", ["attention_mask"], ["m"], to=TensorProto.FLOAT),  # [B, L]
        helper.make_node("Unsqueeze", ["m", "axis2"], ["m3"]),  # [B, L, 1]
        helper.make_node("Mul", ["x", "m3"], ["xm"]),
        helper.make_node("ReduceSum", ["xm", "axis1"], ["s"], keepdims=0),  # [B, D]
        helper.make_node("ReduceSum", ["m3", "axis1"], ["n"], keepdims=0),  # [B, 1]
        helper.make_node("Max", ["n", "one"], ["n1"]),
        helper.make_node("Div", ["s", "n1"], ["mean"]),
        helper.make_node("MatMul", ["mean", "W"], ["vector"]),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny-wordpiece",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "length"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "length"]),
        ],
        [helper.make_tensor_value_info("vector", TensorProto.FLOAT, ["batch", dim])],
        initializer=[
            numpy_helper.from_array(emb, "E"),
            numpy_helper.from_array(w, "W"),
            numpy_helper.from_array(np.array([2], dtype=np.int64), "axis2"),
            numpy_helper.from_array(np.array([1], dtype=np.int64), "axis1"),
            numpy_helper.from_array(np.array([1.0], dtype=np.float32), "one"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def tiny_wordpiece_bundle(out: Path, *, scale: float = 1.0, title: bool = True) -> Path:
    """A sealed bundle directory: input kind ``wordpiece``, a BOW path (IDF-like weights) and, with ``title``, a
    title term in its fusion."""
    settings = TextPipelineSettings()
    pipeline = TextPipeline(settings)
    vocab = Vocabulary.build([pipeline.tokens(" ".join(WORDS[i : i + 7])) for i in range(0, len(WORDS), 3)])
    tok = tiny_tokenizer()
    vocab_json = {"tokens": vocab.itos, "df": list(vocab.df), "n_docs": vocab.n_docs}
    weights = np.linspace(0.5, 2.0, len(vocab)).astype(np.float32)
    import io
    import json

    buf = io.BytesIO()
    np.save(buf, weights, allow_pickle=False)
    fusion = {"beta_bow": 0.2, "beta_dense": 1.0, "alpha": 0.1}
    if title:
        fusion["beta_title"] = 0.5
    manifest = {
        "architecture": "tiny-wordpiece",
        "input_kind": "wordpiece",
        "input_names": ["input_ids", "attention_mask"],
        "output_name": "vector",
        "dimension": DIM,
        "id_range": tok.get_vocab_size(),
        "fusion": fusion,
        "threshold": None,
        "pipeline": settings.to_dict(),
        "tokenizer": {"file": "tokenizer.json", "max_len": MAX_LEN},
        "vocab_size": len(vocab),
    }
    files = {
        "encoder.onnx": tiny_encoder(tok.get_vocab_size(), scale=scale),
        "vocab.json": json.dumps(vocab_json).encode("utf-8"),
        "term_weights.npy": buf.getvalue(),
        "tokenizer.json": tok.to_str().encode("utf-8"),
    }
    return write_bundle(out, files, manifest)

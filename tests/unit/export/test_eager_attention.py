"""Transformer encoders are traced with the eager attention, and the export still equals the torch module."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from semdup.bundle.verify import make_session
from semdup.export.onnx_export import eager_attention, export_encoder
from semdup.training.models.minilm import MeanPoolEncoder

transformers = pytest.importorskip("transformers")


def _tiny_encoder() -> MeanPoolEncoder:
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=60, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=48, max_position_embeddings=64,
                                     attn_implementation="sdpa")
    return MeanPoolEncoder(transformers.BertModel(config)).eval()


def _inputs() -> dict[str, np.ndarray]:
    ids = np.array([[2, 7, 9, 11, 5, 3], [2, 8, 3, 0, 0, 0]], dtype=np.int64)
    return {"input_ids": ids, "attention_mask": (ids != 0).astype(np.int64)}


def test_switches_to_eager_for_the_trace_and_back() -> None:
    encoder = _tiny_encoder()
    assert encoder.bert.config._attn_implementation == "sdpa"
    with eager_attention(encoder) as used:
        assert used == "eager" and encoder.bert.config._attn_implementation == "eager"
    assert encoder.bert.config._attn_implementation == "sdpa"


def test_a_module_without_a_transformer_is_left_alone() -> None:
    with eager_attention(nn.Sequential(nn.Linear(3, 2))) as used:
        assert used is None


def test_eager_export_equals_the_sdpa_module() -> None:
    encoder = _tiny_encoder()
    arrays = _inputs()
    with eager_attention(encoder):
        model = export_encoder(encoder, "wordpiece", arrays)
    session = make_session(model, ["CPUExecutionProvider"], 1)
    got = session.run(["vector"], arrays)[0]
    with torch.no_grad():
        ref = encoder(*(torch.from_numpy(arrays[n]) for n in ("input_ids", "attention_mask"))).numpy()
    np.testing.assert_allclose(got, ref, atol=1e-5)


def test_int8_channel_quantises_matmul_weights_only() -> None:
    import onnx

    from semdup.export.quantize import quantize_encoder, quantize_method

    encoder = _tiny_encoder()
    with eager_attention(encoder):
        model = export_encoder(encoder, "wordpiece", _inputs())
    graph = onnx.load_from_string(quantize_encoder(model, "int8-channel")).graph
    ops = {n.op_type for n in graph.node}
    assert "MatMulInteger" in ops or "DynamicQuantizeMatMul" in ops
    assert "Gather" in ops and not any(i.data_type == onnx.TensorProto.INT8 and len(i.dims) == 2 and i.dims[0] == 60
                                       for i in graph.initializer)  # the embedding table stays fp32
    assert "per_channel=True" in quantize_method("int8-channel") and quantize_method("int8").endswith("QInt8)")
    with pytest.raises(ValueError, match="accepted: int8, int8-channel"):
        quantize_encoder(model, "int4")

"""The neural-search peer benchmark's pure parts: report and ratios, the model zip, the plugin repack."""

from __future__ import annotations

import io
import json
import math
import zipfile

import pytest

from semdup.devstack.ml_plugins import ENGINE_SERVICE, repack_ml_plugin, strip_engine_service
from benchmarks.peer_model import (
    MODEL_FILE,
    TOKENIZER_FILE,
    hybrid_pipeline,
    hybrid_query,
    ml_settings,
    model_zip,
    peer_tokenizer_json,
)
from benchmarks.peer_report import (
    build_report,
    format_report,
    ingest_side,
    quiet_enough,
    safe_ratio,
)
from semdup.core.errors import ConfigError


def _report():
    ingest = {"peer": ingest_side(1000, 20.0, 1.0, 36.0), "semdup": ingest_side(1000, 10.0, 15.0, 5.0)}
    query = {"peer": [10.0] * 99 + [50.0], "semdup": [20.0] * 100, "semdup_fast": [5.0] * 100}
    encode = {"peer": [4.0, 4.0], "semdup": [2.0, 2.0]}
    return build_report({"command": "python -m x", "load_average": {"start": 1.5}}, ingest, query, encode,
                        [1.0, 0.999999])


def test_ratios_are_semdup_over_peer():
    r = _report()
    assert r["ingest"]["peer"]["posts_per_s"] == 50.0
    assert r["ingest"]["ratio"] == 2.0  # 100 posts/s over 50
    assert r["ingest"]["cpu_ratio"] == pytest.approx(0.020 / 0.037)
    assert r["query"]["p50_ratio"] == 2.0
    assert r["query"]["fast_p50_ratio"] == 0.5
    assert r["query"]["p99_ratio"] == pytest.approx(20.0 / r["query"]["peer"]["p99"])
    assert r["encoding"]["p50_ratio"] == 0.5
    assert r["embeddings"] == {"n": 2, "cosine_min": 0.999999, "cosine_mean": pytest.approx(0.9999995)}
    json.dumps(r, allow_nan=False)  # one JSON object, no NaN


def test_report_text_names_every_figure():
    text = format_report(_report())
    for part in ("ingest ratio semdup / peer: 2.00", "p50 2.00", "semdup_fast", "encoding ratio", "start 1.50"):
        assert part in text


def test_a_loaded_start_refuses_the_run_unless_allowed_and_the_report_says_it_is_loaded():
    assert quiet_enough(0.4, allow_load=False) is None and quiet_enough(1.0, allow_load=False) is None
    why = quiet_enough(3.2, allow_load=False)
    assert why is not None and "3.20" in why and "--allow-load" in why and "docs/benchmarks.md" in why
    assert quiet_enough(3.2, allow_load=True) is None
    assert "LOADED RUN: load average 1.50" in format_report(_report())  # the report's start load is 1.5
    quiet = build_report({"load_average": {"start": 0.3}}, {}, {"peer": [1.0], "semdup": [1.0]}, {}, [])
    assert "LOADED" not in format_report(quiet)


def test_missing_figures_give_no_ratio():
    assert safe_ratio(1.0, 0.0) is None and safe_ratio(math.nan, 1.0) is None and safe_ratio(None, 1.0) is None
    r = build_report({}, {"semdup": ingest_side(10, 0.0, 1.0, 1.0)}, {}, {}, [])
    assert "ratio" not in r["ingest"] and r["ingest"]["semdup"]["posts_per_s"] is None
    assert r["embeddings"]["cosine_min"] is None
    json.dumps(r, allow_nan=False)


def test_model_zip_layout_is_one_onnx_and_the_tokenizer():
    data = model_zip(b"onnx-bytes", b'{"x": 1}')
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        assert zf.namelist() == [MODEL_FILE, TOKENIZER_FILE]
        assert sum(n.endswith(".onnx") for n in zf.namelist()) == 1  # ml-commons refuses two
        assert zf.read(MODEL_FILE) == b"onnx-bytes"
    assert model_zip(b"onnx-bytes", b'{"x": 1}') == data  # same files, same sha256


def test_peer_tokenizer_truncates_like_the_bundle_and_does_not_pad():
    published = {"truncation": {"max_length": 128, "strategy": "LongestFirst"},
                 "padding": {"strategy": {"Fixed": 128}}, "model": {"type": "WordPiece"}}
    spec = json.loads(peer_tokenizer_json(json.dumps(published).encode(), 256))
    assert spec["truncation"]["max_length"] == 256 and spec["padding"] is None
    assert spec["model"] == {"type": "WordPiece"}


def test_pipelines_and_query_carry_the_peer_settings():
    combo = hybrid_pipeline()["phase_results_processors"][0]["normalization-processor"]
    assert combo["normalization"]["technique"] == "min_max"
    assert combo["combination"]["parameters"]["weights"] == [0.3, 0.7]
    q = hybrid_query("visa qatar", "Visa for Qatar? ...", "m1", k=100, size=10)["query"]["hybrid"]
    assert q["pagination_depth"] == 100 and q["queries"][1]["neural"]["text_embedding"]["k"] == 100
    assert ml_settings("http://127.0.0.1:4321/model.zip")["plugins.ml_commons.trusted_url_regex"] == (
        r"^http://127\.0\.0\.1:4321/.*$")


def _jar(entries):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in entries.items():
            zf.writestr(name, data)
    return buf.getvalue()


def test_strip_engine_service_removes_only_that_entry():
    jar = _jar({"ai/djl/pytorch/Engine.class": b"c", ENGINE_SERVICE: b"ai.djl.pytorch.PtEngineProvider"})
    with zipfile.ZipFile(io.BytesIO(strip_engine_service(jar))) as zf:
        assert zf.namelist() == ["ai/djl/pytorch/Engine.class"]
    with pytest.raises(ConfigError, match="EngineProvider"):
        strip_engine_service(_jar({"a.class": b"c"}))


def test_repack_ml_plugin_rewrites_the_pytorch_engine_jar(tmp_path):
    src = tmp_path / "ml.zip"
    engine = _jar({ENGINE_SERVICE: b"x", "E.class": b"e"})
    with zipfile.ZipFile(src, "w") as zf:
        zf.writestr("pytorch-engine-0.31.1.jar", engine)
        zf.writestr("plugin-descriptor.properties", "name=opensearch-ml\n")
    dst = tmp_path / "repacked.zip"
    assert repack_ml_plugin(src, dst) == "pytorch-engine-0.31.1.jar"
    with zipfile.ZipFile(dst) as zf:
        assert zf.read("plugin-descriptor.properties") == b"name=opensearch-ml\n"
        with zipfile.ZipFile(io.BytesIO(zf.read("pytorch-engine-0.31.1.jar"))) as inner:
            assert inner.namelist() == ["E.class"]
    other = tmp_path / "other.zip"
    with zipfile.ZipFile(other, "w") as zf:
        zf.writestr("plugin-descriptor.properties", "x")
    with pytest.raises(ConfigError, match="pytorch-engine"):
        repack_ml_plugin(other, tmp_path / "none.zip")
    assert not (tmp_path / "none.zip").exists()

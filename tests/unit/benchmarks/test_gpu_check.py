"""The GPU check (scripts/gpu/check.sh) and what carries it to the GPU machine (scripts/gpu/pack.py), on CPU.

The CPU dry run is the check itself with ``--device cpu`` on a small slice and the learn step skipped: a real
MiniLM bundle, the worker path in a child process, the torch reference (fp32 on CPU). No timing is asserted.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.gpu_check import NullSink, cycled_posts, task_slices
from semdup.core.posts import Post
from semdup.opensearch_io.bulk import bulk_write

REPO = Path(__file__).resolve().parents[3]


def _pack():
    spec = importlib.util.spec_from_file_location("gpu_pack", REPO / "scripts" / "gpu" / "pack.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_null_sink_answers_every_document_as_written() -> None:
    sink = NullSink()
    actions = [{"_op_type": "index", "_index": "x", "_id": str(i), "_source": {"post_id": str(i)}} for i in range(7)]
    report = bulk_write(sink, actions, chunk_size=3)  # type: ignore[arg-type]
    assert report.written == 7 and report.ok and sink.documents == 7


def test_the_corpus_is_cycled_with_ids_of_their_own() -> None:
    corpus = [Post("a", "t", "b"), Post("b", "", "c")]
    posts, passes = cycled_posts(corpus, 5)
    assert [p.id for p in posts] == ["a", "b", "a~1", "b~1", "a~2"] and passes == 3
    assert posts[2].body == "b" and cycled_posts(corpus, 2)[1] == 1
    assert task_slices(5, 2) == [(0, 2), (2, 4), (4, 5)]


def test_parts_are_checked_and_reassembled(tmp_path: Path) -> None:
    pack = _pack()
    stage = tmp_path / "stage"
    (stage / "wheels").mkdir(parents=True)
    blob = os.urandom(3 << 20)
    (stage / "wheels" / "x-1.0-py3-none-any.whl").write_bytes(blob)
    (stage / "data.tar.gz").write_bytes(b"data")
    manifest = pack.split(stage, tmp_path / "send", part_mb=1)
    assert len(manifest["parts"]) == 4 and all(p["bytes"] <= 1 << 20 for p in manifest["parts"])
    pack.join(tmp_path / "send", tmp_path / "joined")
    assert (tmp_path / "joined" / "wheels" / "x-1.0-py3-none-any.whl").read_bytes() == blob
    part = tmp_path / "send" / "part-002"
    part.write_bytes(part.read_bytes()[:-1] + b"!")
    with pytest.raises(SystemExit, match="part-002 .* send it again"):
        pack.join(tmp_path / "send", tmp_path / "again")
    part.unlink()
    with pytest.raises(SystemExit, match="part-002 is missing"):
        pack.join(tmp_path / "send", tmp_path / "again")


def test_the_requirements_are_what_semdup_needs_less_what_the_machine_has() -> None:
    pack = _pack()
    found = pack.closure(["semdup"], {"numpy", "tokenizers"} | {pack.canonical("typing_extensions")})
    assert {"celery", "kombu", "opensearch-py", "orjson", "pydantic-settings", "pydantic-core"} <= set(found)
    assert not {"numpy", "tokenizers", "typing-extensions", "torch"} & set(found)
    present = (REPO / "scripts" / "gpu" / "present.txt").read_text(encoding="utf-8")
    assert "torch" in present.split() and "onnxruntime-gpu" in present.split()


@pytest.mark.slow
def test_the_cpu_dry_run_of_the_check(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from semdup.export.base_encoder_bundle import export_base_encoder
    from semdup.export.parity import sample_posts

    bundle = export_base_encoder("minilm", tmp_path / "minilm", parity_posts=sample_posts(4), max_len=64).bundle_dir
    out = tmp_path / "out"
    env = {**os.environ, "PYTHON": sys.executable}
    done = subprocess.run(
        ["bash", "scripts/gpu/check.sh", "--device", "cpu", "--posts", "96", "--workers", "1", "--task-posts", "40",
         "--no-learn", "--bundle", str(bundle), "--out", str(out)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=900,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "96 written, 0 failed" in done.stdout and "ratio worker / reference:" in done.stdout
    assert "learn skipped" in done.stdout
    report = json.loads((out / "gpu_check.json").read_text(encoding="utf-8"))
    assert report["worker"]["runs_on"] == ["cpu fp32"] and report["worker"]["tasks"] == 3
    assert report["cosine_min"] > 0.999  # the bundle and the torch reference are the same MiniLM

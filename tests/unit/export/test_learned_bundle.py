"""``learn_bundle`` on a small real slice (SemEval-2016 train part 2: 67 originals): a verified candidate bundle,
the untrained default beside it, the gate's decision in the manifest; a second call reuses the finished run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from semdup.bundle import Bundle, BundleScorer
from semdup.data.paths import semeval_train_files
from semdup.data.supervision import load_supervision
from semdup.data.supervision_split import split_supervision
from semdup.export.base_encoder_bundle import export_base_encoder
from semdup.export.learned_bundle import learn_bundle
from semdup.export.parity import sample_posts
from semdup.training.learn.settings import LearnSettings

pytestmark = pytest.mark.slow

SETTINGS = LearnSettings(max_len=64, freeze_layers=5, batch_size=8, epochs=0.5, lr=5e-5)


@pytest.fixture(scope="module")
def base_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.set_num_threads(2)
    out = tmp_path_factory.mktemp("base") / "minilm"
    return export_base_encoder("minilm", out, parity_posts=sample_posts(4), max_len=64).bundle_dir


def test_learning_on_a_real_slice_writes_a_verified_candidate_and_decides(base_bundle: Path, tmp_path: Path) -> None:
    sup = load_supervision(semeval_train_files()[1])
    assert sup.kind == "rerank" and sup.report.queries == 61  # 6 of the 67 originals have no relevant candidate
    out = learn_bundle(sup, tmp_path / "candidate", base_bundle, tmp_path / "work", SETTINGS, budget_minutes=20,
                       show_progress=False)
    bundle = Bundle.load(out.candidate_dir)  # verified: every file's hash, the encoder's inputs
    assert bundle.version == out.version and bundle.arch == "hybrid-minilm"
    record = bundle.manifest["learn"]
    assert record["gate"]["accept"] == out.decision.accept and record["candidate"] is True
    assert record["compared_with"] == out.compared_with == Bundle.load(out.default_dir).version
    assert record["split"]["held_out_queries"] == out.split.held_out_queries > 0
    assert out.summary.steps >= 1 and out.summary.stopped == "done"
    held_out = split_supervision(sup).held_out  # the same split again: no dates, a fixed hash
    assert out.decision.test.n == len(held_out.questions)  # every held-out original is compared
    assert all(np.isfinite(v) for v in out.held_out_figures.values())
    assert set(out.seconds) == {"split_and_current", "train", "export", "fit_and_gate", "write"}
    # the candidate scores as its fusion says: dense, bag of words and title from its own files
    q = sup.data.questions[0]
    scores = BundleScorer(bundle).score(q.post, [r.post for r in q.related])
    assert scores.shape == (len(q.related),) and np.all(np.isfinite(scores))

    again = learn_bundle(sup, tmp_path / "candidate2", base_bundle, tmp_path / "work", SETTINGS, budget_minutes=20,
                         show_progress=False)
    assert again.reused and not out.reused and again.version == out.version  # nothing trained, the same bundle

"""``learn_bundle`` on a small real slice (the first 24 originals of SemEval-2016 train part 2, 2 folds): every
query judged out of fold, the gate refuses a candidate that is worse out of fold, an accepted one is written as a
verified bundle with its record, an interrupted K-fold run resumes where it stopped, and a spent budget ends with
the decision the finished folds support."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from tiny_models import tiny_checkpoint

from semdup.bundle import Bundle, BundleScorer
from semdup.data.paths import semeval_train_files
from semdup.data.semeval import SemEvalSet
from semdup.data.supervision import Supervision, load_supervision
from semdup.export.base_encoder_bundle import export_base_encoder
from semdup.export.onnx_export import export_checkpoint
from semdup.export.parity import sample_posts
from semdup.learn import out_of_fold as oof_module
from semdup.learn.learned_bundle import learn_bundle
from semdup.learn.pass_plan import PLAN_FILE
from semdup.training.learn.settings import LearnSettings

pytestmark = pytest.mark.slow

TINY = LearnSettings(max_len=64, freeze_layers=5, batch_size=8, epochs=0.5, lr=5e-5)
NO_TITLE = {"grid_title": (0.0,), "show_progress": False, "device": "cpu", "folds": 2}


@pytest.fixture(scope="module")
def base_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.set_num_threads(2)
    out = tmp_path_factory.mktemp("base") / "minilm"
    return export_base_encoder("minilm", out, parity_posts=sample_posts(4), max_len=64).bundle_dir


@pytest.fixture(scope="module")
def labels() -> Supervision:
    sup = load_supervision(semeval_train_files()[1])
    return Supervision("rerank", SemEvalSet("part2:24", sup.data.questions[:24]), sup.report)


def test_a_candidate_worse_out_of_fold_is_refused_and_nothing_is_written(base_bundle: Path, labels: Supervision,
                                                                        tmp_path: Path) -> None:
    wrecked = LearnSettings(**{**TINY.to_json(), "lr": 3e-3, "freeze_layers": 0, "epochs": 1.0})  # forgets MiniLM
    out = learn_bundle(labels, tmp_path / "candidate", base_bundle, tmp_path / "work", wrecked, **NO_TITLE)
    informative = sum(1 for q in labels.data.questions if any(r.relevant for r in q.related))
    assert out.decision.test.n == informative == sum(out.folds.queries)  # every labelled query, out of fold
    assert out.figures["encoder"] < out.figures["current"] and not out.decision.accept
    assert out.candidate_dir is None and not (tmp_path / "candidate").exists() and out.final is None
    assert Bundle.load(out.default_dir).version == out.compared_with  # the untrained default, kept beside
    assert [p["queries"] for p in out.per_fold] == list(out.folds.queries)
    assert set(out.phases) == {"split", "current", "folds", "gate"}


def test_an_accepted_candidate_is_a_verified_bundle_with_its_record(base_bundle: Path, labels: Supervision,
                                                                   tmp_path: Path) -> None:
    posts = labels.posts()
    weak = export_checkpoint(tiny_checkpoint("cnn", posts, tmp_path / "weak-ckpt"), tmp_path / "weak",
                             parity_posts=posts[:4]).bundle_dir  # an untrained CNN: the bundle to beat
    out = learn_bundle(labels, tmp_path / "candidate", base_bundle, tmp_path / "work", TINY,
                       current_bundle=weak, **NO_TITLE)
    assert out.decision.accept and out.decision.test.p_value < 0.05 and out.default_dir is None
    bundle = Bundle.load(out.candidate_dir)  # verified: every file's hash, the encoder's inputs
    assert bundle.version == out.version and bundle.arch == "hybrid-minilm"
    record = bundle.manifest["learn"]
    assert record["gate"]["accept"] and record["compared_with"] == Bundle.load(weak).version
    assert record["chosen"] == out.chosen and record["folds"]["queries"] == list(out.folds.queries)
    assert len(record["fold_models"]) == 2 and record["final"]["stopped"] == "done"
    assert out.final.steps > max(r.summary.steps for r in out.fold_runs)  # the same epochs over every label
    assert bundle.fusion == out.fusion and (out.chosen == "hybrid" or out.fusion["beta_bow"] == 0.0)
    assert list(out.phases) == ["split", "current", "folds", "gate", "final", "export", "write"]
    assert set(out.figures) == {"current", "encoder", "carried", "hybrid", "base_dense"} and out.stopped == ""
    assert out.passes is not None and out.passes.per_fold == {0: 0.5, 1: 0.5} and out.passes.final == TINY.epochs
    q = labels.data.questions[0]
    scores = BundleScorer(bundle).score(q.post, [r.post for r in q.related])
    assert scores.shape == (len(q.related),) and np.all(np.isfinite(scores))


def test_an_interrupted_k_fold_run_resumes_where_it_stopped(base_bundle: Path, labels: Supervision,
                                                           tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = oof_module.learn_encoder
    calls: list[Path] = []

    def dies_in_the_second_fold(*args: Any, **kwargs: Any) -> Any:
        calls.append(Path(args[2]))
        if len(calls) == 2:  # fold 2: save after every step, then the machine goes down after two steps
            import semdup.training.learn.trainer as trainer

            steps = {"n": 0}
            step_loss = trainer.step_loss

            def two_steps(*a: Any, **k: Any) -> Any:
                steps["n"] += 1
                if steps["n"] == 3:
                    raise KeyboardInterrupt
                return step_loss(*a, **k)

            monkeypatch.setattr(trainer, "step_loss", two_steps)
            try:
                return real(*args, **{**kwargs, "save_every_minutes": 0})
            finally:
                monkeypatch.setattr(trainer, "step_loss", step_loss)
        return real(*args, **kwargs)

    monkeypatch.setattr(oof_module, "learn_encoder", dies_in_the_second_fold)
    with pytest.raises(KeyboardInterrupt):
        learn_bundle(labels, tmp_path / "candidate", base_bundle, tmp_path / "work", TINY, **NO_TITLE)
    monkeypatch.setattr(oof_module, "learn_encoder", real)
    out = learn_bundle(labels, tmp_path / "candidate", base_bundle, tmp_path / "work", TINY, **NO_TITLE)
    first, second = out.fold_runs
    assert first.reused and not second.reused  # fold 1 was finished: not trained again
    assert second.summary.resumed_from_step == 2 and second.summary.steps == second.summary.planned_steps


def test_a_spent_budget_ends_with_the_decision_the_finished_folds_support(
        base_bundle: Path, labels: Supervision, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = oof_module.learn_encoder
    calls: list[int] = []

    def second_fold_out_of_time(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:
            kwargs["deadline"] = time.monotonic()  # one step, then the budget is spent
        return real(*args, **kwargs)

    monkeypatch.setattr(oof_module, "learn_encoder", second_fold_out_of_time)
    lines: list[str] = []
    out = learn_bundle(labels, tmp_path / "candidate", base_bundle, tmp_path / "work", TINY, report=lines.append,
                       **NO_TITLE)
    assert out.stopped == "fold 2 of 2" and out.candidate_dir is None and not (tmp_path / "candidate").exists()
    assert out.decision is not None and out.decision.test.n == out.folds.queries[0]  # fold 1's queries, judged
    assert out.minutes_left > 0 and out.final is None
    assert any(line.startswith("fold 2 of 2: step 1/") and "stopped by the budget" in line for line in lines)
    assert any(line.startswith("bundle to beat") for line in lines)
    monkeypatch.setattr(oof_module, "learn_encoder", real)
    again = learn_bundle(labels, tmp_path / "candidate", base_bundle, tmp_path / "work", TINY, **NO_TITLE)
    assert again.stopped == "" and again.fold_runs[0].reused
    assert again.fold_runs[1].summary.resumed_from_step == 1 and again.decision.test.n == sum(again.folds.queries)


def test_a_budget_plans_the_passes_its_minutes_fit_and_scores_each_fold_model_after_every_pass(
        base_bundle: Path, labels: Supervision, tmp_path: Path) -> None:
    settings = LearnSettings(**{**TINY.to_json(), "max_epochs": 2.0})
    lines: list[str] = []
    out = learn_bundle(labels, tmp_path / "candidate", base_bundle, tmp_path / "work", settings, budget_minutes=60,
                       report=lines.append, **NO_TITLE)  # fmt: skip
    plan = json.loads((tmp_path / "work" / PLAN_FILE).read_text(encoding="utf-8"))
    assert plan["epochs"] == 2.0 and plan["step_s"] > 0 and plan["steps_per_pass"] > 0  # an hour fits the most
    assert [r.summary.epochs for r in out.fold_runs] == [2.0, 2.0]
    assert [p for p, _ in out.passes.curve] == [1.0, 2.0] and set(out.passes.per_fold.values()) <= {1.0, 2.0}
    assert [c["epoch"] for c in out.fold_runs[0].summary.curve] == [1.0, 2.0]
    kept = sorted(p.name for p in (tmp_path / "work" / "fold-0" / "curve-vectors").iterdir())
    assert kept == ["1.npz", "2.npz"]  # each point's vectors, which the fold's scoring takes as they are
    assert any(line.startswith("passes: 2 (at most 2)") for line in lines)
    assert any(line.startswith("passes -> out-of-fold figure") for line in lines)
    assert out.to_json()["passes"]["final"] == out.passes.final


def test_the_base_bundle_scores_through_the_shared_frozen_bottom(base_bundle: Path, labels: Supervision) -> None:
    from semdup.training.learn.encoder import LearnedEncoder, base_encoder
    from semdup.training.learn.frozen import FrozenPrefix

    bundle = Bundle.load(base_bundle)
    prefix = FrozenPrefix.for_settings(TINY)
    enc = base_encoder(bundle, TINY, prefix)
    assert isinstance(enc, LearnedEncoder) and enc.version == bundle.version
    posts = labels.posts()[:20]
    got, want = enc.encode_dense(posts), bundle.encode_dense(posts)  # torch over the cache vs the ONNX encoder
    assert float((got * want).sum(1).min()) > 0.999
    other = LearnSettings(**{**TINY.to_json(), "max_len": 32})
    assert base_encoder(bundle, other, FrozenPrefix.for_settings(other)) is bundle  # another length: ONNX

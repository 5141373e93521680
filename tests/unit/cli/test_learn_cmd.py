"""``semdup learn``'s parsing and printing: the library call is replaced by a fake (the learning itself is tested in
``tests/unit/learn/test_learned_bundle.py``); the decisions in the fake are the real gate's and the real choice
test's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner

import semdup.learn.learn_run as learn_run
from semdup.cli.learn_cmd import _minutes, learn
from semdup.data.learn_folds import FoldReport
from semdup.data.supervision import SourceReport
from semdup.learn.gate import gate
from semdup.learn.learned_bundle import LearnOutcome
from semdup.learn.out_of_fold import FoldRun
from semdup.measures.significance import paired_randomisation_test
from semdup.training.learn.settings import LearnSettings, LearnSummary


def _run(tmp_path: Path, accept: bool) -> learn_run.LearnRun:
    current = {f"q{i}": 50.0 for i in range(280)}
    candidate = {q: v + (3.0 if accept else -1.0) for q, v in current.items()}
    decision = gate(current, candidate, "MAP")
    assert decision.accept is accept
    choice = paired_randomisation_test(list(candidate.values()), list(candidate.values()))
    folds = FoldReport("cluster", (140, 140), (140, 140))
    runs = [FoldRun(i, LearnSummary(22, 22, 1.0, 300.0, "done"), False, 330.0, 600.0) for i in range(2)]
    per_fold = [{"fold": i, "queries": 140, "current": 50.0, "encoder": 53.0, "carried": 52.8, "hybrid": 52.5,
                 "base_dense": 49.0} for i in range(2)]
    outcome = LearnOutcome(
        decision, tmp_path / "cand" if accept else None, "hybrid-minilm-abc" if accept else None, "hybrid-default",
        tmp_path / "work" / "untrained-default", "encoder", {"carried": choice, "hybrid": choice},
        {"beta_bow": 0.0, "beta_dense": 1.0, "alpha": 0.0},
        {"current": 50.0, "encoder": 53.0 if accept else 49.0, "carried": 52.8, "hybrid": 52.5, "base_dense": 49.0},
        per_fold,
        folds, runs, LearnSummary(44, 44, 1.0, 600.0, "done") if accept else None,
        SourceReport("semeval", "semeval-xml", 280, 1297, 1872), "cpu",
        {"split": (1.0, 1.0), "current": (60.0, 100.0), "folds": (700.0, 1300.0), "gate": (2.0, 2.0)})
    kept = outcome.candidate_dir if accept else outcome.default_dir
    return learn_run.LearnRun(outcome, kept, "semeval", tmp_path / "base", None, 1300.0, 2500.0, (0.3, 2.0))


@pytest.mark.parametrize("accept", [True, False])
def test_the_summary_names_the_folds_the_choice_the_gate_and_the_bundle_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, accept: bool) -> None:
    seen: dict[str, Any] = {}

    def fake(data: Any, out_dir: Any, **kw: Any) -> learn_run.LearnRun:
        seen.update(kw, data=data, out=out_dir)
        return _run(tmp_path, accept)

    monkeypatch.setattr(learn_run, "learn_from", fake)
    out = CliRunner().invoke(learn, ["--data", "semeval", "--out", str(tmp_path / "cand"), "--budget", "1h",
                                     "--epochs", "1.5", "--folds", "3", "--device", "cpu"])
    assert out.exit_code == 0, out.output
    assert seen["data"] == "semeval" and seen["budget_minutes"] == 60.0 and seen["threads"] == 2
    assert seen["settings"] == LearnSettings(epochs=1.5) and seen["folds"] == 3 and seen["device"] == "cpu"
    text = out.output
    assert "folds: 2 folds by duplicate cluster: 140 + 140 = 280 queries" in text
    assert "fold 1: 22/22 steps" in text and "over 280 queries" in text
    assert "p = " in text and "time: 21.7 min wall, 41.7 min CPU" in text
    assert "hybrid vs the encoder alone: +0.00" in text and "candidate: the learned encoder alone" in text
    assert "gate (accept only at p < 0.05 with the gain's 95% interval above +0)" in text
    assert "phases on cpu (wall s / CPU s): split 1/1, current 60/100, folds 700/1300, gate 2/2" in text
    assert ("accept: MAP 50.00 -> 53.00" in text) is accept
    assert f"kept: {tmp_path / 'cand'} (the candidate)" in text if accept else "no candidate written" in text


def test_a_run_the_budget_stopped_says_where_and_the_decision_it_could_make(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace

    def stopped(*a: Any, **kw: Any) -> learn_run.LearnRun:
        kw["report"]("fold 2 of 2: step 3/22, 0.5 min (stopped by the budget; saved)")
        run = _run(tmp_path, True)
        outcome = replace(run.outcome, candidate_dir=None, version=None, final=None, stopped="fold 2 of 2",
                          minutes_left=7.4, figures={"current": 50.0, "encoder": 53.0}, per_fold=[], choices={})
        return replace(run, outcome=outcome, kept=outcome.default_dir)

    monkeypatch.setattr(learn_run, "learn_from", stopped)
    out = CliRunner().invoke(learn, ["--data", "semeval", "--out", str(tmp_path / "c"), "--budget", "2m"])
    assert out.exit_code == 0, out.output
    assert "] fold 2 of 2: step 3/22, 0.5 min (stopped by the budget; saved)" in out.output  # progress, on stderr
    assert "stopped by the budget in fold 2 of 2 (every step saved)" in out.output and "about 7 min more" in out.output
    assert "the decision it could make now, on the 280 queries of the folds finished" in out.output
    assert "accept: MAP 50.00 -> 53.00" in out.output and "nothing written: the run is not finished" in out.output


def test_no_budget_by_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}
    monkeypatch.setattr(learn_run, "learn_from", lambda data, out, **kw: seen.update(kw) or _run(tmp_path, True))
    out = CliRunner().invoke(learn, ["--data", "semeval", "--out", str(tmp_path / "cand")])
    assert out.exit_code == 0 and seen["budget_minutes"] is None and seen["device"] == "auto"


def test_promote_is_refused_when_the_gate_keeps_the_current_bundle(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(learn_run, "learn_from", lambda *a, **k: _run(tmp_path, False))
    out = CliRunner().invoke(learn, ["--data", "semeval", "--out", str(tmp_path / "c"), "--index", "site",
                                     "--promote"])
    assert out.exit_code == 0, out.output
    assert "--promote: not promoted" in out.output and "semdup upgrade" not in out.output


@pytest.mark.parametrize("args, message", [
    ([], "give either --data or --duplicate-field"),
    (["--data", "semeval", "--duplicate-field", "dup", "--index", "s"], "give either --data or --duplicate-field"),
    (["--duplicate-field", "dup"], "give --index too"),
    (["--data", "semeval", "--promote"], "--promote upgrades a site's index"),
    (["--data", "semeval", "--budget", "soon"], "is no duration"),
    (["--data", "semeval", "--budget", "0m"], "must be positive"),
    (["--data", "semeval", "--device", "tpu"], "'tpu' is not one of 'auto', 'cpu', 'cuda'"),
    (["--data", "semeval", "--folds", "1"], "1 is not in the range 2<=x<=20"),
])
def test_bad_options_are_refused_before_anything_runs(tmp_path: Path, args: list[str], message: str) -> None:
    out = CliRunner().invoke(learn, [*args, "--out", str(tmp_path / "c")])
    assert out.exit_code == 2 and message in out.output


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_device_cuda_without_a_gpu_is_one_error_line(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "semdup", "learn", "--data", "semeval", "--device", "cuda", "--out",
                           str(tmp_path / "c")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: --device cuda: torch") and "sees no CUDA device" in lines[0]


def test_budget_durations() -> None:
    assert (_minutes("30m"), _minutes("1.5h"), _minutes("90s"), _minutes("20")) == (30.0, 90.0, 1.5, 20.0)

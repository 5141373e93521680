"""``semdup learn``'s parsing and printing: the library call is replaced by a fake (the learning itself is tested in
``tests/unit/export/test_learned_bundle.py``); the gate's decision in the fake is the real gate's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import semdup.export.learn_run as learn_run
from semdup.cli.learn_cmd import _minutes, learn
from semdup.data.supervision import SourceReport
from semdup.data.supervision_split import SplitReport
from semdup.export.gate import gate
from semdup.export.learned_bundle import LearnOutcome
from semdup.training.learn.settings import LearnSettings, LearnSummary


def _run(tmp_path: Path, accept: bool) -> learn_run.LearnRun:
    current = {f"q{i}": 50.0 for i in range(40)}
    candidate = {q: v + (10.0 if accept else -1.0) for q, v in current.items()}
    decision = gate(current, candidate, "MAP")
    assert decision.accept is accept
    outcome = LearnOutcome(
        tmp_path / "cand", "minilm-abc", decision, "minilm-default", tmp_path / "work" / "untrained-default",
        {"beta_bow": 0.0, "beta_dense": 1.0, "alpha": 0.0}, {"current": 50.0, "candidate": 60.0 if accept else 49.0,
                                                             "base_dense": 48.0, "learned_dense": 52.0},
        LearnSummary(68, 68, 2.0, 1200.0, "done"), False, SourceReport("semeval", "semeval-xml", 237, 1083, 1586),
        SplitReport("official", 237, 43, 267, 50), {"train": 1200.0}, {"train": 2400.0})
    kept = outcome.candidate_dir if accept else outcome.default_dir
    return learn_run.LearnRun(outcome, kept, "semeval", tmp_path / "base", None, 1300.0, 2500.0, (3.0, 4.0))


@pytest.mark.parametrize("accept", [True, False])
def test_the_summary_names_the_split_the_gate_and_the_bundle_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 accept: bool) -> None:
    seen: dict[str, Any] = {}

    def fake(data: Any, out_dir: Any, **kw: Any) -> learn_run.LearnRun:
        seen.update(kw, data=data, out=out_dir)
        return _run(tmp_path, accept)

    monkeypatch.setattr(learn_run, "learn_from", fake)
    out = CliRunner().invoke(learn, ["--data", "semeval", "--out", str(tmp_path / "cand"), "--budget", "1h",
                                     "--epochs", "1.5"])
    assert out.exit_code == 0, out.output
    assert seen["data"] == "semeval" and seen["budget_minutes"] == 60.0 and seen["threads"] == 2
    assert seen["settings"] == LearnSettings(epochs=1.5)
    text = out.output
    assert "split: held out by the data set's own split: 43 of 280 queries" in text
    assert "training: 68/68 steps" in text and "p = " in text and "time: 21.7 min wall, 41.7 min CPU" in text
    assert ("accept: MAP 50.00 -> 60.00" in text) is accept
    assert f"kept: {tmp_path / 'cand'} (the candidate)" in text if accept else "untrained-default" in text


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
])
def test_bad_options_are_refused_before_anything_runs(tmp_path: Path, args: list[str], message: str) -> None:
    out = CliRunner().invoke(learn, [*args, "--out", str(tmp_path / "c")])
    assert out.exit_code == 2 and message in out.output


def test_budget_durations() -> None:
    assert (_minutes("30m"), _minutes("1.5h"), _minutes("90s"), _minutes("20")) == (30.0, 90.0, 1.5, 20.0)

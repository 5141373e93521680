"""The learn trainer: an interrupted run resumes to the weights of an uninterrupted one, a spent budget saves the run
unfinished and the same call goes on, a folder of another recipe is refused, --device cuda without a GPU is
refused in one line. MiniLM with 5 of 6 layers frozen, 32 wordpieces."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import torch

from semdup.core.errors import ConfigError
from semdup.core.posts import Post
from semdup.training.learn import trainer as learn_trainer
from semdup.training.learn.data import LearnData
from semdup.training.learn.settings import LearnSettings
from semdup.training.learn.trainer import STATE_FILE, learn_encoder
from semdup.training.pairs import TrainingGroup

TOPICS = ["visa for qatar", "mount a usb drive", "taxi from doha airport", "rent a flat in doha", "driving licence",
          "cheap flights to india", "football club", "dentist in al sadd"]


def _data() -> LearnData:
    groups = []
    for i, t in enumerate(TOPICS):
        q, pos = Post(f"q{i}", t, "how do I do this?"), Post(f"p{i}", t.upper(), "the same question again")
        neg = Post(f"n{i}", TOPICS[(i + 3) % len(TOPICS)], "something else")
        groups.append(TrainingGroup(q, pos, (neg,)))
    known = {g.query.id: frozenset({g.query.id, g.positive.id}) for g in groups}
    return LearnData(tuple(groups), known, {"groups": len(groups)})


SETTINGS = LearnSettings(max_len=32, freeze_layers=5, batch_size=4, epochs=1.5, lr=1e-4, ema_decay=0.5)


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    return torch.load(folder / "model.pt", map_location="cpu", weights_only=True)


def test_an_interrupted_run_resumes_to_the_same_weights(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    whole = learn_encoder(SETTINGS, _data(), tmp_path / "whole", threads=1, show_progress=False)
    assert (whole.summary.steps, whole.summary.stopped) == (3, "done")

    real = learn_trainer.step_loss
    calls = {"n": 0}

    def dies_on_third_step(*args, **kwargs):  # noqa: ANN002, ANN003
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt  # the operator's Ctrl-C, or the machine going down
        return real(*args, **kwargs)

    monkeypatch.setattr(learn_trainer, "step_loss", dies_on_third_step)
    with pytest.raises(KeyboardInterrupt):
        learn_encoder(SETTINGS, _data(), tmp_path / "cut", threads=1, save_every_minutes=0, show_progress=False)
    assert (tmp_path / "cut" / STATE_FILE).exists()
    monkeypatch.setattr(learn_trainer, "step_loss", real)
    again = learn_encoder(SETTINGS, _data(), tmp_path / "cut", threads=1, show_progress=False)
    assert again.summary.resumed_from_step == 2 and again.summary.steps == 3
    assert not (tmp_path / "cut" / STATE_FILE).exists()
    a, b = _weights(tmp_path / "whole"), _weights(tmp_path / "cut")
    assert all(torch.equal(a[k], b[k]) for k in a)
    done = learn_encoder(SETTINGS, _data(), tmp_path / "cut", threads=1, show_progress=False)
    assert done.reused and done.summary == again.summary


def test_a_spent_budget_saves_the_run_unfinished_and_the_same_call_goes_on(tmp_path: Path) -> None:
    seen = []

    def evaluate(scorer):  # noqa: ANN001, ANN202
        s = scorer.score(Post("x", "visa for qatar", ""), [Post("y", "VISA FOR QATAR", ""), Post("z", "taxi", "")])
        seen.append(s)
        return {"margin": float(s[0] - s[1])}

    run = learn_encoder(SETTINGS, _data(), tmp_path / "short", deadline=time.monotonic(), evaluate=evaluate,
                        metric="margin", threads=1, show_progress=False)
    assert not run.finished and run.summary.stopped == "budget" and run.summary.steps == 1  # one step always runs
    assert run.summary.dev_before is not None and len(seen) == 1  # no final check: nothing was finished
    assert (tmp_path / "short" / STATE_FILE).exists() and not (tmp_path / "short" / "config.json").exists()
    done = learn_encoder(SETTINGS, _data(), tmp_path / "short", evaluate=evaluate, metric="margin", threads=1,
                         show_progress=False)
    assert done.finished and done.summary.resumed_from_step == 1 and done.summary.steps == 3
    assert done.summary.dev_after is not None and "stopped: done" in done.summary.line()
    learn_encoder(SETTINGS, _data(), tmp_path / "whole", threads=1, show_progress=False)
    a, b = _weights(tmp_path / "whole"), _weights(tmp_path / "short")
    assert all(torch.equal(a[k], b[k]) for k in a)  # the budget cut changed nothing in what was learned


def test_a_folder_of_another_recipe_is_refused(tmp_path: Path) -> None:
    learn_encoder(SETTINGS, _data(), tmp_path / "run", threads=1, show_progress=False)
    other = LearnSettings(**{**SETTINGS.to_json(), "lr": 3e-4})
    with pytest.raises(ConfigError, match="another recipe"):
        learn_encoder(other, _data(), tmp_path / "run", threads=1, show_progress=False)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_cuda_without_a_gpu_is_refused_in_one_line_and_auto_takes_the_cpu() -> None:
    from semdup.training.loop import resolve_device

    with pytest.raises(ConfigError, match="--device cuda: torch .* sees no CUDA device") as refused:
        resolve_device("cuda")
    assert "\n" not in str(refused.value)
    assert resolve_device("auto") == resolve_device("cpu") == "cpu"
    with pytest.raises(ConfigError, match="accepted: auto, cpu, cuda"):
        resolve_device("tpu")


def test_the_pass_points_are_every_whole_pass_and_the_last_step() -> None:
    from semdup.training.learn.trainer import pass_points

    assert pass_points(LearnSettings(epochs=2.0, batch_size=32), 100) == {4: 1.0, 8: 2.0}
    assert pass_points(LearnSettings(epochs=2.5, batch_size=32), 100) == {4: 1.0, 8: 2.0, 10: 2.5}
    assert pass_points(LearnSettings(epochs=0.5, batch_size=32), 100) == {2: 0.5}
    with pytest.raises(ConfigError, match="max_epochs > 0"):
        LearnSettings(max_epochs=0)


def test_each_pass_is_scored_and_saved_as_a_checkpoint_of_that_pass(tmp_path: Path) -> None:
    from semdup.training.learn.encoder import LearnedEncoder
    from semdup.training.learn.trainer import pass_dir

    seen: list[float] = []
    settings = LearnSettings(**{**SETTINGS.to_json(), "epochs": 2.0, "ema_decay": 0.0})
    run = learn_encoder(settings, _data(), tmp_path / "run", show_progress=False,
                        on_pass=lambda model, passes: seen.append(passes) or {"figure": passes})  # fmt: skip
    assert seen == [1.0, 2.0] and [c["figure"] for c in run.summary.curve] == [1.0, 2.0]
    posts = list({g.query.id: g.query for g in _data().groups}.values())[:3]
    first = LearnedEncoder(pass_dir(run.checkpoint_dir, 1.0)).encode_dense(posts)
    last = LearnedEncoder(pass_dir(run.checkpoint_dir, 2.0)).encode_dense(posts)
    final = LearnedEncoder(run.checkpoint_dir).encode_dense(posts)
    np.testing.assert_allclose(last, final, atol=1e-6)  # the last pass is the run's own model
    assert not np.allclose(first, last, atol=1e-4)  # the first pass is an earlier model


def test_a_training_length_shapes_the_steps_and_one_no_post_reaches_changes_nothing(tmp_path: Path) -> None:
    """train_len cuts what the trainable layers see in a step: at a length past every post the weights are the
    whole-post run's to the bit; at 4 wordpieces (each post's first words) they are not."""
    base = LearnSettings(**{**SETTINGS.to_json(), "ema_decay": 0.0})
    runs = {n: learn_encoder(LearnSettings(**{**base.to_json(), "train_len": n}), _data(), tmp_path / str(n),
                             threads=1, show_progress=False) for n in (0, 32, 4)}
    assert all(r.summary.stopped == "done" for r in runs.values())
    whole, wide, cut = (_weights(tmp_path / str(n)) for n in (0, 32, 4))
    assert all(torch.equal(whole[k], wide[k]) for k in whole)
    assert not all(torch.equal(whole[k], cut[k]) for k in whole)

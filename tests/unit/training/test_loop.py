"""The one training loop on a tiny fake model: a resumed run gives the weights of an uninterrupted one, a deadline
stops it before a step, the evaluation hook stops it early and keeps the best weights, a loss's own parameters train,
a penalty is trained on but not reported, and evaluations see the weight average."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch
from torch import nn

from semdup.training.loop import KeepBest, Loop

BATCHES = [torch.randn(4, 3, generator=torch.Generator().manual_seed(i)) for i in range(6)]


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.Dropout(0.5), nn.Linear(4, 1))  # dropout: the torch random state


def _loop(model: nn.Module, loss=None) -> Loop:  # noqa: ANN001
    loss = loss if loss is not None else (lambda x: model(x).pow(2).mean())
    opt = torch.optim.Adam(Loop.trainable(model, loss), lr=0.1)
    return Loop(model, loss, opt, max_grad_norm=1.0, ema_decay=0.5, lr_at=lambda s: 0.1 / (1 + s),
                show_progress=False)


def test_a_resumed_run_gives_the_weights_of_an_uninterrupted_one(tmp_path: Path) -> None:
    whole = _loop(_model())
    assert whole.run(BATCHES, total=6) == "done" and whole.step == 6

    model = _model()
    cut = _loop(model)

    def dies_at_step_four(x: torch.Tensor) -> torch.Tensor:
        if cut.step == 3:
            raise KeyboardInterrupt
        return model(x).pow(2).mean()

    cut.loss = dies_at_step_four
    with pytest.raises(KeyboardInterrupt):
        cut.run(BATCHES, total=6, state_path=tmp_path / "state.pt", save_every_s=0.0, extra_state=lambda: {"mine": 1})
    state = torch.load(tmp_path / "state.pt", weights_only=False)
    assert state["step"] == 3 and state["mine"] == 1

    again = _loop(_model())
    again.load(state)
    assert again.run(BATCHES[again.step :], total=6) == "done" and again.step == 6
    a, b = whole.model.state_dict(), again.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert all(torch.equal(x, y) for x, y in zip(whole.ema.averaged_state().values(),
                                                 again.ema.averaged_state().values(), strict=True))
    assert whole.losses[3:] == again.losses


def test_a_deadline_stops_before_a_step_that_would_not_fit_and_the_first_step_always_runs() -> None:
    loop = _loop(_model())
    assert loop.run(BATCHES, deadline=time.monotonic()) == "budget" and loop.step == 1
    assert loop.run(BATCHES[1:], deadline=time.monotonic() + 3600) == "done" and loop.step == 6


def test_the_evaluation_hook_stops_early_and_the_best_weights_are_kept() -> None:
    loop = _loop(_model())
    best, figures, seen = KeepBest(), iter([1.0, 3.0, 2.0, 2.5, 9.0]), {}

    def after_step(_batch: torch.Tensor, _loss: float) -> bool:
        with loop.evaluating():
            assert not loop.model.training and not torch.is_grad_enabled()
            if best.update(next(figures), loop.model):
                seen["best"] = {k: v.clone() for k, v in loop.model.state_dict().items()}  # the averaged weights
        assert loop.model.training
        return best.since >= 2

    assert loop.run(BATCHES, after_step=after_step) == "stopped" and loop.step == 4
    assert best.value == 3.0 and all(torch.equal(best.state[k], seen["best"][k]) for k in best.state)
    raw = loop.model.state_dict()
    assert not all(torch.equal(best.state[k], raw[k]) for k in raw)  # averaged, not the last raw weights


def test_a_loss_module_trains_its_own_parameters_once_shared_ones_are_not_repeated() -> None:
    model = _model()

    class Scaled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model, self.scale = model, nn.Parameter(torch.tensor(2.0))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return (self.scale * model(x) - 1).pow(2).mean()

    loss = Scaled()
    loop = _loop(model, loss)
    assert loop.params == [*model.parameters(), loss.scale]
    loop.run(BATCHES[:2])
    assert float(loss.scale.detach()) != 2.0


def test_a_penalty_is_trained_on_but_left_out_of_the_reported_loss() -> None:
    plain = _loop(_model())  # each built and run in turn: the same dropout draws
    plain.run(BATCHES[:1])
    penalised = _loop(_model())
    penalised.run(BATCHES[:1], penalty=lambda: 100.0 * penalised.model[0].weight.pow(2).sum())
    assert plain.losses == penalised.losses
    assert not torch.equal(plain.model[0].weight, penalised.model[0].weight)

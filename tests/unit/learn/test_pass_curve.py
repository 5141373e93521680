"""The passes curve: a fold is judged at the passes best on the other folds, the final model at the passes best on
all; the budget's passes in quarters; a pool's figure is the encoder alone's on the pool's fixed candidates."""

from __future__ import annotations

import numpy as np
import pytest

from semdup.core.posts import Post
from semdup.data.semeval import OriginalQuestion, RelatedQuestion, SemEvalSet
from semdup.learn.default_bundle import FitData
from semdup.learn.fusion_fit import Group
from semdup.learn.pass_curve import PassPool, choose_passes, passes_within


def test_each_fold_is_judged_at_the_passes_the_other_folds_found_best() -> None:
    curves = {
        0: {1.0: {"a": 50.0, "b": 60.0}, 2.0: {"a": 70.0, "b": 70.0}, 3.0: {"a": 71.0, "b": 71.0}},
        1: {1.0: {"c": 40.0}, 2.0: {"c": 50.0}, 3.0: {"c": 45.0}},
    }
    choice = choose_passes(curves)
    assert choice.per_fold == {0: 2.0, 1: 3.0}  # fold 0 by fold 1's curve, fold 1 by fold 0's
    assert choice.curve == [(1.0, 50.0), (2.0, pytest.approx(190 / 3)), (3.0, pytest.approx(187 / 3))]
    assert choice.final == 2.0  # pooled over every query
    assert "the final model trains 2" in choice.line() and "fold 2 at 3" in choice.line()
    assert choice.to_json()["curve"][0] == {"passes": 1.0, "figure": 50.0}


def test_a_tie_takes_the_fewer_passes_and_no_common_point_is_refused() -> None:
    flat = {0: {1.0: {"a": 5.0}, 2.0: {"a": 5.0}}, 1: {1.0: {"b": 5.0}, 2.0: {"b": 5.0}}}
    assert choose_passes(flat).final == 1.0 and choose_passes(flat).per_fold == {0: 1.0, 1: 1.0}
    with pytest.raises(ValueError, match="no pass was scored on every fold"):
        choose_passes({0: {1.0: {"a": 1.0}}, 1: {2.0: {"b": 1.0}}})


def test_the_budget_plans_the_passes_that_fit_in_quarters_up_to_the_most() -> None:
    # 100 steps per pass over every model at 1 s, 20 s of curve points per pass: 120 s a pass
    assert passes_within(330.0, 1.0, 100, 20.0, most=4.0) == 2.75
    assert passes_within(10_000.0, 1.0, 100, 20.0, most=4.0) == 4.0
    assert passes_within(5.0, 1.0, 100, 20.0, most=4.0) == 0.25  # too short to plan by: the budget stops it


def _semeval() -> SemEvalSet:
    questions = []
    for i in range(2):
        related = tuple(RelatedQuestion(Post(f"r{i}{j}", f"topic {i} {'same' if j == 0 else j}", ""), j + 1, j == 0,
                                        "PerfectMatch" if j == 0 else "Irrelevant", ())
                        for j in range(3))  # fmt: skip
        questions.append(OriginalQuestion(Post(f"q{i}", f"topic {i} same", ""), related))
    return SemEvalSet("tiny", tuple(questions))


def test_a_pool_scores_the_encoder_alone_on_its_fixed_candidates() -> None:
    sem = _semeval()
    data = FitData("tiny", "semeval", sem, [])
    groups = [Group(q.post.id, tuple(r.post.id for r in q.related), np.zeros(3), np.zeros(3), np.zeros(3))
              for q in sem.questions]  # fmt: skip
    pool = PassPool.from_groups(groups, data)
    assert pool.posts() == 2 + 6

    def encode(posts: list[Post]) -> np.ndarray:  # a query's vector is its relevant candidate's: ranked first
        return np.stack([np.eye(8)[sum(map(ord, p.title)) % 8] + 0.01 for p in posts])

    assert pool.score(encode) == {"q0": 100.0, "q1": 100.0}

    def worst(posts: list[Post]) -> np.ndarray:  # the relevant candidate orthogonal to its query, the others not
        return np.stack([np.eye(8)[1] if p.id.startswith("r") and p.id.endswith("0") else np.eye(8)[0] for p in posts])

    assert all(v < 100.0 for v in pool.score(worst).values())


def test_a_point_is_priced_on_a_sample_without_an_autograd_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    """The budget prices a post by the untrained encoder on a sample of the pools' posts, without gradients (on a
    2,546-link site the trainable layers' graph over the whole pool held 24 GB and the run was killed); the
    untrained point's figures come from the pool's own base cosines."""
    import torch

    from semdup.learn import pass_plan
    from semdup.training.learn.settings import LearnSettings

    sem = _semeval()
    groups = [Group(q.post.id, tuple(r.post.id for r in q.related), np.zeros(3), np.array([0.9, 0.1, 0.2]),
                    np.zeros(3)) for q in sem.questions]  # fmt: skip
    pool = PassPool.from_groups(groups, FitData("tiny", "semeval", sem, []))
    assert pool.base_figures() == {"q0": 100.0, "q1": 100.0}  # the relevant candidate has the highest base cosine
    seen: list[tuple[int, bool]] = []
    real = pass_plan.PostVectors

    class Spy(real):  # type: ignore[misc, valid-type]
        def __call__(self, posts):  # noqa: ANN001, ANN204
            seen.append((len(posts), torch.is_grad_enabled()))
            return super().__call__(posts)

    monkeypatch.setattr(pass_plan, "PostVectors", Spy)
    seconds = pass_plan.post_seconds(LearnSettings(max_len=32, freeze_layers=4), {0: pool, 1: pool}, None, "cpu",
                                     sample=4)
    assert seen == [(4, False)] and seconds > 0  # 4 of the 16 posts of the two pools, no graph
    assert pass_plan.post_seconds(LearnSettings(max_len=32), {}, None, "cpu") == 0.0
    assert pool.scored_posts() == pool.posts() == 8  # a SemEval fold scores its own posts: the pool

"""The gate: refuses a bundle that is worse or only better by chance, accepts a clear gain; per-query figures and
their cross-fitting on hand-built groups."""

from __future__ import annotations

import numpy as np
import pytest

from semdup.core.posts import Post
from semdup.data.pairs import PostPair
from semdup.data.semeval import OriginalQuestion, RelatedQuestion, SemEvalSet
from semdup.learn.default_bundle import FitData
from semdup.learn.fusion_fit import Group
from semdup.learn.gate import cross_fitted_figures, gate, per_query_figures

DENSE = {"beta_bow": 0.0, "beta_dense": 1.0, "alpha": 0.0}


def _figures(values: np.ndarray) -> dict[str, float]:
    return {f"q{i}": float(v) for i, v in enumerate(values)}


def test_the_gate_refuses_a_bundle_that_is_worse_on_the_held_out_queries() -> None:
    rng = np.random.default_rng(0)
    current = rng.uniform(40, 100, 80)
    candidate = current - rng.uniform(0, 10, 80)  # worse or equal on every query
    decision = gate(_figures(current), _figures(candidate), "MAP")
    assert not decision.accept
    assert decision.test.mean_difference < 0 and "not better" in decision.reason
    assert decision.line().startswith("keep the current bundle")


def test_the_gate_refuses_a_gain_that_is_within_chance() -> None:
    rng = np.random.default_rng(1)
    current = rng.uniform(0, 100, 50)
    candidate = current + rng.normal(0.5, 20.0, 50)  # +0.5 on average, noise of 20 per query
    decision = gate(_figures(current), _figures(candidate), "MAP")
    assert not decision.accept and decision.test.p_value >= 0.05


def test_the_gate_accepts_a_clear_gain_and_compares_only_common_queries() -> None:
    rng = np.random.default_rng(2)
    current = rng.uniform(20, 80, 200)
    candidate = current + rng.normal(4.0, 5.0, 200)
    extra = {**_figures(candidate), "only-new": 100.0}
    decision = gate(_figures(current), extra, "MAP")
    assert decision.accept and decision.test.n == 200 and decision.test.ci_low > 0
    assert decision.to_json()["test"]["test"].startswith("paired randomisation test")


def _semeval(n: int, informative: str) -> tuple[list[Group], FitData]:
    """n questions of 4 candidates; candidate 1 is relevant; only ``informative`` knows it, the rest is noise."""
    rng = np.random.default_rng(3)
    questions, groups = [], []
    for i in range(n):
        related = tuple(RelatedQuestion(Post(f"r{i}-{j}", "t", "b"), j + 1, j == 1, None, ()) for j in range(4))
        questions.append(OriginalQuestion(Post(f"o{i}", "t", "b"), related))
        comps = {k: rng.uniform(0.0, 0.3, 4) for k in ("cos_bow", "cos_dense", "lexical")}
        comps[informative][1] += 1.0
        groups.append(Group(f"o{i}", tuple(r.post.id for r in related), **comps))
    return groups, FitData("toy", "semeval", SemEvalSet("toy", tuple(questions)), [])


def test_per_query_figures_are_the_official_average_precisions() -> None:
    groups, data = _semeval(6, "cos_dense")
    figures = per_query_figures(groups, DENSE, data)
    assert figures == {f"o{i}": 100.0 for i in range(6)}  # dense ranks the relevant candidate first everywhere


def test_cross_fitting_finds_the_informative_term_on_the_other_fold() -> None:
    groups, data = _semeval(40, "lexical")
    dense_only = per_query_figures(groups, DENSE, data)
    fold_of = {g.query_id: i % 2 for i, g in enumerate(groups)}
    crossed, fusions = cross_fitted_figures(groups, data, fold_of, grid_title=(0.0,))
    assert sorted(fusions) == [0, 1] and all(f["alpha"] > 0 for f in fusions.values())
    assert set(crossed) == set(dense_only)
    assert np.mean(list(crossed.values())) > np.mean(list(dense_only.values())) + 20


def test_pair_figures_use_the_threshold_given() -> None:
    p = lambda i: Post(str(i), "t", "b")  # noqa: E731
    pairs = [PostPair(p(0), p(1), True, "duplicate"), PostPair(p(2), p(3), False, "non-duplicate")]
    data = FitData("pairs", "pairs", pairs, [])
    groups = [Group(str(i), (pair.candidate.id,), np.zeros(1), np.array([s]), np.zeros(1))
              for i, (pair, s) in enumerate(zip(pairs, (0.8, 0.3), strict=True))]
    assert per_query_figures(groups, DENSE, data) == {"0": 100.0, "1": 100.0}  # best threshold separates them
    assert per_query_figures(groups, DENSE, data, threshold=0.9) == {"0": 0.0, "1": 100.0}


def test_bad_gate_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="alpha"):
        gate({"a": 1.0}, {"a": 2.0}, "MAP", alpha=1.5)
    with pytest.raises(ValueError, match="no common"):
        gate({"a": 1.0}, {"b": 2.0}, "MAP")


def test_a_gain_whose_interval_reaches_zero_is_refused_even_under_p_005() -> None:
    rng = np.random.default_rng(3)
    for _ in range(200):  # a draw with p just under 0.05 and a bootstrap interval that still reaches zero
        current = rng.uniform(40, 90, 120)
        candidate = current + rng.normal(1.0, 7.0, 120)
        t = gate(_figures(current), _figures(candidate), "MAP").test
        if t.p_value < 0.05 and t.ci_low <= 0:
            decision = gate(_figures(current), _figures(candidate), "MAP")
            assert not decision.accept and "not clear" in decision.reason and "reaches" in decision.reason
            assert decision.rule() == "accept only at p < 0.05 with the gain's 95% interval above +0"
            return
    raise AssertionError("no draw had p < 0.05 with an interval reaching zero")


def _retrieval(n_queries: int, seed: int) -> tuple[list[Group], FitData]:
    from semdup.data.stackexchange import StackExchangeDump

    rng = np.random.default_rng(seed)
    posts, links, groups = {}, [], []
    for i in range(n_queries):
        q = f"q{i}"
        cands = [f"c{i}_{j}" for j in range(30)]
        posts[q] = Post(q, "t", "b")
        posts.update({c: Post(c, "t", "b") for c in cands})
        links += [(q, cands[j]) for j in rng.choice(30, size=int(rng.integers(1, 4)), replace=False)]
        links.append((q, f"missing{i}")) if i % 3 == 0 else None  # a relevant post no candidate list holds
        comps = {k: np.round(rng.uniform(0, 1, 30), 1) for k in ("cos_bow", "cos_dense", "lexical", "cos_title")}
        groups.append(Group(q, tuple(cands), **comps))  # rounded: many ties
    posts.update({f"missing{i}": Post(f"missing{i}", "t", "b") for i in range(0, n_queries, 3)})
    dump = StackExchangeDump(posts, tuple(links), (), 0, {p: "dev" for p in posts})
    return groups, FitData("toy", "retrieval", (dump, "dev"), [])


@pytest.mark.parametrize("kind", ["semeval", "retrieval"])
def test_the_grid_in_numpy_chooses_what_the_measure_chooses(kind: str) -> None:
    from semdup.learn.fusion_fit import GRID_TITLE, choose_fusion, group_scores
    from semdup.learn.gate import figures_from_predictions, ranked_figure

    groups, data = _semeval(60, "lexical") if kind == "semeval" else _retrieval(60, 5)
    rng = np.random.default_rng(7)  # ties and noise in every component
    groups = [Group(g.query_id, g.candidate_ids, *(np.round(x + rng.uniform(0, 0.3, x.shape), 1) for x in
                                                   (g.cos_bow, g.cos_dense, g.lexical, g.cos_title)))
              for g in groups]
    per_query = ranked_figure(data)
    for fusion in ({"beta_bow": 0.3, "beta_dense": 1.0, "alpha": 0.5, "beta_title": 0.25}, DENSE):
        slow = figures_from_predictions(group_scores(groups, fusion), groups, data, None)
        for g in groups:  # one query's fused scores as one grid row: the same figure as the slow path's
            s = np.asarray([group_scores([g], fusion)[g.query_id][c] for c in g.candidate_ids])
            assert per_query(g, s[None, :])[0] == pytest.approx(slow[g.query_id], abs=1e-9)

    def measure(preds: dict) -> float:
        return float(np.mean(list(figures_from_predictions(preds, groups, data, None).values())))

    want = choose_fusion(groups, measure, grid_title=GRID_TITLE)
    got = choose_fusion(groups, measure, grid_title=GRID_TITLE, per_query=per_query)
    assert got.fusion == want.fusion and got.dev == pytest.approx(want.dev, abs=1e-9)
    assert [row[:3] for row in got.grid] == [row[:3] for row in want.grid]
    assert np.allclose([row[3] for row in got.grid], [row[3] for row in want.grid], atol=1e-9)

"""The title-only evaluation's choice on dev: the grid point with the best MAP wins, ties to the earlier point."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from benchmarks.similar_eval import GRID, _grid, choose_fusion
from semdup.reranker.similar import TitleCandidates, TitleSearch


def _cands(ids: list[str]) -> TitleCandidates:
    components = [(0.0, 0.0, 0.0, 1.0) for _ in ids]  # indexed by the served model (the cosines are in _comps)
    return TitleCandidates(ids, components, [0.0] * len(ids), {i: ["bm25"] for i in ids})


def _comps(dense: list[float], lexical: list[float]) -> dict[str, np.ndarray]:
    n = len(dense)
    lex = np.asarray(lexical)
    return {
        "cos_dense": np.asarray(dense),
        "cos_bow": np.zeros(n),
        "cos_title": np.zeros(n),
        "lexical": lex,
        "lexnorm": (lex - lex.min()) / (lex.max() - lex.min()),
    }


def test_the_grid_covers_every_point_but_all_zero() -> None:
    points = _grid()
    assert len(points) == int(np.prod([len(v) for v in GRID.values()])) - 1
    assert all(any(p.values()) for p in points)


def test_the_dev_choice_is_the_weights_that_rank_the_duplicates_first() -> None:
    search = TitleSearch(SimpleNamespace(version="m"))  # type: ignore[arg-type]
    # BM25 puts the duplicate ("d1", "d2") last; the title's cosine with the posts puts it first
    runs = [
        ("q1", (_cands(["a", "d1"]), _comps([0.2, 0.9], [5.0, 1.0]))),
        ("q2", (_cands(["b", "d2"]), _comps([0.1, 0.8], [7.0, 2.0]))),
    ]
    fusion, dev = choose_fusion(search, runs, {"q1": {"d1"}, "q2": {"d2"}})
    assert dev["MAP"] == 100.0 and dev["Acc@1"] == 100.0
    assert fusion["beta_dense"] > 0 and fusion["alpha"] < fusion["beta_dense"]
    first = next(p for p in _grid() if p["beta_dense"] > 0 and p["alpha"] == 0.0)
    assert fusion == first  # the earliest grid point reaching the best MAP

"""The title term of the hybrid default: packed with the post, read back, fused; absent where a title is absent."""

from __future__ import annotations

import numpy as np
import pytest

from semdup.core.posts import Post
from semdup.core.scoring import check_fusion, fused_scores, title_posts
from semdup.index_format.mapping import semdup_source
from semdup.index_format.packed_fields import pack_semdup_fields, unpack_semdup_fields, unpack_semdup_value
from semdup.learn.fusion_fit import GRID_TITLE, Group, choose_fusion
from semdup.reranker.fusion import compute_components, compute_fused
from semdup.reranker.stored_fields import stored_semdup_fields

FUSION = {"beta_bow": 0.0, "beta_dense": 1.0, "alpha": 0.0, "beta_title": 0.5}


def test_a_fusion_keeps_the_title_weight_only_when_it_is_not_zero() -> None:
    assert check_fusion(FUSION)["beta_title"] == 0.5
    assert "beta_title" not in check_fusion({**FUSION, "beta_title": 0.0})
    with pytest.raises(ValueError, match="unknown fusion weights"):
        check_fusion({**FUSION, "beta_titel": 1.0})
    s = fused_scores(None, np.array([0.5, 0.5]), None, FUSION, cos_title=np.array([1.0, 0.0]))
    np.testing.assert_allclose(s, [1.0, 0.5])


def test_title_posts_are_the_posts_with_a_title_without_their_body() -> None:
    at, titles = title_posts([Post("a", "Visa?", "body"), Post("b", "  ", "only a body"), Post("c", "Rome", "")])
    assert at == [0, 2] and [(p.id, p.title, p.body) for p in titles] == [("a", "Visa?", ""), ("c", "Rome", "")]


def test_format_3_carries_the_title_vector_and_older_readers_keep_their_two_parts() -> None:
    packed = pack_semdup_fields([0.6, 0.8], {"visa": 0.5}, [7], title_vector=[0.0, 1.0])
    value = unpack_semdup_value(packed)
    np.testing.assert_array_equal(value.title, [0.0, 1.0])
    vector, terms = unpack_semdup_fields(packed)
    np.testing.assert_array_equal(vector, np.float32([0.6, 0.8]))
    assert terms.ids.tolist() == [7]
    untitled = unpack_semdup_value(pack_semdup_fields([0.6, 0.8], {"visa": 0.5}, [7], with_title=True))
    assert untitled.title is None
    assert unpack_semdup_value(pack_semdup_fields([0.6, 0.8], {"visa": 0.5}, [7])).title is None  # format 2
    with pytest.raises(ValueError, match="dimension"):
        pack_semdup_fields([0.6, 0.8], {}, [], title_vector=[1.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="term ids"):
        pack_semdup_fields([0.6, 0.8], {"visa": 0.5}, title_vector=[1.0, 0.0])
    truncated = pack_semdup_fields([0.6, 0.8], {}, [], title_vector=[1.0, 0.0])[:-8]
    with pytest.raises(ValueError, match="re-index"):
        unpack_semdup_value(truncated)


def test_a_documents_title_vector_reaches_the_fusion() -> None:
    fields = {"vector": [1.0, 0.0], "terms": {}, "term_ids": [], "model": "m", "title_vector": [0.0, 1.0]}
    stored = stored_semdup_fields(semdup_source(fields))
    np.testing.assert_array_equal(stored["title_vector"], [0.0, 1.0])
    untitled = stored_semdup_fields(semdup_source({**fields, "title_vector": None}))
    comps = compute_components(
        np.array([1.0, 0.0], dtype=np.float32), None, [stored, untitled], [0.0, 0.0], np.array([0.0, 1.0])
    )
    np.testing.assert_allclose(comps["cos_title"], [1.0, 0.0])
    scores, complete = compute_fused(comps, FUSION)
    np.testing.assert_allclose(scores, [1.5, 1.0])
    assert complete.all()  # a post without a title is not an incomplete candidate
    no_query_title = compute_components(np.array([1.0, 0.0], dtype=np.float32), None, [stored], [0.0])
    assert no_query_title["cos_title"].tolist() == [0.0]


def test_the_grid_gives_weight_to_an_informative_title_and_none_by_default() -> None:
    rng = np.random.default_rng(0)
    groups, relevant = [], {}
    for i in range(20):
        comps = {name: rng.uniform(0.0, 0.3, 5) for name in ("cos_bow", "cos_dense", "lexical", "cos_title")}
        comps["cos_title"][2] = 1.0
        groups.append(Group(f"q{i}", tuple(f"q{i}-c{j}" for j in range(5)), **comps))
        relevant[f"q{i}"] = f"q{i}-c2"

    def top1(preds: dict[str, dict[str, float]]) -> float:
        return float(np.mean([max(s, key=s.__getitem__) == relevant[q] for q, s in preds.items()]))

    fit = choose_fusion(groups, top1, "Acc@1", grid_title=GRID_TITLE)
    assert fit.fusion.get("beta_title", 0.0) > 0 and fit.dev == 1.0
    assert fit.to_json()["grid_title"] == sorted(GRID_TITLE)
    plain = choose_fusion(groups, top1, "Acc@1")
    assert "beta_title" not in plain.fusion and "grid_title" not in plain.to_json()

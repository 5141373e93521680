"""Travel pair builder: random (easy) 0-pairs for pair losses beside the hard ones, other data unchanged."""

from __future__ import annotations

from semdup.core.posts import Post
from semdup.data.stackexchange import StackExchangeDump
from semdup.training.pairs import travel_training_data


def _dump() -> StackExchangeDump:
    """40 train posts: 0↔1, 2↔3, 4↔5 duplicates; 0 is related to 6 and 7 (hard negatives)."""
    posts = {str(i): Post(str(i), f"title {i}", f"body of post {i} about place {i % 7}") for i in range(40)}
    return StackExchangeDump(
        posts=posts,
        duplicate_links=(("0", "1"), ("2", "3"), ("4", "5")),
        related_links=(("0", "6"), ("0", "7")),
        skipped_links=0,
        splits={pid: "train" for pid in posts},
    )


def test_random_pair_negatives_leave_groups_and_hard_pairs_unchanged() -> None:
    dump = _dump()
    plain = travel_training_data(dump, negatives=5, pair_negatives=2, seed=3)
    easy = travel_training_data(dump, negatives=5, pair_negatives=2, seed=3, random_pair_negatives=4)
    assert easy.groups == plain.groups
    hard_pairs = [p for p in easy.pairs if p.label > 0 or any(p == q for q in plain.pairs)]
    assert hard_pairs == list(plain.pairs)
    assert "random_pair_negatives" not in plain.summary
    assert easy.summary["random_pair_negatives"] == 4


def test_random_pair_negatives_are_non_duplicates_per_positive() -> None:
    dump = _dump()
    data = travel_training_data(dump, negatives=5, pair_negatives=2, seed=0, random_pair_negatives=4)
    positives = [p for p in data.pairs if p.label > 0]
    negatives = [p for p in data.pairs if p.label == 0]
    assert len(positives) == 6  # three links, both directions
    assert len(negatives) == 6 * (2 + 4)
    for pair in negatives:
        assert pair.candidate.id not in dump.duplicates_of(pair.query.id) | {pair.query.id}
    by_query: dict[str, list[str]] = {}
    for pair in negatives:
        by_query.setdefault(pair.query.id, []).append(pair.candidate.id)
    for ids in by_query.values():
        assert len(ids) == len(set(ids))  # a positive's hard and easy negatives never repeat each other


def test_scqa_travel_defaults_give_random_pair_negatives_and_valid_settings() -> None:
    from semdup.training.recipes import recipe_defaults
    from semdup.training.trainer import TrainSettings

    chosen = recipe_defaults("scqa", "travel")
    hparams = chosen.pop("hparams")
    data_keys = {
        k: chosen.pop(k) for k in ("lexical_negatives", "related_negatives", "random_pair_negatives") if k in chosen
    }
    settings = TrainSettings.for_arch("scqa", hparams=hparams, **chosen)
    assert data_keys["random_pair_negatives"] > 0
    assert settings.arch == "scqa" and settings.max_tokens == 100

"""The default's flagging calibration, streamed offline on dev: only earlier posts are candidates, every post of the
split is flagged, and `fit_default` on a real (tiny) Travel dump writes it where the workers look."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from semdup.alerts.choice import K_CHOICES
from semdup.core.posts import Post
from semdup.data import load_stackexchange_dump
from semdup.data.paths import travel_dir
from semdup.export.base_encoder_bundle import export_base_encoder
from semdup.export.parity import sample_posts
from semdup.learn.default_bundle import fit_default
from semdup.learn.default_flagging import EveryPost, earlier_groups, flagging_calibration
from semdup.learn.fusion_fit import Group
from semdup.reranker.calibration import calibration_path, load_calibration

FUSION = {"beta_bow": 0.0, "beta_dense": 1.0, "alpha": 0.0}


def _group(query: str, cands: dict[str, float]) -> Group:
    n = len(cands)
    return Group(query, tuple(cands), np.zeros(n), np.asarray(list(cands.values())), np.zeros(n))


def test_a_later_post_is_never_a_candidate() -> None:
    [g] = earlier_groups([_group("50", {"70": 0.99, "40": 0.8, "7": 0.3})])
    assert g.candidate_ids == ("40", "7") and list(g.cos_dense) == [0.8, 0.3] and g.cos_title.shape == (2,)


def test_the_choice_sees_only_earlier_duplicates_and_every_post_of_the_split() -> None:
    # "50" is a duplicate of the later "70" only: with no earlier duplicate, any flag of it is wrong
    links = {"50": {"70", "12"}, "70": {"50"}, "12": {"50"}, "60": set(), "80": {"12"}}
    dump = SimpleNamespace(duplicates_of=lambda p: frozenset(links.get(p, ())))
    groups = [
        _group("50", {"70": 0.99, "12": 0.9, "3": 0.2}),  # 70 is later: dropped; 12 is gold
        _group("60", {"12": 0.5, "3": 0.4}),  # no duplicate: only false flags
        _group("80", {"12": 0.95, "50": 0.6}),
    ]
    cal = flagging_calibration(groups, FUSION, dump)
    assert cal.k == 1 and 0.5 < cal.threshold < 0.9  # flags 12 for 50 and for 80, both right
    assert cal.n == 6 and cal.positives == 2 and "3 posts" in cal.fitted_on


def test_a_split_without_an_earlier_duplicate_gives_no_calibration_rather_than_failing_the_fit() -> None:
    dump = SimpleNamespace(duplicates_of=lambda p: frozenset())
    assert flagging_calibration([_group("5", {"1": 0.4})], FUSION, dump) is None


def test_every_post_of_the_split_is_a_query_in_creation_order() -> None:
    posts = {i: Post(i, f"t{i}", "b") for i in ("3", "10", "25", "40")}
    dump = SimpleNamespace(
        posts=posts,
        splits={"25": "dev", "3": "dev", "10": "test", "99": "dev"},  # 99: not in Posts.xml
        duplicates_of=lambda p: frozenset({"10"}) if p == "25" else frozenset(),
        corpus=lambda: list(posts.values()),
    )
    qs = EveryPost(dump).queries("dev")
    assert [q.post.id for q in qs] == ["3", "25"] and qs[1].relevant == {"10"}


def _tiny_travel(out: Path, n_dev: int = 6, n_filler: int = 30) -> Path:
    """A real Travel dump cut down: the first ``n_dev`` dev posts with an earlier duplicate and as many train posts
    (the fusion is fitted on training queries), their duplicates, and ``n_filler`` other posts; Posts.xml and
    PostLinks.xml rows copied verbatim."""
    src = travel_dir()
    full = load_stackexchange_dump(src)

    def linked(split: str) -> list[str]:
        found = (
            p for p, s in full.splits.items() if s == split and any(int(d) < int(p) for d in full.duplicates_of(p))
        )
        return sorted(found, key=int)[:n_dev]

    dev = linked("dev") + linked("train")
    keep = set(dev) | {d for p in dev for d in full.duplicates_of(p)}
    keep |= {p.id for p in full.corpus()[:n_filler]}
    out.mkdir()
    for name, key in (("Posts.xml", "Id"), ("PostLinks.xml", "PostId")):
        lines = (src / name).read_text(encoding="utf-8-sig").splitlines()
        rows = []
        for line in lines:
            m = re.search(rf'<row .*?\b{key}="(\d+)"', line)
            if m is None:
                rows.append(line)
            elif m.group(1) in keep and (key == "Id" or re.search(r'RelatedPostId="(\d+)"', line).group(1) in keep):
                rows.append(line)
        (out / name).write_text("\n".join(rows) + "\n", encoding="utf-8")
    (out / "splits.tsv").write_text(
        "post_id\tsplit\n" + "".join(f"{p}\t{full.splits[p]}\n" for p in sorted(keep, key=int) if p in full.splits),
        encoding="utf-8",
    )
    return out


@pytest.fixture(scope="module")
def base_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.set_num_threads(2)
    out = tmp_path_factory.mktemp("base") / "minilm"
    return export_base_encoder("minilm", out, parity_posts=sample_posts(4), max_len=64).bundle_dir


def test_fit_default_on_a_dump_writes_the_flagging_calibration_beside_the_bundle(
    base_bundle: Path, tmp_path: Path
) -> None:
    dump = _tiny_travel(tmp_path / "travel")
    fit = fit_default(base_bundle, str(dump), tmp_path / "default", grid=((0.0, 0.1), (0.0, 0.1)), grid_title=(0.0,))
    assert fit.flagging is not None and fit.flagging_file == calibration_path(tmp_path / "default")
    stored = load_calibration(fit.flagging_file, fit.version)  # keyed by the bundle the workers load
    assert stored == fit.flagging and stored.k in K_CHOICES and stored.threshold is not None
    n_dev = sum(1 for s in load_stackexchange_dump(dump).splits.values() if s == "dev")
    assert f"{n_dev} posts" in stored.fitted_on and stored.positives > 0
    assert set(json.loads(fit.flagging_file.read_text())) == {fit.version}

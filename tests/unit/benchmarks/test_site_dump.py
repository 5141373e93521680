"""The bigger site for ``semdup learn`` (``python -m benchmarks.site_dump``): thousands of real duplicate links, the
same bytes on every build, no post of any official test side, folds cut by cluster with the reasons printed; and
``semdup learn`` on a slice of it with a budget that runs out: progress lines, the decision it could make, and the
same command going on to the end."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from benchmarks.site_dump import ASKUBUNTU, SEMEVAL, TRAVEL, Site, build_site, write_site
from semdup.data.learn_folds import fold_supervision
from semdup.data.paths import askubuntu_files, data_dir, semeval_files, travel_dir
from semdup.data.supervision import load_supervision


@pytest.fixture(scope="module")
def site() -> Site:
    return build_site(data_dir())


def _digest(folder: Path) -> str:
    return hashlib.sha256(b"".join((folder / n).read_bytes() for n in ("Posts.xml", "PostLinks.xml"))).hexdigest()


@pytest.mark.slow
def test_the_site_holds_thousands_of_links_and_no_test_post(site: Site, tmp_path: Path) -> None:
    counts = write_site(site, tmp_path / "a")
    assert counts["duplicate_links"] >= 2500 and counts["questions"] >= 9000
    assert write_site(build_site(data_dir()), tmp_path / "b") == counts
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b")  # the same bytes on every build

    travel_test = {line.split("\t")[0] for line in (travel_dir() / "splits.tsv").read_text().splitlines()
                   if line.endswith("\ttest")}
    from semdup.data import load_semeval_xml

    semeval_test = {q.post.id for q in load_semeval_xml(*semeval_files("test")).questions}
    semeval_test |= {r.post.id for q in load_semeval_xml(*semeval_files("test")).questions for r in q.related}
    askubuntu_test = {str(json.loads(x)[s]["id"]) for x in askubuntu_files()[1].read_text().splitlines()
                      for s in ("query", "candidate")}
    used = {source: {old for pid, (s, old) in site.sources.items() if s == source}
            for source in ("travel", "semeval", "askubuntu")}
    assert used["travel"] and not used["travel"] & travel_test
    assert used["semeval"] and not used["semeval"] & semeval_test
    assert used["askubuntu"] and not used["askubuntu"] & askubuntu_test
    assert all(TRAVEL <= pid < ASKUBUNTU for pid, (s, _) in site.sources.items() if s == "travel")
    assert all(pid >= SEMEVAL for pid, (s, _) in site.sources.items() if s == "semeval")

    sup = load_supervision(tmp_path / "a")
    assert sup.kind == "retrieval" and sup.report.duplicate_links == counts["duplicate_links"]
    folds = fold_supervision(sup, 2)
    assert folds.report.by == "cluster" and sum(folds.report.queries) == sup.report.queries
    assert "not by time (link dates): " in folds.report.why_not and "carry no date" in folds.report.why_not


def _slice(site: Site, n_links: int) -> Site:
    """The first ``n_links`` duplicate links of each source with their posts, and the related links among them."""
    keep: list[tuple[int, int, str, str]] = []
    per: dict[str, int] = {}
    for link in site.links:
        source = site.sources[link[0]][0]
        if link[2] == "3" and per.get(source, 0) < n_links:
            per[source] = per.get(source, 0) + 1
            keep.append(link)
    posts = {p for a, b, _, _ in keep for p in (a, b)}
    keep += [link for link in site.links if link[2] == "1" and link[0] in posts and link[1] in posts]
    return replace(site, posts={p: site.posts[p] for p in posts}, links=keep,
                   sources={p: site.sources[p] for p in posts})


@pytest.mark.slow
def test_a_budget_run_shows_its_progress_ends_with_its_decision_and_goes_on(site: Site, tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    import semdup.learn.learn_run as learn_run
    from semdup.cli.learn_cmd import learn
    from semdup.export.base_encoder_bundle import export_base_encoder
    from semdup.export.parity import sample_posts

    dump = tmp_path / "site"
    write_site(_slice(site, 40), dump)
    base = export_base_encoder("minilm", tmp_path / "minilm", parity_posts=sample_posts(4), max_len=64).bundle_dir
    tiny = learn_run.LearnSettings(max_len=64, freeze_layers=5, batch_size=8, epochs=0.5, lr=5e-5)
    monkeypatch.setattr(learn_run, "recipe", lambda *a, **k: tiny)
    args = ["--data", str(dump), "--out", str(tmp_path / "cand"), "--base-bundle", str(base), "--device", "cpu"]
    first = CliRunner().invoke(learn, [*args, "--budget", "1s"])
    assert first.exit_code == 0, first.output
    assert "] fold 1 of 2: step 1/" in first.output and "(stopped by the budget; saved)" in first.output
    assert "stopped by the budget in fold 1 of 2 (every step saved)" in first.output
    assert "the decision it could make now: none (no fold model finished" in first.output
    assert "nothing written: the run is not finished" in first.output and not (tmp_path / "cand").exists()
    again = CliRunner().invoke(learn, args)
    assert again.exit_code == 0, again.output
    assert "fold 1: " in again.output and "(resumed at step 1)" in again.output
    assert "gate (accept only at p < 0.05 with the gain's 95% interval above +0)" in again.output
    assert "2 folds by duplicate cluster" in again.output

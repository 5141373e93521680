"""Flags, then verdicts, then `semdup calibrate`, and the next flags use the new threshold: one round trip on the
real parts (OpenSearch, Redis, a `semdup worker` with SEMDUP_FLAG_DUPLICATES=1, the review API, the CLI).

The bundle is the indexer tests' untrained BOW-CNN (:mod:`indexer_stack`), so the test states its thresholds: the
first, in a calibration file, sits in a gap of the scores of the posts' top 3 candidates, so about two thirds of
them are flagged. A moderator's script then judges every flag through the review API (X-API-Key): those above
another gap "duplicate", the rest "not". `semdup calibrate` must fit that gap (the maximum-accuracy threshold) and
write it where the worker reads it; the worker, not restarted, flags the next post with it. Every expectation is
the in-process reranker's ranking of the text the worker reads (the index's), so none is hard-coded.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from indexer_stack import configure_celery, enqueue, wait_until, worker_env
from indexer_stack import travel_posts as _travel_posts
from review_stack import copy_of, flags_by_post
from served_index import build_index
from settings_tree import service_settings

from benchmarks.local_worker import LocalWorker
from semdup.alerts.flag import read_posts
from semdup.alerts.store import delete_flags, list_flags
from semdup.apps.http import create_app
from semdup.core.posts import Post
from semdup.core.settings import OpenSearchSettings
from semdup.core.task_names import FLAG_DUPLICATES
from semdup.index_format.documents import lexical_document
from semdup.measures.fitting import best_threshold
from semdup.reranker.calibration import Calibration, load_calibration, save_calibration
from semdup.reranker.reranker import Reranker
from semdup.review.verdicts import VERDICTS_INDEX

pytestmark = [pytest.mark.opensearch, pytest.mark.broker, pytest.mark.slow]

WAIT_S = 180.0
K = 3
MARGIN = 1e-4  # no expected score lies this close to a threshold
KEY = "review-carol-5e0f-7d2f0c9e4b1a"


def gap_threshold(scores: list[float], quantile: float) -> float:
    """The midpoint of the first gap of at least 2·MARGIN between sorted distinct scores from ``quantile`` on."""
    values = sorted(set(scores))
    for i in range(int(quantile * len(values)), len(values) - 1):
        if values[i + 1] - values[i] >= 2 * MARGIN:
            return (values[i] + values[i + 1]) / 2
    raise AssertionError(f"no gap in the scores above the {quantile} quantile")


def top(rr: Reranker, post: Post) -> list[tuple[str, float]]:
    return [(c.id, c.score) for c in rr.rank(post, k=K, exclude_id=post.id) if c.complete]


def flags_at(cands: list[tuple[str, float]], threshold: float) -> set[str]:
    assert all(abs(s - threshold) > MARGIN for _, s in cands), "a score too close to the threshold"
    return {c for c, s in cands if s >= threshold}


def test_verdicts_calibrate_the_threshold_that_the_next_flags_use(
    opensearch_client: Any, opensearch_url: str, redis_url: str, bundle_dir: Path, bundle: Any, tmp_path: Path
) -> None:
    app = configure_celery(redis_url)
    index = f"semdup-test-roundtrip-{uuid.uuid4().hex[:8]}"
    corpus = _travel_posts()[:100]
    build_index(opensearch_client, index, bundle, corpus)
    rr = Reranker(bundle, opensearch_client, index)  # the workers' candidate paths: the defaults
    first = [p.id for p in corpus[:40]]
    stored, _ = read_posts(opensearch_client, index, first)  # the text the worker reads back
    ranked = {p.id: top(rr, p) for p in stored}
    t_old = gap_threshold([s for cands in ranked.values() for _, s in cands], 0.3)
    cal_file = tmp_path / "flags.calibration.json"
    save_calibration(cal_file, bundle.version, Calibration(a=10.0, b=-10.0 * t_old, threshold=t_old))
    env = worker_env(
        opensearch_url, redis_url, bundle_dir, SEMDUP_FLAG_DUPLICATES="1", SEMDUP_CALIBRATION=str(cal_file)
    )
    worker = LocalWorker({**env, "SEMDUP_FLAG_K": str(K)}, tmp_path / "worker.log")
    next_post: Post | None = None
    try:
        worker.start()
        # 1. flags, by the worker
        app.send_task(FLAG_DUPLICATES, args=[index, first, bundle.version])
        expected = {p: got for p, cands in ranked.items() if (got := flags_at(cands, t_old))}
        wait_until(lambda: flags_by_post(opensearch_client, index) == expected, "the first flags", WAIT_S)

        # 2. verdicts, through the review API as a moderator's script sends them
        flags = list_flags(opensearch_client, index)
        t_split = gap_threshold([f.score for f in flags], 0.5)
        settings = service_settings(
            {"bundle": str(bundle_dir), "index": index, "api_keys": f"{KEY}:{index}:review:carol"},
            OpenSearchSettings(url=opensearch_url),
        )
        client = TestClient(create_app(settings, reranker=rr))
        for f in flags:
            verdict = "duplicate" if f.score >= t_split else "not_duplicate"
            body = {"index": index, "post_id": f.post_id, "candidate_id": f.candidate_id, "verdict": verdict}
            r = client.post("/review/api/verdicts", json=body, headers={"X-API-Key": KEY})
            assert r.status_code == 200 and r.json()["changed"] is True, r.text
        labels = [f.score >= t_split for f in flags]
        assert sum(labels) >= 5 and len(labels) - sum(labels) >= 5 and len(labels) >= 20

        # 3. semdup calibrate, as an operator runs it
        cli = subprocess.run(
            [sys.executable, "-m", "semdup", "calibrate", "--index", index, "--bundle", str(bundle_dir)]
            + ["--out", str(cal_file)],
            env={**env, "SEMDUP_FLAG_K": str(K)},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert cli.returncode == 0, cli.stderr
        cal = load_calibration(cal_file, bundle.version)
        t_new = best_threshold([f.score for f in flags], labels)[0]
        assert cal is not None and cal.threshold == pytest.approx(t_new) and t_new == pytest.approx(t_split)
        assert t_new > t_old + MARGIN and cal.n == len(flags) and cal.positives == sum(labels)
        assert f"threshold {t_new:.4f} (was {t_old:.4f})" in cli.stdout, cli.stdout

        # 4. the next flags use it: a new post (a copy of one whose top 3 straddle the new threshold)
        for p in corpus[:40]:
            candidate = copy_of(p)
            as_read = Post(candidate.id, **{k: lexical_document(candidate)[k] for k in ("title", "body")})
            cands = top(rr, as_read)
            clear = all(abs(s - t) > MARGIN for _, s in cands for t in (t_old, t_new))
            if clear and any(t_old < s < t_new for _, s in cands) and any(s > t_new for _, s in cands):
                next_post = candidate
                break
        assert next_post is not None, "no post whose candidates straddle the new threshold"
        before, after = flags_at(cands, t_old), flags_at(cands, t_new)
        assert after and after < before  # the old threshold would have flagged more
        enqueue(index, [next_post], bundle.version)  # index_posts, which the worker chains to flagging
        wait_until(lambda: flags_by_post(opensearch_client, index).get(next_post.id) == after, "the next flags")
        for f in list_flags(opensearch_client, index, post_id=next_post.id):
            assert f.probability == pytest.approx(float(cal.probability([f.score])[0]), abs=1e-6)
    finally:
        worker.stop()
        delete_flags(opensearch_client, index, [*first, *([next_post.id] if next_post else [])])
        opensearch_client.delete_by_query(
            index=VERDICTS_INDEX, body={"query": {"term": {"index": index}}}, ignore=[404], refresh=True
        )
        opensearch_client.indices.delete(index=index, ignore_unavailable=True)


def test_calibrate_fits_the_sites_duplicate_links_without_any_verdict(
    opensearch_client: Any, opensearch_url: str, bundle_dir: Path, bundle: Any, tmp_path: Path
) -> None:
    """`semdup calibrate --links PostLinks.xml` on the Travel dev clusters: each linked post in the index ranked, its
    top 10 labelled by the links (the pairs counted here by the in-process reranker, the way the command says)."""
    from indexer_stack import TRAVEL

    from semdup.data.stackexchange import load_duplicate_links, load_stackexchange_dump

    dump = load_stackexchange_dump(TRAVEL)
    posts = [p for p in dump.posts.values() if dump.splits.get(p.id) == "dev"]
    index = f"semdup-test-links-{uuid.uuid4().hex[:8]}"
    build_index(opensearch_client, index, bundle, posts)
    try:
        links = TRAVEL / "PostLinks.xml"
        positives: dict[str, set[str]] = {}
        for a, b in load_duplicate_links(links):
            positives.setdefault(a, set()).add(b)
        rr = Reranker(bundle, opensearch_client, index)
        stored, missing = read_posts(opensearch_client, index, list(positives))
        labels = [c.id in positives[p.id] for p in stored for c in rr.rank(p, k=10, exclude_id=p.id) if c.complete]
        out = tmp_path / "links.calibration.json"
        cli = subprocess.run(
            [sys.executable, "-m", "semdup", "calibrate", "--index", index, "--bundle", str(bundle_dir)]
            + ["--links", str(links), "--out", str(out)],
            env={**worker_env(opensearch_url, "redis://unused:1/0", bundle_dir)},
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert cli.returncode == 0, cli.stderr
        pos = sum(labels)
        assert f"links PostLinks.xml: {len(labels)} pairs ({pos} duplicates, {len(labels) - pos} not)" in cli.stdout
        assert f"{len(missing)} posts not in the index" in cli.stdout
        assert "verdicts on " + index + ": 0 pairs" in cli.stdout
        cal = load_calibration(out, bundle.version)
        assert cal is not None and cal.n == len(labels) and cal.positives == pos and cal.threshold is not None
    finally:
        opensearch_client.indices.delete(index=index, ignore_unavailable=True)

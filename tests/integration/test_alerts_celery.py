"""FLAG_DUPLICATES against the real parts: Redis broker, OpenSearch, and a `semdup worker` subprocess.

The bundle is the indexer tests' untrained BOW-CNN over the Travel vocabulary (:mod:`indexer_stack`): its scores
mean nothing yet, so the test states its threshold. It is just under the highest fused score the bundle can give,
β_bow + β_dense + α (every cosine 1, lexnorm 1), which a verbatim copy of an indexed post reaches; the worker reads
it from a calibration file named by SEMDUP_CALIBRATION, as an operator's worker would read a fitted one.
"""

from __future__ import annotations

from typing import Any

import pytest
from indexer_stack import count, create, enqueue, wait_until, worker_env
from indexer_stack import travel_posts as _travel_posts

from benchmarks.local_worker import LocalWorker
from semdup.alerts.store import FLAGS_INDEX, delete_flags, flag_id, list_flags
from semdup.core.posts import Post
from semdup.core.task_names import FLAG_DUPLICATES
from semdup.index_format.documents import lexical_document
from semdup.reranker.calibration import Calibration, save_calibration

pytestmark = [pytest.mark.opensearch, pytest.mark.broker, pytest.mark.slow]

WAIT_S = 180.0


def test_a_verbatim_copy_is_flagged_by_the_worker_and_reflagging_follows_edits_and_deletes(
    opensearch_client, opensearch_url, redis_url, unique_index, bundle_dir, bundle, tmp_path
) -> None:
    from indexer_stack import configure_celery

    app = configure_celery(redis_url)
    fusion = bundle.fusion
    threshold = fusion["beta_bow"] + fusion["beta_dense"] + fusion["alpha"] - 1e-3
    cal = Calibration(a=50.0, b=-50.0 * threshold, threshold=threshold, fitted_on="stated by the test")
    cal_file = save_calibration(tmp_path / "flags.calibration.json", bundle.version, cal)
    posts = _travel_posts()[:63]
    original = posts[10]
    copy = Post(f"copy-of-{original.id}", original.title, original.body)

    create(opensearch_client, unique_index, bundle)
    env = worker_env(opensearch_url, redis_url, bundle_dir, SEMDUP_CALIBRATION=str(cal_file))
    worker = LocalWorker(env, tmp_path / "worker.log")
    try:
        worker.start()
        enqueue(unique_index, [*posts, copy], bundle.version)
        wait_until(lambda: count(opensearch_client, unique_index, bundle.version) == 64, "64 posts", timeout=WAIT_S)

        def flags_of(post_id: str) -> dict[str, Any]:
            return {f.candidate_id: f for f in list_flags(opensearch_client, unique_index, post_id=post_id)}

        for _ in range(2):  # delivered twice: the same flag documents
            app.send_task(FLAG_DUPLICATES, args=[unique_index, [copy.id], bundle.version])
        wait_until(lambda: original.id in flags_of(copy.id), "the copy's flag", timeout=WAIT_S)
        flag = flags_of(copy.id)[original.id]
        assert flag.score >= threshold and flag.model == bundle.version and flag.index == unique_index
        assert flag.probability == pytest.approx(float(cal.probability([flag.score])[0]), abs=1e-6)
        stored = opensearch_client.get(index=FLAGS_INDEX, id=flag_id(unique_index, copy.id, original.id))
        assert stored["_source"]["post_id"] == copy.id

        # the copy is edited into another question (the text as a semdup index stores it: cleaned): its re-flag
        # drops the old flag
        other = posts[40]
        edited = lexical_document(Post(copy.id, other.title, other.body))
        opensearch_client.index(index=unique_index, id=copy.id, body=edited, refresh=True)
        app.send_task(FLAG_DUPLICATES, args=[unique_index, [copy.id], bundle.version])
        wait_until(
            lambda: original.id not in flags_of(copy.id) and other.id in flags_of(copy.id),
            "the edited copy's re-flag",
            timeout=WAIT_S,
        )

        # the copy is deleted before its flagging runs: it gets no flags at all
        opensearch_client.delete(index=unique_index, id=copy.id, refresh=True)
        app.send_task(FLAG_DUPLICATES, args=[unique_index, [copy.id], bundle.version])
        wait_until(lambda: not flags_of(copy.id), "the deleted copy's flags to go", timeout=WAIT_S)
        assert "flagging" in (tmp_path / "worker.log").read_text(encoding="utf-8")
    finally:
        worker.stop()
        delete_flags(opensearch_client, unique_index, [copy.id, *(p.id for p in posts)])


def test_the_worker_flags_as_many_candidates_per_post_as_the_calibration_was_chosen_for(
    opensearch_client, opensearch_url, redis_url, unique_index, bundle_dir, bundle, tmp_path
) -> None:
    """A calibration fitted by `semdup fit-default` or `alerts_eval` records its k: with SEMDUP_FLAG_K unset the
    worker flags at most that many per post (here every candidate passes the threshold, so exactly k)."""
    from indexer_stack import configure_celery

    app = configure_celery(redis_url)
    cal = Calibration(a=1.0, b=0.0, threshold=-100.0, fitted_on="stated by the test", k=2)
    cal_file = save_calibration(tmp_path / "k2.calibration.json", bundle.version, cal)
    posts = _travel_posts()[:20]
    create(opensearch_client, unique_index, bundle)
    env = worker_env(opensearch_url, redis_url, bundle_dir, SEMDUP_CALIBRATION=str(cal_file))
    env.pop("SEMDUP_FLAG_K", None)
    worker = LocalWorker(env, tmp_path / "worker.log")
    first, second = posts[3].id, posts[7].id
    try:
        worker.start()
        enqueue(unique_index, posts, bundle.version)
        wait_until(lambda: count(opensearch_client, unique_index, bundle.version) == 20, "20 posts", timeout=WAIT_S)
        app.send_task(FLAG_DUPLICATES, args=[unique_index, [first], bundle.version])
        app.send_task(FLAG_DUPLICATES, args=[unique_index, [second], bundle.version])
        # one worker process takes the tasks in order: once the second post's flags are there, the first's are done
        wait_until(lambda: list_flags(opensearch_client, unique_index, post_id=second), "flags", timeout=WAIT_S)
        assert len(list_flags(opensearch_client, unique_index, post_id=first)) == 2
        assert len(list_flags(opensearch_client, unique_index, post_id=second)) == 2
        assert "k 2 (the calibration's)" in (tmp_path / "worker.log").read_text(encoding="utf-8")
    finally:
        worker.stop()
        delete_flags(opensearch_client, unique_index, [p.id for p in posts])

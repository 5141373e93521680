"""What `semdup serve` prepares for its workers (semdup.apps.serve): one session secret for all of them where the
review page is on and none is set, and a runtime folder of its own where the settings name none."""

from __future__ import annotations

from pathlib import Path

from semdup.apps.serve import share_between_workers
from semdup.apps.settings import HANDOFF_ENV, handoff, load_settings

SECRET = "hunter2-s3cr3t-0b9e5d7a1c"  # 24+ characters: what a key needs
ENV = {
    "SEMDUP_OPENSEARCH_URL": "http://search:9200",
    "SEMDUP_BUNDLE": "/bundles/current",
    "SEMDUP_INDEX": "travel",
    "SEMDUP_API_KEYS": f"{SECRET}-mod:travel:review:alice",
}


def test_a_review_page_without_a_secret_gets_one_every_worker_reads_back(tmp_path: Path) -> None:
    tree = load_settings(env={**ENV, "SEMDUP_RUNTIME_DIR": str(tmp_path)})
    settings = tree.service_settings()
    assert settings.review_enabled and not settings.review.session_secret

    shared, runtime, note = share_between_workers(tree, review=settings.review_enabled)

    secret = shared.review.session_secret
    assert secret and len(secret) >= 32 and "SEMDUP_SESSION_SECRET" in note
    assert runtime is None and shared.service.runtime_dir == str(tmp_path)  # the operator's folder is kept
    worker = load_settings(env={HANDOFF_ENV: handoff(shared)})  # what a spawned worker reads
    assert worker.service_settings().review.session_secret == secret
    assert tree.review.session_secret is None  # the caller's tree is left as it was


def test_a_set_secret_is_kept_and_a_runtime_folder_is_made_and_removed() -> None:
    tree = load_settings(env={**ENV, "SEMDUP_SESSION_SECRET": SECRET * 2})

    shared, runtime, note = share_between_workers(tree, review=True)

    assert (shared.review.session_secret, note) == (SECRET * 2, "")
    assert runtime is not None and shared.service.runtime_dir == runtime.name and Path(runtime.name).is_dir()
    runtime.cleanup()
    assert not Path(runtime.name).exists()


def test_no_review_page_no_secret() -> None:
    tree = load_settings(env={**ENV, "SEMDUP_API_KEYS": f"{SECRET}-s:travel:search:site"})

    shared, runtime, note = share_between_workers(tree, review=tree.service_settings().review_enabled)

    assert shared.review.session_secret is None and note == ""
    assert runtime is not None
    runtime.cleanup()

"""The review page as a moderator uses it: real flags, a real `semdup serve`, a real browser (headless chromium).

A `semdup worker` with SEMDUP_FLAG_DUPLICATES=1 indexes four verbatim copies of posts already in the index (one of
them a post whose body holds ``<script>`` and ``onerror=``, as tags and as text the author wrote) and flags each
against its original. The threshold, stated by the test in a calibration file, is 1.5 on this untrained bundle's
fused score (β_bow·cos_bow + β_dense·cos_dense, at most 2): the copies score 1.8 to 2 against their originals
(the payload's copy below 2: its stored text is cleaned again when re-read), other Travel pairs under 1.2. A
`semdup serve` subprocess serves /review; one headless chromium (selenium + chromium-driver) logs in with a review
key, judges one pair with the mouse and one with the keyboard (j, then n), and the verdicts are read back from
OpenSearch. Scripts use the same API with the key in X-API-Key: a replay changes nothing, a key without the review
scope gets 403, CSRF and ``next=`` are checked through the real server too.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from indexer_stack import configure_celery, enqueue, wait_until, worker_env
from indexer_stack import travel_posts as _travel_posts
from review_stack import copy_of, flags_by_post, headless_chromium, semdup_serve, serve_env
from served_index import build_index

from benchmarks.local_worker import LocalWorker
from semdup.alerts.store import delete_flags
from semdup.core.posts import Post
from semdup.data.pairs import load_pairs_jsonl
from semdup.reranker.calibration import Calibration, save_calibration
from semdup.review.verdicts import VERDICTS_INDEX, verdict_id

pytestmark = [pytest.mark.opensearch, pytest.mark.broker, pytest.mark.slow]

WAIT_S = 180.0
SEARCH_KEY, ALICE_KEY = "search-key-7a1c-7d2f0c9e4b1a", "review-alice-44be-7d2f0c9e4b1a"
BOB_KEY, OPS_KEY = "review-bob-90d2-7d2f0c9e4b1a", "ops-key-0e4b-9a1c5d7f3e28"
XSS = Post(
    "xss-1",
    "Can a <script> tag in my form ruin my visa application?",
    '<p>My visa form said:</p><script>window.__pwned = 1</script><img src="x" onerror="window.__pwned = 2">'
    "<p>Is &lt;script&gt;window.__pwned = 3&lt;/script&gt; or &lt;img src=x onerror=&quot;window.__pwned = 4&quot;&gt;"
    " dangerous on a visa form?</p>",
)


@pytest.fixture(scope="module")
def flagged(
    opensearch_client: Any, opensearch_url: str, redis_url: str, bundle_dir: Path, bundle: Any, tmp_path_factory: Any
) -> Iterator[dict[str, Any]]:
    """An index of 61 posts, and four copies of them written and flagged by a real flagging worker."""
    configure_celery(redis_url)
    root = tmp_path_factory.mktemp("review-browser")
    index = f"semdup-test-review-{uuid.uuid4().hex[:8]}"
    originals = [*_travel_posts()[:60], XSS]
    build_index(opensearch_client, index, bundle, originals)
    fusion = bundle.fusion
    threshold = fusion["beta_bow"] + fusion["beta_dense"] + fusion["alpha"] - 0.5  # copies only (module doc)
    cal = save_calibration(
        root / "flags.calibration.json",
        bundle.version,
        Calibration(a=50.0, b=-50.0 * threshold, threshold=threshold, fitted_on="stated by the test"),
    )
    copies = [copy_of(p) for p in (originals[5], originals[17], originals[33], XSS)]
    env = worker_env(opensearch_url, redis_url, bundle_dir, SEMDUP_FLAG_DUPLICATES="1", SEMDUP_CALIBRATION=str(cal))
    worker = LocalWorker(env, root / "worker.log")
    try:
        worker.start()
        enqueue(index, copies, bundle.version)
        want = {c.id: {c.id.removeprefix("copy-of-")} for c in copies}
        wait_until(lambda: flags_by_post(opensearch_client, index) == want, "the four copies' flags", WAIT_S)
        yield {"index": index, "calibration": cal, "copies": copies, "root": root}
    finally:
        worker.stop()
        delete_flags(opensearch_client, index, [c.id for c in copies])
        opensearch_client.delete_by_query(
            index=VERDICTS_INDEX, body={"query": {"term": {"index": index}}}, ignore=[404], refresh=True
        )
        opensearch_client.indices.delete(index=index, ignore_unavailable=True)


@pytest.fixture(scope="module")
def served(flagged: dict[str, Any], opensearch_url: str, bundle_dir: Path) -> Iterator[str]:
    index = flagged["index"]
    keys = f"{SEARCH_KEY}:{index},{ALICE_KEY}:{index}:review:alice,{BOB_KEY}:{index}:review:bob,{OPS_KEY}:*:ops"
    env = serve_env(opensearch_url, bundle_dir, index, keys, SEMDUP_CALIBRATION=str(flagged["calibration"]))
    with semdup_serve(env, flagged["root"] / "serve.log") as base:
        yield base


@pytest.fixture(scope="module")
def browser(flagged: dict[str, Any]) -> Iterator[Any]:
    with headless_chromium(flagged["root"]) as driver:
        yield driver


def open_review(driver: Any, base: str) -> list[Any]:
    """The review page, logged in as alice when the browser has no session yet; returns the pair cards."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(f"{base}/review")
    if "/review/login" in driver.current_url:
        driver.find_element(By.ID, "key").send_keys(ALICE_KEY)
        driver.find_element(By.CSS_SELECTOR, "form.login button[type=submit]").click()
    WebDriverWait(driver, 60).until(lambda d: d.execute_script("return document.documentElement.dataset.ready"))
    return driver.find_elements(By.CSS_SELECTOR, "article.pair")


def wait_verdict(driver: Any, position: int, verdict: str) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, 60).until(
        lambda d: d.find_elements("css selector", "article.pair")[position].get_attribute("data-verdict") == verdict
    )


def test_a_moderator_judges_real_flags_with_the_mouse_and_the_keyboard(
    flagged: dict[str, Any], served: str, browser: Any, opensearch_client: Any, bundle: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    index = flagged["index"]
    cards = open_review(browser, served)
    assert sorted(c.get_attribute("data-post") for c in cards) == sorted(c.id for c in flagged["copies"])
    first = cards[0]
    post_id = first.get_attribute("data-post")
    assert first.get_attribute("data-candidate") == post_id.removeprefix("copy-of-")
    assert f"https://travel.stackexchange.com/questions/{post_id}" in [
        a.get_attribute("href") for a in first.find_elements(By.CSS_SELECTOR, "a")
    ]
    assert first.find_elements(By.CSS_SELECTOR, "mark"), "a copy shares every term with its original"
    assert "score" in first.text and "model " + bundle.version in first.text

    cards[2].find_element(By.CSS_SELECTOR, "button.accept").click()  # the mouse
    wait_verdict(browser, 2, "duplicate")
    cards = open_review(browser, served)  # a fresh page: the first pair has the focus
    ActionChains(browser).send_keys("j").send_keys("n").perform()  # the keyboard: next pair, "not a duplicate"
    wait_verdict(browser, 1, "not_duplicate")
    browser.save_screenshot(str(tmp_path / "review-page.png"))

    judged = {
        cards[2].get_attribute("data-post"): "duplicate",
        cards[1].get_attribute("data-post"): "not_duplicate",
    }
    for post, verdict in judged.items():
        doc = opensearch_client.get(index=VERDICTS_INDEX, id=verdict_id(index, post, post[8:], "alice"))["_source"]
        assert (doc["verdict"], doc["who"], doc["model"], doc["index"]) == (verdict, "alice", bundle.version, index)
    assert (tmp_path / "review-page.png").stat().st_size > 10_000
    cards = open_review(browser, served)
    assert browser.find_elements(By.CSS_SELECTOR, "aside.chart svg polyline")  # the chart, from these verdicts
    assert "Your verdict: duplicate" in cards[2].text and "Your verdict: not a duplicate" in cards[1].text


def test_a_post_holding_script_and_onerror_is_shown_inert_as_text(
    flagged: dict[str, Any], served: str, browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    cards = open_review(browser, served)
    card = next(c for c in cards if c.get_attribute("data-post") == "copy-of-xss-1")
    browser.execute_script("arguments[0].scrollIntoView()", card)
    browser.save_screenshot(str(tmp_path / "review-xss.png"))
    assert browser.execute_script("return window.__pwned === undefined")  # neither payload ran
    assert browser.execute_script("return document.querySelectorAll('[onerror], main script, main img').length") == 0
    text = card.text
    assert "window.__pwned = 1" in text  # the script's text (its tags were stripped when it was indexed)
    assert 'Is <script>window.__pwned = 3</script> or <img src=x onerror="window.__pwned = 4"> dangerous' in text
    assert len(card.find_elements(By.CSS_SELECTOR, "section.post")) == 2


def test_scripts_use_the_api_with_a_key_and_a_replay_changes_nothing(
    flagged: dict[str, Any], served: str, opensearch_client: Any, opensearch_url: str, tmp_path: Path
) -> None:
    index = flagged["index"]
    copy = flagged["copies"][0]
    pair = {"index": index, "post_id": copy.id, "candidate_id": copy.id[8:], "verdict": "duplicate"}
    url = f"{served}/review/api/verdicts"
    assert httpx.post(url, json=pair, headers={"X-API-Key": SEARCH_KEY}).status_code == 403
    assert httpx.post(url, json=pair).status_code == 401
    missing = httpx.post(url, json={**pair, "candidate_id": "no-such-post"}, headers={"X-API-Key": BOB_KEY})
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "HTTPError"

    first = httpx.post(url, json=pair, headers={"X-API-Key": BOB_KEY})
    assert first.status_code == 200 and first.json()["changed"] is True
    doc_id = verdict_id(index, copy.id, copy.id[8:], "bob")
    stored = opensearch_client.get(index=VERDICTS_INDEX, id=doc_id)
    again = httpx.post(url, json=pair, headers={"X-API-Key": BOB_KEY})
    assert again.status_code == 200 and again.json() == {**first.json(), "changed": False}
    after = opensearch_client.get(index=VERDICTS_INDEX, id=doc_id)
    assert (after["_seq_no"], after["_source"]) == (stored["_seq_no"], stored["_source"])  # not even rewritten

    export = httpx.get(f"{served}/review/api/verdicts.jsonl", params={"index": index}, headers={"X-API-Key": BOB_KEY})
    assert export.status_code == 200
    (tmp_path / "verdicts.jsonl").write_text(export.text, encoding="utf-8")
    pairs = {(p.query.id, p.candidate.id): p.duplicate for p in load_pairs_jsonl(tmp_path / "verdicts.jsonl")}
    assert pairs[(copy.id, copy.id[8:])] is True
    cli = subprocess.run(  # the same export from the command line
        [sys.executable, "-m", "semdup", "verdicts", "--index", index, "--out", str(tmp_path / "cli.jsonl")],
        env={**os.environ, "SEMDUP_OPENSEARCH_URL": opensearch_url},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert cli.returncode == 0 and f"{len(pairs)} judged pairs written" in cli.stderr, cli.stderr
    assert (tmp_path / "cli.jsonl").read_text(encoding="utf-8") == export.text

    metrics = httpx.get(f"{served}/metrics", headers={"Authorization": f"Bearer {OPS_KEY}"}).text
    assert f'semdup_review_flags{{index="{index}"}} 4.0' in metrics
    judged = len({h["_source"]["pair"] for h in _verdicts(opensearch_client, index)})
    assert f'semdup_review_backlog{{index="{index}"}} {4.0 - judged}' in metrics


def test_the_session_needs_its_csrf_token_and_next_stays_local(flagged: dict[str, Any], served: str) -> None:
    with httpx.Client(base_url=served) as client:
        form = client.get("/review/login")
        token = re.search(r'name="csrf" value="([^"]+)"', form.text).group(1)
        login = client.post("/review/login", data={"key": BOB_KEY, "csrf": token, "next": "https://evil.example"})
        assert login.status_code == 303 and login.headers["location"] == "/review"
        page = client.get("/review")
        csrf = re.search(r'<meta name="csrf-token" content="([^"]+)">', page.text).group(1)
        copy = flagged["copies"][1]
        pair = {"index": flagged["index"], "post_id": copy.id, "candidate_id": copy.id[8:], "verdict": "duplicate"}
        assert client.post("/review/api/verdicts", json=pair).status_code == 403
        assert client.post("/review/api/verdicts", json=pair, headers={"X-CSRF-Token": csrf[:-1]}).status_code == 403
        assert client.post("/review/api/verdicts", json=pair, headers={"X-CSRF-Token": csrf}).status_code == 200


def _verdicts(client: Any, index: str) -> list[dict[str, Any]]:
    client.indices.refresh(index=VERDICTS_INDEX)
    body = {"query": {"term": {"index": index}}, "size": 1000}
    return client.search(index=VERDICTS_INDEX, body=body)["hits"]["hits"]

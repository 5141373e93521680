"""``semdup eval`` end to end on the real data against a real OpenSearch, and its clear errors."""

from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner

from semdup.cli import cli
from semdup.data import load_semeval_xml
from semdup.data.paths import semeval_files
from semdup.data.run_files import read_semeval_pred
from semdup.evaluation.methods import parse_method
from semdup.evaluation.semeval_eval import run_semeval
from semdup.measures.ranking import complete_scores


@pytest.mark.opensearch
def test_semeval_dev_bm25_both_modes_and_official_pred_file(opensearch_url, tmp_path):
    pred = tmp_path / "bm25.pred"
    runner = CliRunner()
    res = runner.invoke(
        cli,
        ["eval", "semeval", "--set", "dev", "--method", "bm25", "--pred", str(pred), "--opensearch", opensearch_url,
         "--json"],
    )
    assert res.exit_code == 0, res.output
    preds = read_semeval_pred(pred)
    assert len(preds) == 50 and all(len(row) == 10 for row in preds.values())
    lines = pred.read_text().splitlines()
    assert len(lines) == 500 and lines[0].split("\t")[2] == "0" and lines[0].split("\t")[4] in ("true", "false")


@pytest.mark.opensearch
def test_retrieve_mode_scores_every_gold_candidate(opensearch_client):
    sem = load_semeval_xml(*semeval_files("dev"), name="dev")
    (run,) = run_semeval(sem, [parse_method("tfidf")], client=opensearch_client, mode="retrieve", k=3, progress=False)
    for q in sem.questions:
        assert set(run.predictions[q.post.id]) == {r.post.id for r in q.related}
    assert 40.0 < run.metrics["MAP"] <= 100.0


def test_unretrieved_candidates_rank_below_retrieved_without_ties():
    row = complete_scores({"a": 3.0, "b": 2.5}, ["x", "a", "y", "b", "z"])
    assert min(row["a"], row["b"]) > max(row["x"], row["y"], row["z"])
    assert len({row["x"], row["y"], row["z"]}) == 3  # no ties left for the scorer's file-order rule to break


@pytest.mark.opensearch
def test_stackexchange_test_split_lexical(opensearch_url, tmp_path):
    res = CliRunner().invoke(
        cli, ["eval", "stackexchange", "--split", "dev", "--method", "bm25", "--run", str(tmp_path / "r.run"),
              "--opensearch", opensearch_url, "--json"]
    )
    assert res.exit_code == 0, res.output
    rows = [r.split() for r in (tmp_path / "r.run").read_text().splitlines()]  # QID Q0 DOCID RANK SCORE TAG
    qids = {r[0] for r in rows}
    assert len(qids) == 108 and all(len(r) == 6 and r[0] != r[2] for r in rows)


def _semdup(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "semdup", *args], capture_output=True, text=True, timeout=120)


def test_unknown_method_is_a_usage_error_listing_accepted_values():
    res = _semdup("eval", "semeval", "--set", "dev", "--method", "bm26")
    assert res.returncode == 2 and "bm25 | lmj" in res.stderr


def test_missing_xml_file_is_one_clear_line(tmp_path):
    res = _semdup("eval", "semeval", "--xml", str(tmp_path / "nope.xml"), "--relevancy", str(tmp_path / "x"),
                  "--method", "bm25")
    assert res.returncode == 1 and res.stderr.startswith("Error: ") and "nope.xml" in res.stderr
    assert "Traceback" not in res.stderr


def test_non_utf8_xml_is_refused_with_its_byte_offset(tmp_path):
    bad = tmp_path / "bad.xml"
    bad.write_bytes(
        b"<?xml version='1.0' encoding='UTF-8'?><root><OrgQuestion ORGQ_ID='Q1'>\xff\xfe</OrgQuestion></root>"
    )
    rel = tmp_path / "bad.relevancy"
    rel.write_text("Q1\tQ1_R1\t1\t1.0\ttrue\n")
    res = _semdup("eval", "semeval", "--xml", str(bad), "--relevancy", str(rel), "--method", "bm25")
    assert res.returncode == 1 and "UTF-8" in res.stderr and "Traceback" not in res.stderr


def test_opensearch_down_says_how_to_start_it():
    res = _semdup("eval", "semeval", "--set", "dev", "--method", "bm25", "--opensearch", "http://127.0.0.1:9")
    assert res.returncode == 1 and "semdup opensearch start" in res.stderr and "Traceback" not in res.stderr


def test_a_bundle_method_scores_every_pair_offline_with_the_progress_bar_on(tiny_bundle):
    # The scorer path (bundle:/checkpoint: methods) with progress=True, as `semdup eval semeval` runs it.
    sem = load_semeval_xml(*semeval_files("dev"), name="dev")
    (run,) = run_semeval(sem, [parse_method(f"bundle:{tiny_bundle}")], client=None, mode="rerank", progress=True)
    assert all(len(run.predictions[q.post.id]) == len(q.related) for q in sem.questions)
    assert 0.0 <= run.metrics["MAP"] <= 100.0

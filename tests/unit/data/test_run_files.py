"""TREC run files and qrels: what trec_eval-compatible tools (ir-measures) read is what semdup measured."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from semdup.core.errors import DataError
from semdup.core.lexical_scores import LexicalIndex
from semdup.core.text_pipeline import TextPipeline, TextPipelineSettings
from semdup.data import load_stackexchange_dump
from semdup.data.paths import default_data_dir
from semdup.data.run_files import read_trec_qrels, read_trec_run, write_trec_qrels, write_trec_run
from semdup.measures.protocols import rank_corpus
from semdup.measures.ranking import retrieval_scores

ir_measures = pytest.importorskip("ir_measures", reason='ir-measures is in the test extra: pip install "semdup[test]"')

TRAVEL = default_data_dir() / "travel-stackexchange"
needs_travel = pytest.mark.skipif(not TRAVEL.is_dir(), reason=f"the Travel dump is not at {TRAVEL}")

# semdup's measure -> the same measure in ir-measures (trec_eval's rules: AP over all relevant documents).
SAME = {"MAP": "AP@100", "MRR": "RR@100", "Acc@1": "Success@1", "Acc@5": "Success@5", "Acc@10": "Success@10"}


def _ir_measures(qrels: Path, run: Path) -> dict[str, float]:
    measures = [ir_measures.parse_measure(m) for m in SAME.values()]
    got = ir_measures.calc_aggregate(
        measures, ir_measures.read_trec_qrels(str(qrels)), ir_measures.read_trec_run(str(run))
    )
    return {ours: 100.0 * got[ir_measures.parse_measure(theirs)] for ours, theirs in SAME.items()}


@pytest.fixture(scope="module")
def bm25_dev_run() -> tuple[dict, dict]:
    """BM25 over the real Travel dump, dev queries, ranked by the protocol's one ranking function."""
    dump = load_stackexchange_dump(TRAVEL)
    queries = dump.queries("dev")
    pipe = TextPipeline(TextPipelineSettings())
    index = LexicalIndex.build(pipe, dump.corpus(), kind="bm25")
    ranked = rank_corpus(index.score_matrix(pipe, [q.post for q in queries]), [q.post.id for q in queries], index.ids)
    return ranked, {q.post.id: q.relevant for q in queries}


@needs_travel
def test_ir_measures_gives_semdups_travel_figures(bm25_dev_run, tmp_path: Path) -> None:
    ranked, relevant = bm25_dev_run
    ours = retrieval_scores({q: [d for d, _ in hits] for q, hits in ranked.items()}, relevant, cutoff=100)
    run = write_trec_run(tmp_path / "bm25.dev.run", ranked, tag="bm25")
    qrels = write_trec_qrels(tmp_path / "dev.qrels", relevant)
    theirs = _ir_measures(qrels, run)
    assert ours["MAP"] > 0 and ours["Acc@10"] > ours["Acc@1"]  # a real ranking, not an empty one
    for name in SAME:
        assert theirs[name] == pytest.approx(ours[name], abs=1e-6), name
    assert read_trec_run(run) == ranked  # no tie in this run: scores come back exactly
    assert read_trec_qrels(qrels) == {q: set(docs) for q, docs in relevant.items()}


def test_ties_are_written_in_semdups_order(tmp_path: Path) -> None:
    # The tools order tied scores by docid, whatever the file's order; semdup ranked b, c, a (neither way).
    ranked = {"q": [("b", 1.0), ("c", 1.0), ("a", 1.0), ("d", 0.5)]}
    run = write_trec_run(tmp_path / "tied.run", ranked)
    back = read_trec_run(run)["q"]
    assert [d for d, _ in back] == ["b", "c", "a", "d"]
    assert back[0][1] == 1.0 and back[0][1] > back[1][1] > back[2][1] > back[3][1] == 0.5
    assert back[2][1] == pytest.approx(1.0, abs=1e-15)
    for relevant_doc, rr in (("b", 1.0), ("c", 0.5), ("a", 1 / 3)):
        qrels = write_trec_qrels(tmp_path / f"{relevant_doc}.qrels", {"q": {relevant_doc}})
        assert _ir_measures(qrels, run)["MRR"] == pytest.approx(100 * rr)


def test_six_columns_and_qrels_lines(tmp_path: Path) -> None:
    run = write_trec_run(tmp_path / "run", {"q1": [("d3", 2.5), ("d1", 1.0), ("d2", 0.5)], "q2": [("d9", 0.1)]},
                         top=2, tag="x")
    assert run.read_text().splitlines() == ["q1 Q0 d3 1 2.5 x", "q1 Q0 d1 2 1.0 x", "q2 Q0 d9 1 0.1 x"]
    qrels = write_trec_qrels(tmp_path / "qrels", {"q1": ["d2", "q1", "d1"]})
    assert qrels.read_text().splitlines() == ["q1 0 d1 1", "q1 0 d2 1"]  # never relevant to itself


def test_a_score_above_its_predecessor_keeps_its_rank_with_a_warning(tmp_path: Path, caplog) -> None:
    run = write_trec_run(tmp_path / "r", {"q": [("a", 0.3), ("b", 0.1), ("c", 5.0)]})  # c ranked last anyway
    back = read_trec_run(run)["q"]
    assert [d for d, _ in back] == ["a", "b", "c"] and back[1][1] == 0.1 and 0.0 < back[2][1] < 0.1
    assert "1 documents" in caplog.text and "keep semdup's order" in caplog.text


def test_bad_runs_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="finite"):
        write_trec_run(tmp_path / "r", {"q": [("a", -math.inf)]})
    with pytest.raises(ValueError, match="one non-empty word"):
        write_trec_run(tmp_path / "r", {"q": [("a", 1.0)]}, tag="my run")
    (tmp_path / "old.run").write_text("q1\td1\t1\t0.3\n")  # the former four-column layout
    with pytest.raises(DataError, match="line 1: found 4 fields"):
        read_trec_run(tmp_path / "old.run")
    (tmp_path / "bad.qrels").write_text("q1 0 d1 yes\n")
    with pytest.raises(DataError, match="RELEVANCE 'yes'"):
        read_trec_qrels(tmp_path / "bad.qrels")


def test_top_half_scores_keeps_each_questions_ranking_and_puts_its_top_half_at_or_above_half() -> None:
    from semdup.data.run_files import top_half_scores

    got = top_half_scores({"Q1": {"a": 3.0, "b": -1.0, "c": 7.5, "d": 0.0}, "Q2": {"x": 0.2}})
    assert got == {"Q1": {"c": 1.0, "a": 0.75, "d": 0.5, "b": 0.25}, "Q2": {"x": 1.0}}

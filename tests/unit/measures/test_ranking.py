"""Official metrics: the IR baseline reproduced on the real gold files, and hand-built cases."""

from __future__ import annotations

import math

import pytest

from semdup.data import load_relevancy, load_semeval_xml
from semdup.data.paths import default_data_dir
from semdup.data.run_files import (
    load_official_results,
    read_semeval_pred,
    read_semeval_pred_labels,
    write_semeval_pred,
)
from semdup.measures.fitting import best_threshold, pair_accuracy
from semdup.measures.ranking import (
    accuracy_at_k,
    average_precision_at,
    precision_recall_f1_accuracy,
    retrieval_scores,
    semeval_scores,
)

DATA = default_data_dir()
OFFICIAL = DATA / "semeval2016-task3" / "official"
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason=f"real data not found at {DATA} (set SEMDUP_DATA_DIR)")

SETS = {
    "dev": ("SemEval2016-Task3-CQA-QL-dev.xml", "SemEval2016-Task3-CQA-QL-dev.xml.subtaskB.relevancy"),
    "test": ("SemEval2016-Task3-CQA-QL-test-input.xml", "SemEval2016-Task3-CQA-QL-test.xml.subtaskB.relevancy"),
}


def _r2(scores: dict) -> dict:
    """Figures rounded as the official scorer prints them. Comparing the rounded figure exactly is safe here: every
    figure these tests round lies at least 7e-4 from a two-decimal rounding edge (test MAP 74.7535, MRR 83.7857,
    AvgRec 88.2972; dev MAP 71.3530, MRR 76.6667; MAP without no-answer questions 84.3991), and float noise in a
    mean of 70 average precisions is below 1e-12."""
    return {k: round(v, 2) for k, v in scores.items()}


# ---------------------------------------------------------------- the IR baseline, exactly


@needs_data
@pytest.mark.parametrize(("split", "map_", "mrr"), [("test", 74.75, 83.79), ("dev", 71.35, 76.67)])
def test_ir_baseline_reproduces_official_figures(split, map_, mrr):
    xml, gold_file = (OFFICIAL / f for f in SETS[split])
    gold = load_semeval_xml(xml, gold_file).gold()
    scores = semeval_scores(read_semeval_pred(gold_file), gold)  # the gold file's own SCORE column
    assert (round(scores["MAP"], 2), round(scores["MRR"], 2)) == (map_, mrr)  # far from a rounding edge: _r2
    assert scores["n_queries"] == len(gold)


@needs_data
def test_ir_baseline_avgrec_matches_the_paper():
    xml, gold_file = (OFFICIAL / f for f in SETS["test"])
    s = load_semeval_xml(xml, gold_file)
    by_rank = {q.post.id: {r.post.id: -float(r.rank) for r in q.related} for q in s.questions}
    scores = _r2(semeval_scores(by_rank, s.gold()))
    # Nakov et al. 2016, Table 5: IR baseline MAP 74.75, AvgRec 88.30, MRR 83.79.
    assert (scores["MAP"], scores["AvgRec"], scores["MRR"]) == (74.75, 88.30, 83.79)


@needs_data
def test_questions_without_relevant_candidates_count_as_zero():
    gold = load_relevancy(OFFICIAL / SETS["test"][1])
    gold_flags = {q: {r: rel for r, (_, rel) in row.items()} for q, row in gold.items()}
    no_answer = [q for q, row in gold_flags.items() if not any(row.values())]
    assert len(no_answer) == 8
    kept = {q: row for q, row in gold_flags.items() if q not in no_answer}
    pred = read_semeval_pred(OFFICIAL / SETS["test"][1])
    full, ignored = semeval_scores(pred, gold_flags), semeval_scores(pred, kept)
    assert _r2(ignored)["MAP"] == 84.40  # the scorer's --ignore_noanswer figure, not the official one
    assert full["MAP"] == pytest.approx(ignored["MAP"] * len(kept) / len(gold_flags))


@needs_data
def test_official_results_table():
    runs = load_official_results(OFFICIAL / "results_subtask_B_2016.tab")  # figures parsed from text: exact
    assert len(runs) == 28
    by_name = {r.name: r for r in runs}
    best = max(runs, key=lambda r: r.MAP)
    assert best.name == "UH-PRHLT-contrastive2" and best.MAP == 77.33
    assert by_name["UH-PRHLT-primary"].MAP == 76.70 and by_name["UH-PRHLT-primary"].MRR == 83.0238
    assert by_name["_baseline-baseline_random"].AvgRec == 67.92  # paper: random baseline AvgRec 67.92
    assert "ITNLP-AiKF-primary" in by_name  # soft hyphen removed


# ---------------------------------------------------------------- hand-built SemEval cases


def test_average_precision_of_known_rankings():
    assert average_precision_at([True, False, True], 10) == pytest.approx((1 + 2 / 3) / 2)
    assert average_precision_at([False, True], 10) == 0.5
    assert average_precision_at([False, False], 10) == 0.0
    assert average_precision_at([False, True, True], 10, n_relevant=4) == pytest.approx((1 / 2 + 2 / 3) / 4)


def test_semeval_map_mrr_precision_on_a_known_case():
    gold = {
        "q1": {"a": True, "b": False, "c": True, "d": False, "e": False},
        "q2": {"f": False, "g": False},  # no relevant candidate: counts, with AP = RR = 0
    }
    pred = {"q1": {"a": 0.9, "b": 0.8, "c": 0.7, "d": 0.1, "e": 0.0}, "q2": {"f": 1.0, "g": 0.5}}
    s = semeval_scores(pred, gold)
    assert s["MAP"] == pytest.approx(100 * ((1 + 2 / 3) / 2) / 2)
    assert s["MRR"] == pytest.approx(50.0)
    assert s["P@1"] == pytest.approx(50.0)
    assert s["P@5"] == pytest.approx(100 * (2 / 5) / 2)
    assert s["n_queries"] == 2


def test_semeval_ties_keep_gold_order():
    tied = {"q": {"a": 0.5, "b": 0.5}}
    assert semeval_scores(tied, {"q": {"a": False, "b": True}})["MAP"] == 50.0
    assert semeval_scores(tied, {"q": {"b": True, "a": False}})["MAP"] == 100.0


def test_semeval_missing_candidates_rank_last():
    gold = {"q": {"a": False, "b": True, "c": False}}
    # Only "a" is scored, however low: "b" and "c" go below it, in gold order.
    assert semeval_scores({"q": {"a": -1e9}}, gold)["MAP"] == 50.0
    assert semeval_scores({"q": {"c": 0.0}}, gold)["MRR"] == pytest.approx(100 / 3)  # c, a, b


def test_semeval_only_top_ten_count():
    gold = {"q": {f"r{i}": i == 10 for i in range(11)}}  # the one relevant candidate is 11th
    pred = {"q": {f"r{i}": -float(i) for i in range(11)}}
    s = semeval_scores(pred, gold)
    assert s["MAP"] == 0.0 and s["MRR"] == 0.0


def test_semeval_refuses_bad_predictions():
    gold = {"q": {"a": True}}
    with pytest.raises(ValueError, match="absent from the gold list, e.g. zz"):
        semeval_scores({"q": {"a": 1.0, "zz": 2.0}}, gold)
    with pytest.raises(ValueError, match="NaN"):
        semeval_scores({"q": {"a": math.nan}}, gold)
    with pytest.raises(ValueError, match="gold is empty"):
        semeval_scores({}, {})


# ---------------------------------------------------------------- retrieval (Travel protocol)


def test_retrieval_scores_on_a_known_case():
    ranked = {"q1": ["q1", "x", "d1", "y", "d2"], "q2": ["z", "w"], "q3": ["e"]}
    relevant = {"q1": {"d1", "d2", "d3"}, "q2": {"v"}, "q3": {"e"}}
    s = retrieval_scores(ranked, relevant, cutoff=100)
    # q1: its own id is dropped -> x d1 y d2; d3 never found.
    assert s["Acc@1"] == pytest.approx(100 / 3)
    assert s["Acc@5"] == pytest.approx(200 / 3)
    assert s["MRR"] == pytest.approx(100 * (1 / 2 + 0 + 1) / 3)
    assert s["MAP"] == pytest.approx(100 * ((1 / 2 + 2 / 4) / 3 + 0 + 1) / 3)
    assert s["n_queries"] == 3


def test_retrieval_cutoff_and_absent_queries():
    relevant = {"q1": {"d"}, "q2": {"d"}}
    s = retrieval_scores({"q1": ["a", "b", "d"]}, relevant, cutoff=2)
    assert s["MAP"] == 0.0 and s["MRR"] == 0.0 and s["Acc@5"] == 50.0
    assert accuracy_at_k({"q1": ["a", "d"]}, relevant, ks=(1, 2)) == {"Acc@1": 0.0, "Acc@2": 50.0}
    with pytest.raises(ValueError, match="twice"):
        retrieval_scores({"q1": ["d", "d"]}, relevant)


# ---------------------------------------------------------------- pairs (AskUbuntu protocol)


def test_best_threshold_is_a_midpoint_and_maximises_accuracy():
    scores = [0.1, 0.4, 0.35, 0.8, 0.9]
    labels = [False, False, True, True, True]
    threshold, acc = best_threshold(scores, labels)
    assert threshold == pytest.approx((0.1 + 0.35) / 2) or threshold == pytest.approx((0.4 + 0.8) / 2)
    # 4 of 5 right: 100·4/5 here and 100·mean(hits) in pair_accuracy, two roundings of one fraction
    assert acc == pytest.approx(80.0, rel=1e-12)
    assert pair_accuracy(scores, labels, threshold) == pytest.approx(acc, rel=1e-12)


def test_best_threshold_edges_and_ties():
    assert best_threshold([0.2, 0.3], [True, True]) == (pytest.approx(-0.8), 100.0)
    assert best_threshold([0.2, 0.3], [False, False]) == (pytest.approx(1.3), 100.0)
    # Equal scores with different labels cannot be split: best is 2 of 3 either way; lowest threshold wins.
    assert best_threshold([0.5, 0.5, 0.7], [True, False, True]) == (pytest.approx(-0.5), pytest.approx(200 / 3))
    with pytest.raises(ValueError, match="one length"):
        best_threshold([0.1], [True, False])


def test_precision_recall_f1_accuracy():
    m = precision_recall_f1_accuracy([True, True, False, False], [True, False, True, False])
    assert (m["P"], m["R"], m["F1"], m["Acc"], m["n"]) == (50.0, 50.0, 50.0, 50.0, 4)
    none = precision_recall_f1_accuracy([False, False], [True, False])
    assert (none["P"], none["R"], none["F1"], none["Acc"]) == (0.0, 0.0, 0.0, 50.0)


# ---------------------------------------------------------------- run files


def test_semeval_pred_round_trip_in_gold_order(tmp_path):
    gold = {"Q1": {"Q1_R2": True, "Q1_R1": False}, "Q2": {"Q2_R1": False}}
    pred = {"Q1": {"Q1_R1": 0.75, "Q1_R2": 0.25}}
    path = write_semeval_pred(tmp_path / "run.pred", pred, gold, threshold=0.5)
    lines = path.read_text().splitlines()
    assert lines == ["Q1\tQ1_R2\t0\t0.25\tfalse", "Q1\tQ1_R1\t0\t0.75\ttrue", "Q2\tQ2_R1\t0\t-inf\tfalse"]
    back = read_semeval_pred(path)
    assert back == {"Q1": {"Q1_R2": 0.25, "Q1_R1": 0.75}, "Q2": {"Q2_R1": -math.inf}}
    assert read_semeval_pred_labels(path) == {"Q1": {"Q1_R2": False, "Q1_R1": True}, "Q2": {"Q2_R1": False}}
    assert semeval_scores(back, gold) == semeval_scores(pred, gold)


@needs_data
def test_written_ir_baseline_scores_the_same(tmp_path):
    gold_file = OFFICIAL / SETS["dev"][1]
    gold = load_semeval_xml(OFFICIAL / SETS["dev"][0], gold_file).gold()
    pred = read_semeval_pred(gold_file)
    path = write_semeval_pred(tmp_path / "dev.pred", pred, gold)
    assert len(path.read_text().splitlines()) == 500
    assert _r2(semeval_scores(read_semeval_pred(path), gold))["MAP"] == 71.35


def test_per_question_average_precisions_average_to_the_official_map() -> None:
    from semdup.measures.ranking import semeval_average_precisions, semeval_scores

    gold = {"q1": {"a": True, "b": False, "c": True}, "q2": {"d": False, "e": True}, "q3": {"f": False}}
    preds = {"q1": {"a": 0.1, "b": 0.9, "c": 0.5}, "q2": {"d": 0.2, "e": 0.8}, "q3": {"f": 1.0}}
    per = semeval_average_precisions(preds, gold)
    assert list(per) == ["q1", "q2", "q3"]
    assert per["q1"] == pytest.approx(100 * (1 / 2 + 2 / 3) / 2) and per["q2"] == 100.0 and per["q3"] == 0.0
    assert sum(per.values()) / 3 == pytest.approx(semeval_scores(preds, gold)["MAP"])


def test_per_query_retrieval_average_precisions_average_to_the_map() -> None:
    from semdup.measures.ranking import retrieval_average_precisions, retrieval_scores

    ranked = {"q1": ["x", "q1", "r1", "y", "r2"], "q2": ["z", "w"]}
    relevant = {"q1": ["r1", "r2", "r3"], "q2": ["w"], "q3": ["v"]}
    per = retrieval_average_precisions(ranked, relevant, cutoff=100)
    assert per["q1"] == pytest.approx(100 * (1 / 2 + 2 / 4) / 3)  # the query's own id is dropped from its ranking
    assert per["q2"] == pytest.approx(50.0) and per["q3"] == 0.0
    assert sum(per.values()) / 3 == pytest.approx(retrieval_scores(ranked, relevant)["MAP"])

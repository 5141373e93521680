"""T-SCQA: interpolate a trained SCQA's cosine with BM25 and tune α on dev (Das et al. 2016, §6, eq. 3).

    score(q, c) = α · cos(v(q), v(c)) + (1 − α) · lexnorm(q, c)

lexnorm is BM25 (k1 = 1.2, b = 0.75, :class:`~semdup.core.lexical_scores.LexicalIndex`) min-max
normalised over the query's candidate list (:func:`~semdup.core.scoring.minmax_normalise`),
the same form the reranker uses at serving time with OpenSearch's BM25. α is chosen on dev
(grid 0.0 .. 1.0 by 0.05) and test is reported once at that α; α = 0.8 (the paper's) is reported too.

Torch-free apart from the checkpoint scorer that produces the cosines. The tuned checkpoint is
written as a copy of the SCQA checkpoint whose config says ``arch: t-scqa`` and carries the fusion
weights ``beta_dense = α``, ``alpha = 1 − α``, so export and serving apply the interpolation.

Example (the command-line front end is ``experiments/tscqa.py``, in the repository, not installed)::

    python -m experiments.tscqa --checkpoint artifacts/scqa-semeval --data semeval --out artifacts/t-scqa-semeval
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from semdup.core.errors import ConfigError
from semdup.core.lexical_scores import LexicalIndex
from semdup.core.scoring import PostScorer, minmax_normalise
from semdup.core.text_pipeline import TextPipeline, TextPipelineSettings
from semdup.data.paths import default_data_dir
from semdup.measures.fitting import best_threshold, grid_search
from semdup.measures.protocols import travel_scores
from semdup.measures.ranking import semeval_scores

__all__ = ["ALPHA_GRID", "semeval_components", "travel_components", "fuse", "tune_alpha", "write_tscqa_checkpoint"]

logger = logging.getLogger(__name__)

ALPHA_GRID = tuple(round(a * 0.05, 2) for a in range(21))
PAPER_ALPHA = 0.8


def fuse(cos: np.ndarray, lexnorm: np.ndarray, alpha: float) -> np.ndarray:
    """α·cos + (1 − α)·lexnorm (Das et al. 2016, eq. 3)."""
    return alpha * np.asarray(cos, dtype=np.float64) + (1.0 - alpha) * np.asarray(lexnorm, dtype=np.float64)


def semeval_components(
    scorer: PostScorer, semeval_set: Any, lex_pipeline: TextPipeline
) -> list[tuple[str, list[str], np.ndarray, np.ndarray]]:
    """Per original question: (id, related ids, cosines, min-max BM25), BM25 statistics over the set's questions."""
    posts = {q.post.id: q.post for q in semeval_set.questions}
    posts.update({r.post.id: r.post for q in semeval_set.questions for r in q.related})
    corpus = list(posts.values())
    index = LexicalIndex.build(lex_pipeline, corpus, kind="bm25")
    col = {pid: i for i, pid in enumerate(index.ids)}
    out = []
    for q in semeval_set.questions:
        cands = [r.post for r in q.related]
        if not cands:
            continue
        cos = np.asarray(scorer.score(q.post, cands), dtype=np.float64)
        bm25 = index.score_matrix(lex_pipeline, [q.post])[0][[col[c.id] for c in cands]]
        out.append((q.post.id, [c.id for c in cands], cos, minmax_normalise(bm25)))
    return out


def _semeval_figures(
    components: Sequence[tuple[str, list[str], np.ndarray, np.ndarray]], gold: Any, alpha: float
) -> dict[str, float]:
    preds = {qid: dict(zip(ids, fuse(cos, lex, alpha).tolist(), strict=True)) for qid, ids, cos, lex in components}
    return semeval_scores(preds, gold)


def travel_components(
    scorer: PostScorer, dump: Any, split: str, lex_index: LexicalIndex, lex_pipeline: TextPipeline
) -> tuple[list[Any], np.ndarray, np.ndarray, np.ndarray]:
    """(queries, corpus ids, cosines [Q, N], row-wise min-max BM25 [Q, N]) over the whole corpus."""
    queries = dump.queries(split)
    corpus = dump.corpus()
    ids = np.asarray([p.id for p in corpus])
    cos = np.asarray(scorer.score_matrix([q.post for q in queries], corpus), dtype=np.float64)
    col = {pid: i for i, pid in enumerate(lex_index.ids)}
    bm25 = lex_index.score_matrix(lex_pipeline, [q.post for q in queries])[:, [col[p] for p in ids]]
    lex = np.vstack([minmax_normalise(row) for row in bm25]) if len(bm25) else bm25
    return queries, ids, cos, lex


def _travel_figures(
    queries: Sequence[Any], ids: np.ndarray, cos: np.ndarray, lex: np.ndarray, alpha: float, cutoff: int = 100
) -> dict[str, float]:
    return travel_scores(fuse(cos, lex, alpha), queries, [str(i) for i in ids], cutoff)


def tune_alpha(
    checkpoint: str | Path, data: str, data_dir: str | Path | None = None, metric: str = "MAP"
) -> dict[str, Any]:
    """Dev curve over :data:`ALPHA_GRID`, the best α, and dev/test figures at it and at the paper's 0.8."""
    from semdup.training.checkpoint import CheckpointScorer
    from semdup.training.recipes import DataPaths, _load_semeval

    data_dir = data_dir or default_data_dir()
    scorer = CheckpointScorer.from_dir(checkpoint)
    if scorer.fusion.get("beta_bow", 0.0) != 0.0:
        raise ConfigError(f"{checkpoint} has a BOW term; T-SCQA interpolates a dense-only SCQA checkpoint")
    lex_pipeline = TextPipeline(TextPipelineSettings())
    if data == "semeval":
        paths = DataPaths.defaults("semeval", data_dir)
        sets = {"dev": _load_semeval(paths.dev, gold=True), "test": _load_semeval(paths.test, gold=True)}
        comps = {k: semeval_components(scorer, s, lex_pipeline) for k, s in sets.items()}

        def figures(part: str, a: float) -> dict[str, float]:
            return _semeval_figures(comps[part], sets[part].gold(), a)

        def threshold(a: float) -> tuple[float | None, float | None]:
            """Duplicate threshold of the fused score, chosen on dev pair accuracy (as the SemEval recipe does)."""
            gold = sets["dev"].gold()
            scores = np.concatenate([fuse(cos, lex, a) for _, _, cos, lex in comps["dev"]])
            labels = [bool(gold.get(qid, {}).get(i, False)) for qid, ids, _, _ in comps["dev"] for i in ids]
            thr, acc = best_threshold(scores, labels)
            return float(thr), float(acc)

    elif data == "travel":
        from semdup.data import load_stackexchange_dump

        dump = load_stackexchange_dump(DataPaths.defaults("travel", data_dir).train[0])
        index = LexicalIndex.build(lex_pipeline, dump.corpus(), kind="bm25")
        comps_t = {k: travel_components(scorer, dump, k, index, lex_pipeline) for k in ("dev", "test")}

        def figures(part: str, a: float) -> dict[str, float]:
            return _travel_figures(*comps_t[part], a)

        def threshold(a: float) -> tuple[float | None, float | None]:
            return None, None  # retrieval over the corpus: no pair labels to choose a threshold on

    else:
        raise ConfigError(f"T-SCQA tuning supports data sets 'semeval' and 'travel' (ranking); got {data!r}")
    fit = grid_search(ALPHA_GRID, lambda a: figures("dev", a), metric=metric, ties="last")  # ties: more SCQA
    curve, best = dict(fit.table), fit.point
    thr, acc = threshold(best)
    return {
        "threshold": thr,
        "dev_pair_accuracy": acc,
        "data": data,
        "metric": metric,
        "dev_curve": curve,
        "alpha": best,
        "dev": figures("dev", best),
        "test": figures("test", best),
        "paper_alpha": {
            "alpha": PAPER_ALPHA,
            "dev": figures("dev", PAPER_ALPHA),
            "test": figures("test", PAPER_ALPHA),
        },
        "scqa_alone": {"dev": figures("dev", 1.0), "test": figures("test", 1.0)},
        "bm25_alone": {"dev": figures("dev", 0.0), "test": figures("test", 0.0)},
    }


def write_tscqa_checkpoint(checkpoint: str | Path, out_dir: str | Path, result: dict[str, Any]) -> Path:
    """Copy the SCQA checkpoint to ``out_dir`` as a T-SCQA one with the tuned α in config and metrics."""
    src, out = Path(checkpoint), Path(out_dir)
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(src, out)
    cfg = json.loads((out / "config.json").read_text(encoding="utf-8"))
    a = float(result["alpha"])
    cfg["arch"] = "t-scqa"
    cfg["hparams"] = {**cfg.get("hparams", {}), "tscqa_alpha": a}
    cfg["fusion"] = {"beta_bow": 0.0, "beta_dense": a, "alpha": round(1.0 - a, 10)}
    cfg["threshold"] = result.get("threshold")  # of the fused score; the SCQA one no longer applies
    cfg["tscqa"] = {
        "tuned_on": "dev " + result["metric"],
        "source_checkpoint": str(src),
        "lexical": "bm25 k1=1.2 b=0.75, min-max per query",
    }
    (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True), encoding="utf-8")
    (out / "metrics.json").write_text(json.dumps(result, indent=2, sort_keys=True), encoding="utf-8")
    return out


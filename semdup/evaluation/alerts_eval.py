"""Duplicate alerts on a Stack Exchange dump: posts arrive in creation order, each post of a split is flagged against
the posts before it, and the flags are scored against the site's duplicate links.

    python -m semdup.evaluation.alerts_eval --bundle artifacts/demo/default-minilm-travel \\
        --dense-cache artifacts/demo/cache/dense-3602748718d84b07.npy

Protocol. Posts.xml carries no dates, so creation order is id order (Stack Exchange numbers posts as they are
created). A stream indexes the posts one by one (the indexer's ``index_batch``, refreshed); when a post of the split
arrives it is flagged at once, against the posts already indexed, by :func:`semdup.alerts.flag_duplicates` (the
worker's path), so a post is never compared with a later one. Gold: the posts joined to it by a duplicate link
(either direction) that came before it. Precision = flags on a gold pair / flags; recall = gold pairs flagged /
gold pairs. A post of the split with no earlier duplicate (the first of its cluster) counts only through its
false flags.

What is chosen is chosen on dev, by the same stream: the threshold on the fused score and k (at most k flags per
post) maximising F1 of the flags, and the Platt calibration (on every dev post's top-10 candidates). Test runs
once, with those. If the bundle has a threshold of its own it is reported beside, on test, too.

``--dense-cache``: the corpus's dense vectors in Posts.xml order (``semdup fit-default --cache`` keeps them), to
skip encoding 4,919 posts (about 13 CPU minutes with MiniLM); they are checked against the bundle on a sample first.
Queries are always encoded by the reranker itself.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from semdup.alerts.flag import flag_duplicates
from semdup.bundle.bundle import Bundle
from semdup.core import progress as progress_bar
from semdup.core.errors import BulkWriteError, DataError
from semdup.core.fitting import grid_search, threshold_candidates
from semdup.core.posts import Post
from semdup.data.stackexchange import StackExchangeDump, load_stackexchange_dump
from semdup.indexer.lexical_index import create_index, delete_index
from semdup.indexer.semantic import ensure_index_model, index_batch
from semdup.reranker.calibration import Calibration, calibration_path, fit_platt, save_calibration
from semdup.reranker.reranker import Reranker
from semdup.reranker.settings import RerankerSettings
from semdup.search_templates import register_templates

__all__ = ["AlertsRun", "alerts_run", "flag_scores", "choose_on_dev", "main"]

logger = logging.getLogger(__name__)

K_CHOICES = (1, 2, 3, 5, 10)
TOP = 10  # dev: every post's top candidates, for the threshold, k and Platt


@dataclass
class AlertsRun:
    """Dev choices and test figures (percent) with their counts."""

    model: str
    candidates: str
    k: int
    threshold: float
    calibration: dict[str, Any]
    dev: dict[str, float]
    test: dict[str, float]
    bundle_threshold_test: dict[str, float] | None = None
    seconds: float = 0.0
    calibration_file: str | None = None
    notes: list[str] = field(default_factory=list)


def creation_order(dump: StackExchangeDump) -> list[Post]:
    """Every question by id, numerically: the order Stack Exchange created them."""
    return sorted(dump.corpus(), key=lambda p: int(p.id))


def earlier_duplicates(dump: StackExchangeDump, post_id: str) -> set[str]:
    """The posts joined to ``post_id`` by a duplicate link that were created before it."""
    return {d for d in dump.duplicates_of(post_id) if int(d) < int(post_id)}


class StoredVectors:
    """A document encoder (the indexer's ``DocumentEncoder``) whose dense vectors come from a table computed once;
    term weights and the model id from the bundle, as ``Bundle.document_fields`` gives them."""

    def __init__(self, bundle: Bundle, vectors: dict[str, np.ndarray]) -> None:
        self.version = bundle.version
        self.vectors = vectors
        self._terms = Bundle(bundle.path, bundle.manifest, bundle.pipeline, bundle.term_weights, None)

    def document_fields(self, posts: Sequence[Post]) -> list[dict[str, Any]]:
        out = self._terms.document_fields(posts)
        for post, fields in zip(posts, out, strict=True):
            fields["vector"] = self.vectors[post.id].tolist()
        return out


def dense_table(bundle: Bundle, corpus: Sequence[Post], cache: str | Path | None, *, progress: bool) -> StoredVectors:
    """Dense vectors of ``corpus`` (from ``cache`` when given, checked on 8 posts against the bundle)."""
    if cache is None:
        chunks = [
            bundle.encode_dense(corpus[i : i + 64])
            for i in progress_bar.progress(range(0, len(corpus), 64), desc="encoding the corpus", enabled=progress)
        ]
        return StoredVectors(bundle, {p.id: v for p, v in zip(corpus, np.concatenate(chunks), strict=True)})
    x = np.load(cache, allow_pickle=False)
    if x.shape != (len(corpus), bundle.dimension):
        raise DataError(
            f"{cache}: holds {x.shape} vectors; expected ({len(corpus)}, {bundle.dimension}) in Posts.xml order"
        )
    sample = np.linspace(0, len(corpus) - 1, 8).astype(int)
    diff = float(np.max(np.abs(bundle.encode_dense([corpus[i] for i in sample]) - x[sample])))
    if diff > 1e-3:
        raise DataError(f"{cache}: its vectors differ from bundle {bundle.version}'s by up to {diff:.3g}; drop it")
    logger.info("dense vectors from %s (max difference %.2g on 8 posts re-encoded)", cache, diff)
    return StoredVectors(bundle, {p.id: v for p, v in zip(corpus, x, strict=True)})


def stream(
    client: Any,
    encoder: StoredVectors,
    order: Sequence[Post],
    targets: set[str],
    on_target: Callable[[str, Post], None],
    *,
    knn: bool,
    progress: bool,
) -> None:
    """Index ``order`` into a fresh index post by post; call ``on_target(index, post)`` as each target arrives (it
    and every post before it indexed and searchable). The index is dropped afterwards."""
    index = f"semdup-alerts-eval-{uuid.uuid4().hex[:8]}"
    create_index(client, index, dimension=len(next(iter(encoder.vectors.values()))), knn=knn)
    try:
        search = ensure_index_model(client, index, encoder.version)
        register_templates(client)
        pending: list[Post] = []
        bar = progress_bar.progress(order, desc=f"stream ({len(targets)} flagged)", enabled=progress)
        for post in bar:
            pending.append(post)
            if post.id not in targets:
                continue
            result = index_batch(client, index, [p.to_json() for p in pending], encoder, search=search)
            if result.failed:
                raise BulkWriteError(
                    f"{len(result.failed)} posts not indexed (first: {result.failed[0]})", result.failed
                )
            pending = []
            client.indices.refresh(index=index, request_timeout=60)
            on_target(index, post)
    finally:
        delete_index(client, index)


def flag_scores(flagged: dict[str, set[str]], gold: dict[str, set[str]]) -> dict[str, float]:
    """Precision, recall, F1 (percent) of the flags ``post -> candidates`` against ``gold``, with the counts."""
    flags = sum(len(v) for v in flagged.values())
    pairs = sum(len(v) for v in gold.values())
    hits = sum(len(flagged.get(p, set()) & g) for p, g in gold.items())
    precision = 100.0 * hits / flags if flags else 0.0
    recall = 100.0 * hits / pairs if pairs else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {
        "precision": precision,
        "recall": recall,
        "F1": f1,
        "posts": len(gold),
        "posts_with_earlier_duplicate": sum(1 for g in gold.values() if g),
        "gold_pairs": pairs,
        "flags": flags,
        "true_flags": hits,
        "posts_flagged": sum(1 for v in flagged.values() if v),
    }


def _flags_at(ranked: dict[str, list[tuple[str, float]]], k: int, threshold: float) -> dict[str, set[str]]:
    return {p: {c for c, s in cands[:k] if s >= threshold} for p, cands in ranked.items()}


def choose_on_dev(
    ranked: dict[str, list[tuple[str, float]]], gold: dict[str, set[str]], ks: Sequence[int] = K_CHOICES
) -> tuple[int, float, dict[str, float]]:
    """(k, threshold, dev scores) maximising F1 of the flags; thresholds are midpoints between the scores seen
    (:func:`semdup.core.fitting.threshold_candidates`); the first best (k, threshold), smallest k first, wins."""
    thresholds = threshold_candidates([s for cands in ranked.values() for _, s in cands])
    grid = [(k, float(t)) for k in ks for t in thresholds]
    fit = grid_search(grid, lambda flags: flag_scores(flags, gold), run=lambda kt: _flags_at(ranked, *kt),
                      metric="F1", tolerance=1e-12)
    return fit.point[0], fit.point[1], fit.figures


def alerts_run(
    client: Any,
    bundle_path: str | Path,
    dump_dir: str | Path,
    *,
    dense_cache: str | Path | None = None,
    knn: bool = True,
    save: bool = False,
    progress: bool = True,
) -> AlertsRun:
    """Choose k, threshold and calibration on dev, then flag test once (module doc)."""
    start = time.monotonic()
    dump = load_stackexchange_dump(dump_dir)
    bundle = Bundle.load(bundle_path)
    encoder = dense_table(bundle, dump.corpus(), dense_cache, progress=progress)
    order = creation_order(dump)
    settings = RerankerSettings(templates=("bm25",), knn=knn and bundle.dimension is not None)
    candidates = "bm25" + ("+knn" if settings.knn else "")

    def split_targets(split: str) -> tuple[set[str], dict[str, set[str]]]:
        ids = {p for p, s in dump.splits.items() if s == split and p in dump.posts}
        return ids, {p: earlier_duplicates(dump, p) for p in ids}

    # dev: every dev post's top candidates against the posts before it
    dev_ids, dev_gold = split_targets("dev")
    ranked: dict[str, list[tuple[str, float]]] = {}
    plain = Reranker(bundle, client, "", settings)

    def rank_dev(index: str, post: Post) -> None:
        cands = plain.rank(post, k=TOP, exclude_id=post.id, index=index)
        ranked[post.id] = [(c.id, c.score) for c in cands if c.complete]

    stream(client, encoder, order, dev_ids, rank_dev, knn=settings.knn, progress=progress)
    k, threshold, dev = choose_on_dev(ranked, dev_gold)
    pairs = [(s, c in dev_gold[p]) for p, cands in ranked.items() for c, s in cands]
    platt = fit_platt([s for s, _ in pairs], [y for _, y in pairs])
    cal = Calibration(
        a=platt.a,
        b=platt.b,
        threshold=threshold,
        fitted_on=f"{Path(dump_dir).name} dev alerts: {len(dev_ids)} posts against earlier posts, top {TOP}, "
        f"threshold and k={k} by F1 of the flags",
        n=platt.n,
        positives=platt.positives,
    )
    # test, once: the worker's path (flag_duplicates) with the dev calibration
    test_ids, test_gold = split_targets("test")
    store = f"semdup-alerts-eval-flags-{uuid.uuid4().hex[:8]}"
    flagged: dict[str, set[str]] = {}
    top: dict[str, list[tuple[str, float]]] = {}
    calibrated = Reranker(bundle, client, "", settings, cal)

    def flag_test(index: str, post: Post) -> None:
        flagged[post.id] = {
            f.candidate_id for f in flag_duplicates(calibrated, client, index, [post], k=k, store=store)
        }
        if bundle.threshold is not None:
            top[post.id] = [(c.id, c.score) for c in plain.rank(post, k=k, exclude_id=post.id, index=index)]

    try:
        stream(client, encoder, order, test_ids, flag_test, knn=settings.knn, progress=progress)
    finally:
        client.indices.delete(index=store, ignore_unavailable=True, request_timeout=30)
    notes = [] if bundle.threshold is not None else [f"bundle {bundle.version} has no threshold of its own"]
    if dense_cache is None:
        notes.append("corpus vectors encoded by the bundle in this run")
    run = AlertsRun(
        model=bundle.version,
        candidates=candidates,
        k=k,
        threshold=threshold,
        calibration=asdict(cal),
        dev=dev,
        test=flag_scores(flagged, test_gold),
        bundle_threshold_test=None
        if bundle.threshold is None
        else flag_scores(_flags_at(top, k, bundle.threshold), test_gold),
        seconds=time.monotonic() - start,
        notes=notes,
    )
    if save:
        run.calibration_file = str(save_calibration(calibration_path(bundle_path), bundle.version, cal))
    return run


def _print(run: AlertsRun) -> None:
    print(f"model {run.model}, candidates {run.candidates}; chosen on dev: k={run.k}, threshold {run.threshold:.4f}")
    cal = run.calibration
    print(f"Platt on dev: a={cal['a']:.3f} b={cal['b']:.3f} ({cal['n']} pairs, {cal['positives']} duplicates)")
    print(f"{'':<6}{'P':>7}{'R':>7}{'F1':>7}{'posts':>7}{'w/ dup':>7}{'gold':>6}{'flags':>7}{'true':>6}{'flagged':>8}")
    rows = [("dev", run.dev), ("test", run.test)]
    if run.bundle_threshold_test is not None:
        rows.append(("test*", run.bundle_threshold_test))
    for name, m in rows:
        print(
            f"{name:<6}{m['precision']:>7.2f}{m['recall']:>7.2f}{m['F1']:>7.2f}{m['posts']:>7}"
            f"{m['posts_with_earlier_duplicate']:>7}{m['gold_pairs']:>6}{m['flags']:>7}{m['true_flags']:>6}"
            f"{m['posts_flagged']:>8}"
        )
    for note in run.notes:
        print(f"note: {note}")
    if run.calibration_file:
        print(f"calibration written to {run.calibration_file}")
    print(f"{run.seconds:.0f} s")


def main(argv: list[str] | None = None) -> int:
    from semdup.apps.settings import load_settings
    from semdup.core.clients import connect
    from semdup.data.paths import travel_dir

    ap = argparse.ArgumentParser(prog="python -m semdup.evaluation.alerts_eval", description=__doc__.split("\n")[0])
    ap.add_argument("--bundle", required=True, help="the model bundle (directory or .tar.gz)")
    ap.add_argument("--dump", help="Stack Exchange dump directory (default: the Travel data set)")
    ap.add_argument("--dense-cache", help="the corpus's dense vectors, .npy in Posts.xml order (checked on a sample)")
    ap.add_argument("--no-knn", action="store_true", help="BM25 candidates only")
    ap.add_argument("--save-calibration", action="store_true", help="write <bundle>.calibration.json for workers")
    ap.add_argument("--json", action="store_true", help="print the run as JSON")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    client = connect(load_settings().opensearch_settings())
    dump = args.dump or travel_dir()
    run = alerts_run(
        client,
        args.bundle,
        dump,
        dense_cache=args.dense_cache,
        knn=not args.no_knn,
        save=args.save_calibration,
        progress=sys.stderr.isatty(),
    )
    if args.json:
        print(json.dumps(asdict(run), indent=2))
    else:
        _print(run)
    return 0


if __name__ == "__main__":
    sys.exit(main())

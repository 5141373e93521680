"""Duplicate alerts on a Stack Exchange dump: posts arrive in creation order, each post of a split is flagged against
the posts before it, and the flags are scored against the site's duplicate links.

    python -m experiments.alerts_eval --bundle artifacts/demo/default-minilm-travel \\
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

The choice is :func:`semdup.alerts.choice.fit_flagging`'s (``semdup fit-default`` makes the same one offline,
:mod:`semdup.learn.default_flagging`); the calibration records k, and workers flag with it. ``--calibration FILE``
tests a given calibration instead (dev still streamed, reported at it); ``--curve X.svg`` draws the test flags'
precision/recall at every threshold (:mod:`experiments.flag_curve`); ``--ranked X.json`` keeps every post's
streamed top 10 and gold (``experiments/flag_margin.py`` reads it); ``--own-node`` runs on a throwaway node.

``--dense-cache``: the corpus's dense vectors in Posts.xml order (``semdup fit-default --cache`` keeps them), to
skip encoding 4,919 posts (about 13 CPU minutes with MiniLM); they are checked against the bundle on a sample first.
Queries are always encoded by the reranker itself.
"""

from __future__ import annotations

import argparse
import contextlib
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

from experiments.flag_curve import curve_svg, pr_curve
from semdup.alerts.choice import K_CHOICES, choose_on_dev, fit_flagging, flag_scores, flags_at
from semdup.alerts.flag import flag_duplicates
from semdup.alerts.settings import DEFAULT_K
from semdup.bundle.bundle import Bundle
from semdup.core import progress as progress_bar
from semdup.core.errors import BulkWriteError, DataError
from semdup.core.posts import Post
from semdup.data.stackexchange import StackExchangeDump, load_stackexchange_dump
from semdup.indexer.batch_writer import ensure_index_model, index_batch
from semdup.ingest.lexical_index import create_index, delete_index
from semdup.reranker.calibration import Calibration, calibration_path, load_calibration, save_calibration
from semdup.reranker.reranker import Reranker
from semdup.reranker.settings import RerankerSettings
from semdup.search_templates import register_templates

__all__ = ["AlertsRun", "alerts_run", "flag_scores", "choose_on_dev", "K_CHOICES", "write_curve", "main"]

logger = logging.getLogger(__name__)

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
    given: bool = False  # the calibration was given (--calibration), not chosen on this run's dev
    calibration_file: str | None = None
    notes: list[str] = field(default_factory=list)
    # with keep_ranked: each post's top candidates (id, fused score), best first, and the test gold
    dev_ranked: dict[str, list[tuple[str, float]]] | None = field(default=None, repr=False)
    test_ranked: dict[str, list[tuple[str, float]]] | None = field(default=None, repr=False)
    dev_gold: dict[str, list[str]] | None = field(default=None, repr=False)
    test_gold: dict[str, list[str]] | None = field(default=None, repr=False)


def creation_order(dump: StackExchangeDump) -> list[Post]:
    """Every question by id, numerically: the order Stack Exchange created them."""
    return sorted(dump.corpus(), key=lambda p: int(p.id))


def earlier_duplicates(dump: StackExchangeDump, post_id: str) -> set[str]:
    """The posts joined to ``post_id`` by a duplicate link that were created before it."""
    return {d for d in dump.duplicates_of(post_id) if int(d) < int(post_id)}


class StoredVectors:
    """A document encoder (the indexer's ``DocumentEncoder``) whose dense vectors come from a table computed once;
    term weights and the model id from the bundle, as ``Bundle.document_fields`` gives them; for a bundle with a
    title term, the title vectors too (``titles``; without them every title cosine would be 0 and the run would
    measure another model than the workers')."""

    def __init__(
        self, bundle: Bundle, vectors: dict[str, np.ndarray], titles: dict[str, np.ndarray | None] | None = None
    ) -> None:
        if bundle.uses_title and titles is None:
            raise ValueError(f"bundle {bundle.version} has a title term: give its posts' title vectors")
        self.version = bundle.version
        self.vectors = vectors
        self.titles = titles if bundle.uses_title else None
        self._terms = Bundle(bundle.path, bundle.manifest, bundle.pipeline, bundle.term_weights, None)

    def document_fields(self, posts: Sequence[Post]) -> list[dict[str, Any]]:
        out = self._terms.document_fields(posts)
        for post, fields in zip(posts, out, strict=True):
            fields["vector"] = self.vectors[post.id].tolist()
            if self.titles is not None:
                title = self.titles[post.id]
                fields["title_vector"] = None if title is None else title.tolist()
        return out


def title_table(bundle: Bundle, corpus: Sequence[Post], *, progress: bool) -> dict[str, np.ndarray | None] | None:
    """Each post's title vector (None without a title) for a bundle with a title term, else None."""
    if not bundle.uses_title:
        return None
    out: dict[str, np.ndarray | None] = {}
    for i in progress_bar.progress(range(0, len(corpus), 256), desc="encoding the titles", enabled=progress):
        chunk = corpus[i : i + 256]
        out.update(zip((p.id for p in chunk), bundle.encode_titles(chunk), strict=True))
    return out


def dense_table(bundle: Bundle, corpus: Sequence[Post], cache: str | Path | None, *, progress: bool) -> StoredVectors:
    """Dense vectors of ``corpus`` (from ``cache`` when given, checked on 8 posts against the bundle)."""
    if cache is None:
        chunks = [
            bundle.encode_dense(corpus[i : i + 64])
            for i in progress_bar.progress(range(0, len(corpus), 64), desc="encoding the corpus", enabled=progress)
        ]
        vectors = {p.id: v for p, v in zip(corpus, np.concatenate(chunks), strict=True)}
        return StoredVectors(bundle, vectors, title_table(bundle, corpus, progress=progress))
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
    vectors = {p.id: v for p, v in zip(corpus, x, strict=True)}
    return StoredVectors(bundle, vectors, title_table(bundle, corpus, progress=progress))


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


def alerts_run(
    client: Any,
    bundle_path: str | Path,
    dump_dir: str | Path,
    *,
    dense_cache: str | Path | None = None,
    knn: bool = True,
    save: bool = False,
    test: bool = True,
    keep_ranked: bool = False,
    given: Calibration | None = None,
    progress: bool = True,
) -> AlertsRun:
    """Choose k, threshold and calibration on dev, then flag test once (module doc).

    ``test=False``: dev only (the choice, e.g. to ``save`` it beside a bundle; no test figure). ``keep_ranked``:
    also keep every test post's top candidates (``AlertsRun.test_ranked``: the curve, other decision rules).
    ``given``: flag with this calibration (e.g. the one ``semdup fit-default`` wrote) instead of choosing one on dev;
    dev is still streamed, to report its figure at that calibration.
    """
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
    if given is None:
        cal = fit_flagging(
            ranked,
            dev_gold,
            f"{Path(dump_dir).name} dev alerts: {len(dev_ids)} posts against earlier posts, top {TOP}",
        )
    elif given.threshold is None:
        raise DataError(f"the calibration given for {bundle.version} has no threshold: nothing to flag with")
    else:
        cal = given
    k, threshold = int(cal.k or DEFAULT_K), float(cal.threshold)
    dev = flag_scores(flags_at(ranked, k, threshold), dev_gold)
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
        test={},
        given=given is not None,
        notes=notes,
    )
    if keep_ranked:
        run.dev_ranked, run.dev_gold = ranked, {p: sorted(g) for p, g in dev_gold.items()}
    if test:
        # test, once: the worker's path (flag_duplicates) with the dev calibration
        test_ids, test_gold = split_targets("test")
        store = f"semdup-alerts-eval-flags-{uuid.uuid4().hex[:8]}"
        flagged: dict[str, set[str]] = {}
        top: dict[str, list[tuple[str, float]]] = {}
        calibrated = Reranker(bundle, client, "", settings, cal)
        depth = TOP if keep_ranked else k

        def flag_test(index: str, post: Post) -> None:
            flagged[post.id] = {
                f.candidate_id for f in flag_duplicates(calibrated, client, index, [post], k=k, store=store)
            }
            if bundle.threshold is not None or keep_ranked:
                cands = plain.rank(post, k=depth, exclude_id=post.id, index=index)
                top[post.id] = [(c.id, c.score) for c in cands if c.complete]

        try:
            stream(client, encoder, order, test_ids, flag_test, knn=settings.knn, progress=progress)
        finally:
            client.indices.delete(index=store, ignore_unavailable=True, request_timeout=30)
        run.test = flag_scores(flagged, test_gold)
        if bundle.threshold is not None:
            run.bundle_threshold_test = flag_scores(flags_at(top, k, bundle.threshold), test_gold)
        if keep_ranked:
            run.test_ranked, run.test_gold = top, {p: sorted(g) for p, g in test_gold.items()}
    else:
        run.notes.append("dev only: test not flagged")
    run.seconds = time.monotonic() - start
    if save:
        run.calibration_file = str(save_calibration(calibration_path(bundle_path), bundle.version, cal))
    return run


def write_curve(run: AlertsRun, path: str | Path) -> Path:
    """The test flags' precision/recall curve at the chosen k over every threshold (``keep_ranked`` runs), as SVG,
    with the dev-chosen threshold's test point marked."""
    if run.test_ranked is None or run.test_gold is None:
        raise ValueError("the run kept no test candidates: run with test=True, keep_ranked=True")
    gold = {p: set(g) for p, g in run.test_gold.items()}
    points = pr_curve(run.test_ranked, gold, run.k)
    title = f"{run.model}: test flags in creation order, k={run.k}, {run.candidates}"
    chosen = (run.threshold, run.test["precision"], run.test["recall"])
    out = Path(path)
    out.write_text(curve_svg(points, chosen, title), encoding="utf-8")
    return out


def _print(run: AlertsRun) -> None:
    how = "given" if run.given else "chosen on dev"
    print(f"model {run.model}, candidates {run.candidates}; {how}: k={run.k}, threshold {run.threshold:.4f}")
    cal = run.calibration
    platt = "Platt" if run.given else "Platt on dev"
    print(f"{platt}: a={cal['a']:.3f} b={cal['b']:.3f} ({cal['n']} pairs, {cal['positives']} duplicates)")
    print(f"{'':<6}{'P':>7}{'R':>7}{'F1':>7}{'posts':>7}{'w/ dup':>7}{'gold':>6}{'flags':>7}{'true':>6}{'flagged':>8}")
    rows = [("dev", run.dev)] + ([("test", run.test)] if run.test else [])
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
    from semdup.core.settings import OpenSearchSettings
    from semdup.opensearch_io.clients import connect

    ap = argparse.ArgumentParser(prog="python -m experiments.alerts_eval", description=__doc__.split("\n")[0])
    ap.add_argument("--bundle", required=True, help="the model bundle (directory or .tar.gz)")
    ap.add_argument("--dump", help="Stack Exchange dump directory (default: the Travel data set)")
    ap.add_argument("--dense-cache", help="the corpus's dense vectors, .npy in Posts.xml order (checked on a sample)")
    ap.add_argument("--no-knn", action="store_true", help="BM25 candidates only")
    ap.add_argument("--save-calibration", action="store_true", help="write <bundle>.calibration.json for workers")
    ap.add_argument("--calibration", help="flag with this calibration file's entry for the bundle (no dev choice)")
    ap.add_argument("--dev-only", action="store_true", help="choose on dev and stop (no test figure)")
    ap.add_argument("--curve", help="write the test flags' precision/recall curve (top k, every threshold) as SVG")
    ap.add_argument("--ranked", help="write every dev and test post's top candidates and gold as JSON")
    ap.add_argument("--own-node", action="store_true", help="start a throwaway OpenSearch node for the run")
    ap.add_argument("--json", action="store_true", help="print the run as JSON")
    args = ap.parse_args(argv)
    if args.dev_only and args.curve:
        ap.error("--curve draws the test stream: drop --dev-only")
    if args.calibration and args.save_calibration:
        ap.error("--save-calibration writes the dev choice: drop --calibration")
    logging.basicConfig(level=logging.WARNING)
    given = None
    if args.calibration:
        given = load_calibration(args.calibration, Bundle.load(args.bundle).version)
        if given is None:
            ap.error(f"{args.calibration} holds no calibration for {args.bundle}")
    with contextlib.ExitStack() as stack:
        if args.own_node:
            from semdup.devstack.local_opensearch import own_opensearch

            settings = OpenSearchSettings(url=stack.enter_context(own_opensearch(None, "alerts-eval")))
        else:
            settings = load_settings().opensearch_settings()
        run = _run(args, connect(settings), given)
    if args.curve:
        write_curve(run, args.curve)
    if args.ranked:
        keep = ("k", "threshold", "dev_ranked", "dev_gold", "test_ranked", "test_gold")
        Path(args.ranked).write_text(json.dumps({name: getattr(run, name) for name in keep}), encoding="utf-8")
    if args.json:
        print(json.dumps({k: v for k, v in asdict(run).items() if not k.endswith(("_ranked", "_gold"))}, indent=2))
    else:
        _print(run)
    return 0


def _run(args: argparse.Namespace, client: Any, given: Calibration | None) -> AlertsRun:
    from semdup.data.paths import travel_dir

    dump = args.dump or travel_dir()
    return alerts_run(
        client,
        args.bundle,
        dump,
        dense_cache=args.dense_cache,
        knn=not args.no_knn,
        save=args.save_calibration,
        test=not args.dev_only,
        keep_ranked=bool(args.curve or args.ranked),
        given=given,
        progress=sys.stderr.isatty(),
    )


if __name__ == "__main__":
    sys.exit(main())

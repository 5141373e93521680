"""Fit a site's flagging threshold and Platt probabilities from its moderators' verdicts (and its duplicate links).

    result = calibrate_site(client, "artifacts/demo/default-minilm-travel", "travel", links="PostLinks.xml")
    result.calibration.threshold      # the workers' next flags use it (they re-read the file when it changes)

Samples, each a fused score and a label:

* **verdicts** (``semdup-verdicts``): one per judged pair of the index, labelled by its reviewers' majority (even
  splits left out), scored as the flag was (the score stored with the verdict); only pairs flagged by the bundle
  being calibrated count, since another model's scores are on another scale.
* **links** (optional): a Stack Exchange ``PostLinks.xml`` (duplicate links, ``LinkTypeId=3``; the ``PostId``
  side's text is read from the index) or a JSONL of labelled pairs (:mod:`semdup.data.pairs`; the query's text from
  the file). Each query is ranked against the index by the reranker as a worker would (``SEMDUP_TEMPLATES``,
  ``SEMDUP_KNN`` ...), and its top ``k`` complete candidates become samples: a duplicate when the links say so,
  else not. Candidates below the top ``k`` would never be flagged, so they teach the threshold nothing.

The fit is the project's one fitting code (:mod:`semdup.measures.fitting`) through
:func:`semdup.reranker.calibration.fit_decision` (threshold by maximum accuracy, and Platt), stored with
:func:`~semdup.reranker.calibration.save_calibration` in ``<bundle>.calibration.json`` (the bundle's entry
replaced, other bundles' kept). Two rules guard it:

* at least :data:`MIN_PAIRS` samples with :data:`MIN_PER_CLASS` of each label, else :class:`DataError` says how
  many more are needed: Platt's two parameters need both labels, and with fewer than five of a label one verdict
  moves the threshold anywhere between two scores;
* the threshold never goes below the lowest score sampled: verdicts exist only for flagged pairs, so when every
  judged pair was a duplicate nothing says how far below them the next duplicates lie.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from semdup.alerts.flag import read_posts
from semdup.bundle.bundle import Bundle
from semdup.core.errors import DataError, PostError
from semdup.core.posts import Post
from semdup.core.progress import progress
from semdup.data.pairs import PAIR_LABELS, iter_pair_records
from semdup.data.stackexchange import load_duplicate_links
from semdup.measures.ranking import precision_recall_f1_accuracy
from semdup.reranker.calibration import Calibration, calibration_path, fit_decision, load_calibration, save_calibration
from semdup.reranker.reranker import Reranker
from semdup.reranker.settings import RerankerSettings
from semdup.review.verdicts import VERDICTS_INDEX, iter_verdicts, judged_pairs

__all__ = [
    "MIN_PAIRS",
    "MIN_PER_CLASS",
    "Samples",
    "Links",
    "CalibrateResult",
    "verdict_samples",
    "read_links",
    "link_samples",
    "fit_calibration",
    "calibrate_site",
]

logger = logging.getLogger(__name__)

MIN_PAIRS = 20
MIN_PER_CLASS = 5
TOP_K = 10  # candidates per linked query: the workers' default SEMDUP_FLAG_K


@dataclass
class Samples:
    """Scores and labels from one source, and what was left out of it (for the report)."""

    source: str
    scores: list[float] = field(default_factory=list)
    labels: list[bool] = field(default_factory=list)
    left_out: dict[str, int] = field(default_factory=dict)

    @property
    def positives(self) -> int:
        return sum(self.labels)

    def describe(self) -> str:
        skipped = ", ".join(f"{n} {why}" for why, n in self.left_out.items() if n)
        return (
            f"{self.source}: {len(self.scores)} pairs ({self.positives} duplicates, "
            f"{len(self.scores) - self.positives} not){'; left out: ' + skipped if skipped else ''}"
        )


@dataclass(frozen=True)
class Links:
    """Labelled links: each query's duplicates (``positives``) and, for a pair file, the query's own text."""

    source: str
    positives: dict[str, set[str]]
    texts: dict[str, Post]


@dataclass(frozen=True)
class CalibrateResult:
    """The fit, where it was written, the previous threshold, and the samples it came from."""

    calibration: Calibration
    path: Path
    previous_threshold: float | None
    samples: list[Samples]
    precision: float
    recall: float


def verdict_samples(client: Any, index: str, model: str, store: str = VERDICTS_INDEX) -> Samples:
    """One sample per pair of ``index`` judged on a flag of ``model`` (majority label, the flag's score)."""
    pairs, ties = judged_pairs(iter_verdicts(client, index, store=store))
    out = Samples(f"verdicts on {index}", left_out={"even splits": ties})
    other = 0
    for p in pairs:
        if p.model != model:
            other += 1
            continue
        out.scores.append(p.score)
        out.labels.append(p.duplicate)
    out.left_out["flagged by another model"] = other
    return out


def read_links(path: str | Path) -> Links:
    """Duplicate links from a Stack Exchange ``PostLinks.xml`` or a JSONL pair file (:mod:`semdup.data.pairs`).

    Raises:
        DataError: a file of neither kind, or one that does not read as its kind.
    """
    p = Path(path)
    positives: dict[str, set[str]] = {}
    texts: dict[str, Post] = {}
    if p.suffix.lower() == ".xml":
        for a, b in load_duplicate_links(p):  # the PostId side was closed as a duplicate of the other
            positives.setdefault(a, set()).add(b)
    elif p.suffix.lower() in (".jsonl", ".json"):
        for _, query, candidate, label, _ in iter_pair_records(p):
            texts.setdefault(query.id, query)
            got = positives.setdefault(query.id, set())
            if PAIR_LABELS[label]:
                got.add(candidate.id)
    else:
        raise DataError(
            f"{p}: links must be a Stack Exchange PostLinks.xml or a JSONL file of labelled pairs "
            "(query{id,title,body}, candidate{id,title,body}, label); got neither (.xml / .jsonl)"
        )
    return Links(str(p), positives, texts)


def link_samples(reranker: Reranker, client: Any, index: str, links: Links, k: int = TOP_K) -> Samples:
    """The top ``k`` candidates of each linked query, ranked against ``index``, labelled by the links."""
    out = Samples(f"links {Path(links.source).name}", left_out={"posts not in the index": 0, "posts unusable": 0})
    ids = [q for q in links.positives if q not in links.texts]
    texts = dict(links.texts)
    for i in range(0, len(ids), 100):
        found, missing = read_posts(client, index, ids[i : i + 100], to_encode=True)
        texts.update({p.id: p for p in found})
        out.left_out["posts not in the index"] += len(missing)
    for qid, positives in progress(links.positives.items(), desc="ranking linked posts", total=len(links.positives)):
        post = texts.get(qid)
        if post is None:
            continue
        try:
            cands = reranker.rank(post, k=k, exclude_id=qid, index=index)
        except PostError:
            out.left_out["posts unusable"] += 1
            continue
        for c in cands:
            if c.complete:
                out.scores.append(c.score)
                out.labels.append(c.id in positives)
    return out


def fit_calibration(samples: Sequence[Samples], fitted_on: str) -> tuple[Calibration, float, float]:
    """``(calibration, precision %, recall %)`` fitted on every sample (module doc for the two rules).

    Raises:
        DataError: fewer than :data:`MIN_PAIRS` samples or :data:`MIN_PER_CLASS` of a label.
    """
    scores = [s for part in samples for s in part.scores]
    labels = [y for part in samples for y in part.labels]
    pos = sum(labels)
    neg = len(labels) - pos
    if len(labels) < MIN_PAIRS or pos < MIN_PER_CLASS or neg < MIN_PER_CLASS:
        found = "; ".join(part.describe() for part in samples) or "no samples"
        raise DataError(
            f"too few judged pairs to fit a threshold: {len(labels)} ({pos} duplicates, {neg} not); at least "
            f"{MIN_PAIRS} are needed, with {MIN_PER_CLASS} of each verdict, because Platt's two parameters need "
            "both labels and with fewer a single verdict moves the threshold anywhere between two scores. "
            f"Found: {found}. Judge more flags on the review page (/review), or add the site's duplicate links "
            "(--links PostLinks.xml or a JSONL of pairs)"
        )
    cal = fit_decision(scores, labels, fitted_on, floor=True)
    m = precision_recall_f1_accuracy([s >= cal.threshold for s in scores], labels)
    return cal, m["P"], m["R"]


def calibrate_site(
    client: Any,
    bundle_path: str | Path,
    index: str,
    *,
    links: str | Path | None = None,
    out: str | Path | None = None,
    settings: RerankerSettings | None = None,
    k: int | None = None,
    verdicts_store: str = VERDICTS_INDEX,
) -> CalibrateResult:
    """Fit from ``index``'s verdicts (and ``links``) and write the bundle's entry of ``out`` (default
    ``<bundle>.calibration.json``). ``k``: candidates per linked post (None: :data:`TOP_K`, the workers' default);
    the calibration records no k, so workers flag with ``SEMDUP_FLAG_K`` or 10.

    Raises:
        DataError: too few samples (see :func:`fit_calibration`), unreadable links.
        BundleError: a bundle or calibration file that does not load.
    """
    bundle = Bundle.load(bundle_path)
    path = Path(out) if out is not None else calibration_path(bundle_path)
    previous = load_calibration(path, bundle.version)
    samples = [verdict_samples(client, index, bundle.version, verdicts_store)]
    if links is not None:
        reranker = Reranker(bundle, client, index, settings or RerankerSettings())
        samples.append(link_samples(reranker, client, index, read_links(links), k or TOP_K))
    fitted_on = f"{index}: " + "; ".join(part.describe() for part in samples)
    cal, precision, recall = fit_calibration(samples, fitted_on)
    save_calibration(path, bundle.version, cal)
    before = previous.threshold if previous is not None and previous.threshold is not None else bundle.threshold
    return CalibrateResult(cal, path, before, samples, precision, recall)

"""The verdict store: index ``semdup-verdicts``, one document per (flagged pair, reviewer).

A moderator's answer to a flag ("duplicate" or "not_duplicate"), kept in the cluster beside the flags
(:mod:`semdup.alerts.store`), created on first use with a strict mapping::

    pair                           keyword, the flag's _id (semdup.alerts.store.flag_id)
    index, post_id, candidate_id   keyword, the flagged pair (post_id is the newer post)
    verdict                        keyword, duplicate | not_duplicate
    who                            keyword, the reviewer (the key's name, semdup.service.settings.ApiKey.who)
    when                           date (ISO 8601, UTC), when this verdict was first given
    model, score, probability      the flag as the reviewer saw it: bundle version, fused score, P(duplicate)

The ``_id`` is a hash of (index, post, candidate, reviewer) (:func:`verdict_id`), so each reviewer has one verdict
per pair. Giving the same verdict again on the same flag (same model and score) is a replay: nothing is written,
the first ``when`` stays (:func:`record_verdict` answers ``changed=False``). Another verdict, or the same one on a
pair flagged again by another model or with another score, replaces the document with a new ``when``.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Any

from semdup.alerts.store import FLAGS_INDEX, Flag, flag_id
from semdup.core.errors import ConfigError, OpenSearchMissing, OpenSearchRefused, SemdupError
from semdup.core.index_names import check_index_name
from semdup.index_format.system_indices import VERDICTS as VERDICTS_STORE
from semdup.index_format.system_indices import ensure

__all__ = [
    "VERDICTS_INDEX",
    "DUPLICATE",
    "NOT_DUPLICATE",
    "VERDICTS",
    "Verdict",
    "Recorded",
    "verdict_id",
    "ensure_verdicts_index",
    "get_flag",
    "record_verdict",
    "iter_verdicts",
    "verdicts_of_pairs",
    "JudgedPair",
    "judged_pairs",
]

logger = logging.getLogger(__name__)

VERDICTS_INDEX = VERDICTS_STORE.name  # semdup-verdicts, declared in semdup.index_format.system_indices
DUPLICATE, NOT_DUPLICATE = "duplicate", "not_duplicate"
VERDICTS = (DUPLICATE, NOT_DUPLICATE)
_PAGE = 1000


@dataclass(frozen=True)
class Verdict:
    """One reviewer's answer about one flagged pair, with the flag as it was shown."""

    index: str
    post_id: str
    candidate_id: str
    verdict: str
    who: str
    when: str
    model: str
    score: float
    probability: float | None

    @property
    def pair(self) -> str:
        return flag_id(self.index, self.post_id, self.candidate_id)

    @property
    def duplicate(self) -> bool:
        return self.verdict == DUPLICATE

    def to_json(self) -> dict[str, Any]:
        return {"pair": self.pair, **asdict(self)}

    @classmethod
    def from_json(cls, src: dict[str, Any]) -> Verdict:
        p = src.get("probability")
        return cls(
            index=str(src["index"]),
            post_id=str(src["post_id"]),
            candidate_id=str(src["candidate_id"]),
            verdict=str(src["verdict"]),
            who=str(src["who"]),
            when=str(src.get("when") or ""),
            model=str(src.get("model") or ""),
            score=float(src["score"]),
            probability=None if p is None else float(p),
        )


@dataclass(frozen=True)
class Recorded:
    """What :func:`record_verdict` did: the stored verdict, and whether this call changed it."""

    verdict: Verdict
    changed: bool


def verdict_id(index: str, post_id: str, candidate_id: str, who: str) -> str:
    """One ``_id`` per (pair, reviewer): a hash, since ids may hold any character and be 512 bytes long."""
    joined = "\x00".join((index, post_id, candidate_id, who)).encode("utf-8", "surrogatepass")
    return "v-" + hashlib.sha256(joined).hexdigest()[:40]


def ensure_verdicts_index(client: Any, store: str = VERDICTS_INDEX) -> None:
    """Create the store with its strict mapping unless it exists (another service process may create it first)."""
    ensure(client, VERDICTS_STORE, store)


def get_flag(client: Any, index: str, post_id: str, candidate_id: str, store: str = FLAGS_INDEX) -> Flag | None:
    """The flag of this pair as the store holds it now, None when the pair is not flagged (or no longer is)."""
    check_index_name(index)
    try:
        doc = client.get(index=store, id=flag_id(index, post_id, candidate_id))
    except OpenSearchMissing:  # no such flag, or no flag store yet
        return None
    flag = Flag.from_json(doc["_source"])
    if (flag.index, flag.post_id, flag.candidate_id) != (index, post_id, candidate_id):  # a hashed _id's collision
        return None
    return flag


def record_verdict(
    client: Any,
    flag: Flag,
    verdict: str,
    who: str,
    *,
    now: str | None = None,
    store: str = VERDICTS_INDEX,
) -> Recorded:
    """Store ``who``'s ``verdict`` on ``flag`` (see the module doc for replays); visible to searches on return.

    Raises:
        ConfigError: a verdict that is not one of :data:`VERDICTS`.
        OpenSearchUnavailable: the cluster did not answer (nothing half-written: the write is one document).
    """
    if verdict not in VERDICTS:
        raise ConfigError(f"verdict must be one of {', '.join(VERDICTS)}, got {verdict!r}")
    ensure_verdicts_index(client, store)
    doc_id = verdict_id(flag.index, flag.post_id, flag.candidate_id, who)
    for _ in range(3):  # two requests racing on one (pair, reviewer): the loser re-reads and compares
        try:
            found = client.get(index=store, id=doc_id)
        except OpenSearchMissing:
            found = None
        if found is not None:
            old = Verdict.from_json(found["_source"])
            if (old.verdict, old.model, old.score) == (verdict, flag.model, flag.score):
                return Recorded(old, changed=False)
        new = Verdict(
            flag.index,
            flag.post_id,
            flag.candidate_id,
            verdict,
            who,
            now or datetime.now(timezone.utc).isoformat(timespec="seconds"),
            flag.model,
            flag.score,
            flag.probability,
        )
        kwargs: dict[str, Any] = (
            {"op_type": "create"}
            if found is None
            else {"if_seq_no": found["_seq_no"], "if_primary_term": found["_primary_term"]}
        )
        try:
            client.index(index=store, id=doc_id, body=new.to_json(), refresh="true", **kwargs)
        except OpenSearchRefused as exc:
            if exc.status != 409:
                raise
            continue
        return Recorded(new, changed=True)
    raise SemdupError(f"the verdict on pair {flag.post_id} / {flag.candidate_id} kept changing under this write")


def _search(client: Any, store: str, body: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every hit of ``body`` (sorted, with a unique last key), page by page with ``search_after``."""
    if not client.indices.exists(index=store):
        return
    while True:
        hits = client.search(index=store, body=body)["hits"]["hits"]
        yield from hits
        if len(hits) < body["size"]:
            return
        body["search_after"] = hits[-1]["sort"]


def iter_verdicts(
    client: Any, index: str, *, who: str | None = None, store: str = VERDICTS_INDEX
) -> Iterator[Verdict]:
    """Every verdict on ``index``'s flags (of one reviewer when ``who`` is given), by pair then reviewer."""
    check_index_name(index)
    filters: list[dict[str, Any]] = [{"term": {"index": index}}]
    if who is not None:
        filters.append({"term": {"who": who}})
    body = {"query": {"bool": {"filter": filters}}, "sort": [{"pair": "asc"}, {"who": "asc"}], "size": _PAGE}
    for hit in _search(client, store, body):
        yield Verdict.from_json(hit["_source"])


def verdicts_of_pairs(client: Any, pairs: Sequence[str], store: str = VERDICTS_INDEX) -> dict[str, list[Verdict]]:
    """The verdicts on these flags (``pair`` ids, at most a page's worth), by pair."""
    out: dict[str, list[Verdict]] = {}
    if not pairs:
        return out
    body = {
        "query": {"bool": {"filter": [{"terms": {"pair": list(dict.fromkeys(pairs))}}]}},
        "sort": [{"pair": "asc"}, {"who": "asc"}],
        "size": _PAGE,
    }
    for hit in _search(client, store, body):
        v = Verdict.from_json(hit["_source"])
        out.setdefault(v.pair, []).append(v)
    return out


@dataclass(frozen=True)
class JudgedPair:
    """A flagged pair's label from its verdicts: the reviewers' majority, with the latest verdict's score and model
    (the flag as last judged)."""

    index: str
    post_id: str
    candidate_id: str
    duplicate: bool
    score: float
    model: str
    votes: int


def judged_pairs(verdicts: Iterable[Verdict]) -> tuple[list[JudgedPair], int]:
    """``(pairs, ties)``: one label per pair by majority of its reviewers; pairs whose reviewers split evenly are
    left out and counted in ``ties``."""
    by_pair: dict[str, list[Verdict]] = {}
    for v in verdicts:
        by_pair.setdefault(v.pair, []).append(v)
    out: list[JudgedPair] = []
    ties = 0
    for vs in by_pair.values():
        yes = sum(v.duplicate for v in vs)
        if 2 * yes == len(vs):
            ties += 1
            continue
        last = max(vs, key=lambda v: v.when)
        out.append(
            JudgedPair(last.index, last.post_id, last.candidate_id, 2 * yes > len(vs), last.score, last.model, len(vs))
        )
    return out, ties

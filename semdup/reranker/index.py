"""Which index a rerank searches, resolved once per index name: :class:`ResolvedIndex`.

    indices = IndexResolver(client, bundle.version, dense=True)
    resolved = indices.resolve("travel", RerankerSettings())
    resolved.target, resolved.fields  # 'semdup-travel-…' (a site's index: its companion), CandidateFields(knn=True)

The first resolution of a name checks it (one index or alias, never a pattern), finds the index semdup searches for
it (itself, or the companion ``semdup enable`` made for a site's index: :mod:`semdup.index_format.companion`),
reads its mapping once (the model that claims it, and the search structures it holds) and stores the lexical
templates the settings search with when the cluster lacks them. Later calls read the cache; a template chosen per
request (``templates`` in ``/v1/rerank``) is stored on its first use.

An index claimed by another bundle version is refused (:class:`ModelMismatch`); a site's index whose posts semdup
has not encoded yet makes an empty answer an error (:class:`NothingIndexed`, from :meth:`IndexResolver.explain_empty`),
never a quiet "no duplicates".
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

from semdup.core.errors import SearchIndexError
from semdup.core.index_names import check_index_name
from semdup.index_format.companion import companion_of, search_target
from semdup.index_format.mapping import MODEL_META_KEY, common_fields, mappings
from semdup.index_format.schema import CandidateFields
from semdup.reranker.settings import RerankerSettings
from semdup.search_templates import ensure_templates

__all__ = ["IndexResolver", "ModelMismatch", "NothingIndexed", "ResolvedIndex"]

logger = logging.getLogger(__name__)


class ModelMismatch(SearchIndexError):
    """The index holds vectors of another bundle version than the reranker's (the service answers 409)."""


class NothingIndexed(SearchIndexError):
    """The site's index holds posts but semdup has encoded none of them yet (the service answers 409): a rerank
    would answer nothing, which must never look like "no duplicates"."""


@dataclass(frozen=True)
class ResolvedIndex:
    """An index as a rerank searches it.

    Attributes:
        name: the index (or alias) asked for; the answer's ids are its ids.
        target: the index searched: ``name`` itself when semdup created it, else its companion.
        fields: the hybrid candidate paths wanted and served there (learned-sparse, k-NN).
        shards: the primary shards behind ``target`` (a k-NN search finds its ``k`` in each).
        text_fields: the fields of ``name`` that hold a post's title and body (the site's own, for a companion).
    """

    name: str
    target: str
    fields: CandidateFields = CandidateFields()
    shards: int = 1
    text_fields: tuple[str, str] = ("title", "body")

    @property
    def companion(self) -> bool:
        """True for a site's index connected with ``semdup enable``: its posts are searched in the companion."""
        return self.target != self.name


def _primary_shards(client: Any, target: str) -> int:
    """The primary shards of every concrete index behind ``target`` (an alias may point at several)."""
    got = client.indices.get_settings(index=target, name="index.number_of_shards")
    return max(1, sum(int(v["settings"]["index"]["number_of_shards"]) for v in got.values()))


class IndexResolver:
    """Resolves index names for one bundle version and client, once each; thread-safe.

    Args:
        client: an OpenSearch client (:func:`semdup.opensearch_io.clients.connect`).
        version: the bundle version the reranker serves.
        dense: the bundle has a dense encoder (k-NN candidates are then on by default where the index maps them).
    """

    def __init__(self, client: object, version: str, *, dense: bool) -> None:
        self.client = client
        self.version = version
        self.dense = dense
        # name -> (target, its search structures, its shards, the title and body fields of name)
        self._mapped: dict[str, tuple[str, CandidateFields, int, tuple[str, str]]] = {}
        self._stored: set[tuple[str, str]] = set()  # (template model, variant) stored in the cluster
        self._warned: set[tuple[str, str]] = set()  # (target, path) a warning was logged for
        self._lock = threading.Lock()

    def resolve(self, name: str, settings: RerankerSettings) -> ResolvedIndex:
        """``name`` as searched with ``settings`` (module doc).

        Raises:
            ConfigError: a name that is not one index or alias (``*``, ``_all``, ``a,b``, ``_search``, ``.hidden``;
                :func:`~semdup.core.index_names.check_index_name`). SearchIndexError: the index does not exist.
            ModelMismatch: it holds another model's vectors.
        """
        mapped = self._mapped.get(name)
        if mapped is None:
            check_index_name(name)  # before any request: a pattern would search every index, '_search' an endpoint
            target = search_target(self.client, name, self.version)
            behind = mappings(self.client, target)  # one read: the models that claim it and its search structures
            wrong = {k: (m.get("_meta") or {}).get(MODEL_META_KEY) for k, m in behind.items()}
            wrong = {k: v for k, v in wrong.items() if v is not None and v != self.version}
            if wrong:
                concrete, other = next(iter(wrong.items()))
                raise ModelMismatch(
                    f"index {concrete!r} holds vectors of model {other}, but the reranker serves bundle "
                    f"{self.version}; serve bundle {other}, or index the posts with {self.version} into a new index "
                    "and point an alias"
                )
            text = ("title", "body")
            if target != name:
                found = companion_of(self.client, name)  # type: ignore[arg-type]
                text = (found[1].title, found[1].body) if found is not None else text
            mapped = (target, common_fields(behind), _primary_shards(self.client, target), text)
        missing = {(m, settings.variant) for m in settings.templates} - self._stored
        with self._lock:
            self._mapped[name] = mapped
            if missing:  # a cluster nobody ran the evaluation on has none: every search would get "no requests added"
                ensure_templates(self.client, [m for m, _ in sorted(missing)], [settings.variant],
                                 settings.search_timeout)  # fmt: skip
                self._stored.update(missing)
        target, held, shards, text = mapped
        auto_knn = settings.knn is None and self.dense
        wanted = CandidateFields(settings.sparse, bool(settings.knn) or auto_knn)
        for path, flag in (("learned-sparse", "sparse"), ("k-NN", "knn")):
            if getattr(wanted, flag) and not getattr(held, flag) and not (flag == "knn" and auto_knn):
                self._warn_once(target, path, flag)
        return ResolvedIndex(name, target, wanted & held, shards, text)

    def _warn_once(self, target: str, path: str, flag: str) -> None:
        """Say once per index that a wanted candidate path is off (the index was created or enabled without
        ``--sparse`` / ``--knn``); a path wanted only where the index has it (``knn`` None) is off quietly."""
        if (target, flag) in self._warned:
            return
        self._warned.add((target, flag))
        logger.warning(
            "%s candidates are off for %s: its mapping lacks their search structure; add it with "
            "`semdup enable --index %s --%s` and a backfill, or drop %s",
            path, target, target, flag, flag,
        )  # fmt: skip

    def explain_empty(self, name: str, settings: RerankerSettings) -> str:
        """Why a rerank found no candidates (one count per side; asked only when the answer is empty).

        Raises:
            NothingIndexed: the site's index holds posts but its companion none yet (run the backfill).
        """
        target = self.resolve(name, settings).target
        params = {"request_timeout": settings.search_timeout}
        ours = int(self.client.count(index=target, params=params)["count"])  # type: ignore[attr-defined]
        if target != name and ours == 0:
            theirs = int(self.client.count(index=name, params=params)["count"])  # type: ignore[attr-defined]
            if theirs:
                raise NothingIndexed(
                    f"index {name!r} holds {theirs} posts but semdup has encoded none of them yet; run "
                    f"`semdup backfill --index {name}` with workers running (then `semdup watch` keeps it current)"
                )
        if ours == 0:
            return f"index {name!r} holds no posts yet"
        return (
            f"none of the {ours} indexed posts matched the query's words ({', '.join(settings.templates)} "
            "candidates); a post with other words can still be a duplicate: k-NN candidates (--knn, an index with a "
            "vector field) find those"
        )

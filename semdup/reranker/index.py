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

from semdup.core.errors import SearchIndexError
from semdup.core.index_names import check_index_name
from semdup.index_format.companion import search_target
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
    """

    name: str
    target: str
    fields: CandidateFields = CandidateFields()

    @property
    def companion(self) -> bool:
        """True for a site's index connected with ``semdup enable``: its posts are searched in the companion."""
        return self.target != self.name


class IndexResolver:
    """Resolves index names for one bundle version and client, once each; thread-safe.

    Args:
        client: an OpenSearch client (:func:`semdup.core.clients.connect`).
        version: the bundle version the reranker serves.
        dense: the bundle has a dense encoder (k-NN candidates are then on by default where the index maps them).

    Attributes:
        named_scores: the cluster returns the scores of named queries (OpenSearch >= 2.13); set False by the
            first search it refused.
    """

    def __init__(self, client: object, version: str, *, dense: bool) -> None:
        self.client = client
        self.version = version
        self.dense = dense
        self._mapped: dict[str, tuple[str, CandidateFields]] = {}  # name -> (target, its search structures)
        self._stored: set[tuple[str, str]] = set()  # (template model, variant) stored in the cluster
        self._warned: set[tuple[str, str]] = set()  # (target, path) a warning was logged for
        self._lock = threading.Lock()
        # sparse / k-NN hits can carry their lexical score as a named query (False: the cluster is older than 2.13)
        self.named_scores = True

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
            mapped = (target, common_fields(behind))
        missing = {(m, settings.variant) for m in settings.templates} - self._stored
        with self._lock:
            self._mapped[name] = mapped
            if missing:  # a cluster nobody ran the evaluation on has none: every search would get "no requests added"
                ensure_templates(self.client, [m for m, _ in sorted(missing)], [settings.variant],
                                 settings.search_timeout)  # fmt: skip
                self._stored.update(missing)
        target, held = mapped
        auto_knn = settings.knn is None and self.dense
        wanted = CandidateFields(settings.sparse, bool(settings.knn) or auto_knn)
        for path, flag in (("learned-sparse", "sparse"), ("k-NN", "knn")):
            if getattr(wanted, flag) and not getattr(held, flag) and not (flag == "knn" and auto_knn):
                self._warn_once(target, path, flag)
        return ResolvedIndex(name, target, wanted & held)

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

"""Settings of the reranker as the layers take them: a frozen dataclass, no environment.

The composition root reads them, with every other setting, into one tree (:mod:`semdup.apps.settings`; the
variables are listed in ``docs/settings.md``) and hands :class:`RerankerSettings` (the candidate paths) to the HTTP
service and the flagging workers alike. The service's own settings (what it serves, to which keys) are
:mod:`semdup.service.settings`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from semdup.core.errors import ConfigError
from semdup.index_format.schema import LEXICAL_MODELS
from semdup.search_templates import VARIANTS

__all__ = ["RerankerSettings", "usable_cpus"]


@dataclass(frozen=True)
class RerankerSettings:
    """How the reranker finds candidates; everything that changes which candidates a call sees.

    Args:
        templates: lexical models whose stored templates give candidates; the first one gives the lexical
            score that T-SCQA's lexnorm normalises.
        variant: ``text`` (match title + body) or ``title``.
        sparse: add learned-sparse candidates (rank_feature dot product on ``semdup.terms``).
        knn: add k-NN candidates on ``semdup.vector`` (needs a ``knn_vector`` mapping); None (the default) =
            wherever the index has that mapping and the bundle a dense encoder (the candidates the demo's figures
            come from: Travel recall 96.39 with them, 81.53 BM25 alone), quietly off elsewhere.
        k_candidates: candidates per retrieval path (1..1000).
        search_timeout: seconds allowed for each OpenSearch call.
        lexical_terms: N > 0: the lexical templates match the query's N heaviest terms by the bundle's
            bag-of-words weights (words the bundle's vocabulary lacks are always kept), not its whole text; 0, the
            default: the whole text. The cluster pays for every term of a match query, twice per rerank (the BM25
            search and the k-NN hits' rescore). 32 kept every dev set within 0.2 MAP and took about a tenth off the
            ``_msearch``, but cost Travel test 0.30 MAP (docs/benchmarks.md), beyond what the default may lose, so
            it is an operator's choice. A bundle without BOW weights matches the whole text.
        dfs: search with ``dfs_query_then_fetch`` (every shard scores BM25 with the whole index's term statistics,
            at the price of one more round to the shards); None, the default: where the searched index has more
            than one primary shard, so a ranking does not depend on how many shards the index has (on a 3-shard
            index, per-shard statistics moved Travel dev BM25 MAP by 1.08, docs/results.md "Shard count").
    """

    templates: tuple[str, ...] = ("bm25",)
    variant: str = "text"
    sparse: bool = False
    knn: bool | None = None
    k_candidates: int = 100
    search_timeout: float = 5.0
    lexical_terms: int = 0
    dfs: bool | None = None

    def global_stats(self, shards: int) -> bool:
        """Whether a search of an index of ``shards`` primary shards collects global term statistics (``dfs``)."""
        return self.dfs if self.dfs is not None else shards > 1

    def __post_init__(self) -> None:
        if not self.templates:
            raise ConfigError(f"give at least one candidate template; accepted: {', '.join(LEXICAL_MODELS)}")
        unknown = [t for t in self.templates if t not in LEXICAL_MODELS]
        if unknown:
            raise ConfigError(f"unknown template(s) {unknown}; accepted: {', '.join(LEXICAL_MODELS)}")
        if self.variant not in VARIANTS:
            raise ConfigError(f"unknown template variant {self.variant!r}; accepted: {', '.join(VARIANTS)}")
        if not 1 <= self.k_candidates <= 1000:
            raise ConfigError(f"k_candidates must be within 1..1000, got {self.k_candidates}")
        if self.search_timeout <= 0:
            raise ConfigError(f"search_timeout must be > 0 seconds, got {self.search_timeout}")
        if self.lexical_terms < 0:
            raise ConfigError(f"lexical_terms must be >= 0 (0 = the whole text), got {self.lexical_terms}")



def usable_cpus() -> int:
    """CPUs this process may use: its affinity mask, bounded by a cgroup v2 CPU quota (a container's limit)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text(encoding="utf-8").split()[:2]
        if quota != "max":
            cpus = min(cpus, max(1, int(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(1, cpus)

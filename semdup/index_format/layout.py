"""Shards and replicas of every index semdup creates: :class:`IndexLayout` (the settings), :class:`Shape` (one
index's), and what the cluster says about them.

    layout = IndexLayout()                          # the defaults (settings: the ``indices`` section)
    layout.companion(site_shape(client, "posts"))   # Shape(shards=<the site's>, replicas=<the site's>)
    layout.created()                                # Shape(1, "0-1"): an index `semdup index-posts` creates
    layout.store()                                  # Shape(1, "0-1"): semdup-jobs, -duplicates, -verdicts ...

Why these defaults. A companion holds one document per post of the site's index and is searched beside it, so it
follows the site's own choice of shards and replicas (read from the site index's settings when ``enable`` or
``upgrade`` creates it). An index semdup creates itself (``index-posts``, the evaluation's throwaway indices)
keeps one primary shard: a few hundred thousand posts are far below a shard's comfortable size, and one shard
keeps BM25's statistics whole. Replicas default to ``auto_expand_replicas: 0-1`` for those and for the stores:
one replica wherever the cluster has two or more data nodes, none on a single node (which a replica would
leave yellow for ever). The stores hold what cannot be recreated (the moderators' verdicts, the job ledger), so
losing a data node must not lose them.

Replicas are written either as a count (``number_of_replicas``) or as a range ``N-M`` / ``N-all``
(``auto_expand_replicas``: OpenSearch keeps as many replicas as the data nodes allow within it).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from semdup.core.errors import ConfigError

__all__ = ["Replicas", "Shape", "IndexLayout", "AUTO_ONE", "replicas_value", "shape_of", "site_shape",
           "data_nodes", "unreplicated"]  # fmt: skip

Replicas = int | str  # a count (number_of_replicas) or a range "0-1", "1-all" (auto_expand_replicas)
AUTO_ONE = "0-1"  # one replica where a second data node exists, none on a single node
_RANGE = re.compile(r"^(\d+)-(\d+|all)$")


def replicas_value(value: Any, where: str = "replicas") -> Replicas:
    """``value`` as a replica setting: a count >= 0 (an int, or its digits) or an ``N-M`` / ``N-all`` range.

    Raises:
        ConfigError: anything else (names ``where``, the setting it came from).
    """
    if isinstance(value, bool):
        raise ConfigError(f"{where} must be a count of replicas (0, 1 ...) or a range like 0-1, found {value!r}")
    if isinstance(value, int) and value >= 0:
        return value
    text = str(value).strip().lower()
    if text.isdigit():
        return int(text)
    m = _RANGE.match(text)
    if m and (m.group(2) == "all" or int(m.group(1)) <= int(m.group(2))):
        return text
    raise ConfigError(
        f"{where} must be a count of replicas (0, 1 ...) or a range like 0-1 or 1-all (auto_expand_replicas), "
        f"found {value!r}"
    )


@dataclass(frozen=True)
class Shape:
    """One index's primary shards and replicas (a count, or an ``auto_expand_replicas`` range)."""

    shards: int = 1
    replicas: Replicas = AUTO_ONE

    def __post_init__(self) -> None:
        if not 1 <= int(self.shards) <= 1024:
            raise ConfigError(f"shards must be within 1..1024, found {self.shards!r}")
        object.__setattr__(self, "replicas", replicas_value(self.replicas))

    def settings(self) -> dict[str, Any]:
        """The ``index`` settings of a ``PUT /<index>`` body."""
        out: dict[str, Any] = {"number_of_shards": int(self.shards)}
        if isinstance(self.replicas, int):
            out["number_of_replicas"] = self.replicas
        else:
            out["auto_expand_replicas"] = self.replicas
        return out

    def replica_settings(self) -> dict[str, Any]:
        """The replica part alone, for ``PUT /<index>/_settings`` on an existing index (shards cannot change)."""
        if isinstance(self.replicas, int):
            return {"number_of_replicas": self.replicas, "auto_expand_replicas": False}
        return {"auto_expand_replicas": self.replicas}

    def describe(self) -> str:
        r = self.replicas
        return f"{self.shards} shard(s), " + (f"{r} replica(s)" if isinstance(r, int) else f"auto_expand_replicas {r}")


@dataclass(frozen=True)
class IndexLayout:
    """Shards and replicas of the indices semdup creates (settings section ``indices``, module doc).

    Attributes:
        companion_shards: primary shards of a companion (None: the site index's).
        companion_replicas: its replicas (None: the site index's); ``enable`` also applies a value set here to an
            existing companion.
        index_shards: primary shards of an index semdup creates itself (``index-posts``).
        index_replicas: its replicas.
        store_shards: primary shards of each store (``semdup-jobs``, ``-duplicates``, ``-verdicts``, ``-sessions``,
            ``-parked``).
        store_replicas: their replicas.
    """

    companion_shards: int | None = None
    companion_replicas: Replicas | None = None
    index_shards: int = 1
    index_replicas: Replicas = AUTO_ONE
    store_shards: int = 1
    store_replicas: Replicas = AUTO_ONE

    def __post_init__(self) -> None:
        for name in ("companion_shards", "index_shards", "store_shards"):
            value = getattr(self, name)
            if value is not None and not 1 <= int(value) <= 1024:
                raise ConfigError(f"{_where(name)} must be within 1..1024, found {value!r}")
        for name in ("companion_replicas", "index_replicas", "store_replicas"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, replicas_value(value, _where(name)))

    def companion(self, site: Shape | None) -> Shape:
        """A new companion's shape: the settings where set, else the site index's (else one shard, ``0-1``)."""
        site = site or Shape()
        return Shape(
            self.companion_shards or site.shards,
            site.replicas if self.companion_replicas is None else self.companion_replicas,
        )

    def created(self) -> Shape:
        """An index semdup creates itself (``index-posts``)."""
        return Shape(self.index_shards, self.index_replicas)

    def store(self) -> Shape:
        """Each of semdup's stores."""
        return Shape(self.store_shards, self.store_replicas)


def _where(name: str) -> str:
    """A field as an operator sets it: the variable and the config file key."""
    return f"SEMDUP_{name.upper()} (indices.{name})"


def shape_of(index_settings: dict[str, Any]) -> Shape:
    """The shape of one concrete index from its ``settings.index`` (what ``GET /<index>/_settings`` returns)."""
    shards = int(index_settings.get("number_of_shards", 1))
    auto = str(index_settings.get("auto_expand_replicas", "false")).lower()
    if auto not in ("", "false"):
        return Shape(shards, auto)
    return Shape(shards, int(index_settings.get("number_of_replicas", 1)))


def site_shape(client: Any, index: str) -> Shape | None:
    """The shape of the site's ``index`` (an alias: its concrete index with the most primary shards); None when
    the cluster does not say (it then gets the defaults)."""
    got = client.indices.get_settings(index=index)
    shapes = [shape_of((v.get("settings") or {}).get("index") or {}) for v in got.values()]
    return max(shapes, key=lambda s: s.shards) if shapes else None


def data_nodes(client: Any) -> int:
    """How many data nodes the cluster has (``GET _cluster/health``)."""
    return int(client.cluster.health().get("number_of_data_nodes", 1))


def unreplicated(client: Any, indices: Iterable[str]) -> list[str]:
    """Those of ``indices`` (existing, concrete or aliases) that keep no replica on this cluster: 0 replicas and
    no ``auto_expand_replicas`` that would add one. Empty on a single data node, where no replica can live."""
    names = [i for i in indices if i]
    if not names or data_nodes(client) < 2:
        return []
    got = client.indices.get_settings(index=",".join(names), ignore_unavailable=True)
    out = []
    for concrete, value in got.items():
        shape = shape_of((value.get("settings") or {}).get("index") or {})
        if shape.replicas == 0 or (isinstance(shape.replicas, str) and shape.replicas.split("-")[1] == "0"):
            out.append(concrete)
    return sorted(out)

"""Whether the indexing tasks chain duplicate flagging (``SEMDUP_FLAG_DUPLICATES``), read where both sides can.

The switch is read by the indexer (which sends ``FLAG_DUPLICATES`` by name after a write) and by
:mod:`semdup.alerts` (which runs it). ``indexer`` sits below ``alerts`` in the layers contract and may not import
it, so the one reader lives here, in ``core``; :mod:`semdup.alerts.settings` re-exports it.

    >>> flag_duplicates_enabled({"SEMDUP_FLAG_DUPLICATES": "1"})
    True
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from semdup.core.settings import parse_bool

__all__ = ["FLAG_DUPLICATES_ENV", "flag_duplicates_enabled"]

FLAG_DUPLICATES_ENV = "SEMDUP_FLAG_DUPLICATES"


def flag_duplicates_enabled(env: Mapping[str, str] | None = None) -> bool:
    """True when ``SEMDUP_FLAG_DUPLICATES`` is on (1/true/yes/on); off when unset or empty.

    Raises:
        ConfigError: a value that is not a boolean (``SEMDUP_FLAG_DUPLICATES=maybe``).
    """
    env = os.environ if env is None else env
    raw = env.get(FLAG_DUPLICATES_ENV, "").strip()
    return parse_bool(FLAG_DUPLICATES_ENV, raw) if raw else False

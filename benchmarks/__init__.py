"""Speed benchmarks: scripts that print numbers with the command, hardware and versions (never tests)."""

from __future__ import annotations

import sys
from collections.abc import Callable

__all__ = ["run_main"]


def run_main(main: Callable[[], int]) -> None:
    """Exit with ``main()``'s code; a SemdupError (cluster down, bad bundle) is one ``Error:`` line and exit 1, as the
    ``semdup`` command prints it, not a traceback."""
    from semdup.core.errors import SemdupError

    try:
        sys.exit(main())
    except SemdupError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        sys.exit(1)

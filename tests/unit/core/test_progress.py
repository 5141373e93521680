"""Progress bars show on a terminal only: a redirected run (CI, logs, `> file`) gets none."""

from __future__ import annotations

import io

from semdup.core.progress import progress


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_bar_shows_on_a_terminal_and_not_elsewhere() -> None:
    shown = _Terminal()
    assert list(progress(range(3), desc="work", file=shown)) == [0, 1, 2]
    assert "work" in shown.getvalue()
    piped = io.StringIO()
    assert list(progress(range(3), desc="work", file=piped)) == [0, 1, 2]
    assert piped.getvalue() == ""


def test_a_bar_the_caller_turned_off_stays_off_on_a_terminal() -> None:
    shown = _Terminal()
    with progress(total=2, enabled=False, file=shown) as bar:
        bar.update(2)
    assert shown.getvalue() == ""

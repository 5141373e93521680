"""Index names from people: one index or alias, never a pattern, an endpoint, a path or a system index."""

from __future__ import annotations

import pytest

from semdup.core.errors import ConfigError
from semdup.core.index_names import check_index_name


@pytest.mark.parametrize("name", ["travel", "semdup-parked", "posts_2024.v2", "%2e%2e", "a" * 255])
def test_single_names_pass_unchanged(name: str) -> None:
    assert check_index_name(name) == name


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("*", "pattern or path"),
        ("travel*", "pattern or path"),
        ("a,b", "pattern or path"),
        ("../x", "pattern or path"),
        ("a b", "pattern or path"),
        ("a\x00", "pattern or path"),
        ("_all", "must not start with '_'"),
        ("_search", "must not start with '_'"),
        ("-travel", "must not start with '-'"),
        (".kibana", "hidden or system index"),
        ("..", "hidden or system index"),
        ("Travel", "upper-case"),
        ("", "empty"),
        ("a" * 256, "longer than 255 bytes"),
    ],
)
def test_patterns_endpoints_and_system_indices_are_one_line_errors(name: str, why: str) -> None:
    with pytest.raises(ConfigError, match=why) as err:
        check_index_name(name, "SEMDUP_INDEX")
    assert "\n" not in str(err.value) and str(err.value).startswith("SEMDUP_INDEX")

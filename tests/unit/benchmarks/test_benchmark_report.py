"""The pure helpers of the footprint and freshness benchmarks (no OpenSearch, no worker, nothing timed)."""

from __future__ import annotations

import math

from benchmarks.freshness import Tracker, private_broker
from benchmarks.report import format_table, human_bytes, ratio, summary


def test_summary_percentiles_and_max() -> None:
    s = summary([float(i) for i in range(1, 101)])
    assert s["n"] == 100 and s["max"] == 100.0 and s["mean"] == 50.5
    assert math.isclose(s["p50"], 50.5) and math.isclose(s["p95"], 95.05) and math.isclose(s["p99"], 99.01)


def test_summary_of_nothing_is_nan_but_prints() -> None:
    s = summary([])
    assert s["n"] == 0 and math.isnan(s["p50"]) and math.isnan(s["max"])


def test_human_bytes() -> None:
    assert human_bytes(512) == "512 B"
    assert human_bytes(1536) == "1.5 KiB"
    assert human_bytes(3 * 1024**2) == "3.0 MiB"
    assert human_bytes(5 * 1024**4) == "5120.0 GiB"


def test_ratio_guards_zero_and_nan() -> None:
    assert ratio(3.0, 2.0) == "1.50x"
    assert ratio(1.0, 0.0) == "-"
    assert ratio(float("nan"), 1.0) == "-"


def test_format_table_aligns_columns() -> None:
    out = format_table(["mode", "p50 s"], [["called", 1.234], ["watch", 12.0]])
    lines = out.splitlines()
    assert lines[0] == "mode    p50 s"
    assert set(lines[1]) == {"-", " "}
    assert lines[2] == "called   1.23"
    assert lines[3] == "watch   12.00"


def test_format_table_pads_short_rows() -> None:
    out = format_table(["a", "b", "c"], [["x"]])
    assert out.splitlines()[-1] == "x"


def test_private_broker_changes_only_the_redis_database() -> None:
    assert private_broker("redis://127.0.0.1:6379/0", 9) == "redis://127.0.0.1:6379/9"
    assert private_broker("redis://:pw@host:6380", 3) == "redis://:pw@host:6380/3"
    assert private_broker("amqp://guest@host//", 9) == "amqp://guest@host//"


def test_tracker_records_a_lag_only_for_the_new_hash() -> None:
    t = Tracker()
    t.add("1", 10.0, "new")
    t.add("2", 11.0, "new2")
    t.seen({"1": "old", "2": "new2", "3": "x"}, 12.5)
    assert t.lags == [1.5] and list(t.pending) == ["1"]
    t.seen({"1": "new"}, 14.0)
    assert t.lags == [1.5, 4.0] and not t.pending

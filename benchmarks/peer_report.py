"""The neural-search peer benchmark's figures: pure assembly of the report and its text, unit-tested alone.

:func:`ingest_side` and :func:`build_report` turn what :mod:`benchmarks.neural_search_peer`
measured into one JSON-ready dict; :func:`format_report` prints it. Ratios are always semdup ÷ peer of the
same figure measured in the same run: for posts/s above 1 means semdup is faster, for latencies below 1.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from benchmarks.report import format_table, summary

__all__ = ["MAX_QUIET_LOAD", "ingest_side", "build_report", "format_report", "quiet_enough", "safe_ratio"]

# The 1-minute load average above which a run is not a quiet machine's: on 2 cores, the benchmark's own nodes and
# encoder then share the CPU with other work, and the ratios describe that sharing, not the two systems.
MAX_QUIET_LOAD = 1.0


def quiet_enough(load_at_start: float, allow_load: bool) -> str | None:
    """None when the run may print headline ratios; else why not (the load average at the start is above
    :data:`MAX_QUIET_LOAD` and the caller did not allow a loaded run)."""
    if load_at_start <= MAX_QUIET_LOAD or allow_load:
        return None
    return (
        f"the 1-minute load average is {load_at_start:.2f} at the start, above {MAX_QUIET_LOAD:g}: other work shares "
        "the cores, and the ratios would describe that, not semdup and the peer; quiet the machine "
        "(docs/benchmarks.md, \"A quiet machine\") or pass --allow-load for a run labelled as loaded"
    )


def safe_ratio(a: float, b: float) -> float | None:
    """``a / b``, or None when ``b`` is 0 or either is missing (NaN, None): JSON has no NaN."""
    if a is None or b is None or not b or a != a or b != b:
        return None
    return float(a) / float(b)


def ingest_side(posts: int, wall_s: float, client_cpu_s: float, node_cpu_s: float) -> dict[str, Any]:
    """One system's ingest figures: posts/s (posts / wall seconds) and CPU seconds, total and per post."""
    return {
        "posts": posts,
        "wall_s": wall_s,
        "posts_per_s": safe_ratio(posts, wall_s),
        "client_cpu_s": client_cpu_s,
        "node_cpu_s": node_cpu_s,
        "cpu_s_per_post": safe_ratio(client_cpu_s + node_cpu_s, posts),
    }


def _latency(ms: Sequence[float]) -> dict[str, float]:
    s = summary(ms)
    return {k: s[k] for k in ("n", "p50", "p95", "p99", "mean")}


def build_report(
    meta: Mapping[str, Any],
    ingest: Mapping[str, Mapping[str, Any]],
    query_ms: Mapping[str, Sequence[float]],
    encode_ms: Mapping[str, Sequence[float]],
    cosines: Sequence[float],
    quality: Mapping[str, Mapping[str, float]] | None = None,
) -> dict[str, Any]:
    """The benchmark's one JSON object.

    Args:
        meta: command, hardware, versions, load averages, settings (copied as they are).
        ingest: ``{"peer": ingest_side(...), "semdup": ingest_side(...)}``.
        query_ms: per-call milliseconds of ``peer`` (hybrid), ``semdup`` (the default), ``semdup_fast``,
            ``semdup_one_thread`` (the default with a 1-thread query encoder) and ``semdup_pipeline`` (the site's
            ``_search`` through semdup's search pipeline).
        encode_ms: per-call milliseconds of encoding one query, ``peer`` and ``semdup``.
        cosines: cosine of the two systems' embeddings of the same posts.
        quality: the Travel test measures of each way of ranking (name -> MAP, MRR, Acc@k), when measured.

    Returns:
        ``meta`` plus ``ingest`` (with ``ratio`` = semdup posts/s ÷ peer's), ``query`` (summaries and
        ``p50_ratio``/``p95_ratio``/``p99_ratio`` = semdup default ÷ peer hybrid, ``fast_*`` for the fast preset),
        ``encoding`` (summaries, ``p50_ratio``/``p99_ratio``) and ``embeddings`` (cosine min / mean, n).
    """
    query = {name: _latency(ms) for name, ms in query_ms.items()}
    peer_q = query.get("peer", {})
    for prefix, name in (("", "semdup"), ("fast_", "semdup_fast"), ("one_thread_", "semdup_one_thread"),
                         ("pipeline_", "semdup_pipeline")):
        if name in query:
            for p in ("p50", "p95", "p99"):
                query[f"{prefix}{p}_ratio"] = safe_ratio(query[name][p], peer_q.get(p))
    encoding = {name: _latency(ms) for name, ms in encode_ms.items()}
    if "peer" in encoding and "semdup" in encoding:
        for p in ("p50", "p99"):
            encoding[f"{p}_ratio"] = safe_ratio(encoding["semdup"][p], encoding["peer"][p])
    ingest_out: dict[str, Any] = {k: dict(v) for k, v in ingest.items()}
    if "peer" in ingest and "semdup" in ingest:
        ingest_out["ratio"] = safe_ratio(ingest["semdup"]["posts_per_s"], ingest["peer"]["posts_per_s"])
        ingest_out["cpu_ratio"] = safe_ratio(ingest["semdup"]["cpu_s_per_post"], ingest["peer"]["cpu_s_per_post"])
    cos = [float(c) for c in cosines]
    embeddings = {"n": len(cos), "cosine_min": min(cos) if cos else None,
                  "cosine_mean": sum(cos) / len(cos) if cos else None}
    out = {**dict(meta), "embeddings": embeddings, "ingest": ingest_out, "query": query, "encoding": encoding}
    if quality:
        out["quality"] = {k: dict(v) for k, v in quality.items()}
    return out


def _fmt(x: float | None, spec: str = ".2f") -> str:
    return "-" if x is None else format(x, spec)


def format_report(report: Mapping[str, Any]) -> str:
    """The report as the lines the benchmark prints (command, hardware, loads, then one table per figure)."""
    lines = [f"# {report.get('command', '')}"]
    for key in ("hardware", "versions", "setup"):
        if key in report:
            lines.append(f"# {key}: {report[key]}")
    loads = report.get("load_average", {})
    if loads:
        lines.append("# load average (1 min): " + ", ".join(f"{k} {v:.2f}" for k, v in loads.items()))
    if loads.get("start", 0.0) > MAX_QUIET_LOAD:
        lines.append(f"# LOADED RUN: load average {loads['start']:.2f} at the start (above {MAX_QUIET_LOAD:g}, "
                     "--allow-load): not a quiet machine's figures")
    emb = report["embeddings"]
    lines.append(f"embeddings agree: cosine min {_fmt(emb['cosine_min'], '.6f')}, "
                 f"mean {_fmt(emb['cosine_mean'], '.6f')} on {emb['n']} posts")
    ing = report["ingest"]
    rows = []
    for name in ("peer", "semdup"):
        if name in ing:
            s = ing[name]
            rows.append([name, _fmt(s["posts_per_s"], ".1f"), _fmt(s["wall_s"], ".1f"), _fmt(s["client_cpu_s"], ".1f"),
                         _fmt(s["node_cpu_s"], ".1f"), _fmt(s["cpu_s_per_post"], ".4f")])
    lines += ["", "ingest", format_table(["system", "posts/s", "wall s", "client CPU s", "node CPU s", "CPU s/post"],
                                         rows)]
    lines.append(f"ingest ratio semdup / peer: {_fmt(ing.get('ratio'))} (posts/s; CPU per post "
                 f"{_fmt(ing.get('cpu_ratio'))})")
    q = report["query"]
    rows = [[name, q[name]["n"], q[name]["p50"], q[name]["p95"], q[name]["p99"]]
            for name in ("peer", "semdup", "semdup_fast", "semdup_one_thread", "semdup_pipeline") if name in q]
    lines += ["", "query latency (ms)", format_table(["system", "calls", "p50", "p95", "p99"], rows)]
    lines.append(f"query ratio semdup default / peer hybrid: p50 {_fmt(q.get('p50_ratio'))}, "
                 f"p95 {_fmt(q.get('p95_ratio'))}, p99 {_fmt(q.get('p99_ratio'))}")
    if "fast_p50_ratio" in q:
        lines.append(f"query ratio semdup fast / peer hybrid: p50 {_fmt(q.get('fast_p50_ratio'))}, "
                     f"p99 {_fmt(q.get('fast_p99_ratio'))}")
    if "one_thread_p50_ratio" in q:
        lines.append(f"query ratio semdup default, its query encoded on 1 thread / peer hybrid: p50 "
                     f"{_fmt(q.get('one_thread_p50_ratio'))}, p99 {_fmt(q.get('one_thread_p99_ratio'))}")
    if "pipeline_p50_ratio" in q:
        lines.append(f"query ratio site _search through semdup's pipeline / peer hybrid: p50 "
                     f"{_fmt(q.get('pipeline_p50_ratio'))}, p99 {_fmt(q.get('pipeline_p99_ratio'))}")
    e = report["encoding"]
    rows = [[name, e[name]["n"], e[name]["p50"], e[name]["p99"]] for name in ("peer", "semdup") if name in e]
    lines += ["", "query encoding (ms)", format_table(["system", "calls", "p50", "p99"], rows)]
    lines.append(f"encoding ratio semdup / peer: p50 {_fmt(e.get('p50_ratio'))}, p99 {_fmt(e.get('p99_ratio'))}")
    if report.get("quality"):
        rows = [[name, *(_fmt(m.get(k)) for k in ("MAP", "MRR", "Acc@1", "Acc@5", "Acc@10")), m.get("n_queries")]
                for name, m in report["quality"].items()]
        lines += ["", "quality, Travel test (top 100)",
                  format_table(["ranking", "MAP", "MRR", "Acc@1", "Acc@5", "Acc@10", "queries"], rows)]
    return "\n".join(lines)

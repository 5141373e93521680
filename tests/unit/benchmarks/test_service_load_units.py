"""The pure and loopback-only pieces of the service load benchmark: its row, its reading of the service's request
log, and its minimal HTTP/1.1 client against a loopback server (no OpenSearch, no service, nothing timed)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from benchmarks.service_load import HEADERS, Outcomes, _Connection, row_cells, served_ms


def test_a_row_counts_answers_by_kind_and_takes_percentiles_of_the_200s_only() -> None:
    out = Outcomes(
        statuses=[200, 503, 503, 200, 0, 500],
        ok_s=[0.1, 0.3],
        done_s=[0.1, 2.5],
        server_ms=[90.0, 280.0],
        probe_s=[0.01, 0.02, 5.0],
        probe_failures=1,
        wall_s=2.0,
    )
    row = dict(zip(HEADERS, row_cells("4", 200, out, 3.5), strict=True))
    assert (row["calls"], row["200"], row["503"], row["other"]) == (6, 2, 2, 2)
    # exact: 0.1 s and 0.3 s become 100.0 and 300.0 ms exactly, and their linear median is halfway
    assert row["p50 ms"] == 200.0 and row["200s/s"] == 1.0 and row["healthz max ms"] == 5000.0
    assert row["probe fail"] == "1/3" and row["load 1m"] == 3.5 and row["limit"] == "4"


def test_the_service_time_comes_from_its_json_request_records_past_the_offset(tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    before = json.dumps({"message": "request", "path": "/v1/rerank", "status": 200, "ms": 1.0})
    log.write_text(before + "\n")
    offset = log.stat().st_size
    lines = [
        {"message": "request", "path": "/v1/rerank", "status": 200, "ms": 12.5},
        {"message": "request", "path": "/healthz", "status": 200, "ms": 0.4},
        {"message": "request", "path": "/v1/rerank", "status": 504, "ms": 5000.0},
        {"message": "reranking service: bundle b"},
    ]
    with log.open("a") as f:
        f.write("".join(json.dumps(x) + "\n" for x in lines) + "not json\n")
    assert served_ms(log, offset) == [12.5]


def test_the_minimal_client_keeps_its_connection_and_reopens_after_close() -> None:
    async def scenario() -> tuple[list[tuple[int, dict[str, str]]], list[bytes], int]:
        seen: list[bytes] = []
        connections = 0

        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal connections
            connections += 1
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    break
                length = int(
                    next(h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")).split(b":")[1]
                )
                seen.append(await reader.readexactly(length))
                close = len(seen) == 2
                body = b'{"error": {"type": "Overloaded"}}'
                writer.write(
                    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n"
                    + (b"connection: close\r\n" if close else b"")
                    + f"content-length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                await writer.drain()
                if close:
                    break
            writer.close()

        server = await asyncio.start_server(answer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        conn = _Connection("127.0.0.1", port, "k")
        got = [await conn.post("/v1/rerank", b'{"title": "%d"}' % i) for i in range(3)]
        await conn.close()
        server.close()
        await server.wait_closed()
        return got, seen, connections

    got, seen, connections = asyncio.run(scenario())
    assert [status for status, _ in got] == [503, 503, 503]
    assert all(headers["retry-after"] == "1" for _, headers in got)
    assert seen == [b'{"title": "0"}', b'{"title": "1"}', b'{"title": "2"}']
    assert connections == 2  # kept alive for the first two, reopened after the server's "connection: close"

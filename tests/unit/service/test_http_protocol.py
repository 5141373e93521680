"""`semdup serve`'s HTTP protocol sets TCP_NODELAY on connections of a socket bound the way uvicorn's multi-worker
mode binds it (``socket.socket(family)``: asyncio leaves Nagle on there, and every answer waited for a delayed ACK)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import httpx
import uvicorn

from semdup.service.http_protocol import PROTOCOL_PATH


async def _app(scope: dict, receive: object, send: object) -> None:
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


def test_connections_of_a_multi_worker_socket_get_tcp_nodelay() -> None:
    sock = socket.socket(family=socket.AF_INET)  # as uvicorn.Config.bind_socket makes it: protocol 0
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    # no log_config / log_level: uvicorn would reconfigure this process's loggers for the tests that follow
    server = uvicorn.Server(uvicorn.Config(_app, http=PROTOCOL_PATH, log_config=None, log_level=None, lifespan="off"))
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True)
    thread.start()
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}") as client:
            deadline = time.monotonic() + 30  # waiting for start-up, not a timing assertion
            while not server.started and time.monotonic() < deadline:
                time.sleep(0.05)
            assert client.get("/").text == "ok"  # the kept-alive connection is open now
            (conn,) = server.server_state.connections
            accepted = conn.transport.get_extra_info("socket")
            assert accepted.proto != socket.IPPROTO_TCP  # asyncio would not have set the option itself
            assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()

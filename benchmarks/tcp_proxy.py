"""A TCP forwarder on 127.0.0.1 that can be cut and restored: a real network outage for fault tests.

Point a client (a worker's ``SEMDUP_OPENSEARCH_URL``) at the proxy instead of the server. :meth:`TcpProxy.down`
closes the listening socket and every open connection, so new connections are refused and requests in flight
fail, as when a link or a node goes away; :meth:`TcpProxy.up` listens again on the same port.

Example::

    proxy = TcpProxy("http://127.0.0.1:9200")
    proxy.up()
    env["SEMDUP_OPENSEARCH_URL"] = proxy.url     # http://127.0.0.1:<free port>
    proxy.down(); time.sleep(60); proxy.up()     # a one-minute outage
    proxy.close()
"""

from __future__ import annotations

import logging
import socket
import threading
from urllib.parse import urlsplit

__all__ = ["TcpProxy"]

logger = logging.getLogger(__name__)

_CONNECT_TIMEOUT = 10.0


class TcpProxy:
    """Forwards 127.0.0.1:``port`` to ``upstream`` (``http(s)://host[:port]`` or ``host:port``) while it is up."""

    def __init__(self, upstream: str, port: int | None = None) -> None:
        parts = urlsplit(upstream if "://" in upstream else f"http://{upstream}")
        if not parts.hostname:
            raise ValueError(f"upstream must look like http(s)://host:port or host:port, got {upstream!r}")
        self.upstream = (parts.hostname, parts.port or (443 if parts.scheme == "https" else 80))
        if port is None:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = int(s.getsockname()[1])
        self.port = port
        self.url = f"{parts.scheme}://127.0.0.1:{self.port}"  # same scheme: TLS passes through untouched
        self._listener: socket.socket | None = None
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()

    def up(self) -> None:
        """Listen and forward (again); a no-op while up."""
        if self._listener is not None:
            return
        ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind(("127.0.0.1", self.port))
        ls.listen(128)
        self._listener = ls
        threading.Thread(target=self._accept, args=(ls,), daemon=True, name=f"proxy-{self.port}").start()
        logger.info("proxy 127.0.0.1:%d -> %s:%d up", self.port, *self.upstream)

    def down(self) -> None:
        """Refuse new connections and cut the open ones."""
        if self._listener is not None:
            try:
                self._listener.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked in accept() (Linux)
            except OSError:
                pass
            self._listener.close()
            self._listener = None
        with self._lock:
            for c in self._conns:
                _close(c)
            self._conns.clear()
        logger.info("proxy 127.0.0.1:%d down", self.port)

    close = down

    def _accept(self, ls: socket.socket) -> None:
        while True:
            try:
                client, _ = ls.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=_CONNECT_TIMEOUT)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._listener is not ls:  # cut while connecting
                    _close(client)
                    _close(server)
                    return
                self._conns = [c for c in self._conns if c.fileno() != -1] + [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=_pump, args=(a, b), daemon=True).start()


def _close(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    s.close()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

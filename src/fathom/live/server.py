"""One HTTP server for a run's live view: /metrics (Prometheus), / (the page), /state (the page's JSON).

It binds in its constructor, before the run starts, so a busy or forbidden port is a UsageError naming the
fix while nothing has been made yet; it serves on a daemon thread and `close()` (end, error, Ctrl-C) shuts
the socket, so the port is free again when fathom returns. A client gone before or while it is answered (a
scrape abandoned on its timeout) is dropped quietly: /metrics is not rendered for a client that has closed, and
a broken connection prints nothing (stderr is the run's progress).
"""

from __future__ import annotations

import errno
import ipaddress
import json
import select
import socket
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from fathom.errors import UsageError
from fathom.live import page


def parse_addr(text: str, flag: str = "--metrics") -> tuple[str, int]:
    """ADDR:PORT, [IPv6]:PORT or :PORT (loopback: 127.0.0.1; every address only when asked, 0.0.0.0 or [::])
    -> (host, port)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise UsageError(f"{flag} {text!r}: expected ADDR:PORT, e.g. 127.0.0.1:9464 or 0.0.0.0:9464",
                         hint="PORT is a number from 1 to 65535 (0: any free one)")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    return host or "127.0.0.1", int(port)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True  # a just-closed run's port is free for the next at once (no TIME_WAIT refusal)
    asked = 0  # requests received (a run's end lingers only for a server someone reads)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return  # the client went away: nothing to say about it
        super().handle_error(request, client_address)


class LiveServer:
    def __init__(self, addr: str, snapshot: Callable[[], dict[str, Any]], metrics: Callable[[], tuple[bytes, str]]
                 | None, flag: str = "--metrics"):
        host, port = parse_addr(addr, flag)
        try:
            family = socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
        except ValueError:
            family = socket.AF_INET  # a host name: resolved by bind
        handler = type("Handler", (_Handler,), {"snapshot": staticmethod(snapshot),
                                                "metrics": staticmethod(metrics) if metrics else None})
        _Server.address_family = family
        try:
            self.httpd = _Server((host, port), handler)
        except OSError as exc:
            raise _bind_error(exc, addr, host, port, flag) from None
        self.host, self.port = host, self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="fathom-live", daemon=True)
        self._thread.start()

    @property
    def bound(self) -> str:
        """The address the socket really listens on (a name resolved; 0.0.0.0 or :: for every address)."""
        return str(self.httpd.socket.getsockname()[0])

    @property
    def everywhere(self) -> bool:
        return ipaddress.ip_address(self.bound).is_unspecified

    @property
    def url(self) -> str:
        """The URL of the address it listens on (0.0.0.0 when that is every address: said so, never 127.0.0.1)."""
        host = self.bound
        return f"http://{f'[{host}]' if ':' in host else host}:{self.port}/"

    @property
    def serving(self) -> bool:
        return self._thread.is_alive()

    @property
    def asked(self) -> int:
        """Requests received so far."""
        return self.httpd.asked

    def close(self) -> None:
        """Stop serving and close the listening socket (idempotent)."""
        if self._thread.is_alive():
            self.httpd.shutdown()
            self._thread.join(timeout=5)
        self.httpd.server_close()


def _bind_error(exc: OSError, addr: str, host: str, port: int, flag: str) -> UsageError:
    if exc.errno == errno.EADDRINUSE:
        return UsageError(f"{flag} {addr}: port {port} is busy (something else listens there)",
                          hint=f"choose a free port ({flag} {host}:0 lets the system pick one), or stop what "
                               f"listens there (`ss -ltnp 'sport = :{port}'` names it)")
    if exc.errno == errno.EACCES:
        return UsageError(f"{flag} {addr}: binding port {port} is not allowed for this user",
                          hint="ports below 1024 need root: choose one above 1024, e.g. 9464")
    if exc.errno == errno.EADDRNOTAVAIL or isinstance(exc, socket.gaierror):
        return UsageError(f"{flag} {addr}: {host!r} is not an address of this host ({exc.strerror or exc})",
                          hint="use one of this host's addresses (`ip -brief addr`), 127.0.0.1, or 0.0.0.0 for all")
    return UsageError(f"{flag} {addr}: cannot listen there: {exc}", hint="choose another ADDR:PORT")


class _Handler(BaseHTTPRequestHandler):
    snapshot: Callable[[], dict[str, Any]]
    metrics: Callable[[], tuple[bytes, str]] | None
    server_version = "fathom-live"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet: stderr is the run's progress
        pass

    def handle(self) -> None:
        try:
            super().handle()
        except (ConnectionError, TimeoutError):  # the client went away mid-request or mid-response
            self.close_connection = True

    def _gone(self) -> bool:
        """The client has closed its end already (a scrape abandoned on its timeout): nothing to render for it."""
        try:
            ready, _, _ = select.select([self.connection], [], [], 0)
            return bool(ready) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.server.asked += 1  # type: ignore[attr-defined]
        path = self.path.split("?", 1)[0]
        try:
            if path == "/metrics" and self.metrics is not None:
                if self._gone():
                    self.close_connection = True
                    return
                body, ctype = self.metrics()
            elif path in ("/", "/index.html"):
                body, ctype = page.HTML.encode(), "text/html; charset=utf-8"
            elif path == "/state":
                body, ctype = json.dumps(self.snapshot(), default=str).encode(), "application/json"
            else:
                self.send_error(404, "not here: /, /state" + (", /metrics" if self.metrics else ""))
                return
        except Exception as exc:  # noqa: BLE001 - a reader's failure is an HTTP error, never the run's
            self.send_error(500, f"{type(exc).__name__}: {exc}")
            return
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        # the page loads nothing from elsewhere; say so to the browser as well
        self.send_header("Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline'; "
                                                    "style-src 'unsafe-inline'; img-src data:")
        self.end_headers()
        self.wfile.write(body)

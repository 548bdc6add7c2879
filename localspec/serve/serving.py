"""Serving the app: the listening sockets, bound before the models load (``listening_sockets``),
and uvicorn on them, with a deadline for each request's headers (``H11WithDeadline``: 408) and
SIGINT and SIGTERM both ending the serving the same way, so ``localspec serve`` can then let the
running reply stop, save the profile and close the models (``Uvicorn``, ``serve``).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import signal
import socket
import threading
from collections.abc import Iterator

import h11
import uvicorn
from starlette.applications import Starlette
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import HANDLED_SIGNALS

from .api import ApiError
from .server import HEADER_TIMEOUT_S

log = logging.getLogger(__name__)

# Tuning choice: on SIGINT or SIGTERM a reply still streaming gets this long to end by itself
# before its connection is closed (the reply then stops at its next step): a long editor reply
# on the default pair, and well inside the 10 s Docker waits before it sends SIGKILL.
SHUTDOWN_GRACE_S = 5
# Tuning choice: the longest a reply's worker may take to reach its next step once the serving
# has ended (a long prompt's prefill on 2 cores); the models are closed only after it.
DRAIN_S = 30


def listening_sockets(host: str, port: int) -> list[socket.socket]:
    """Listening sockets on every address of ``host`` (127.0.0.1 and ::1 for localhost, as
    asyncio's own server setup binds them), on ``port``, or with 0 on one free port for all.
    Made before the models load, so a port in use is known in a second instead of after the
    load, and handed to uvicorn, so nothing can take the port in between (it listens at once:
    on Linux two sockets with SO_REUSEADDR may both bind a port nobody listens on yet).
    OSError says why not; socket.gaierror for a name that does not resolve."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    unavailable: list[OSError] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):  # /etc/hosts may repeat one
            try:
                sockets.append(_listen_one(family, kind, proto, (address[0], port, *address[2:])))
            except OSError as e:
                if e.errno != errno.EADDRNOTAVAIL:
                    raise
                unavailable.append(e)  # that family is off here (IPv6 in many containers)
                continue
            port = port or sockets[-1].getsockname()[1]
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    if not sockets:
        raise unavailable[0]  # not an address of this machine
    return sockets


def _listen_one(family: int, kind: int, proto: int, address: tuple) -> socket.socket:
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart need not wait out TIME_WAIT
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)  # "::" is IPv6 only, as with asyncio
        sock.bind(address)
        sock.listen()
    except BaseException:
        sock.close()
        raise
    return sock


class H11WithDeadline(H11Protocol):
    """uvicorn's h11 protocol with a deadline for each request's headers. uvicorn has none (its
    keep-alive timer stops at a connection's first byte), so a client sending a header now and
    then keeps its connection open forever, and 300 such clients keep 300 (slowloris). Past the
    deadline the client gets a 408 and the connection is closed; once the headers are in, the
    body has a deadline of its own (``read_body``)."""

    header_timeout_s = HEADER_TIMEOUT_S
    _deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # as uvicorn
        super().connection_made(transport)
        self._start_deadline()

    def handle_events(self) -> None:
        super().handle_events()
        if self._handling():
            self._stop_deadline()  # the headers are in: the request is the app's now

    def on_response_complete(self) -> None:
        self._start_deadline()  # the next request on this connection has a deadline of its own
        super().on_response_complete()  # (it parses a pipelined request at once: that stops it)

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_deadline()
        super().connection_lost(exc)

    def _handling(self) -> bool:
        return self.cycle is not None and not self.cycle.response_complete

    def _start_deadline(self) -> None:
        self._stop_deadline()
        self._deadline = self.loop.call_later(self.header_timeout_s, self._too_slow)

    def _stop_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _too_slow(self) -> None:
        self._deadline = None
        if self.transport.is_closing() or self._handling():
            return
        if self.conn.their_state is h11.IDLE:  # a request not begun or half sent; h11 sends no
            self.transport.write(request_timeout(self.header_timeout_s))  # reply before a request
            log.info("a client sent no complete request headers within %g s: 408", self.header_timeout_s)
        self.transport.close()


def request_timeout(seconds: float) -> bytes:
    """A whole HTTP 408 reply, in OpenAI's error shape."""
    error = ApiError(408, f"the request headers did not arrive within {seconds:g} s", code="request_timeout")
    body = json.dumps(error.body).encode()
    head = (
        "HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body


class Uvicorn(uvicorn.Server):
    """uvicorn's server, but a signal only ends the serving. uvicorn catches SIGINT and SIGTERM,
    shuts down, and then raises the signal again, and a SIGTERM raised with its default handler
    kills the process before ``localspec serve`` has let the reply stop, saved the profile and
    closed the models; so both signals end ``serve`` normally here, and the CLI exits 0."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield  # only the main thread receives signals (the tests serve from a thread)
            return
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in HANDLED_SIGNALS}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def make_server(app: Starlette, log_level: str = "info") -> Uvicorn:
    """uvicorn as ``serve`` runs it (on h11, with the deadlines of the app's ServerConfig)."""
    config = app.state.api.config
    protocol = type("H11WithDeadline", (H11WithDeadline,), {"header_timeout_s": config.header_timeout_s})
    return Uvicorn(
        uvicorn.Config(
            app, http=protocol, lifespan="off", log_level=log_level, timeout_graceful_shutdown=SHUTDOWN_GRACE_S
        )
    )


def serve(app: Starlette, sockets: list[socket.socket], log_level: str = "info") -> None:
    """Serve on ``sockets`` (``listening_sockets``) until SIGINT or SIGTERM; then the running
    reply has SHUTDOWN_GRACE_S to end, and its worker is waited for (it stops at its next step),
    so the caller may close the models."""
    make_server(app, log_level).run(sockets=sockets)
    app.state.api.line.drain(timeout=DRAIN_S)

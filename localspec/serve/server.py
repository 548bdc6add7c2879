"""``localspec serve``: the OpenAI-compatible HTTP adapter (Starlette on uvicorn) over a Session.

The only module that imports the web stack. It validates requests (``api``), queues them, and
runs each one through ``Session.chat`` on a worker thread: the same session and engine the app
and ``localspec run`` use, so there is no second generation loop here.

One pair of KV caches means one generation at a time: a request waits its turn in a bounded
FIFO (``--queue``, answered 503 with Retry-After past it). The worker hands each engine Step
to the event loop and checks between steps whether the client has gone; if so it closes the
generator, which stops the reply at the next step and frees the turn. Consecutive requests of
one conversation share their prompt prefix, which the target's cache keeps (``cache_n``).

What a web page could do is refused before any route runs (``Guard``: DNS rebinding through
Host, cross-site requests through Origin), and only JSON bodies are read (``read_json``). Slow
clients are cut off: request headers and bodies each have a deadline (``H11WithDeadline``,
``read_body``), answered 408. The socket is bound before the models load
(``listening_sockets``), and SIGINT and SIGTERM both end the serving the same way, so
``localspec serve`` can then let the running reply stop, save the profile and close the models
(``Uvicorn``).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hmac
import ipaddress
import json
import logging
import signal
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import h11
import uvicorn
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import HANDLED_SIGNALS

from ..core.protocol import common_prefix
from ..core.stats import RunStats
from .api import ApiError, Head, Job, Kind, Served, chunk_body, parse_job, reply_body, timings, usage

log = logging.getLogger("localspec.serve.server")

# Tuning choice: 4 MiB holds a 128k-token context of JSON-escaped text with room to spare;
# anything larger cannot fit the models this app loads, so it is refused before parsing.
MAX_BODY_BYTES = 4 * 2**20
# Tuning choice: a short editor reply on the default pair takes a few seconds on 2 cores;
# clients that honour Retry-After come back about when a place in the queue may be free.
RETRY_AFTER_S = 2
# Tuning choices: a client on this machine or the LAN sends its headers in milliseconds, and the
# largest body (4 MiB) in under 30 s even at 1.2 Mbit/s. A connection slower than that is
# holding a place, not sending a request (slowloris), and is answered 408 and closed.
HEADER_TIMEOUT_S = 10.0
BODY_TIMEOUT_S = 30.0
# Tuning choice: on SIGINT or SIGTERM a reply still streaming gets this long to end by itself
# before its connection is closed (the reply then stops at its next step): a long editor reply
# on the default pair, and well inside the 10 s Docker waits before it sends SIGKILL.
SHUTDOWN_GRACE_S = 5
# Tuning choice: the longest a reply's worker may take to reach its next step once the serving
# has ended (a long prompt's prefill on 2 cores); the models are closed only after it.
DRAIN_S = 30

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


@dataclass(frozen=True)
class ServerConfig:
    api_key: str | None = None  # None: no authentication (loopback only, see cli.serve)
    queue: int = 8  # requests that may wait while one generates; past that, 503
    cors_origins: tuple[str, ...] = ()  # empty: no CORS headers, and no other site's pages
    max_body_bytes: int = MAX_BODY_BYTES
    host: str = "127.0.0.1"  # the address bound: a name clients may use in Host (``Names``)
    allow_hosts: tuple[str, ...] = ()  # more names clients may use in Host (--allow-host)
    header_timeout_s: float = HEADER_TIMEOUT_S  # from a connection's start or its last reply
    body_timeout_s: float = BODY_TIMEOUT_S  # from the end of the headers to the end of the body


class ClientGone(Exception):
    """The client disconnected before its reply was ready."""


# --- one generation at a time --------------------------------------------------------------
class Run:
    """One generation's hand-off from the worker thread to the event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.items: asyncio.Queue = asyncio.Queue()
        self.cancelled = threading.Event()
        self.prompt_tokens = 0
        self.cache_n = 0  # prompt tokens already in the target's KV cache
        self.baseline_tps = float("nan")  # target-only tokens/s, read when the reply ends
        self.stopped = False  # the worker stopped early because the client had gone
        self.streamed = False  # the reply is an event stream (a client leaving it is logged here)
        self.drafting = None  # the controller's DraftingState when the reply ended

    def put(self, item) -> None:
        """From the worker: a Step, an exception, or None at the end."""
        try:
            self.loop.call_soon_threadsafe(self.items.put_nowait, item)
        except RuntimeError:  # the event loop has closed: nobody is listening any more
            self.cancelled.set()

    async def next(self):
        # a fast worker can fill the queue faster than one loop pass: yield to the loop once
        # per item anyway, so a disconnect (and every other connection) is seen in time
        await asyncio.sleep(0)
        item = await self.items.get()
        if isinstance(item, BaseException):
            raise item
        return item

    def close(self) -> None:
        """Stop at the next step (a no-op once the reply is complete)."""
        self.cancelled.set()


class Ticket:
    """A place in line, given back once (whichever of the response or the handler ends first)."""

    def __init__(self, line: Generations) -> None:
        self.line = line
        self.open = True

    def close(self) -> None:
        if self.open:
            self.open = False
            self.line.admitted -= 1


class Generations:
    """Runs replies one at a time on a worker thread, up to ``queue`` more waiting in order."""

    def __init__(self, session, queue: int) -> None:
        self.session = session
        self.queue = queue
        self.admitted = 0  # running + waiting
        self.served = 0
        self.cancelled = 0
        self._turn: asyncio.Lock | None = None  # made on the server's own event loop
        self._thread: threading.Thread | None = None

    @property
    def turn(self) -> asyncio.Lock:
        if self._turn is None:
            self._turn = asyncio.Lock()  # FIFO: waiters are woken in the order they came
        return self._turn

    def admit(self) -> Ticket | None:
        """A place in line, or None when the queue is full."""
        if self.admitted > self.queue:
            return None
        self.admitted += 1
        return Ticket(self)

    async def start(self, job: Job) -> Run:
        """Wait for the turn, start the reply, and return once its prompt is known to fit
        (an ApiError otherwise, before any response is sent)."""
        await self.turn.acquire()
        run = Run(asyncio.get_running_loop())
        self._thread = threading.Thread(target=self._work, args=(job, run), name="localspec-reply", daemon=True)
        self._thread.start()  # from here on the worker gives the turn back
        try:
            await run.next()  # None once the prompt is tokenized and checked
        except BaseException:
            run.close()
            raise
        return run

    def _work(self, job: Job, run: Run) -> None:
        try:
            budget = self._budget(job, run)
            run.put(None)
            if run.cancelled.is_set():
                run.stopped = True
                return
            steps = self.session.chat(
                job.messages,
                job.params,
                budget,
                mode=job.mode,
                raw=job.raw,
                stop=job.stop,
                draft_max=job.draft_max,
                p_min=job.p_min,
            )
            try:
                for step in steps:
                    run.put(step)
                    if run.cancelled.is_set() and not step.finish:
                        run.stopped = True
                        break
            finally:
                steps.close()  # the engine's state is consistent between steps
                run.baseline_tps = self.session.baseline_tokens_per_second
                run.drafting = self.session.drafting_state(job.mode, job.draft_max, job.params)
        except Exception as e:
            run.put(e)
        finally:
            run.put(None)
            try:
                run.loop.call_soon_threadsafe(self._finished, run)
            except RuntimeError:  # the server has shut down: there is no turn left to give back
                pass

    def _budget(self, job: Job, run: Run) -> int:
        """Tokens the reply may have: what was asked, cut to the room left in the context."""
        ids = self.session.prompt_tokens(job.messages, job.raw)
        n_ctx = self.session.target.n_ctx
        if not ids:
            raise ApiError(400, "the prompt is empty", param="prompt")
        if len(ids) >= n_ctx:
            raise ApiError(
                400,
                f"the prompt is {len(ids)} tokens, and the context holds {n_ctx}: "
                "shorten the request or restart the server with a larger --ctx",
                param="messages" if job.kind == "chat" else "prompt",
                code="context_length_exceeded",
            )
        run.prompt_tokens = len(ids)
        run.cache_n = common_prefix(self.session.target.cached, ids[:-1])  # what the prefill reuses
        room = n_ctx - len(ids)
        return min(job.max_tokens or room, room)

    def _finished(self, run: Run) -> None:
        self.served += 1
        self.cancelled += run.stopped
        if run.stopped and run.streamed:  # a client that leaves otherwise is logged as ClientGone
            log.info("a client left mid-stream: its reply stopped at the next step")
        self.turn.release()

    def drain(self, timeout: float | None = None) -> None:
        """Wait for the worker (a reply stops at its next step once its client has gone)."""
        if self._thread is not None:
            self._thread.join(timeout)


# --- HTTP ----------------------------------------------------------------------------------
class EventStream(StreamingResponse):
    """Server-sent events; ``on_close`` runs however the response ends, even when the client
    left before the first event (Starlette then never starts the iterator)."""

    def __init__(self, events: AsyncIterator[bytes], on_close) -> None:
        super().__init__(
            events, media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        )
        self.on_close = on_close

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.on_close()


def sse(data: dict | str) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return f"data: {text}\n\n".encode()


def error_response(e: ApiError, headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse(e.body, e.status, headers=headers)


async def read_json(request: Request, limit: int, timeout_s: float) -> Any:
    """The body as JSON. Only sent as JSON: any other type is one a web page may POST from
    another site without asking first (a CORS "simple request"), so it is refused (415)."""
    kind = request.headers.get("content-type", "")
    if kind.partition(";")[0].strip().lower() != "application/json":
        raise ApiError(
            415,
            f"the request body must be JSON, sent with 'Content-Type: application/json' (got {kind[:100]!r})",
            code="unsupported_media_type",
        )
    body = await read_body(request, limit, timeout_s)
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        raise ApiError(400, f"the request body is not valid JSON: {e}", code="invalid_json") from None


async def read_body(request: Request, limit: int, timeout_s: float) -> bytes:
    """The body, refused past ``limit`` bytes whether or not Content-Length says so, and past
    ``timeout_s`` seconds in all (a client sending a byte a second would pass any per-read
    timeout); ClientGone if the client leaves before its end."""
    too_big = ApiError(413, f"the request body is larger than {limit} bytes", code="request_too_large")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_big
    body = bytearray()
    try:
        async with asyncio.timeout(timeout_s):
            async for part in request.stream():
                body += part
                if len(body) > limit:
                    raise too_big
    except TimeoutError:
        raise ApiError(408, f"the request body did not arrive within {timeout_s:g} s", code="request_timeout") from None
    except ClientDisconnect:
        raise ClientGone("before its request had arrived") from None
    return bytes(body)


async def until_disconnected(request: Request, work: Awaitable):
    """``work``'s result, or ClientGone if the client disconnects first (the body has been
    read, so the next message the server receives for this request is the disconnect)."""

    async def gone() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    task, watch = asyncio.ensure_future(work), asyncio.ensure_future(gone())
    try:
        done, _ = await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in (task, watch):
            t.cancel()
        await asyncio.gather(task, watch, return_exceptions=True)  # let them clean up
    if task in done:
        return task.result()
    raise ClientGone("before its reply was ready")


class Api:
    """The routes, over one session."""

    def __init__(self, session, served: Served, config: ServerConfig) -> None:
        self.session = session
        self.served = served
        self.config = config
        self.line = Generations(session, config.queue)
        self.started = int(time.time())

    def authorize(self, request: Request) -> None:
        """Bearer token, compared in constant time (hmac.compare_digest)."""
        if self.config.api_key is None:
            return
        given = request.headers.get("authorization", "").encode()
        if not hmac.compare_digest(given, f"Bearer {self.config.api_key}".encode()):
            raise ApiError(401, "invalid or missing API key (send 'Authorization: Bearer KEY')", code="invalid_api_key")

    async def health(self, request: Request) -> Response:
        line = self.line
        running = int(line.turn.locked())
        return JSONResponse(
            {
                "status": "ok",
                "running": running,
                "waiting": max(line.admitted - running, 0),
                "queue": line.queue,
                "served": line.served,
                "cancelled": line.cancelled,
            }
        )

    async def models(self, request: Request) -> Response:
        self.authorize(request)
        s = self.served
        card = {
            "id": s.model_id,
            "object": "model",
            "created": self.started,
            "owned_by": "localspec",
            "meta": {"mode": s.mode, "n_ctx": s.n_ctx, "draft": s.has_draft},
        }
        return JSONResponse({"object": "list", "data": [card]})

    async def chat(self, request: Request) -> Response:
        return await self.complete(request, "chat")

    async def text(self, request: Request) -> Response:
        return await self.complete(request, "text")

    async def complete(self, request: Request, kind: Kind) -> Response:
        self.authorize(request)
        body = await read_json(request, self.config.max_body_bytes, self.config.body_timeout_s)
        job = parse_job(kind, body, self.served)
        ticket = self.line.admit()
        if ticket is None:
            busy = ApiError(
                503,
                f"the server is busy: one reply is generating and {self.line.queue} are waiting; try again shortly",
                type="server_error",
                code="server_busy",
            )
            return error_response(busy, {"Retry-After": str(RETRY_AFTER_S)})
        try:
            run = await until_disconnected(request, self.line.start(job))
        except BaseException:
            ticket.close()
            raise
        head = Head.new(kind, self.served.model_id)
        if job.stream:
            run.streamed = True

            def close() -> None:
                run.close()
                ticket.close()

            return EventStream(self.events(job, run, head), close)
        try:
            return JSONResponse(await until_disconnected(request, self.collect(job, run, head)))
        finally:
            run.close()
            ticket.close()

    async def collect(self, job: Job, run: Run, head: Head) -> dict:
        stats, parts = RunStats(), []
        while (step := await run.next()) is not None:
            stats.add(step)
            parts.append(step.text)
        self.log(job, run, stats)
        return reply_body(head, "".join(parts), stats.finish, self.usage(run, stats), self.timings(job, run, stats))

    async def events(self, job: Job, run: Run, head: Head) -> AsyncIterator[bytes]:
        """Chunks as OpenAI streams them; the last one carries finish_reason and timings, and
        with stream_options.include_usage a final chunk with no choices carries the usage."""
        stats = RunStats()
        try:
            if head.kind == "chat":
                yield sse(chunk_body(head, "", role=True))
            while (step := await run.next()) is not None:
                stats.add(step)
                if step.text:
                    yield sse(chunk_body(head, step.text))
            self.log(job, run, stats)
            last = chunk_body(head, None if head.kind == "chat" else "", stats.finish or "stop")
            extra = {"usage": None} if job.include_usage else {}
            yield sse({**last, **extra, "timings": self.timings(job, run, stats)})
            if job.include_usage:
                yield sse(
                    {
                        **head.fields(True),
                        "choices": [],
                        "usage": self.usage(run, stats),
                        "timings": self.timings(job, run, stats),
                    }
                )
        except Exception as e:
            yield sse(internal(e).body)
        yield sse("[DONE]")

    def usage(self, run: Run, stats: RunStats) -> dict:
        return usage(run.prompt_tokens, stats.n_tokens, run.cache_n)

    def timings(self, job: Job, run: Run, stats: RunStats) -> dict:
        return timings(stats, run.prompt_tokens - run.cache_n, run.cache_n, run.baseline_tps, job.mode, run.drafting)

    def log(self, job: Job, run: Run, stats: RunStats) -> None:
        log.info(
            "%s reply: %d prompt tokens (%d cached), %d tokens, %.1f tok/s, %d/%d drafts accepted, %s",
            job.mode,
            run.prompt_tokens,
            run.cache_n,
            stats.n_tokens,
            stats.tokens_per_second,
            stats.n_accepted,
            stats.n_drafted,
            stats.finish,
        )


def internal(e: Exception) -> ApiError:
    return e if isinstance(e, ApiError) else ApiError(500, f"{type(e).__name__}: {e}", type="server_error")


# headers some refusals need: how to authenticate; that a client too slow to send its body is
# not kept (the rest of the body would otherwise still be read, and ignored)
ERROR_HEADERS = {401: {"WWW-Authenticate": "Bearer"}, 408: {"Connection": "close"}}


async def _on_api_error(request: Request, e: ApiError) -> Response:
    return error_response(e, ERROR_HEADERS.get(e.status))


async def _on_http_error(request: Request, e: HTTPException) -> Response:
    """Unknown routes and methods get OpenAI's error shape too."""
    return error_response(ApiError(e.status_code, f"{request.method} {request.url.path}: {e.detail}"), e.headers)


async def _on_client_gone(request: Request, e: ClientGone) -> Response:
    """One line: a client leaving is not a server error."""
    log.info("%s %s: the client left %s", request.method, request.url.path, e)
    return Response(status_code=499)  # nginx's "client closed request"; nobody reads it


async def _on_crash(request: Request, e: Exception) -> Response:
    log.exception("error in %s %s", request.method, request.url.path)
    return error_response(internal(e))


# --- what a web page could send --------------------------------------------------------------
def host_name(value: str) -> str:
    """The name in a Host header, an origin or a --host: lower case, no port, no IPv6
    brackets ('Example.com:8080' -> 'example.com', '[::1]:8080' -> '::1'); '' if malformed."""
    value = value.strip().lower()
    if value.startswith("["):
        name, bracket, _ = value[1:].partition("]")
        return name if bracket else ""
    if value.count(":") > 1:  # a bare IPv6 address (--host ::1)
        return value
    return value.partition(":")[0]


def is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class Names:
    """The names clients may reach this server by. Any port is allowed with them: a port
    forward (ssh -L 9000:localhost:8080) changes it, and DNS rebinding works through the name."""

    names: frozenset[str]
    any_ip: bool  # bound to every address (0.0.0.0, ::): any of the machine's, so any IP

    @classmethod
    def of(cls, host: str, allowed: tuple[str, ...] = ()) -> Names:
        bound = host_name(host)
        wildcard = bound in ("", "0.0.0.0", "::")
        return cls(LOOPBACK_NAMES | {bound} | {host_name(n) for n in allowed}, wildcard)

    def allows(self, name: str) -> bool:
        """With ``any_ip``, any IP address too: an address cannot be rebound (that takes a name
        whose DNS the attacker answers for)."""
        return bool(name) and (name in self.names or (self.any_ip and is_ip(name)))


class Guard:
    """Refuses, before any route runs (403 in OpenAI's error shape), what a web page on another
    site could send:

    - DNS rebinding: a page whose own name now resolves to 127.0.0.1 calls this server as its
      own origin, so CORS never applies; its name is in Host, and only ``Names`` pass.
    - cross-site requests: a page anywhere can POST without asking first (a CORS "simple
      request") and start a generation; the browser names the page in Origin, and only this
      server's own names and the --cors origins pass (``read_json`` also refuses non-JSON).

    Clients that are not browsers (editors, curl, the openai library) send the name they
    dialled and no Origin, so they pass.
    """

    def __init__(self, app: ASGIApp, names: Names, origins: frozenset[str]) -> None:
        self.app = app
        self.names = names
        self.origins = origins

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        refusal = self.refusal(Headers(scope=scope)) if scope["type"] == "http" else None
        if refusal is None:
            await self.app(scope, receive, send)
            return
        log.warning("refused %s %s: %s", scope["method"], scope["path"], refusal.message)
        await error_response(refusal)(scope, receive, send)

    def refusal(self, headers: Headers) -> ApiError | None:
        host = headers.get("host", "")
        if not self.names.allows(host_name(host)):
            return ApiError(
                403,
                f"the Host header {host[:100]!r} is not a name of this server (a web page may be "
                f"trying DNS rebinding); if clients reach it by that name, restart it with "
                f"--allow-host {host_name(host) or 'NAME'}",
                code="host_not_allowed",
            )
        origin = headers.get("origin")
        if origin is not None and not self.origin_allowed(origin):
            return ApiError(
                403,
                f"requests from web pages on {origin[:100]!r} are refused; to let that page call the "
                f"API, restart the server with --cors {origin[:100]}",
                code="origin_not_allowed",
            )
        return None

    def origin_allowed(self, origin: str) -> bool:
        """This server's own site (any port: it serves no pages), or one --cors allows."""
        scheme, sep, authority = origin.partition("://")
        same_site = bool(sep) and scheme in ("http", "https") and self.names.allows(host_name(authority))
        return same_site or origin in self.origins or "*" in self.origins


def make_app(session, served: Served, config: ServerConfig = ServerConfig()) -> Starlette:
    api = Api(session, served, config)
    routes = [
        Route("/health", api.health, methods=["GET"]),
        Route("/v1/models", api.models, methods=["GET"]),
        Route("/v1/chat/completions", api.chat, methods=["POST"]),
        Route("/v1/completions", api.text, methods=["POST"]),
    ]
    # the guard first: a refused request gets no CORS headers either
    guard = Middleware(Guard, names=Names.of(config.host, config.allow_hosts), origins=frozenset(config.cors_origins))
    middleware = [guard]
    if config.cors_origins:
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(config.cors_origins),
                allow_methods=["GET", "POST"],
                allow_headers=["authorization", "content-type"],
            )
        )
    handlers: dict[Any, Callable[..., Any]] = {
        ApiError: _on_api_error,
        HTTPException: _on_http_error,
        ClientGone: _on_client_gone,
        Exception: _on_crash,
    }
    app = Starlette(routes=routes, middleware=middleware, exception_handlers=handlers)
    app.state.api = api
    return app


# --- serving -----------------------------------------------------------------------------------
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

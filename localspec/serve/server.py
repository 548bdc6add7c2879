"""``localspec serve``: the OpenAI-compatible HTTP adapter (Starlette on uvicorn) over a Session.

The ASGI app and its routes. A request passes the ``guard`` first (what a web page could send,
only JSON bodies, within a size limit and a deadline), is validated (``api``), waits its turn
and runs through ``Session.chat`` on a worker thread (``generations``): the same session and
engine the app and ``localspec run`` use, so there is no second generation loop here. Replies
are one JSON body or an event stream. Consecutive requests of one conversation share their
prompt prefix, which the target's cache keeps (``cache_n``). ``serving`` binds the sockets and
runs uvicorn on them.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ..core.stats import RunStats
from .api import ApiError, Head, Job, Kind, Served, chunk_body, parse_job, reply_body, timings, usage
from .generations import Generations, ReplyChannel
from .guard import ClientGone, Guard, Names, error_response, read_json

log = logging.getLogger(__name__)

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


@dataclass(frozen=True, kw_only=True)
class ServerConfig:
    api_key: str | None = None  # None: no authentication (loopback only, see cli.serve)
    queue: int = 8  # requests that may wait while one generates; past that, 503
    cors_origins: tuple[str, ...] = ()  # empty: no CORS headers, and no other site's pages
    max_body_bytes: int = MAX_BODY_BYTES
    host: str = "127.0.0.1"  # the address bound: a name clients may use in Host (``Names``)
    allow_hosts: tuple[str, ...] = ()  # more names clients may use in Host (--allow-host)
    header_timeout_s: float = HEADER_TIMEOUT_S  # from a connection's start or its last reply
    body_timeout_s: float = BODY_TIMEOUT_S  # from the end of the headers to the end of the body


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

    def __init__(self, session, served: Served, config: ServerConfig, llama: ThreadPoolExecutor | None = None) -> None:
        self.session = session
        self.served = served
        self.config = config
        self.line = Generations(session, config.queue, llama)
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

    async def collect(self, job: Job, run: ReplyChannel, head: Head) -> dict:
        stats, parts = RunStats(), []
        while (step := await run.next()) is not None:
            stats.add(step)
            parts.append(step.text)
        self.log(job, run, stats)
        return reply_body(head, "".join(parts), stats.finish, self.usage(run, stats), self.timings(job, run, stats))

    async def events(self, job: Job, run: ReplyChannel, head: Head) -> AsyncIterator[bytes]:
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

    def usage(self, run: ReplyChannel, stats: RunStats) -> dict:
        return usage(run.prompt_tokens, stats.n_tokens, run.cache_n)

    def timings(self, job: Job, run: ReplyChannel, stats: RunStats) -> dict:
        return timings(stats, run.prompt_tokens - run.cache_n, run.cache_n, run.baseline_tps, job.mode, run.drafting)

    def log(self, job: Job, run: ReplyChannel, stats: RunStats) -> None:
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


def make_app(
    session, served: Served, config: ServerConfig = ServerConfig(), llama: ThreadPoolExecutor | None = None
) -> Starlette:
    """The app over ``session``; ``llama``: the thread that loaded it (``generations.llama_thread``),
    where every reply runs (a new one by default)."""
    api = Api(session, served, config, llama)
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

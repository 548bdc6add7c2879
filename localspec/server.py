"""``localspec serve``: the OpenAI-compatible HTTP adapter (Starlette on uvicorn) over a Session.

The only module that imports the web stack. It validates requests (``api``), queues them, and
runs each one through ``Session.chat`` on a worker thread: the same session and engine the app
and ``localspec run`` use, so there is no second generation loop here.

One pair of KV caches means one generation at a time: a request waits its turn in a bounded
FIFO (``--queue``, answered 503 with Retry-After past it). The worker hands each engine Step
to the event loop and checks between steps whether the client has gone; if so it closes the
generator, which stops the reply at the next step and frees the turn. Consecutive requests of
one conversation share their prompt prefix, which the target's cache keeps (``cache_n``).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from .api import ApiError, Head, Job, Kind, Served, chunk_body, parse_job, reply_body, timings, usage
from .core.protocol import common_prefix
from .core.stats import RunStats

log = logging.getLogger("localspec.server")

# Tuning choice: 4 MiB holds a 128k-token context of JSON-escaped text with room to spare;
# anything larger cannot fit the models this app loads, so it is refused before parsing.
MAX_BODY_BYTES = 4 * 2**20
# Tuning choice: a short editor reply on the default pair takes a few seconds on 2 cores;
# clients that honour Retry-After come back about when a place in the queue may be free.
RETRY_AFTER_S = 2


@dataclass(frozen=True)
class ServerConfig:
    api_key: str | None = None  # None: no authentication (loopback only, see cli.serve)
    queue: int = 8  # requests that may wait while one generates; past that, 503
    cors_origins: tuple[str, ...] = ()  # empty: no CORS headers at all
    max_body_bytes: int = MAX_BODY_BYTES


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
                n_max=job.n_max,
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
                run.drafting = self.session.drafting_state(job.mode, job.n_max)
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


async def read_json(request: Request, limit: int) -> Any:
    """The body as JSON, refused past ``limit`` bytes whether or not Content-Length says so."""
    too_big = ApiError(413, f"the request body is larger than {limit} bytes", code="request_too_large")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_big
    body = bytearray()
    async for part in request.stream():
        body += part
        if len(body) > limit:
            raise too_big
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        raise ApiError(400, f"the request body is not valid JSON: {e}", code="invalid_json") from None


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
    raise ClientGone


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
        job = parse_job(kind, await read_json(request, self.config.max_body_bytes), self.served)
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


async def _on_api_error(request: Request, e: ApiError) -> Response:
    return error_response(e, {"WWW-Authenticate": "Bearer"} if e.status == 401 else None)


async def _on_http_error(request: Request, e: HTTPException) -> Response:
    """Unknown routes and methods get OpenAI's error shape too."""
    return error_response(ApiError(e.status_code, f"{request.method} {request.url.path}: {e.detail}"), e.headers)


async def _on_client_gone(request: Request, e: ClientGone) -> Response:
    return Response(status_code=499)  # nginx's "client closed request"; nobody reads it


async def _on_crash(request: Request, e: Exception) -> Response:
    log.exception("error in %s %s", request.method, request.url.path)
    return error_response(internal(e))


def make_app(session, served: Served, config: ServerConfig = ServerConfig()) -> Starlette:
    api = Api(session, served, config)
    routes = [
        Route("/health", api.health, methods=["GET"]),
        Route("/v1/models", api.models, methods=["GET"]),
        Route("/v1/chat/completions", api.chat, methods=["POST"]),
        Route("/v1/completions", api.text, methods=["POST"]),
    ]
    middleware = []
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


def serve(app: Starlette, host: str, port: int, log_level: str = "info") -> None:
    """Serve until interrupted, then let a reply still running stop at its next step."""
    uvicorn.run(app, host=host, port=port, log_level=log_level, lifespan="off", timeout_graceful_shutdown=5)
    app.state.api.line.drain(timeout=30)

"""The real ``localspec serve`` server on the tiny GGUF pair, for the server tests
(test_server.py, test_hardening.py, test_soak.py): the app and the uvicorn server that
``localspec serve`` runs, on a free loopback port, in a thread of the test process.

No test waits on the wall clock: the server's deadlines run on a ``VirtualClock`` the test
moves, a reply's steps wait until the test lets them go (``hold``), and a state the server
reaches is waited for with ``wait_for``, whose bound only fails a server that is stuck."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time

import httpx
import pytest

from localspec.chat.session import LoadOptions, PairSpec, Session
from localspec.serve import server, serving
from localspec.serve.api import Served

N_CTX = 512
PROMPT = "hello world the model"
MESSAGES = [{"role": "user", "content": PROMPT}]
N_TOKENS = 24
JSON = {"Content-Type": "application/json"}


def load(tiny_pair) -> Session:
    return Session.load(PairSpec(tiny_pair[0], tiny_pair[1]), LoadOptions(n_ctx=N_CTX, threads=1))


def served(session, has_draft=True) -> Served:
    return Served("tiny", frozenset({"t.gguf", "t"}), session.mode, has_draft, N_CTX, session.options.draft_max)


# Not a timing: only a server that is stuck reaches it. A working one is waited for as long as
# it takes (a busy 2-core machine is slow, never wrong).
STUCK_S = 60.0


class VirtualClock:
    """The time of the server's event loop, which only the test moves (``advance``). The header
    and body deadlines are timers on that loop (``serving.H11WithDeadline``, ``guard.read_body``),
    so they fall due when the test says and never because the machine was slow."""

    def __init__(self) -> None:
        self.now = 0.0
        self.loop: asyncio.AbstractEventLoop | None = None
        self.free_since: float | None = None  # the test is over: time runs again, for the shutdown

    def __call__(self) -> float:
        if self.free_since is None:
            return self.now
        return self.now + time.monotonic() - self.free_since

    def new_loop(self) -> asyncio.AbstractEventLoop:
        clock = self

        class VirtualTimeLoop(asyncio.SelectorEventLoop):
            def time(self) -> float:
                return clock()

        self.loop = VirtualTimeLoop()
        return self.loop

    def advance(self, seconds: float) -> None:
        """Move the time on, between two of the loop's callbacks (never while one runs: a timer
        it starts is due from the time it read), and return once the loop has run the timers
        due by then. A loop pass runs what is ready, then looks for timers due, and puts them
        behind what is ready: so the time moves in one pass, the timers are put behind ``hop``
        in the next, and ``ran`` is set in the one after, once they have run."""
        loop = self.loop
        assert loop is not None and self.free_since is None
        ran = threading.Event()

        def move() -> None:
            self.now += seconds
            loop.call_soon(hop)

        def hop() -> None:
            loop.call_soon(ran.set)

        loop.call_soon_threadsafe(move)
        assert ran.wait(STUCK_S), "the server's event loop is stuck"

    def run_free(self) -> None:
        """The test is over: from here the time runs as the wall clock does, so uvicorn's own
        timers (its shutdown polls every 0.1 s) fall due and the server can stop."""
        self.free_since = time.monotonic()
        if self.loop is not None and not self.loop.is_closed():
            with contextlib.suppress(RuntimeError):  # closed meanwhile
                self.loop.call_soon_threadsafe(lambda: None)  # wake it to see the time move


@contextlib.contextmanager
def running(session, has_draft=True, clock: VirtualClock | None = None, **config):
    """The real server (``serving.listening_sockets`` and ``serving.make_server``, as ``localspec
    serve`` uses them) on a free loopback port; yields its base URL. With ``clock`` the server's
    event loop keeps that clock's time."""
    app = server.make_app(session, served(session, has_draft), server.ServerConfig(**config))
    (sock,) = serving.listening_sockets("127.0.0.1", 0)
    srv = serving.make_server(app, log_level="warning")
    if clock is None:
        serve = lambda: srv.run(sockets=[sock])
    else:
        serve = lambda: asyncio.Runner(loop_factory=clock.new_loop).run(srv.serve(sockets=[sock]))
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    deadline = time.monotonic() + STUCK_S
    while not srv.started and time.monotonic() < deadline:  # uvicorn says so with a flag only
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        if clock is not None:
            clock.run_free()
        srv.should_exit = True
        thread.join(STUCK_S)
        app.state.api.line.drain(STUCK_S)
        sock.close()


def hold(monkeypatch, session) -> threading.Event:
    """Each engine step of ``session`` waits until the event returned is set, so a reply stays
    running, or queued behind one, until the test lets it go (the steps are the real ones)."""
    chat = session.chat
    go = threading.Event()

    def held_chat(*args, **kwargs):
        with contextlib.closing(chat(*args, **kwargs)) as steps:
            for step in steps:
                go.wait(STUCK_S)
                yield step

    monkeypatch.setattr(session, "chat", held_chat)
    return go


def health(base) -> dict:
    return httpx.get(base + "/health").json()


def wait_for(predicate, seconds=STUCK_S):
    """Whether predicate() came to hold; looked at every 10 ms, for ``seconds`` at most."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def port_of(base: str) -> int:
    return int(base.rsplit(":", 1)[1])


def connect(base: str) -> socket.socket:
    """A client's own connection to the server (a read waits 10 s at most)."""
    return socket.create_connection(("127.0.0.1", port_of(base)), timeout=10)


def request(body: dict, path: str = "/v1/chat/completions") -> bytes:
    """A whole POST of ``body`` as JSON, as a client sends it down a socket."""
    data = json.dumps(body).encode()
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    return (head + f"Content-Length: {len(data)}\r\n\r\n").encode() + data


def post(base, body, path="/v1/chat/completions", headers=None, **kw) -> httpx.Response:
    """A POST of ``body`` (bytes as they are, anything else as JSON), sent as JSON unless
    ``headers`` says otherwise."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(base + path, content=data, timeout=30, headers={**JSON, **(headers or {})}, **kw)


def chat_body(**extra) -> dict:
    return {"messages": MESSAGES, "max_tokens": N_TOKENS, "temperature": 0, **extra}


# The fixtures both server test modules use (imported there by name, as pytest finds them):
@pytest.fixture(scope="module")
def session(tiny_pair):
    """The tiny pair loaded once per module."""
    s = load(tiny_pair)
    yield s
    s.close()


@pytest.fixture
def url(session):
    """The real server on a free loopback port, over ``session``."""
    with running(session) as base:
        yield base

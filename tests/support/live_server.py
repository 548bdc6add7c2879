"""The real ``localspec serve`` server on the tiny GGUF pair, for the server tests
(test_server.py, test_server_hardening.py, test_server_soak.py): the app and the uvicorn server
that ``localspec serve`` runs, on a free loopback port, in a thread of the test process."""

from __future__ import annotations

import contextlib
import json
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
    return Served("tiny", frozenset({"t.gguf", "t"}), session.mode, has_draft, N_CTX)


@contextlib.contextmanager
def running(session, has_draft=True, **config):
    """The real server (``serving.listening_sockets`` and ``serving.make_server``, as ``localspec
    serve`` uses them) on a free loopback port; yields its base URL."""
    app = server.make_app(session, served(session, has_draft), server.ServerConfig(**config))
    (sock,) = serving.listening_sockets("127.0.0.1", 0)
    srv = serving.make_server(app, log_level="warning")
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not srv.started and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        srv.should_exit = True
        thread.join(10)
        app.state.api.line.drain(10)
        sock.close()


def slow_down(monkeypatch, session, delay: float) -> None:
    """Each engine step takes ``delay`` seconds more, so a reply lasts long enough to queue
    behind or to leave in the middle (the steps themselves are the real ones)."""
    chat = session.chat

    def slow_chat(*args, **kwargs):
        with contextlib.closing(chat(*args, **kwargs)) as steps:
            for step in steps:
                time.sleep(delay)
                yield step

    monkeypatch.setattr(session, "chat", slow_chat)


def health(base) -> dict:
    return httpx.get(base + "/health").json()


def wait_for(predicate, seconds=5.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


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

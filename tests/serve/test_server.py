"""``localspec serve`` on the tiny real GGUF pair: the official ``openai`` client against the
real uvicorn server (on 127.0.0.1, a free port, in a thread of this process), bad input, the
safety defaults, the queue, and disconnects. The 500-request soak is test_server_soak.py."""

from __future__ import annotations

import contextlib
import io
import json
import threading
from pathlib import Path

import httpx
import openai
import pytest

from localspec.cli import main
from localspec.cli.serve import check_bind
from localspec.serve import server, serving
from tests.support.live_server import (  # and its fixtures `session` and `url` (conftest.pytest_plugins)
    JSON,
    MESSAGES,
    N_CTX,
    N_TOKENS,
    PROMPT,
    STUCK_S,
    chat_body,
    connect,
    health,
    hold,
    post,
    request,
    running,
    wait_for,
)


def client(base, key="unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=base + "/v1", api_key=key, max_retries=0, timeout=30)


def run_cli(*argv) -> dict:
    """``localspec run --json`` in-process: the reference text."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["run", *argv, "--json"]) == 0
    return json.loads(out.getvalue())


@pytest.fixture(scope="module")
def reference(tiny_pair):
    common = [
        "--target",
        str(tiny_pair[0]),
        "--draft",
        str(tiny_pair[1]),
        "--ctx",
        str(N_CTX),
        "--threads",
        "1",
        "--max-tokens",
        str(N_TOKENS),
    ]
    return {"chat": run_cli(PROMPT, *common)["text"], "raw": run_cli(PROMPT, *common, "--raw")["text"]}


@pytest.fixture
def go(session, monkeypatch):
    """Each engine step waits until this event is set (``live_server.hold``)."""
    return hold(monkeypatch, session)


@contextlib.contextmanager
def queued(base):
    """A plain chat request waiting its turn behind the running reply while the block runs;
    yields a list that holds its response once it has one. Its place in ``/health`` shows when
    the server lets go of the reply in front: "waiting" drops from 1 to 0."""
    answer: list[httpx.Response] = []
    waiting = threading.Thread(target=lambda: answer.append(post(base, chat_body())))
    waiting.start()
    assert wait_for(lambda: health(base)["waiting"] == 1)
    try:
        yield answer
    finally:
        waiting.join(STUCK_S)


# --- the openai client ---------------------------------------------------------------------
class TestOpenAIClient:
    def test_chat_greedy_text_equals_localspec_run(self, url, reference):
        r = client(url).chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=N_TOKENS, temperature=0)
        assert r.choices[0].message.content == reference["chat"]
        assert r.choices[0].finish_reason in ("length", "stop")
        assert r.usage.completion_tokens == r.timings["predicted_n"] <= N_TOKENS

    def test_streamed_greedy_text_equals_localspec_run_and_ends_with_timings(self, url, reference):
        stream = client(url).chat.completions.create(
            model="tiny",
            messages=MESSAGES,
            max_tokens=N_TOKENS,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = list(stream)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == reference["chat"]
        finish, usage = chunks[-2], chunks[-1]
        assert finish.choices[0].finish_reason in ("length", "stop") and finish.timings["predicted_n"] > 0
        assert usage.choices == [] and usage.usage.completion_tokens == finish.timings["predicted_n"]
        assert usage.timings == finish.timings

    @pytest.mark.parametrize("stream", [False, True])
    def test_completions_equal_localspec_run_raw(self, url, reference, stream):
        r = client(url).completions.create(
            model="tiny", prompt=PROMPT, max_tokens=N_TOKENS, temperature=0, stream=stream
        )
        text = "".join(c.choices[0].text for c in r) if stream else r.choices[0].text
        assert text == reference["raw"]

    def test_models_lists_the_served_pair(self, url):
        (card,) = client(url).models.list().data
        assert card.id == "tiny" and card.owned_by == "localspec"

    def test_usage_and_timings_add_up(self, url):
        r = client(url).chat.completions.create(model="t.gguf", messages=MESSAGES, max_tokens=N_TOKENS, temperature=0)
        t = r.timings
        assert t["prompt_n"] + t["cache_n"] == r.usage.prompt_tokens
        assert r.usage.prompt_tokens_details.cached_tokens == t["cache_n"]
        assert t["predicted_n"] == r.usage.completion_tokens
        assert 0 <= t["draft_n_accepted"] <= t["draft_n"]
        assert t["predicted_per_second"] > 0 and t["speed_up"] > 0 and t["tokens_per_pass"] >= 1
        d = t["drafting"]
        assert d["mode"] == "draft" and d["drafted"] == t["draft_n"] and d["state"] in ("on", "off")
        assert d["why"].startswith(d["state"] + ": ")  # the controller's own account (core.explain)
        if not t["draft_n"]:
            assert t["speed_up"] == 1.0  # nothing drafted: the same computation as the target alone

    @pytest.mark.parametrize(
        "extra, mode",
        [
            ({"speculative": {"type": "none"}}, "none"),
            ({"speculative": {"n_max": 0}}, "none"),  # llama.cpp: a longest draft of 0 drafts nothing
            ({"speculative.type": "lookup", "speculative.n_max": 2}, "lookup"),  # llama.cpp's dotted keys
            ({"speculative": {"type": "draft", "n_max": 1, "p_min": 0.0}}, "draft"),
        ],
    )
    def test_per_request_drafting_changes_speed_never_text(self, url, reference, extra, mode):
        r = client(url).chat.completions.create(
            model="tiny", messages=MESSAGES, max_tokens=N_TOKENS, temperature=0, extra_body=extra
        )
        assert r.choices[0].message.content == reference["chat"]
        t = r.timings
        assert t["drafting"]["mode"] == mode
        if mode == "none":
            assert t["draft_n"] == 0 and t["drafting"]["state"] == "off"
        n_max = extra.get("speculative.n_max") or extra["speculative"].get("n_max")
        if n_max:
            assert t["tokens_per_pass"] <= n_max + 1

    def test_a_continued_conversation_reuses_the_cached_prefix(self, url):
        c = client(url)
        first = c.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=8, temperature=0)
        follow = MESSAGES + [
            {"role": "assistant", "content": first.choices[0].message.content},
            {"role": "user", "content": "and the draft"},
        ]
        second = c.chat.completions.create(model="tiny", messages=follow, max_tokens=8, temperature=0)
        assert second.timings["cache_n"] >= first.usage.prompt_tokens - 1
        assert second.timings["prompt_n"] == second.usage.prompt_tokens - second.timings["cache_n"]

    def test_stop_string_ends_the_reply_before_it(self, url, reference):
        stop = reference["chat"][6:8]
        r = client(url).chat.completions.create(
            model="tiny", messages=MESSAGES, max_tokens=N_TOKENS, temperature=0, stop=[stop]
        )
        assert r.choices[0].message.content == reference["chat"][: reference["chat"].index(stop)]
        assert r.choices[0].finish_reason == "stop"

    def test_sampling_with_a_seed_repeats(self, url):
        ask = dict(model="tiny", messages=MESSAGES, max_tokens=N_TOKENS, temperature=0.9, top_p=0.9, seed=7)
        a, b = (client(url).chat.completions.create(**ask).choices[0].message.content for _ in range(2))
        assert a == b

    def test_client_sees_bad_input_as_its_exception(self, url):
        with pytest.raises(openai.NotFoundError, match="not served here"):
            client(url).chat.completions.create(model="gpt-4o", messages=MESSAGES)
        with pytest.raises(openai.BadRequestError, match="temperature"):
            client(url).chat.completions.create(model="tiny", messages=MESSAGES, temperature=7)


# --- bad input -----------------------------------------------------------------------------
TOO_LONG = " ".join(["hello world the model is fast"] * 120)  # ~700 tokens, context 512

BAD = [
    # (case, body, status, error.param or None, words in error.message)
    ("malformed JSON", b'{"messages": [', 400, None, "not valid JSON"),
    ("invalid UTF-8", b'{"messages": "\xff"}', 400, None, "not valid JSON"),
    ("body not an object", b"[1, 2]", 400, None, "valid dictionary"),
    ("messages not a list", {"messages": "hi"}, 400, "messages", "valid list"),
    ("a message not an object", {"messages": ["hi"]}, 400, "messages.0", "valid dictionary or instance of Message"),
    ("no messages", {"messages": []}, 400, "messages", "at least 1"),
    ("too many messages", {"messages": MESSAGES * 1025}, 400, "messages", "at most 1024"),
    ("unknown role", {"messages": [{"role": "wizard", "content": "x"}]}, 400, "messages.0.role", "system"),
    (
        "content a number",
        {"messages": [{"role": "user", "content": 5}]},
        400,
        "messages.0.content",
        "a string or a list",
    ),
    (
        "image content",
        {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
        400,
        "messages.0.content",
        "only text",
    ),
    ("temperature a string", chat_body(temperature="hot"), 400, "temperature", "must be a number from 0 to 5"),
    ("temperature out of range", chat_body(temperature=9), 400, "temperature", "temperature must be ≤ 5 (got 9)"),
    ("top_p zero", chat_body(top_p=0), 400, "top_p", "top_p must be > 0"),
    ("seed negative", chat_body(seed=-1), 400, "seed", "seed must be ≥ 0"),
    ("max_tokens zero", chat_body(max_tokens=0), 400, "max_tokens", "max_tokens must be ≥ 1"),
    ("max_tokens a string", chat_body(max_tokens="5"), 400, "max_tokens", "must be a whole number"),
    (
        "max_completion_tokens a bool",
        chat_body(max_completion_tokens=True),
        400,
        "max_completion_tokens",
        "whole number",
    ),
    ("max_tokens past the context", chat_body(max_tokens=N_CTX + 1), 400, "max_tokens", "context holds 512"),
    ("stream not a bool", chat_body(stream="yes"), 400, "stream", "valid boolean"),
    ("n of 2", chat_body(n=2), 400, "n", "only n=1"),
    ("too many stop strings", chat_body(stop=["a"] * 17), 400, "stop", "at most 16"),
    ("unknown model", chat_body(model="gpt-4o"), 404, "model", "not served here"),
    ("unknown drafting type", chat_body(speculative={"type": "magic"}), 400, "speculative.type", "draft"),
    ("n_max past the longest draft", chat_body(**{"speculative.n_max": 33}), 400, "speculative.n_max", "must be ≤ 32"),
    ("p_min above 1", chat_body(speculative={"p_min": 2}), 400, "speculative.p_min", "must be ≤ 1"),
    (
        "prompt longer than the context",
        {"messages": [{"role": "user", "content": TOO_LONG}]},
        400,
        "messages",
        "context holds 512",
    ),
]


class TestBadInput:
    @pytest.mark.parametrize("case, body, status, param, words", BAD, ids=[b[0] for b in BAD])
    def test_clear_4xx_in_openai_shape_and_the_server_keeps_serving(
        self, url, reference, case, body, status, param, words
    ):
        r = post(url, body)
        assert r.status_code == status
        error = r.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert words in error["message"] and error["param"] == param
        ok = post(url, chat_body())
        assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["content"] == reference["chat"]

    def test_prompt_longer_than_the_context_on_completions_and_streaming(self, url):
        for path, body in (
            ("/v1/completions", {"prompt": TOO_LONG}),
            ("/v1/chat/completions", {"messages": [{"role": "user", "content": TOO_LONG}], "stream": True}),
        ):
            r = post(url, body, path)
            assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"

    def test_draft_type_without_a_draft_model(self, session):
        with running(session, has_draft=False) as base:
            r = post(base, chat_body(speculative={"type": "draft"}))
        assert r.status_code == 400 and "needs a draft model" in r.json()["error"]["message"]

    def test_unknown_fields_are_ignored(self, url, reference):
        body = chat_body(frequency_penalty=0.5, user="me", logit_bias={}, tools=[], metadata={"a": [1]})
        body["messages"] = [{**MESSAGES[0], "name": "someone"}]
        r = post(url, body)
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == reference["chat"]

    @pytest.mark.parametrize("chunked", [False, True])
    def test_a_body_past_the_limit_is_refused(self, session, chunked):
        big = json.dumps(chat_body(user="x" * 5000)).encode()
        with running(session, max_body_bytes=4096) as base:
            content = iter([big[:3000], big[3000:]]) if chunked else big  # no Content-Length when chunked
            r = httpx.post(base + "/v1/chat/completions", content=content, headers=JSON)
            assert r.status_code == 413 and "larger than 4096 bytes" in r.json()["error"]["message"]
            assert post(base, chat_body()).status_code == 200

    def test_unknown_routes_and_methods_in_openai_shape(self, url):
        assert httpx.get(url + "/v1/engines").json()["error"]["message"] == "GET /v1/engines: Not Found"
        r = httpx.get(url + "/v1/chat/completions")
        assert r.status_code == 405 and "Method Not Allowed" in r.json()["error"]["message"]


# --- safe by default -----------------------------------------------------------------------
class TestSafety:
    KEY = "s3cret-key-for-tests"

    def test_api_key_required_and_compared_in_constant_time(self, session, monkeypatch):
        seen = []
        compare = server.hmac.compare_digest
        monkeypatch.setattr(server.hmac, "compare_digest", lambda a, b: seen.append((a, b)) or compare(a, b))
        with running(session, api_key=self.KEY) as base:
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": self.KEY}):
                r = post(base, chat_body(), headers=headers)
                assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
            assert httpx.get(base + "/v1/models").status_code == 401
            with pytest.raises(openai.AuthenticationError):
                client(base, "wrong").models.list()
            assert client(base, self.KEY).models.list().data[0].id == "tiny"
            assert health(base)["status"] == "ok"  # no secrets there: open, like llama.cpp's
        assert (b"Bearer wrong", f"Bearer {self.KEY}".encode()) in seen

    def test_cors_off_unless_asked_for(self, session):
        origin = {"Origin": "http://example.com"}
        preflight = {**origin, "Access-Control-Request-Method": "POST"}
        with running(session) as base:
            assert "access-control-allow-origin" not in httpx.get(base + "/v1/models", headers=origin).headers
            assert httpx.options(base + "/v1/chat/completions", headers=preflight).status_code == 403
        with running(session, cors_origins=("http://example.com",)) as base:
            r = httpx.options(base + "/v1/chat/completions", headers=preflight)
            assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "http://example.com"
            other = {"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"}
            assert httpx.options(base + "/v1/chat/completions", headers=other).status_code == 403

    @pytest.mark.parametrize(
        "host, key, refused",
        [
            ("127.0.0.1", None, False),
            ("localhost", None, False),
            ("::1", None, False),
            ("127.0.0.2", None, False),
            ("0.0.0.0", None, True),
            ("192.168.1.5", None, True),
            ("::", None, True),
            ("myhost.lan", None, True),
            ("0.0.0.0", "long-enough-key", False),
            ("0.0.0.0", "short", True),
        ],
    )
    def test_non_loopback_host_needs_a_key(self, host, key, refused):
        assert (check_bind(host, key) is not None) == refused

    def test_cli_refuses_before_loading_anything(self, capsys, monkeypatch):
        monkeypatch.delenv("LOCALSPEC_API_KEY", raising=False)
        assert main(["serve", "--target", "missing.gguf", "--host", "0.0.0.0"]) == 2
        assert "without an API key" in capsys.readouterr().err

    def test_only_the_http_modules_import_the_web_stack(self):
        package = Path(server.__file__).parent
        users = sorted(
            str(p.relative_to(package))
            for p in package.rglob("*.py")
            if any(f"import {m}" in p.read_text() or f"from {m}" in p.read_text() for m in ("uvicorn", "starlette"))
        )
        assert users == ["guard.py", "server.py", "serving.py"]  # api and generations: no web framework


class TestCli:
    def test_pair_from_the_catalog_is_served_under_its_id(self, tiny_pair, monkeypatch):
        from localspec.models import downloads

        files = {"target": tiny_pair[0], "draft": tiny_pair[1]}
        monkeypatch.setattr(
            downloads, "locate", lambda ref, settings: files["target" if "1.5b" in ref.filename.lower() else "draft"]
        )
        seen = {}

        def fake_serve(app, sockets, log_level):  # instead of blocking in uvicorn
            api = app.state.api
            (host, port) = sockets[0].getsockname()
            seen.update(id=api.served.model_id, mode=api.served.mode, host=host, port=port > 0, queue=api.line.queue)

        monkeypatch.setattr(serving, "serve", fake_serve)
        assert (
            main(
                [
                    "serve",
                    "--pair",
                    "qwen2.5-coder-1.5b",
                    "--ctx",
                    "512",
                    "--threads",
                    "1",
                    "--port",
                    "0",
                    "--queue",
                    "3",
                ]
            )
            == 0
        )
        assert seen == {"id": "qwen2.5-coder-1.5b", "mode": "draft", "host": "127.0.0.1", "port": True, "queue": 3}

    def test_pair_not_on_disk_or_unknown(self, monkeypatch):
        from localspec.models import downloads

        monkeypatch.setattr(downloads, "locate", lambda ref, settings: None)
        with pytest.raises(SystemExit, match="localspec models pull qwen2.5-coder-1.5b"):
            main(["serve", "--pair", "qwen2.5-coder-1.5b"])
        with pytest.raises(SystemExit, match="no pair 'nope'"):
            main(["serve", "--pair", "nope"])
        with pytest.raises(SystemExit, match="not both"):
            main(["serve", "--pair", "x", "--target", "t.gguf"])


# --- one generation at a time ---------------------------------------------------------------
def stream_text(base, body) -> tuple[str, dict]:
    """(text, finish chunk) of a streamed chat reply read with the openai client."""
    chunks = list(client(base).chat.completions.create(stream=True, **body))
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices), chunks[-1]


class TestQueue:
    def test_eight_concurrent_streaming_clients_all_answered_in_full(self, session, reference, go):
        results = [None] * 8
        with running(session, queue=8) as base:

            def ask(i):
                results[i] = stream_text(
                    base, dict(model="tiny", messages=MESSAGES, max_tokens=N_TOKENS, temperature=0)
                )

            threads = [threading.Thread(target=ask, args=(i,)) for i in range(8)]
            for t in threads:
                t.start()
            assert wait_for(lambda: health(base)["waiting"] == 7)  # they really queued
            go.set()
            for t in threads:
                t.join(STUCK_S)
            assert health(base)["served"] == 8
        for text, last in results:
            assert text == reference["chat"] and last.choices[0].finish_reason in ("length", "stop")

    def test_past_the_queue_503_with_retry_after(self, session, go):
        with running(session, queue=1) as base:
            body = chat_body(stream=True)
            with httpx.Client(timeout=30) as a, httpx.Client(timeout=30) as b:
                first = threading.Thread(target=lambda: a.post(base + "/v1/chat/completions", json=body))
                second = threading.Thread(target=lambda: b.post(base + "/v1/chat/completions", json=body))
                first.start()
                assert wait_for(lambda: health(base)["running"] == 1)
                second.start()
                assert wait_for(lambda: health(base)["waiting"] == 1)
                r = post(base, chat_body())
                assert r.status_code == 503 and r.headers["retry-after"] == str(server.RETRY_AFTER_S)
                assert r.json()["error"]["code"] == "server_busy"
                go.set()
                first.join(STUCK_S)
                second.join(STUCK_S)
            assert post(base, chat_body()).status_code == 200

    def test_disconnect_mid_stream_stops_the_reply_and_frees_the_slot(self, session, go, reference):
        with running(session) as base:
            with (
                httpx.Client(timeout=30) as c,
                c.stream("POST", base + "/v1/chat/completions", json=chat_body(stream=True)) as r,
            ):
                lines = r.iter_lines()
                assert next(lines).startswith("data: ")  # the role chunk: the reply has started
                assert health(base)["running"] == 1
                with queued(base) as answer:
                    r.close()  # the client goes
                    assert wait_for(lambda: health(base)["waiting"] == 0)  # the server has let go of the reply
                    go.set()  # the worker stops at its next step; the one waiting runs
            assert health(base) == {**health(base), "running": 0, "cancelled": 1}
            assert answer[0].json()["choices"][0]["message"]["content"] == reference["chat"]

    def test_disconnect_during_a_non_streamed_reply(self, session, go):
        with running(session) as base:
            with connect(base) as sock:
                sock.sendall(request(chat_body()))
                assert wait_for(lambda: health(base)["running"] == 1)
                with queued(base) as answer:
                    sock.close()  # the client goes
                    assert wait_for(lambda: health(base)["waiting"] == 0)  # the server has let go of the reply
                    go.set()
            assert answer[0].status_code == 200
            assert health(base)["cancelled"] == 1 and health(base)["running"] == 0

    def test_a_client_that_leaves_the_queue_frees_its_place(self, session, go):
        with running(session, queue=1) as base:
            running_reply = threading.Thread(target=lambda: post(base, chat_body()))
            running_reply.start()
            assert wait_for(lambda: health(base)["running"] == 1)
            with connect(base) as sock:
                sock.sendall(request(chat_body()))
                assert wait_for(lambda: health(base)["waiting"] == 1)
            assert wait_for(lambda: health(base)["waiting"] == 0)  # the client has gone, and its place
            go.set()
            running_reply.join(STUCK_S)
            assert health(base)["served"] == 1  # the one that left never ran


# --- scripts/serve_bench.py ----------------------------------------------------------------
class TestServeBench:
    def test_measures_every_mode_through_the_server(self, url, tmp_path):
        import runpy

        suite = tmp_path / "suite.json"
        suite.write_text(json.dumps({"prompts": [{"id": "edit", "prompt": "def f(x): return x + 1  # add hints"}]}))
        bench = runpy.run_path(str(Path(__file__).parents[2] / "scripts" / "serve_bench.py"))
        out, table = tmp_path / "out.json", tmp_path / "out.md"
        assert (
            bench["main"](
                [
                    "--url",
                    url,
                    "--suite",
                    str(suite),
                    "--prompt",
                    "edit",
                    "--rounds",
                    "2",
                    "--max-tokens",
                    "8",
                    "--json",
                    str(out),
                    "--markdown",
                    str(table),
                ]
            )
            == 0
        )
        summary = json.loads(out.read_text())["summary"]
        assert set(summary) == {"draft", "lookup", "none"}
        assert all(s["runs"] == 2 and s["identical_to_none"] for s in summary.values())  # greedy: lossless
        assert summary["none"]["speed_up_vs_none"] == 1.0 and summary["none"]["acceptance"] is None
        assert table.read_text().count("\n| ") == 4  # header + 3 modes

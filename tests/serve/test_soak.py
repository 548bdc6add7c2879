"""Soak: 500 requests to one real ``localspec serve`` server on the tiny GGUFs (``pytest -m soak``).

A mix of what editors and scripts send: conversations continued turn by turn (prefix reuse),
streamed and whole replies, all three drafting modes, bursts of concurrent streams, clients
that leave mid-stream, and malformed requests. Every reply must arrive whole, the server must
end idle, and its memory (this process: the server runs in a thread here) must stay flat.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path

import httpx
import pytest

from tests.support.live_server import JSON, health, load, running

pytestmark = pytest.mark.soak

N_REQUESTS = 500
WARMUP = 50  # requests before the first RSS reading: first-use buffers, allocator slack
MAX_TOKENS = 8
TURNS_PER_CONVERSATION = 3  # ~100 tokens a turn on the tiny vocab (ChatML in bytes): 3 fit 512
MODES = ("draft", "lookup", "none")
MAX_RSS_GROWTH = 50 * 2**20  # bytes; the same bound as the session soak (test_soak.py)


def rss_bytes() -> int:
    text = Path("/proc/self/status").read_text()
    return int(re.search(r"^VmRSS:\s+(\d+)\s+kB", text, re.M).group(1)) * 1024


def body(messages, i, stream=False) -> dict:
    return {
        "messages": messages,
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        "stream": stream,
        "speculative": {"type": MODES[i % len(MODES)]},
    }


def streamed(c: httpx.Client, url: str, payload: dict) -> str:
    """A whole streamed reply's text; fails unless it ends with a finish chunk and [DONE]."""
    import json

    text, events = [], []
    with c.stream("POST", url, json=payload) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: "):
                events.append(line[6:])
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[-1]["choices"][0]["finish_reason"] in ("length", "stop") and "timings" in chunks[-1]
    for c in chunks:
        text.append(c["choices"][0]["delta"].get("content") or "")
    return "".join(text)


def leave_mid_stream(c: httpx.Client, url: str, payload: dict) -> None:
    with c.stream("POST", url, json={**payload, "max_tokens": 200}) as r:
        next(r.iter_lines())


def burst(url: str, n: int = 4) -> None:
    """n streams at once (they queue behind each other)."""
    errors = []

    def one(i):
        try:
            with httpx.Client(timeout=60) as c:
                streamed(c, url, body([{"role": "user", "content": f"burst {i}"}], i, stream=True))
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []


def one_request(c: httpx.Client, url: str, i: int, messages: list) -> None:
    """Request i of the mix; continues ``messages`` in place when it gets a reply."""
    if i % 10 == 9:
        assert c.post(url, content=b'{"messages": [', headers=JSON).status_code == 400
        return
    if i % 50 == 0:
        burst(url)
        return
    if i % 25 == 7:
        leave_mid_stream(c, url, body(messages, i, stream=True))
        return
    if len(messages) > 2 * TURNS_PER_CONVERSATION:  # a new conversation
        del messages[1:]
    messages.append({"role": "user", "content": f"question {i}: is the model fast"})
    if i % 3 == 0:
        text = streamed(c, url, body(messages, i, stream=True))
    else:
        r = c.post(url, json=body(messages, i))
        assert r.status_code == 200, r.text
        text = r.json()["choices"][0]["message"]["content"]
    messages.append({"role": "assistant", "content": text})


def test_500_requests_memory_flat_and_every_reply_whole(tiny_pair):
    session = load(tiny_pair)
    messages = [{"role": "system", "content": "be brief"}]
    try:
        with running(session) as base, httpx.Client(timeout=60) as c:
            url = base + "/v1/chat/completions"
            for i in range(N_REQUESTS):
                if i == WARMUP:
                    rss_start = rss_bytes()
                one_request(c, url, i, messages)
            rss_end = rss_bytes()
            h = health(base)
    finally:
        session.close()
    print(
        f"\nserver soak: {N_REQUESTS} requests, {h['served']} replies generated, {h['cancelled']} stopped "
        f"by a client leaving; RSS after {WARMUP} requests {rss_start / 2**20:.1f} MiB, end "
        f"{rss_end / 2**20:.1f} MiB, growth {(rss_end - rss_start) / 2**20:+.1f} MiB"
    )
    assert h["running"] == 0 and h["waiting"] == 0
    assert h["cancelled"] >= 1
    assert rss_end - rss_start < MAX_RSS_GROWTH

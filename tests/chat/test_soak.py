"""Soak: 200 short chat turns in one Session on the tiny real GGUFs (``pytest -m soak``).

Memory must stay flat (RSS printed at start and end), both KV caches must not drift (every
50 turns the reply equals a fresh target-only Session's reply to the same trimmed history),
and nothing may crash while the history outgrows the 512-token context and is trimmed.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from localspec.chat.session import LoadOptions, PairSpec, Session
from localspec.core.sampling import SamplingParams
from tests.support.tiny_gguf import write_tiny_gguf

pytestmark = pytest.mark.soak

GREEDY = SamplingParams(temperature=0.0)
N_TURNS = 200
MAX_TOKENS = 8
N_CTX = 512
CHECK_EVERY = 50
MAX_RSS_GROWTH = 50 * 2**20  # bytes; measured +11 MiB on 2 cores (first-turn buffers, allocator slack)


def rss_bytes() -> int:
    text = Path("/proc/self/status").read_text()
    return int(re.search(r"^VmRSS:\s+(\d+)\s+kB", text, re.M).group(1)) * 1024


def reply(session: Session, msgs, mode=None) -> str:
    return "".join(s.text for s in session.chat(msgs, GREEDY, MAX_TOKENS, mode=mode))


def fresh_reply(target: Path, msgs) -> str:
    fresh = Session.load(PairSpec(target), LoadOptions(n_ctx=N_CTX, threads=1))
    try:
        return reply(fresh, msgs)
    finally:
        fresh.close()


def test_200_turns_memory_flat_no_cache_drift(tmp_path):
    target = write_tiny_gguf(tmp_path / "t.gguf", seed=0, n_ctx=N_CTX)
    draft = write_tiny_gguf(tmp_path / "d.gguf", seed=1, noise_of=0, noise=0.6, n_ctx=N_CTX)
    s = Session.load(PairSpec(target, draft), LoadOptions(n_ctx=N_CTX, threads=1))
    msgs = [{"role": "system", "content": "be brief"}]
    rss_start = rss_bytes()
    trimmed_turns, checks = 0, 0
    try:
        for turn in range(N_TURNS):
            msgs.append({"role": "user", "content": f"question {turn}: is the model fast"})
            got = reply(s, msgs, mode="draft")
            _, kept = s.fit(msgs, MAX_TOKENS)
            trimmed_turns += len(kept) < len(msgs)
            if turn % CHECK_EVERY == CHECK_EVERY - 1:
                assert got == fresh_reply(target, kept), f"cache drift at turn {turn + 1}"
                checks += 1
            msgs.append({"role": "assistant", "content": got})
        rss_end = rss_bytes()
    finally:
        s.close()
    print(
        f"\nsoak: {N_TURNS} turns, {trimmed_turns} trimmed, {checks} fresh-evaluation checks passed; "
        f"RSS start {rss_start / 2**20:.1f} MiB, end {rss_end / 2**20:.1f} MiB, "
        f"growth {(rss_end - rss_start) / 2**20:+.1f} MiB"
    )
    assert trimmed_turns > N_TURNS // 2  # the history really outgrew the context
    assert checks == N_TURNS // CHECK_EVERY
    assert rss_end - rss_start < MAX_RSS_GROWTH

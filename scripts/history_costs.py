"""What the history of past replies costs: the time it adds to a step, its memory, and its load.

A synthetic history of ``--tokens`` tokens (replies of 50-600 tokens drawn from a Zipf
vocabulary of 151,936 ids, each a slightly changed copy of one of 400 "kinds" of reply, so
that matches are long and repeated as in real repeated work) is written by the real store
(``HistoryStore``) into a temporary folder. Then:

- per step: the suffix drafter's time on growing contexts (a prompt, then a reply token by
  token) with the history and without it, side by side; the difference is what the history
  adds to a step (the issue's limit: 0.1 ms at 1,000,000 tokens);
- memory: the arrays a session holds (tokens, suffix array, first-token offsets);
- load: ``HistoryStore.load`` plus the offsets a session computes at load (limit: 100 ms).

    .venv/bin/python scripts/history_costs.py [--tokens 1000000] [--steps 2000] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from localspec.chat.history import HistoryStore, write_segment
from localspec.core.sampling import SamplingParams
from localspec.core.suffix import SuffixDrafter, build

VOCAB = 151_936
GREEDY = SamplingParams(temperature=0.0)


def synthetic_replies(n_tokens: int, rng: np.random.Generator) -> list[np.ndarray]:
    kinds = [rng.zipf(1.3, size=int(rng.integers(50, 600))) % VOCAB for _ in range(400)]
    replies, total = [], 0
    while total < n_tokens:
        r = kinds[int(rng.integers(len(kinds)))].copy()
        r[int(rng.integers(len(r)))] = rng.integers(VOCAB)  # one token changed: no two the same
        replies.append(r)
        total += len(r)
    return replies


def step_times(drafter: SuffixDrafter, contexts: list[list[int]]) -> list[float]:
    out = []
    for ctx in contexts:
        t0 = time.perf_counter()
        drafter.draft(ctx, 16, GREEDY, None)
        out.append(time.perf_counter() - t0)
    return out


def growing_contexts(replies: list[np.ndarray], steps: int, rng: np.random.Generator) -> list[list[int]]:
    """The contexts a few replies' steps see: one list per reply, grown as the engine grows it
    (the drafter converts only what was appended)."""
    out: list[list[int]] = []
    while len(out) < steps:
        ctx = [int(t) for t in rng.integers(0, VOCAB, 300)]  # the prompt
        reply = replies[int(rng.integers(len(replies)))]
        for t in reply[: steps - len(out)]:
            ctx.append(int(t) if rng.random() > 0.05 else int(rng.integers(VOCAB)))
            out.append(ctx)  # the same list, as the engine hands it over
    return out


def measure(n_tokens: int, steps: int) -> dict:
    rng = np.random.default_rng(0)
    replies = synthetic_replies(n_tokens, rng)
    with tempfile.TemporaryDirectory() as tmp:
        store = HistoryStore(Path(tmp))
        t0 = time.perf_counter()
        corpus = build(replies, used=np.arange(len(replies), dtype=np.float64))
        build_s = time.perf_counter() - t0
        write_segment(store.folder("ab12") / "base.npz", "ab12", corpus)
        t0 = time.perf_counter()
        (loaded,), _ = store.load("ab12")
        loaded.first_offsets  # noqa: B018 (what a session computes as it loads)
        load_s = time.perf_counter() - t0
    contexts = growing_contexts(replies, steps, rng)
    with_history = SuffixDrafter(lambda: (loaded,))
    without = SuffixDrafter()
    a, b = [], []
    for i in range(0, steps, 100):  # interleaved, so both see the same machine
        a += step_times(with_history, contexts[i : i + 100])
        b += step_times(without, contexts[i : i + 100])
    memory = loaded.nbytes + loaded.first_offsets.nbytes
    return {
        "history_tokens": loaded.n_tokens,
        "replies": loaded.n_replies,
        "step_ms_with_history": round(statistics.median(a) * 1e3, 4),
        "step_ms_context_only": round(statistics.median(b) * 1e3, 4),
        "added_ms_per_step": round((statistics.median(a) - statistics.median(b)) * 1e3, 4),
        "added_ms_p90": round((float(np.percentile(a, 90)) - float(np.percentile(b, 90))) * 1e3, 4),
        "memory_mb": round(memory / 2**20, 2),
        "load_ms": round(load_s * 1e3, 1),
        "build_s": round(build_s, 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=1_000_000)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    out = measure(args.tokens, args.steps)
    if args.json:
        print(json.dumps(out))
        return
    print(f"history: {out['history_tokens']:,} tokens in {out['replies']:,} replies")
    print(f"per step: {out['added_ms_per_step']} ms added by the history (median; p90 {out['added_ms_p90']} ms)")
    print(f"          {out['step_ms_with_history']} ms with it, {out['step_ms_context_only']} ms context alone")
    print(f"memory:   {out['memory_mb']} MiB")
    print(f"load:     {out['load_ms']} ms (building it: {out['build_s']} s, done as replies are kept)")


if __name__ == "__main__":
    main()

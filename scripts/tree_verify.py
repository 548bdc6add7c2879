"""What a two-branch draft tree would cost to verify here, and whether its rows are the target's.

A draft tree proposes, at a token the draft is unsure of, its first and its second choice, each
continued (docs/benchmarks.md, 2026-12-03: where the draft's top token is under 0.6 sure, the
target's token is its second choice a quarter of the time). llama.cpp verifies a tree in one
batch through sequence ids: the prefix's cells are shared by sequences 0 and 1 (a unified KV
cache, ``llama_memory_seq_cp``), the branch tokens of sequence s attend only to the prefix and
their own branch, and the branch that loses is dropped with ``llama_memory_seq_rm``.

This loads the target with two sequences, reads a prefix of ``--prefix`` tokens, and compares
(1) the rows of a tree [x0 | a1..aB | b1..bB] with the rows of the two linear evaluations
[x0, a1..aB] and [x0, b1..bB] (the largest logit difference and whether every argmax agrees),
and (2) the time of that tree against a linear verify of the same number of tokens and one of
1 + B tokens (median of ``--repeats``, interleaved). Nothing in localspec uses a tree yet: this
measures whether one would pay on this machine before it is built.

    .venv/bin/python scripts/tree_verify.py --target models/qwen2.5-coder-1.5b-f16.gguf [--branch 2] [--prefix 200]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from unittest import mock

import llama_cpp as L
import numpy as np

from localspec.core.costs import calibration_tokens
from localspec.llama import backend


def load_two_sequences(path: str, n_ctx: int, threads: int | None) -> backend.LlamaModel:
    """The model loaded as ``LlamaModel.load`` loads it, but with two sequences sharing one KV cache."""
    one_sequence = backend._context_params

    def params(n_ctx: int, threads: int | None, snapshots: int = 0):
        cparams = one_sequence(n_ctx, threads, snapshots)
        cparams.n_seq_max = 2
        cparams.kv_unified = True  # one cache whose cells two sequences can share
        return cparams

    with mock.patch.object(backend, "_context_params", params):
        return backend.LlamaModel.load(path, n_ctx=n_ctx, threads=threads)


def decode(model: backend.LlamaModel, entries: Sequence[tuple[int, int, tuple[int, ...]]]) -> list[np.ndarray]:
    """One llama_decode of (token, position, sequence ids) entries, a logits row for each."""
    b = model._batch
    for i, (token, pos, seqs) in enumerate(entries):
        b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = token, pos, len(seqs), True
        for j, s in enumerate(seqs):
            b.seq_id[i][j] = s
    b.n_tokens = len(entries)
    if L.llama_decode(model._ctx, b) != 0:
        raise SystemExit("llama_decode refused the batch")
    return [np.array(model._logits(i)) for i in range(len(entries))]


def drop(model: backend.LlamaModel, start: int) -> None:
    """Every sequence back to the prefix of ``start`` tokens (sequence 1 shares its cells again)."""
    L.llama_memory_seq_rm(model._mem, 1, -1, -1)
    L.llama_memory_seq_rm(model._mem, 0, start, -1)
    L.llama_memory_seq_cp(model._mem, 0, 1, -1, -1)


def linear(n: int, x0: int, branch: Sequence[int]) -> list[tuple[int, int, tuple[int, ...]]]:
    return [(t, n + i, (0,)) for i, t in enumerate([x0, *branch])]


def tree(n: int, x0: int, a: Sequence[int], b: Sequence[int]) -> list[tuple[int, int, tuple[int, ...]]]:
    return (
        [(x0, n, (0, 1))]
        + [(t, n + 1 + i, (0,)) for i, t in enumerate(a)]
        + [(t, n + 1 + i, (1,)) for i, t in enumerate(b)]
    )


def timed(model: backend.LlamaModel, n: int, entries) -> float:
    t0 = time.perf_counter()
    decode(model, entries)
    seconds = time.perf_counter() - t0
    drop(model, n)
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", required=True)
    ap.add_argument("--branch", type=int, default=2, help="tokens in each branch after the shared one")
    ap.add_argument("--prefix", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    if args.branch < 1 or args.prefix < 2 or args.repeats < 1:
        raise SystemExit("--branch and --repeats must be at least 1, --prefix at least 2")
    model = load_two_sequences(args.target, args.prefix + 4 * args.branch + 16, args.threads)
    try:
        ids = calibration_tokens(model, args.prefix + 2 * args.branch + 1)
        n, x0 = args.prefix, ids[args.prefix]
        a, b = ids[n + 1 : n + 1 + args.branch], ids[n + 1 + args.branch : n + 1 + 2 * args.branch]
        model.evaluate(ids[:n], 1)  # the prefix, sequence 0
        L.llama_memory_seq_cp(model._mem, 0, 1, -1, -1)
        rows_a = decode(model, linear(n, x0, a))
        drop(model, n)
        rows_b = decode(model, linear(n, x0, b))
        drop(model, n)
        rows_t = decode(model, tree(n, x0, a, b))
        drop(model, n)
        pairs = [(rows_t[0], rows_a[0])] + list(zip(rows_t[1 : 1 + len(a)], rows_a[1:]))
        pairs += list(zip(rows_t[1 + len(a) :], rows_b[1:]))
        diff = max(float(np.abs(t - r).max()) for t, r in pairs)
        same = all(int(np.argmax(t)) == int(np.argmax(r)) for t, r in pairs)
        print(f"tree rows against the linear ones: largest logit difference {diff:.2e}, every argmax equal: {same}")
        batches = {
            "tree": tree(n, x0, a, b),
            "linear, same size": linear(n, x0, ids[n + 1 : n + 1 + 2 * args.branch]),
            "linear, one branch": linear(n, x0, a),
        }
        times: dict[str, list[float]] = {name: [] for name in batches}
        for _ in range(args.repeats):  # interleaved, so drift moves all three alike
            for name, entries in batches.items():
                times[name].append(timed(model, n, entries))
        base = statistics.median(times["linear, one branch"])
        for name, ts in times.items():
            print(
                f"{name} ({len(batches[name])} tokens): "
                f"{1000 * statistics.median(ts):.1f} ms, {statistics.median(ts) / base:.2f}x one branch"
            )
    finally:
        model.close()


if __name__ == "__main__":
    main()

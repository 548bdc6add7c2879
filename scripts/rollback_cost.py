"""What one rejected draft costs a hybrid target (Qwen3.5's gated delta-net layers), by context length.

A recurrent state cannot drop a tail as a KV cache does (``localspec/llama/recurrent.py``). This
times one rejection of a whole draft the three ways a rollback can go, at each context length:

- ``snapshot``: llama.cpp's ``n_rs_seq`` states of the verify, what the engine uses for drafts
  up to the target's snapshots (``memory.snapshots_for``);
- ``checkpoint``: a state copy before the verify, restored after it (drafts past the snapshots,
  and every draft model's passes);
- ``prefill``: what localspec did before: clear the cache and evaluate every kept token again.

For each: a verify of k + 1 tokens (the pending token and k drafts) at the end of a context of
N tokens, every draft rejected, then the next single-token evaluation; the cost of the rejection
is how much longer that takes than the same step with every draft accepted (nothing rolled
back), measured in pairs side by side: the median of ``--repeats`` rounds' differences. The
truncate call alone is given too (the snapshot's is a bookkeeping change in llama.cpp).

  python scripts/rollback_cost.py MODEL.gguf [--contexts 100,2000] [--k 4] [--repeats 7]

Write a model with ``python -m tests.support.random_gguf DIR --models qwen3.5-2b:f16`` (random
weights of Qwen3.5-2B's shape) or use ``tests.support.hybrid_gguf.write_tiny_qwen35``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from localspec.llama.backend import LlamaModel

WAYS = ("snapshot", "checkpoint", "prefill")
PREFILL_REPEATS = 3


def context_tokens(model: LlamaModel, n: int) -> list[int]:
    """``n`` ordinary token ids (not end-of-generation), cycling through the vocabulary."""
    ids = [t for t in range(3, min(model.n_vocab, 3 + 4096)) if not model.is_eog(t)]
    return [ids[(i * 7919) % len(ids)] for i in range(n)]


def one_step(model: LlamaModel, context: list[int], k: int, way: str | None) -> tuple[float, float]:
    """(seconds of the step, seconds of its truncate): a verify of k + 1 tokens after
    ``context[:-1]``, its rollback the given ``way`` (all k drafts rejected; None: all accepted,
    nothing dropped), and the next single-token evaluation. The cache holds ``context[:-1]``
    before and after."""
    rb = model._rollback
    assert rb is not None, "not a recurrent or hybrid model"
    n = len(context) - 1
    draft = context_tokens(model, k + 7)[7:]
    if way == "checkpoint":
        model.checkpoint()
    snapshots, truncate = rb.snapshots, 0.0
    t0 = time.perf_counter()
    model.evaluate([context[-1], *draft], k + 1)  # the verify
    if way is not None:
        rb.snapshots = snapshots if way == "snapshot" else 0
        if way == "prefill":
            rb.checkpoints = [c for c in rb.checkpoints if not c.lasting]  # (a transient one is not at n)
        t1 = time.perf_counter()
        model.truncate(n + 1)  # keep the pending token, drop the k drafts
        truncate = time.perf_counter() - t1
        rb.snapshots = snapshots
    model.evaluate([draft[0]], 1)  # the next step
    seconds = time.perf_counter() - t0
    if way == "prefill":
        model.truncate(0)
        model.evaluate(context[:-1], 1)
        model.checkpoint(lasting=True)
    else:
        model.truncate(n)  # back to the context for the next round (untimed)
    return seconds, truncate


def measure(model: LlamaModel, n_context: int, k: int, repeats: int, ways: tuple[str, ...] = WAYS) -> dict:
    """Each way in rounds of (an accepted step, a rejected step) side by side: the rejection's
    cost is the median of the rounds' differences, so a drift of the machine's speed cancels."""
    context = context_tokens(model, n_context + 1)
    model.truncate(0)
    model.evaluate(context[:-1], 1)
    model.checkpoint(lasting=True)  # where each round comes back to
    out: dict = {"context": n_context, "k": k}
    steps = []
    for way in ways:
        # a new prefill of the whole context takes seconds on a real shape: fewer rounds of it
        rounds = []
        for _ in range(min(repeats, PREFILL_REPEATS) if way == "prefill" else repeats):
            accepted, _ = one_step(model, context, k, None)
            rejected, truncate = one_step(model, context, k, way)
            rounds.append((rejected - accepted, truncate))
            steps.append(accepted)
        diffs = sorted(d for d, _ in rounds)
        out[way] = {
            "rollback_seconds": max(statistics.median(diffs), 0.0),
            "quartiles_seconds": [diffs[len(diffs) // 4], diffs[(3 * len(diffs)) // 4]],  # the rounds' spread
            "truncate_seconds": statistics.median(t for _, t in rounds),
        }
    out["accepted_step_seconds"] = statistics.median(steps)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("model", type=Path)
    p.add_argument("--contexts", default="100,2000", help="comma-separated context lengths (default 100,2000)")
    p.add_argument("--k", type=int, default=4, help="drafts per verify, all rejected (default 4)")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--ways", default=",".join(WAYS), help=f"which rollbacks to time (default {','.join(WAYS)})")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    contexts = [int(c) for c in args.contexts.split(",")]
    model = LlamaModel.load(args.model, n_ctx=max(contexts) + args.k + 16, threads=args.threads, snapshots=args.k)
    try:
        ways = tuple(w for w in WAYS if w in args.ways.split(","))
        rows = [measure(model, n, args.k, args.repeats, ways) for n in contexts]
    finally:
        model.close()
    print(report(args.model.name, rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


def report(name: str, rows: list[dict]) -> str:
    first = rows[0]
    ways = [w for w in WAYS if w in first]
    lines = [
        f"{name}: what one rejection of {first['k']} drafts adds to a step, in ms: the median of paired rounds "
        f"[their quartiles] (the truncate call alone), and that cost at each context ÷ at {first['context']} tokens",
        "",
        "| context | accepted step | " + " | ".join(f"{w} (truncate) | ratio" for w in ways) + " |",
        "|---|---|" + "---|---|" * len(ways),
    ]
    for r in rows:
        cells = []
        for w in ways:
            ms, base = r[w]["rollback_seconds"], first[w]["rollback_seconds"]
            ratio = f"{ms / base:.2f}" if base > 0 else "—"
            q1, q3 = r[w]["quartiles_seconds"]
            cells.append(f"{_ms(ms)} [{_ms(q1)}, {_ms(q3)}] ({_ms(r[w]['truncate_seconds'])}) | {ratio}")
        lines.append(f"| {r['context']} | {r['accepted_step_seconds'] * 1e3:.1f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _ms(seconds: float) -> str:
    """Milliseconds to three significant digits (a snapshot's truncate is microseconds)."""
    return f"{seconds * 1e3:.3g}"


if __name__ == "__main__":
    raise SystemExit(main())

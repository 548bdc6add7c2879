"""What a hybrid target's snapshots (llama.cpp's ``n_rs_seq``) cost, at 0, 3, 8 and 16 of them.

With ``n_rs_seq`` = S, llama.cpp keeps S extra copies of every delta-net layer's state beside
it, and an evaluation writes the states after its last tokens into them, so a verify of up to
S drafts rolls back for free (``localspec/llama/recurrent.py``). A draft longer than S needs a
checkpoint first (a host copy of the state), as ``engine.prepare_rollback`` takes one. This
loads the file once per S (the weights are mapped once, each context has its own cache and
state) and times, round by round, every S in turn (the order rotated), at the end of a context
of --context tokens:

- ``T(1)``: a single-token evaluation, the step of a reply with drafting off (the median of 3);
- ``T(k+1)``: a verify of the pending token and k drafts, every draft kept, with the
  checkpoint the engine takes first where k > S;
- ``rollback``: that verify with every draft rejected, the truncate and the next single-token
  evaluation, less the same with every draft kept and no truncate (paired in the round).

Each figure is the median over --rounds rounds, and each S's is also given ÷ S = 0's of the same
round (the median of those ratios), so the machine's drift cancels.

  python scripts/snapshot_cost.py MODEL.gguf [--snapshots 0,3,8,16] [--k 3,8] [--rounds 7]

Write a model with ``python -m tests.support.random_gguf DIR --models qwen3.5-2b:f16,qwen3.5-2b:q4_k_m``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # rollback_cost, beside this
from rollback_cost import context_tokens

from localspec.llama import ggufinfo
from localspec.llama.backend import LlamaModel


def one_step(model: LlamaModel, context: list[int], k: int, rejected: bool) -> tuple[float, float]:
    """(seconds of the evaluation, seconds of the whole step) after ``context[:-1]``: with k = 0
    a single-token evaluation; else a verify of k + 1 tokens (a checkpoint first where the
    snapshots do not reach), every draft ``rejected`` (truncated) or kept, then the next
    single-token evaluation. The cache holds ``context[:-1]`` again afterwards (untimed)."""
    n = len(context) - 1
    draft = context_tokens(model, k + 8)[8:]
    t0 = time.perf_counter()
    if k == 0:
        model.evaluate([context[-1]], 1)
        seconds = time.perf_counter() - t0
        model.truncate(n)
        return seconds, seconds
    if k > (model.rollback_depth or 0):
        model.checkpoint()
    model.evaluate([context[-1], *draft], k + 1)
    verify = time.perf_counter() - t0
    if rejected:
        model.truncate(n + 1)
    model.evaluate([draft[0]], 1)
    seconds = time.perf_counter() - t0
    model.truncate(n)
    return verify, seconds


def measure(models: dict[int, LlamaModel], n_context: int, ks: list[int], rounds: int) -> dict:
    context = context_tokens(next(iter(models.values())), n_context + 1)
    for m in models.values():
        m.truncate(0)
        m.evaluate(context[:-1], 1)
        m.checkpoint(lasting=True)  # where each step comes back to
    names = ["T(1)", *(f"T({k + 1})" for k in ks), *(f"rollback {k}" for k in ks)]
    times: dict[int, dict[str, list[float]]] = {s: {name: [] for name in names} for s in models}
    order = list(models)
    for r in range(rounds):
        for s in order[r % len(order) :] + order[: r % len(order)]:
            m, t = models[s], times[s]
            t["T(1)"].append(statistics.median(one_step(m, context, 0, False)[0] for _ in range(3)))
            for k in ks:
                verify, kept = one_step(m, context, k, False)
                t[f"T({k + 1})"].append(verify)
                t[f"rollback {k}"].append(one_step(m, context, k, True)[1] - kept)
    base = min(models)
    out: dict = {"context": n_context, "ks": ks, "rounds": rounds, "snapshots": {}}
    for s in models:
        row = {name: statistics.median(v) for name, v in times[s].items()}
        row |= {
            f"{name} ratio": statistics.median(a / b for a, b in zip(times[s][name], times[base][name]))
            for name in names
            if not name.startswith("rollback")
        }
        out["snapshots"][s] = row
    return out


def report(name: str, result: dict, state_bytes: int) -> str:
    ks = result["ks"]
    base = min(result["snapshots"])
    cols = ["T(1)", *(f"T({k + 1})" for k in ks)]
    lines = [
        f"{name}, context {result['context']}: ms, median of {result['rounds']} rounds "
        f"[÷ {base} snapshots, median of the rounds' ratios]; rollback: a rejected draft of k",
        "",
        "| snapshots | memory | " + " | ".join(cols) + " | " + " | ".join(f"rollback k={k}" for k in ks) + " |",
        "|---|---|" + "---|" * (len(cols) + len(ks)),
    ]
    for s, row in sorted(result["snapshots"].items()):
        cells = [f"{row[c] * 1e3:.1f} [{row[c + ' ratio']:.3f}]" for c in cols]
        cells += [f"{row[f'rollback {k}'] * 1e3:.1f}" for k in ks]
        lines.append(f"| {s} | {s * state_bytes / 2**20:.0f} MiB | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("model", type=Path)
    p.add_argument("--snapshots", default="0,3,8,16", help="counts to compare (default 0,3,8,16)")
    p.add_argument("--k", default="3,8", help="draft lengths to verify (default 3,8; 0: T(1) only)")
    p.add_argument("--context", type=int, default=256, help="tokens before the step (default 256)")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    counts, ks = (
        [int(s) for s in args.snapshots.split(",")],
        [int(k) for k in args.k.split(",") if k.strip() not in ("", "0")],
    )
    n_ctx = args.context + max(ks, default=0) + 16
    models = {s: LlamaModel.load(args.model, n_ctx=n_ctx, threads=args.threads, snapshots=s) for s in counts}
    try:
        if any(m.rollback_depth is None for m in models.values()):
            p.error(f"{args.model}: not a recurrent or hybrid model (no snapshots to price)")
        result = measure(models, args.context, ks, args.rounds)
    finally:
        for m in models.values():
            m.close()
    print(report(args.model.name, result, ggufinfo.state_bytes(args.model)))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

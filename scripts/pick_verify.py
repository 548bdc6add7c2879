"""A verify's time with its greedy tokens picked by llama.cpp (backend sampling) beside the same
verify with its logits rows read and argmax'd in Python, on one model, to decide where picking
pays (``picking.logits_on_gpu``). Runs in blocks of one mode (a switch of mode makes llama.cpp
reserve its graphs again, which a reply pays once, not every step), alternating, and checks that
both modes give the same tokens.

    .venv/bin/python scripts/pick_verify.py models/qwen2.5-coder-1.5b-f16.gguf [--rows 17] [--blocks 3] [--per-block 4]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from localspec.llama.backend import LlamaModel

TEXT = "def merge_intervals(intervals):\n    intervals.sort()\n    out = []\n    for lo, hi in intervals:\n"


def verify(model: LlamaModel, ids: list[int], prefix: int, rows: int, picked: bool) -> tuple[float, list[int]]:
    """Seconds for one verify of ``rows`` tokens after ``prefix`` cached ones, and its tokens."""
    model.truncate(prefix)
    batch = ids[: prefix + rows]
    t0 = time.perf_counter()
    if picked:
        tokens = list(model.sync_greedy(batch, rows, prefix))
    else:
        tokens = [int(np.argmax(r)) for r in model.sync(batch, rows, prefix) or []]
    return time.perf_counter() - t0, tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--rows", type=int, default=17, help="tokens a verify evaluates (k + 1)")
    ap.add_argument("--prefix", type=int, default=300, help="cached tokens before it")
    ap.add_argument("--blocks", type=int, default=3)
    ap.add_argument("--per-block", type=int, default=4)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    model = LlamaModel.load(args.model, n_ctx=args.prefix + args.rows + 64, threads=args.threads)
    try:
        model.can_pick = True  # asked for, whatever the build: this measures what it would cost
        ids = model.tokenize(TEXT * (1 + (args.prefix + args.rows) // 20))[: args.prefix + args.rows]
        if len(ids) < args.prefix + args.rows:
            raise SystemExit(f"the text gives {len(ids)} tokens, fewer than --prefix + --rows")
        model.sync(ids[: args.prefix])
        seconds: dict[bool, list[float]] = {True: [], False: []}
        tokens: dict[bool, list[int]] = {}
        for _ in range(args.blocks):
            for picked in (True, False):
                for i in range(args.per_block):
                    s, got = verify(model, ids, args.prefix, args.rows, picked)
                    if i:  # the first after a switch re-reserves llama.cpp's graphs
                        seconds[picked].append(s)
                    if tokens.setdefault(picked, got) != got:
                        raise SystemExit("the same verify gave other tokens: not deterministic")
        if tokens[True] != tokens[False]:
            raise SystemExit(f"picked {tokens[True]} != rows' argmax {tokens[False]}")
        print(f"{model.name}: a verify of {args.rows} tokens after {args.prefix}, medians of {len(seconds[True])}")
        for picked, label in ((True, "argmax picked by llama.cpp"), (False, "rows read in Python")):
            print(f"  {label:<28} {1000 * statistics.median(seconds[picked]):9.2f} ms")
        print("  the same tokens either way")
    finally:
        model.close()


if __name__ == "__main__":
    main()

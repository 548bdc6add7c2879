"""How far a verify's logit rows sit from the rows of one-token evaluations, on one model.

llama.cpp evaluates a batch of k tokens with other kernels than a single token, so a verify's
rows differ slightly from the target alone's. Greedy speculative output stays the target's own
wherever that difference is smaller than the row's top-1/top-2 gap; this measures both. It
generates ``--tokens`` greedy tokens one at a time, keeping each row, then evaluates the same
tokens again in verifies of ``--k`` + 1 (the engine's batches) and compares row by row.

  python scripts/verify_rows.py MODEL.gguf [--tokens 40] [--k 8] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

# first: llama.cpp's libraries before numpy, or a CUDA build crashes loading a model (native.py)
from localspec.llama import native  # noqa: F401

# isort: split
import numpy as np

from localspec.llama.backend import LlamaModel

PROMPT = "Write a Python function that merges overlapping intervals and explain it."


def one_at_a_time(model: LlamaModel, prompt: list[int], n: int) -> tuple[list[int], list[np.ndarray]]:
    """n greedy tokens after ``prompt`` and, for each, the row it was taken from."""
    row = np.array(model.evaluate(prompt, 1)[-1], dtype=np.float64)
    tokens, rows = [], []
    for _ in range(n):
        tokens.append(int(row.argmax()))
        rows.append(row)
        row = np.array(model.evaluate([tokens[-1]], 1)[-1], dtype=np.float64)
    return tokens, rows


def compare(model: LlamaModel, n_tokens: int, k: int) -> dict:
    prompt = model.tokenize(PROMPT)
    tokens, single = one_at_a_time(model, prompt, n_tokens)
    diffs, gaps, flips = [], [], 0
    for start in range(0, n_tokens - k, k):  # verify k + 1 tokens: rows for the next k
        model.truncate(len(prompt) + start)
        batched = model.evaluate(tokens[start : start + k + 1], k + 1)
        for j in range(k):
            one, many = single[start + j + 1], np.array(batched[j], dtype=np.float64)
            diffs.append(float(np.abs(one - many).max()))
            top2 = np.sort(one)[-2:]
            gaps.append(float(top2[1] - top2[0]))
            flips += int(one.argmax() != many.argmax())
    return {
        "rows": len(diffs),
        "logit_std": float(np.std(single[-1])),
        "max_difference": max(diffs),
        "median_difference": float(np.median(diffs)),
        "median_gap": float(np.median(gaps)),
        "min_gap": min(gaps),
        "argmax_flips": flips,
        "distinct_tokens": len(set(tokens)),
        "tokens": n_tokens,
    }


def report(name: str, r: dict) -> str:
    return (
        f"{name}: {r['rows']} verify rows beside one-token rows (logit std {r['logit_std']:.2f}): "
        f"difference max {r['max_difference']:.4g}, median {r['median_difference']:.3g}; "
        f"top-2 gap median {r['median_gap']:.3g}, min {r['min_gap']:.3g}; "
        f"argmax flips {r['argmax_flips']}; {r['distinct_tokens']} distinct of {r['tokens']} tokens"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", type=Path)
    p.add_argument("--tokens", type=int, default=40)
    p.add_argument("--k", type=int, default=8, help="drafts a verify checks (it evaluates k + 1)")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    if not 1 <= args.k < args.tokens:
        p.error("--k must be at least 1 and below --tokens")
    model = LlamaModel.load(args.model, n_ctx=1024, threads=args.threads)
    try:
        result = compare(model, args.tokens, args.k)
    finally:
        model.close()
    print(report(args.model.name, result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

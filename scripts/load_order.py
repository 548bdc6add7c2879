"""Decode speed by load order: copies of one model loaded into one process, in turn, each
decoding after a long prompt, their runs rotated round by round (each first in turn).

    .venv/bin/python scripts/load_order.py MODEL [--copies 3] [--tokens 48] [--rounds 3]

On some VMs the model loaded first decodes markedly slower than those loaded after it (the Xeon
of docs/benchmarks.md: 11.9, 12.9, 13.2 tok/s for three copies of the Q4 1.5B target), whatever
the mode of loading: a server started first in a side-by-side run carries that handicap, so
scripts/vs_llama_server.py comparisons are made in both orders."""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from localspec.llama.backend import LlamaModel

PROMPT = Path(__file__).resolve().parents[1] / "localspec" / "bench" / "suites" / "summaries.json"


def decode_rate(model: LlamaModel, prompt: list[int], n_tokens: int) -> float:
    """Tokens a second of ``n_tokens`` greedy single-token steps after ``prompt``, read afresh."""
    model.truncate(0)
    model.sync_greedy(prompt[:-1])
    context = list(prompt)
    t0 = time.perf_counter()
    for _ in range(n_tokens):
        (token,) = model.sync_greedy(context, 1, len(context) - 1)
        context.append(int(token))
    return n_tokens / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("model", type=Path)
    p.add_argument("--copies", type=int, default=3)
    p.add_argument("--tokens", type=int, default=48)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--prompt-tokens", type=int, default=None, help="the prompt's last N tokens (default: all)")
    args = p.parse_args(argv)
    models = [LlamaModel.load(args.model, n_ctx=4096, threads=args.threads) for _ in range(args.copies)]
    text = json.loads(PROMPT.read_text(encoding="utf-8"))["prompts"][1]["prompt"]  # 1,725 tokens
    prompt = models[0].tokenize(text)[-(args.prompt_tokens or 0) :]
    rates: list[list[float]] = [[] for _ in models]
    for r in range(args.rounds):
        for i in [(r + j) % len(models) for j in range(len(models))]:
            rates[i].append(decode_rate(models[i], prompt, args.tokens))
    for i, got in enumerate(rates):
        print(f"loaded {i + 1}: {statistics.median(got):.2f} tok/s (rounds: {', '.join(f'{x:.2f}' for x in got)})")


if __name__ == "__main__":
    main()

"""Per-step engine overhead with a target that costs nothing: what Python adds to every step
when the target is fast (a GPU), measured on any machine.

The target is a fake of the real vocabulary size (151,936) that answers instantly, rewriting
its logits rows; the oracle drafter replays its greedy continuation. The reported overhead is
the engine's own bookkeeping time per target pass (everything but draft and verify), as the
bench and the statistics panel count it, two ways: with the greedy tokens picked by the
backend (llama.cpp's backend sampling, what ``LlamaModel`` does for a greedy reply without a
repetition penalty where the logits are computed on a GPU, the case this script stands for:
the argmax is part of the verify) and with the rows read in Python (a CPU target, any other
sampling): then every accepted token costs an argmax over the whole vocabulary, which reads
0.6 MB of memory, so that column follows the machine's memory bandwidth and the tokens per
pass (16 with adaptive k here).

    .venv/bin/python scripts/overhead.py [--context 2000] [--tokens 900] [--vocab 151936]
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np

from localspec.bench.modes import OracleDrafter
from localspec.core.controller import AdaptiveController, FixedController
from localspec.core.costs import CostModel
from localspec.core.engine import SpeculativeEngine
from localspec.core.protocol import CachedModel
from localspec.core.sampling import SamplingParams
from localspec.core.stats import RunStats


class InstantTarget(CachedModel):
    """Greedy continuation = ``sequence``. Each evaluation rewrites the rows of one resident
    buffer and hands out views of it, as llama.cpp's output buffer is rewritten in place by
    each decode (``llama_get_logits_ith``, see llama/backend.py). A fresh array per row would
    also time the kernel's page faults on memory just allocated, which no real target costs."""

    def __init__(self, sequence: list[int], n_vocab: int) -> None:
        super().__init__()
        self.n_vocab, self.n_ctx, self.sequence = n_vocab, 1 << 16, sequence
        self.picks = False  # whether the greedy tokens come from the backend, not the rows
        self._noise = np.random.default_rng(0).standard_normal((64, n_vocab)).astype(np.float32)
        self._out = np.empty_like(self._noise)

    def _decode(self, tokens, start, n_logits):
        end = start + len(tokens)
        rows = []
        for j in range(n_logits):
            row = self._out[j]
            row[:] = self._noise[j]
            row[self.sequence[end - n_logits + j + 1]] = 100.0
            rows.append(row)
        return rows

    def _remove(self, start):
        pass

    def _decode_greedy(self, tokens, start, n_logits):
        if not self.picks:  # the rows, each argmax taken in Python as it is read
            return super()._decode_greedy(tokens, start, n_logits)
        end = start + len(tokens)  # the backend picked each row's token (llama.cpp's backend sampling)
        return self.sequence[end - n_logits + 1 : end + 1]

    def tokenize(self, text, **kw):
        return [1] * len(text)

    def token_bytes(self, token):
        return b"x"

    def is_eog(self, token):
        return False


def run(target, prompt, reference, k: int | None, n_tokens: int, repeats: int) -> list[float]:
    """Overhead in ms per target pass, one figure per repeat."""
    out = []
    for _ in range(repeats):
        costs = CostModel({n: 0.004 + 0.0002 * n for n in (1, 2, 4, 8, 16)})  # a GPU-like curve
        drafter = OracleDrafter(len(prompt), reference, target.n_vocab) if k != 0 else None
        controller = AdaptiveController(costs, 16) if k is None else FixedController(costs, k)
        engine = SpeculativeEngine(target, drafter, controller)
        stats = RunStats()
        for step in engine.generate(prompt, SamplingParams(), n_tokens):
            stats.add(step)
        target.truncate(0)
        out.append(1000 * stats.overhead_seconds / stats.n_steps)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--context", type=int, default=2000, help="prompt tokens before the reply")
    ap.add_argument("--tokens", type=int, default=900)
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    rng = np.random.default_rng(1)
    sequence = [int(t) for t in rng.integers(3, args.vocab, args.context + args.tokens + 64)]
    target = InstantTarget(sequence, args.vocab)
    prompt = sequence[: args.context]
    reference = sequence[args.context : args.context + args.tokens]
    print(f"vocab {args.vocab}, context {args.context}, {args.tokens} tokens, median of {args.repeats}")
    print("ms per target pass:     greedy picked by the backend   rows read in Python")
    for label, k in (("target only", 0), ("oracle k=4", 4), ("oracle k=8", 8), ("oracle, adaptive k", None)):
        ms = []
        for target.picks in (True, False):
            ms.append(statistics.median(run(target, prompt, reference, k, args.tokens, args.repeats)))
        print(f"  {label:<20} {ms[0]:>18.3f} {ms[1]:>24.3f}")


if __name__ == "__main__":
    main()

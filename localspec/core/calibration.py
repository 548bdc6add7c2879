"""Timing the costs on this machine: the target's verify curve and the draft's pass at load
(``calibrate``), again between replies where the machine's speed moved (``recheck``), and what a
change of batch size adds where a model settles (``time_change``). What the timings mean and how
they are kept is ``costs``; this module only measures, as a verify runs (a filled cache, distinct
ordinary tokens, a logits row per token), and restores every cache it touched."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Iterator, Sequence
from statistics import median

from . import costs as _costs
from .costs import CostModel, DraftCost, VerifyCurve
from .protocol import CachedModel

# Tuning choice: a short filled cache like a chat's (attention over it is part of a verify's
# cost), of real text so the tokens are distinct and ordinary; 48 tokens keep the load fast.
CALIBRATION_TEXT = (
    'def merge_intervals(intervals):\n    """Merge overlapping intervals and return them sorted."""\n'
    "    result = []\n    for start, end in sorted(intervals):\n        if result and start <= result[-1][1]:\n"
    "            result[-1][1] = max(result[-1][1], end)\n        else:\n            result.append([start, end])\n"
    "    return result\n\nThe function sorts the intervals by their start, then walks them once. "
)
CALIBRATION_PREFIX = 48


def calibration_tokens(model: CachedModel, n: int) -> list[int]:
    """``n`` ordinary, distinct-looking token ids of this model (its own tokenizer)."""
    ids = [t for t in model.tokenize(CALIBRATION_TEXT, add_bos=False, special=False) if not model.is_eog(t)]
    if not ids:
        ids = list(range(1, min(model.n_vocab, 64)))
    return [ids[i % len(ids)] for i in range(n)]


def time_sizes(
    model: CachedModel,
    sizes: Iterable[int],
    repeats: int,
    prefix: int = CALIBRATION_PREFIX,
    warmup: int = 0,
    on_top: bool = False,
    once: Iterable[int] = (),
) -> dict[int, list[float]]:
    """Seconds of one evaluation of n tokens with n logits rows, after ``prefix`` cached tokens
    (whose evaluation pages the weights in), for each size that fits the context: ``warmup``
    untimed rounds, then ``repeats`` timed rounds across all sizes, so that a burst of noise
    lands on different sizes in different rounds; the sizes ``once``, in the last round only. A
    model that settles (``CachedModel.settle``: on a GPU) has each size timed in a run of its
    own instead, after that many untimed evaluations: its steady cost, which the verify curve
    holds (``CachedModel.steady``). The cache is restored; ``on_top``: one that holds tokens
    already (a conversation) is timed on top of them instead, and not evaluated again."""
    once = {n for n in once if 1 <= n <= model.n_ctx}
    sizes = sorted({n for n in sizes if 1 <= n <= model.n_ctx} | once)
    out: dict[int, list[float]] = {n: [] for n in sizes}
    run = sizes if model.settle else []  # sizes timed in a run of their own
    with timing_prefix(model, max(sizes, default=1), prefix, on_top) as (tokens, prefix):
        for n in run:  # each after a change of size: ``settle`` untimed evaluations
            untimed = max(warmup, model.settle)
            for r in range(untimed + (1 if n in once else repeats)):
                seconds = time_one(model, tokens[prefix : prefix + n], prefix)
                if r >= untimed:
                    out[n].append(seconds)
        for r in range(warmup + repeats):
            last = r == warmup + repeats - 1
            for n in (n for n in sizes if n not in run and (last or n not in once)):
                seconds = time_one(model, tokens[prefix : prefix + n], prefix)
                if r >= warmup:
                    out[n].append(seconds)
    return out


@contextlib.contextmanager
def timing_prefix(
    model: CachedModel, largest: int, prefix: int = CALIBRATION_PREFIX, on_top: bool = False
) -> Iterator[tuple[list[int], int]]:
    """The cache set up for timing evaluations of up to ``largest`` tokens: ``prefix`` cached
    tokens of calibration text (fewer where the context is short), or with ``on_top`` the
    conversation it holds; checkpointed, so each evaluation rolls back to it (``time_one``).
    Yields the calibration tokens and the prefix's length; the cache is restored after."""
    saved = list(model.cached)
    on_top = on_top and 0 < len(saved) <= model.n_ctx - largest
    prefix = len(saved) if on_top else max(0, min(prefix, model.n_ctx - largest))
    tokens = calibration_tokens(model, prefix + largest)
    try:
        if not on_top:
            model.truncate(0)
            if prefix:
                model.evaluate(tokens[:prefix], 1)
        model.checkpoint()
        yield tokens, prefix
    finally:
        model.sync(saved)


def time_one(model: CachedModel, tokens: list[int], prefix: int) -> float:
    """Seconds to evaluate ``tokens`` with a logits row each; the cache is rolled back to ``prefix``."""
    t0 = _costs.clock()
    model.evaluate(tokens, len(tokens))
    seconds = _costs.clock() - t0
    model.truncate(prefix)
    return seconds


# Tuning choice: the sizes a change is timed into (a short verify, a typical one, a long one),
# each from single tokens and back, three rounds: the median of 18 changes.
CHANGE_SIZES = (2, 4, 8)


def time_change(model: CachedModel, sizes: Sequence[int] = CHANGE_SIZES, rounds: int = 3) -> float:
    """Seconds a change of batch size adds, for a model that settles (``CachedModel.settle``: on a
    GPU, llama.cpp's CUDA backend captures its graph again): the ``settle`` + 1 evaluations right
    after a change, over the same number right after them at the same size, a change from single
    tokens into each size and one back, the median. 0 for a model that does not settle (a CPU:
    measured to cost nothing there, docs/benchmarks.md), which is not timed, and where the
    changes came out dearer no more often than chance would have it (``dearer``): a backend
    whose changes cost nothing times noise, half of it above 0."""
    return counted_change(change_excess(model, sizes, rounds))


def counted_change(excess: Sequence[float]) -> float:
    """The change that timed ``excess`` stands for: their median where they came out dearer than
    chance would have it (``dearer``), else 0."""
    return max(median(excess), 0.0) if excess and dearer(excess) else 0.0


def change_excess(model: CachedModel, sizes: Sequence[int] = CHANGE_SIZES, rounds: int = 3) -> list[float]:
    """``time_change``'s timed excesses, seconds each (none for a model that does not settle)."""
    sizes = [n for n in sizes if 1 < n <= model.n_ctx // 2]
    if not model.settle or not sizes:
        return []
    m = model.settle + 1
    excess: list[float] = []
    with timing_prefix(model, max(sizes)) as (tokens, prefix):

        def run(n: int) -> float:
            return sum(time_one(model, tokens[prefix : prefix + n], prefix) for _ in range(m))

        run(1)
        for _ in range(rounds):
            for n in sizes:
                excess.append(run(n) - run(n))  # into n, then steady at n
                excess.append(run(1) - run(1))  # back to single tokens, then steady
    return excess


def dearer(excess: Sequence[float], significance: float = 0.01) -> bool:
    """Whether more of ``excess`` is above 0 than a fair coin would make it (a sign test, at the
    1 % level, so a backend whose changes cost nothing is read as one that pays for them at one
    load in a hundred at most): 15 of 18 or more."""
    n, above = len(excess), sum(e > 0 for e in excess)
    return sum(math.comb(n, i) for i in range(above, n + 1)) / 2**n < significance


def calibrate(
    target: CachedModel,
    sizes: Sequence[int] = (1, 2, 3, 4, 6, 8),
    draft: CachedModel | None = None,
    repeats: int = 3,
    prefix: int = CALIBRATION_PREFIX,
    warmup: int = 0,
    once: Sequence[int] = (),
) -> tuple[VerifyCurve, DraftCost]:
    """The target's verify curve (``once``: sizes timed in one round, see time_sizes) and the
    draft's pass time, measured here. No warm-up round by default: a first-use spike is one
    sample of three, which the median ignores, and the load stays short (a few seconds for a
    1.5B target and a 0.5B draft on 2 CPU cores). Where a model settles (a GPU), what a change
    of its batch size costs too (``time_change``)."""
    curve = VerifyCurve(samples=time_sizes(target, sizes, repeats, prefix, warmup, once=once))
    curve.change = time_change(target)
    draft_cost = DraftCost()
    if draft is not None:
        for s in time_sizes(draft, (1,), repeats, prefix, warmup).get(1, []):
            draft_cost.observe(1, s)
        draft_cost.observe_read(prefix, time_read(draft, prefix))
        draft_cost.change = time_change(draft)
    return curve, draft_cost


def recheck(
    costs: CostModel, target: CachedModel, sizes: Sequence[int], draft: CachedModel | None = None, probe: bool = False
) -> bool:
    """Between replies, on top of the caches (left as they were): where the machine's speed
    ``moved`` since the calibration, or a ``probe`` of T(1) (the best of two) ``differs`` from it,
    time the curve and the draft's pass again in place of the calibration: one round of every
    size, beside the probe's T(1)s (a size with fewer than MIN_SAMPLES is read at its lowest
    until the verifies fill its window), so the reply that pays for it waits about one pass of
    each size. Whether it did."""
    probed = time_sizes(target, (1,), 2, on_top=True) if probe else {}
    moved = costs.verify.moved or costs.verify.differs(1, min(probed.get(1, [0.0])))
    if moved:
        fresh = time_sizes(target, sizes, 1, on_top=True)
        fresh[1] = fresh.get(1, []) + probed.get(1, [])
        passes = time_sizes(draft, (1,), 2, on_top=True).get(1, []) if draft is not None else []
        costs.recalibrate(VerifyCurve(samples=fresh), passes)
    return moved


def time_read(model: CachedModel, n: int) -> float:
    """Seconds to read ``n`` tokens into an empty cache (the weights are paged in by then:
    ``time_sizes`` ran first). The cache is restored."""
    saved = list(model.cached)
    n = min(n, model.n_ctx)
    try:
        model.truncate(0)
        t0 = _costs.clock()
        model.evaluate(calibration_tokens(model, n), 1)
        return _costs.clock() - t0
    finally:
        model.sync(saved)

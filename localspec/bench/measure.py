"""What one bench run measures: one reply in one mode (``run_once``), every run starting from
an empty cache, and the target's cost curve T(k) measured directly (``measure_costs``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import median

from ..core.calibration import calibrate, time_one, timing_prefix
from ..core.costs import CostModel
from ..core.options import MAX_DRAFT
from ..core.sampling import SamplingParams
from ..core.stats import RunStats
from .modes import ReplaysReference, split_mode

# every size to 16, then every 4th to the longest verify the engine asks for (a copy's: MAX_DRAFT + 1)
COST_SIZES = (*range(1, 17), *range(20, MAX_DRAFT + 1, 4), MAX_DRAFT + 1)


@dataclass(kw_only=True)
class WarmRun:
    """One reply of the warm bench (the pair stays loaded and each mode keeps its controller;
    ``cold.ColdRun`` is a fresh process's)."""

    prompt_id: str
    category: str
    mode: str
    temperature: float
    stats: dict
    text: str
    tokens: list[int] = field(repr=False)
    alpha: float | None  # per-token acceptance (geometric estimate) of this run


def measure_costs(session, prefix: int = 200, repeats: int = 5) -> CostModel:
    """T(k) for ``COST_SIZES`` and one draft pass, measured directly: after
    ``prefix`` cached tokens, medians of ``repeats`` interleaved rounds; caches restored."""
    return CostModel(
        *calibrate(session.target, COST_SIZES, draft=session.draft, repeats=repeats, prefix=prefix, warmup=1)
    )


def size_change(session, k: int = 4, prefix: int = 200, repeats: int = 5, settle: int = 2) -> dict:
    """What changing the batch size costs beyond each size's steady cost (llama.cpp's CUDA
    backend re-captures its graph after every change, ``CachedModel.settle``; a CPU pays
    nothing): rounds of one-token steps, a verify of ``k``, two one-token steps, then ``k``
    repeated, each size timed steady after ``settle`` untimed; medians, seconds. The cache is
    restored."""
    model = session.target
    timed: dict[str, list[float]] = {"one": [], "k_after_ones": [], "one_after_k": [], "two_after_k": [], "k": []}
    with timing_prefix(model, k, prefix) as (tokens, prefix):
        one, many = tokens[prefix : prefix + 1], tokens[prefix : prefix + k]
        for _ in range(repeats):
            for _ in range(settle):
                time_one(model, one, prefix)
            timed["one"].append(time_one(model, one, prefix))
            timed["k_after_ones"].append(time_one(model, many, prefix))
            timed["one_after_k"].append(time_one(model, one, prefix))
            timed["two_after_k"].append(time_one(model, one, prefix))
            for _ in range(settle):
                time_one(model, many, prefix)
            timed["k"].append(time_one(model, many, prefix))
    m = {key: median(values) for key, values in timed.items()}
    extra = m["k_after_ones"] - m["k"] + m["one_after_k"] + m["two_after_k"] - 2 * m["one"]
    at_load = session.costs.change  # one change, as the load timed it: what the steady sizes are planned on
    return {"k": k, "seconds": m, "extra_seconds": extra, "extra_over_t1": extra / m["one"], "at_load_seconds": at_load}


def run_once(
    session, prompt: dict, mode: str, params: SamplingParams, max_tokens: int, reference: Sequence[int] | None = None
) -> WarmRun:
    """One reply in ``mode`` (registered: see ``modes.register_modes``); an oracle or the
    verdicts mode replays ``reference``, the target-only reply of ``prompt``."""
    session.reset()  # every run starts cold: no prefix reuse across modes
    params = params.model_copy(update={"rule": split_mode(mode)[1]})
    build = session.modes[mode].build
    if isinstance(build, ReplaysReference):
        build.replay(prompt["id"], reference, params.seed or 0)
    stats = RunStats()
    tokens: list[int] = []
    text: list[str] = []
    n_rejections = 0
    msgs = [{"role": "user", "content": prompt["prompt"]}]
    for step in session.chat(msgs, params, max_tokens, mode=mode, repeatable=False):
        stats.add(step)
        tokens.extend(step.emitted)
        text.append(step.text)
        n_rejections += step.n_accepted < len(step.drafted)
    alpha = stats.n_accepted / (stats.n_accepted + n_rejections) if stats.n_drafted else None
    return WarmRun(
        prompt_id=prompt["id"],
        category=prompt["category"],
        mode=mode,
        temperature=params.temperature,
        stats=stats.as_dict(),
        text="".join(text),
        tokens=tokens,
        alpha=alpha,
    )


def first_divergence(session, prompt: dict, ref: Sequence[int], got: Sequence[int]) -> dict | None:
    """Where a greedy speculative text parts from target-only (``Session.divergence``)."""
    return session.divergence([{"role": "user", "content": prompt["prompt"]}], ref, got)

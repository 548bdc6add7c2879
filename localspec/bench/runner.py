"""Measured speed-ups, side by side: every mode runs on the same prompt, interleaved
(A, B, A, B ...) after a warm-up, so a noisy machine slows them alike. Speed-ups are ratios of
runs measured in this process, never against a stored number. Returns data; the CLI prints.

One reply is measured by ``measure``, the bench's own modes live in ``modes``, the suites in
``suites``, the report in ``report``; ``cold`` runs each reply in a fresh process instead.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..core.sampling import SamplingParams
from .measure import WarmRun, measure_costs, run_once, size_change
from .modes import parse_fixed, register_modes
from .report import curve_comparison, report, summarise, sweep_summary
from .suites import SUITE_MAX_TOKENS
from .verdicts import RecordedVerdicts


def run_bench(
    session,
    suite: dict,
    modes: Sequence[str],
    temperatures: Sequence[float],
    repeats: int = 1,
    seed: int = 1234,
    progress: Callable[[int, int, str], None] | None = None,
    verdicts: RecordedVerdicts | None = None,
) -> dict:
    """Every prompt in every mode, interleaved; the direct cost curve is measured at the end
    (a filled cache, after the runs have warmed everything) and set beside the engine's.
    ``verdicts``: what the verdicts mode replays, where ``modes`` has it."""
    max_tokens = suite.get("max_tokens", SUITE_MAX_TOKENS)
    prompts = suite["prompts"]
    total = len(prompts) * len(modes) * len(temperatures) * repeats + 2
    done = 0
    say = progress or (lambda *_: None)
    register_modes(session, modes, verdicts)
    say(done, total, "warm-up")
    run_once(session, prompts[0], modes[0], SamplingParams(), 8)  # page weights in, warm caches
    done += 1
    collected = []
    for prompt in prompts:
        for temp in temperatures:
            params = SamplingParams(temperature=temp, seed=seed)
            runs: dict[str, list[WarmRun]] = {m: [] for m in modes}
            for _ in range(repeats):
                for mode in modes:  # interleaved: A, B, C, A, B, C
                    say(done, total, f"{prompt['id']} {mode} t={temp}")
                    ref = runs["none"][0].tokens if runs.get("none") else None
                    runs[mode].append(run_once(session, prompt, mode, params, max_tokens, ref))
                    done += 1
            collected.append((prompt, temp, runs))
    say(done, total, "measuring the cost curve directly")
    costs = measure_costs(session)
    rows = [row for prompt, temp, runs in collected for row in summarise(session, costs, prompt, temp, runs)]
    say(done + 1, total, "done")
    rep = report(rows, costs, session, suite, modes, temperatures, repeats)
    rep["engine_curve"] = curve_comparison(session.costs, costs)
    rep["size_change"] = size_change(session)
    if any(parse_fixed(m) for m in modes):
        rep["sweep"] = sweep_summary(collected)
    return rep

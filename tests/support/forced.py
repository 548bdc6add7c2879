"""Forced drafting on real (tiny) models: every step drafts k tokens, whatever they cost, so a
test exercises acceptance, rejection and rollback on each step (``FixedController``)."""

from __future__ import annotations

from localspec.core.controller import FixedController
from localspec.core.costs import CostModel
from localspec.core.engine import SpeculativeEngine, Step
from localspec.core.sampling import SamplingParams

GREEDY = SamplingParams(temperature=0.0)


def fixed(k: int) -> FixedController:
    return FixedController(CostModel(verify={1: 1.0}), k)


def generate(
    target, drafter, k: int, prompt, n: int = 60, params: SamplingParams = GREEDY
) -> tuple[list[int], list[Step]]:
    """(the reply's tokens, its steps): ``drafter`` drafting ``k`` tokens every step."""
    engine = SpeculativeEngine(target, drafter, fixed(k))
    steps = list(engine.generate(prompt, params, n))
    return [t for s in steps for t in s.emitted], steps


def beside_target_alone(target, drafter, k: int, prompt, n: int = 60) -> tuple[list[int], list[int], int, int]:
    """(the target alone's greedy reply, the reply with ``drafter`` drafting ``k`` every step,
    tokens drafted, tokens accepted); the target's cache is emptied between the two."""
    from localspec.core.drafters import NoDrafter

    expected, _ = generate(target, NoDrafter(), 0, prompt, n)
    target.truncate(0)
    got, steps = generate(target, drafter, k, prompt, n)
    return expected, got, sum(len(s.drafted) for s in steps), sum(s.n_accepted for s in steps)


def acceptance(target, drafter, k: int, prompt, n: int = 48) -> float:
    """Tokens accepted over tokens drafted in a greedy reply of ``n`` tokens, ``drafter``
    drafting ``k`` every step; the target's cache is emptied first."""
    target.truncate(0)
    _, steps = generate(target, drafter, k, prompt, n)
    return sum(s.n_accepted for s in steps) / sum(len(s.drafted) for s in steps)

"""Choosing the draft length k each step: the one that maximises expected tokens per second
here (``costs.speeds``), k = 0 (the target alone) among the candidates, from the acceptance
and the measured speed (``estimates``), with tries while drafting is off (``budget.Tries``).
On a compute-bound target T(n) grows almost linearly and k = 0 often wins; on a memory-bound one
(a big model, a GPU) T(n) is nearly flat and long drafts pay. Each step's decision is a
``choice.Choice`` with its ``Reason``; ``explain`` puts it in words."""

from __future__ import annotations

import copy as _copy
import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from typing import TypeAlias

import numpy as np

from .budget import Tries, trial_length
from .choice import Choice, Reason
from .costs import CostModel, best_k, extension_value, speeds
from .drafters import Draft
from .estimates import Acceptance
from .options import DEFAULT_DRAFT_MAX
from .plan import Decides
from .policy import DEFAULT, Policy
from .reading import Reading, plan_reading
from .sizes import SteadySize


class FixedController(Decides):
    """``--no-adapt``: ``k`` drafts every step (0: the target alone), nothing tried; the
    acceptance is counted for the predicted speed-up only."""

    def __init__(self, costs: CostModel, k: int, reason: str = "fixed: --no-adapt", policy: Policy = DEFAULT) -> None:
        self.costs, self.k, self.draft_max = costs, k, k
        self.reason, self.policy = reason, policy  # what the drafting line says fixed it
        self.acceptance = Acceptance(policy=policy)
        self.reading: Reading | None = None  # never planned: k every step, whatever reading costs

    def plan_read(self, n_prompt: int, n_read: int, n_reply: int) -> None:
        """Nothing to weigh: a fixed k drafts every step, the prompt's reading at its first."""

    def choose(self, behind: Callable[[], int] | None = None, budget: int | None = None) -> Choice:
        fixed = Choice(self.k, math.nan, math.nan, reason=Reason.FIXED, best_k=self.k, note=self.reason)
        if not self.costs.verify:
            return fixed
        rates = speeds(self.costs, self.acceptance.alpha, self.k)
        speedup = float(rates[self.k] / rates[0])
        return replace(fixed, predicted_tps=float(rates[self.k]), baseline_tps=float(rates[0]), best_speedup=speedup)

    def state(self) -> Choice:
        return self.choose()

    def pick(self, copies: Sequence[Draft], k: int, room: int = 0) -> tuple[Draft | None, int]:
        alpha = self.acceptance.alpha
        return pick_copy(copies, self.costs, lambda: speeds(self.costs, alpha, k), k, self.policy, alpha, room)

    def begin_reply(self) -> None:
        pass

    def observe(self, n_drafted: int, n_accepted: int, passes: int = 0) -> None:
        self.acceptance.observe(n_drafted, n_accepted, passes)


def best_gain(rates: np.ndarray) -> float:
    return float(rates.max() / rates[0])


def pick_copy(
    copies: Sequence[Draft],
    costs: CostModel,
    rates: Callable[[], np.ndarray],
    k: int,
    policy: Policy,
    alpha: float = 0.0,
    room: int = 0,
) -> tuple[Draft | None, int]:
    """The copy a step verifies in place of ``k`` drafts (``rates()``: ``costs.speeds`` at the
    learnt acceptance ``alpha``), and how many tokens the draft model adds after it. Beside
    drafts, the copy of the best expected rate (its source's acceptance, no draft pass) where it
    beats the drafts' by ``min_gain``, extended by up to k tokens within the ``room`` a verify
    has left where they are worth more than the drafts' steps would make of that time, or a
    sure copy's own rate (``costs.extension_value``); in place of the target alone (k = 0), or before anything is
    timed, the first proposed, alone: its gate priced it."""
    proposed = [c for c in copies if c.ids]
    if not proposed or k == 0 or not costs.verify:
        return (proposed[0] if proposed else None), 0
    bar = policy.min_gain * float(rates()[k])
    best, best_tps = None, bar
    for copy in proposed:
        j = len(copy.ids)
        tps = float(speeds(costs, copy.alpha, j, t_draft=0.0, steady=costs.size)[j]) if copy.alpha is not None else 0
        if tps > best_tps:
            best, best_tps = copy, tps
    if best is None or best.alpha is None:
        return None, 0
    j = len(best.ids)
    rate = best_tps if best.alpha >= 1.0 else bar  # a sure copy's time is worth its own rate: it copies on
    return best, int(np.argmax(extension_value(costs, best.alpha, j, alpha, max(min(k, room - j), 0), rate)))


class AdaptiveController(Decides):
    """The best k at the learnt acceptance, else tries as the budget affords. ``gated``: k is a
    cap, a gate weighs each proposal (prompt lookup); ``extend_when_sure``: a draft sure of its
    tokens may run past k (``rules.MarginalRule``)."""

    def __init__(
        self,
        costs: CostModel,
        draft_max: int = DEFAULT_DRAFT_MAX,
        gated: bool = False,
        extend_when_sure: bool = False,
        prior: float | None = None,
        policy: Policy = DEFAULT,
    ) -> None:
        self.costs, self.draft_max, self.gated, self.extend_when_sure = costs, draft_max, gated, extend_when_sure
        self.policy = policy
        self.acceptance, self.tries = Acceptance(prior, policy), Tries(costs, policy)
        self.drafted = self.resumed = False  # any draft pass run yet; the last try found drafting pays
        self._steps = 0  # this reply's
        self.steady = SteadySize(costs, policy)  # the rows verified, where a change of size costs
        self.last: Choice | None = None
        self.reading: Reading | None = None  # what the draft reads of this reply's prompt

    def plan_read(self, n_prompt: int, n_read: int, n_reply: int) -> Reading:
        """Whether the draft reads the ``n_read`` prompt tokens it has not read, for a reply of
        ``n_reply`` expected tokens (``reading``): what drafting saves at the learnt acceptance;
        off, what a first try (which no budget prices) could save at best; off after that,
        nothing here, since a try prices its catch-up itself (``budget.Tries``)."""
        rates = self.speeds() if self.costs.verify else np.ones(1)
        if self.costs.verify and self.model_k(rates) == 0:
            rates = self.speeds(1.0) if not self.drafted else rates[:1]
        self.reading = plan_reading(self.costs, rates, n_prompt, n_read, n_reply, self.policy)
        return self.reading

    @property
    def alpha(self) -> float:
        return self.acceptance.alpha

    def speeds(self, alpha: float | None = None) -> np.ndarray:
        """costs.speeds for k = 0..draft_max at the learnt acceptance and proposal rate, or at
        ``alpha`` for a drafter that always proposes."""
        if alpha is not None:
            return speeds(self.costs, alpha, self.draft_max)
        return speeds(self.costs, self.alpha, self.draft_max, propose=self.acceptance.propose)

    def best_case(self) -> float:
        """Drafting's speed-up at its best k were every draft token accepted."""
        return best_gain(self.speeds(1.0))

    def model_k(self, rates: np.ndarray | None = None) -> int:
        """The k the speed model wants (gated: the cap, wherever the hardware could pay)."""
        if not self.costs.verify:
            return min(self.policy.probe_k, self.draft_max)
        if self.gated:
            return self.draft_max if self.best_case() >= self.policy.min_gain else 0
        return best_k(self.speeds() if rates is None else rates, self.policy.min_gain)

    def on(self) -> bool:
        """Whether a step now would draft at the model's k (not as a try)."""
        return self.model_k() > 0

    def begin_reply(self) -> None:
        self.acceptance.begin_reply()
        self._steps = 0
        self.steady.reset()

    def choose(self, behind: Callable[[], int] | None = None, budget: int | None = None) -> Choice:
        """This step's k and why, and where a change of batch size costs, the rows it verifies
        (``SteadySize``); ``behind()``: the tokens the draft must read first (for a try's price);
        ``budget``: the tokens the reply may still have (for what a change of size saves)."""
        self._steps += 1
        propose = self.acceptance.propose
        self.last = self.steady.plan(self._choose(behind), self.alpha, propose, budget, self.gated)
        return self.last

    def pick(self, copies: Sequence[Draft], k: int, room: int = 0) -> tuple[Draft | None, int]:
        """The copy a step verifies, if any, and the draft model's tokens after it (``pick_copy``)."""
        return pick_copy(copies, self.costs, self.speeds, min(k, self.draft_max), self.policy, self.alpha, room)

    def state(self) -> Choice:
        """The last step's choice; before any, what one would be now (on a copy: nothing spent)."""
        if self.last is not None:
            return self.last
        return _copy.deepcopy(self).choose(lambda: self.tries.behind)

    def _choose(self, behind: Callable[[], int] | None) -> Choice:
        if not self.costs.verify:
            k = min(self.policy.probe_k, self.draft_max)
            return Choice(k, math.nan, math.nan, reason=Reason.UNMEASURED, best_k=k)
        rates = self.speeds()
        k = self.model_k(rates)
        if self.reading is not None and (self.reading.skip or (self.reading.hold and self._steps == 1)):
            return self._reading(rates, k)
        if self.tries.trial_over(k > 0, partial(switches_on, self)):
            self.resumed = k > 0  # drafting pays again, or not
            self.tries.judged(k > 0)
        if k == 0:
            return self._off(rates, behind)
        self.tries.left = 0
        base, alpha = float(rates[0]), self.alpha
        if self.gated:  # the gate predicts each proposal, not the controller
            return Choice(k, math.nan, base, reason=Reason.GATED, alpha=alpha, best_k=k, resumed=self.resumed)
        # a sure draft runs past k, but not past a steady size: real runs mostly end too soon to
        # pay its two changes of size (docs/design.md, "Sure runs where a change costs")
        draft_max = self.draft_max if self.extend_when_sure and not self.costs.change else 0
        speedup = float(rates[k] / base)
        return Choice(
            k, float(rates[k]), base, draft_max, alpha=alpha, best_k=k, best_speedup=speedup, resumed=self.resumed
        )

    def _reading(self, rates: np.ndarray, k: int) -> Choice:
        """No draft this step: the draft has the prompt to read, which costs more than this
        reply can win (``Reading.skip``), or would delay the first token (``Reading.hold``)."""
        base = float(rates[0])
        return Choice(
            0, base, base, reason=Reason.READING, alpha=self.alpha, best_k=k, best_speedup=float(rates[k] / base)
        )

    def _off(self, rates: np.ndarray, behind: Callable[[], int] | None) -> Choice:
        """Off: at the learnt acceptance drafting does not pay. A try drafts ``probe_k`` tokens for as
        long as its drafts could switch drafting on (``budget.trial_length``), made once the budget
        affords its price (a first try: once the opening is over)."""
        probe_k, base = min(self.policy.probe_k, self.draft_max), float(rates[0])
        self.resumed = False
        best = float(rates[1:].max() / base) if len(rates) > 1 else 0.0
        off = Choice(0, base, base, reason=Reason.ACCEPTANCE, alpha=self.alpha, best_speedup=best)
        off = replace(off, propose=self.acceptance.propose)
        trying = replace(off, reason=Reason.TRY, k=probe_k, predicted_tps=float(rates[probe_k]))
        if self.tries.left > 0:
            self.tries.left -= 1
            return trying
        perfect = self.speeds(1.0)
        if best_gain(perfect) < self.policy.min_gain:  # even drafts always accepted could not pay here
            best = float(perfect[1:].max() / perfect[0]) if len(perfect) > 1 else 1.0  # (a longest draft of 0)
            return replace(off, reason=Reason.HARDWARE, alpha=1.0, best_speedup=best)
        if self._steps <= self.policy.opening_steps and not self.drafted:  # the first try: after the opening, unpriced
            return replace(off, next_try_in=self.policy.opening_steps + 1 - self._steps)
        # what drafting could win at best: every proposal accepted, at the rate the drafter proposes
        reach = speeds(self.costs, 1.0, self.draft_max, propose=self.acceptance.propose)
        best_saving = (best_gain(reach) - 1.0) * self.costs.T(1)
        if (steps := trial_length(partial(switches_on, self), self.policy.trial_steps)) is None:
            return replace(off, unreachable=True)
        if not self.tries.due(rates, probe_k, behind, best_saving, self.drafted):
            return replace(off, next_try_in=self.tries.next_in(), outpaced=self.tries.outpaced)
        self.tries.start(steps)
        return trying

    def observe(self, n_drafted: int, n_accepted: int, passes: int = 0) -> None:
        self.drafted = self.drafted or n_drafted > 0 or passes > 0  # a refused pass was a try too
        self.acceptance.observe(n_drafted, n_accepted, passes)


def switches_on(controller: AdaptiveController, steps: int) -> bool:
    """Whether ``steps`` try steps, every draft accepted, would switch ``controller``'s drafting on."""
    probe_k, acceptance = min(controller.policy.probe_k, controller.draft_max), _copy.copy(controller.acceptance)
    for _ in range(steps):
        acceptance.observe(probe_k, probe_k)
    rates = speeds(controller.costs, acceptance.alpha, controller.draft_max, propose=acceptance.propose)
    return controller.model_k(rates) > 0


Controller: TypeAlias = FixedController | AdaptiveController

"""Choosing the draft length k each step: the one that maximises expected tokens per second
here (``costs.speeds``: Leviathan et al. 2023 with the measured T(n) and draft pass).

On a compute-bound target T(n) grows almost linearly and k = 0, the target alone, often wins;
on a memory-bound one (a big model, a GPU) T(n) is nearly flat and long drafts pay. The parts,
each with one job:

- ``estimates.Acceptance``: the per-token acceptance estimate, from a prior that is what this
  pair measured here before (its profile) or a reasoned default, weighted so one step cannot
  overturn it;
- ``estimates.SpeedGuard``: drafting must also *measure* at least as fast as the target alone;
- ``Budget`` (its own module): what tries of drafting and measurements may spend, and
  ``Explorer``, which measures verify sizes the curve is unsure of;
- ``AdaptiveController`` puts them together; ``FixedController`` is ``--no-adapt``.

``explain`` (its own module) says in words why drafting is on or off.
"""

from __future__ import annotations

import copy as _copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from typing import Protocol

import numpy as np

from .budget import Budget, Explorer
from .costs import READ_MIN, CostModel, speeds, step_seconds
from .drafters import Draft
from .estimates import Acceptance, SpeedGuard
from .policy import DEFAULT, Policy


class Reason(Enum):
    """Why a step drafts what it does: the one decision, which ``explain`` only puts in words."""

    UNMEASURED = "unmeasured"  # nothing timed yet: a moderate start (policy.unmeasured_k)
    FIXED = "fixed"  # a fixed k (--no-adapt, a seeded reply; 0: the target alone)
    ON = "on"  # the best k at the learnt acceptance, and the guard agrees
    GATED = "gated"  # k is a cap: the drafter's gate weighs each proposal (prompt lookup)
    TRY = "try"  # off, and a try's trial is under way
    HARDWARE = "hardware"  # off: even policy.optimistic_alpha could not pay here
    ACCEPTANCE = "acceptance"  # off: at the learnt acceptance drafting does not pay
    GUARD = "guard"  # off: drafting measured slower than the target alone


@dataclass(frozen=True)
class Choice:
    k: int
    predicted_tps: float  # expected tokens/s at this k
    baseline_tps: float  # expected tokens/s of the target alone (k = 0)
    # > 0: pad this step's verify to this many tokens to measure T there (the padding rows are
    # evaluated and thrown away, like rejected drafts): budget.Explorer
    measure: int = 0
    draft_max: int = 0  # > k: a draft the drafter is sure of may run this long (rules.MarginalRule)
    reason: Reason = Reason.ON
    # the figures behind the reason
    alpha: float = math.nan  # the acceptance estimate the choice was made at
    best_k: int = 0  # the k the speed model wants (a step that measures T(1) drafts none)
    best_speedup: float = math.nan  # expected speed-up at best_k (HARDWARE: at policy.optimistic_alpha)
    guard_tps: float | None = None  # GUARD: tokens/s drafting measured
    next_try_in: int | None = None  # off: steps until the next try (None: none comes)
    outpaced: bool = False  # off: the draft's catch-up grows faster than tries earn (Tries.outpaced)
    resumed: bool = False  # on: the last try found drafting pays again
    note: str = ""  # FIXED: what fixed it

    @property
    def predicted_speedup(self) -> float:
        return self.predicted_tps / self.baseline_tps  # nan until something was measured


class Controller(Protocol):
    """What the engine asks of a controller."""

    costs: CostModel
    draft_max: int
    acceptance: Acceptance

    def choose(self, behind: Callable[[], int] | None = None) -> Choice: ...

    def state(self) -> Choice:
        """The choice that explains drafting now: the last step's, or before any step what
        one would choose."""
        ...

    def pick(self, copies: Sequence[Draft], k: int) -> Draft | None:
        """The free proposal (a copy) this step verifies in place of ``k`` drafts, if any."""
        ...

    def begin_reply(self) -> None: ...

    def wants_prefill(self) -> bool: ...

    def recheck_draft(self) -> bool: ...

    def observe(self, n_drafted: int, n_accepted: int, refused: bool = False) -> None:
        """A verify kept ``n_accepted`` of ``n_drafted`` drafts; ``refused``: the drafter ran a
        pass and proposed nothing, which counts as one rejected token (a draft that stands
        behind nothing it sees must stop costing passes)."""
        ...

    def observe_rate(self, n_tokens: int, seconds: float, passes: int | None = None) -> None: ...


class FixedController:
    """``--no-adapt``: ``k`` drafts every step (0: the target alone); nothing is tried, guarded
    or measured. The acceptance is counted only for the predicted speed-up."""

    def __init__(self, costs: CostModel, k: int, reason: str = "fixed: --no-adapt", policy: Policy = DEFAULT) -> None:
        self.costs, self.k, self.draft_max = costs, k, k
        self.reason, self.policy = reason, policy  # what the drafting line says fixed it
        self.acceptance = Acceptance(policy=policy)

    def choose(self, behind: Callable[[], int] | None = None) -> Choice:
        fixed = Choice(self.k, math.nan, math.nan, reason=Reason.FIXED, best_k=self.k, note=self.reason)
        if not self.costs.verify:
            return fixed
        rates = speeds(self.costs, self.acceptance.alpha, self.k)
        speedup = float(rates[self.k] / rates[0])
        return replace(fixed, predicted_tps=float(rates[self.k]), baseline_tps=float(rates[0]), best_speedup=speedup)

    def state(self) -> Choice:
        return self.choose()

    def pick(self, copies: Sequence[Draft], k: int) -> Draft | None:
        return pick_copy(copies, k, self.policy)

    def begin_reply(self) -> None:
        pass

    def wants_prefill(self) -> bool:
        return self.k > 0

    def recheck_draft(self) -> bool:
        return False

    def observe(self, n_drafted: int, n_accepted: int, refused: bool = False) -> None:
        self.acceptance.observe(*((1, 0) if refused else (n_drafted, n_accepted)))

    def observe_rate(self, n_tokens: int, seconds: float, passes: int | None = None) -> None:
        pass


def pick_copy(copies: Sequence[Draft], k: int, policy: Policy) -> Draft | None:
    """The first copy long enough and trusted enough (``policy.min_copy``; its source's
    acceptance at least ``policy.min_copy_alpha`` in place of ``k`` > 0 model drafts, at least
    ``policy.min_off_copy_alpha`` in place of a step of the target alone)."""
    bar = policy.min_copy_alpha if k > 0 else policy.min_off_copy_alpha
    for copy in copies:
        if len(copy.ids) >= policy.min_copy and copy.alpha is not None and copy.alpha >= bar:
            return copy
    return None


def price_of_try(
    costs: CostModel,
    rates: np.ndarray,
    k: int,
    guard: SpeedGuard | None,
    behind: Callable[[], int] | None,
    steps_off: int = 0,
    policy: Policy = DEFAULT,
) -> float:
    """What a try of ``k`` drafts is expected to lose: the draft model's catch-up on the
    ``behind()`` tokens it has not read, and its trial steps' shortfall against the target
    alone, at the learnt acceptance or, where the ``guard`` said no, at the rate and step time
    it measured; each step at least ``policy.loss_floor`` of its time. What the guard's trial
    lost fades by ``policy.decay`` a step in the ``steps_off`` since, as every verdict does: the
    machine's load changes (a busy stretch is the usual reason for a no), so a slow trial says
    less the older it is."""
    n_behind = behind() if behind else 0
    catch_up = costs.read(n_behind) if n_behind >= READ_MIN else 0.0
    step = step_seconds(costs, k)
    loss = step * max(1.0 - float(rates[k] / rates[0]), policy.loss_floor)
    if guard is not None and guard.rate is not None:
        step = max(step, guard.seconds / guard.weight)
        fade = policy.decay**steps_off
        loss = max(loss, fade * step * (1.0 - guard.rate * costs.T(1)))
    return catch_up + policy.trial_steps * loss


class Tries:
    """Tries of drafting while it is off: each off step earns a share of what drafting could
    win at best (``policy.first_try_share``, halved by each failed try in a row down to
    ``policy.try_share``), and a try is made once the budget covers its price
    (``price_of_try``); a try where the model wants no drafting lasts ``policy.trial_steps``
    steps at ``policy.probe_k``."""

    def __init__(self, policy: Policy = DEFAULT) -> None:
        self.policy = policy
        self.budget = Budget(policy.first_try_share)
        self.price = self.earning = 0.0  # the next try's price, and what a step earns
        self.behind, self.growth = 0, 0.0  # tokens the draft is behind on, and what the last step added to the price
        self.left = 0  # steps left of a try at policy.probe_k
        self.started = False  # the guard's trial under way began as a try
        self.failed = 0  # tries in a row that did not switch drafting back on
        self.steps_off = 0  # steps since drafting last ran

    def earn(self, stake: float) -> None:
        """An off step: ``stake`` is what drafting could win in it at best."""
        self.steps_off += 1
        self.earning = self.budget.share * stake
        self.budget.earn(stake, cap=max(self.earning * self.policy.banked_steps, self.price))

    def judged(self, on: bool) -> None:
        """A try's trial ended with drafting ``on`` again (the share starts over) or not (it halves)."""
        self.started = False
        self.failed = 0 if on else self.failed + 1
        self.budget.share = max(self.policy.first_try_share / 2**self.failed, self.policy.try_share)

    def try_now(
        self, costs: CostModel, rates: np.ndarray, k: int, guard: SpeedGuard | None, behind: Callable[[], int] | None
    ) -> bool:
        """Whether the budget affords a try of ``k`` drafts now (``price_of_try``), the draft
        ``behind()`` tokens behind: each token it fell behind since the last step grew the price."""
        n_behind = behind() if behind else 0
        grown = n_behind - self.behind if self.behind and n_behind >= READ_MIN else 0
        self.behind = n_behind
        price = price_of_try(costs, rates, k, guard, lambda: n_behind, self.steps_off, self.policy)
        return self.afford(price, costs.read(max(grown, 0)))

    def afford(self, price: float, growth: float = 0.0) -> bool:
        """Spend ``price`` if the budget holds it; ``growth``: what the draft's catch-up in it grew
        by since the last step."""
        self.price, self.growth = price, growth
        if not self.budget.spend(price):
            return False
        self.growth = 0.0  # the try's first pass reads what the draft is behind on
        return True

    @property
    def outpaced(self) -> bool:
        """The draft's catch-up grows (a token read a step off) faster than a step earns: the
        budget never catches the price up, and no try comes while that lasts."""
        return self.price > self.budget.credit and self.growth >= self.earning > 0

    def next_in(self) -> int | None:
        """Steps until the budget affords the last priced try, the catch-up growing as it did
        in the last step; None where it never would (``outpaced``)."""
        short = self.price - self.budget.credit
        if short <= 0 or self.earning <= 0:
            return 1
        if self.outpaced:
            return None
        return max(math.ceil(short / (self.earning - self.growth)), 1)


class AdaptiveController:
    """Each step the best k at the learnt acceptance while the guard agrees; while off, a try as
    the budget affords; now and then a verify size measured (``budget.Explorer``). ``gated``: k
    is only a cap and the drafter's gate weighs each proposal (prompt lookup), drafting whenever
    the hardware could pay; ``extend_when_sure``: a draft the drafter is sure of may run to draft_max."""

    def __init__(
        self,
        costs: CostModel,
        draft_max: int = 16,
        gated: bool = False,
        extend_when_sure: bool = False,
        prior: float | None = None,
        policy: Policy = DEFAULT,
    ) -> None:
        self.costs, self.draft_max, self.gated, self.extend_when_sure = costs, draft_max, gated, extend_when_sure
        self.policy = policy
        self.acceptance = Acceptance(prior, policy)
        self.guard = SpeedGuard(policy)
        self.tries = Tries(policy)
        self.explorer = Explorer(costs, draft_max, policy)
        self.drafted = self.resumed = False  # anything verified yet; the last try found drafting pays
        self._steps, self._protected = 0, False  # this reply's steps; its opening keeps drafting on
        self._last_drafted = 0  # the last verify's drafts (the guard's modelled step)
        self.last: Choice | None = None  # the last step's choice

    @property
    def alpha(self) -> float:
        return self.acceptance.alpha

    def speeds(self, alpha: float | None = None) -> np.ndarray:  # costs.speeds, k = 0..draft_max
        return speeds(self.costs, self.alpha if alpha is None else alpha, self.draft_max)

    def best_k(self, rates: np.ndarray | None = None) -> int:
        """The k of the best expected rate, or 0 where it is not ``policy.min_gain`` better than none."""
        rates = self.speeds() if rates is None else rates
        k = int(np.argmax(rates))
        return k if rates[k] >= self.policy.min_gain * rates[0] else 0

    def best_case(self) -> float:
        """Drafting's speed-up at ``policy.optimistic_alpha`` and its best k."""
        rates = self.speeds(self.policy.optimistic_alpha)
        return float(rates.max() / rates[0])

    def hardware_allows(self) -> bool:
        return self.best_case() >= self.policy.probe_gain

    def model_k(self, rates: np.ndarray | None = None) -> int:
        """The k the model wants (a gate's cap whenever the hardware could pay)."""
        if not self.costs.verify:
            return min(self.policy.unmeasured_k, self.draft_max)
        if self.gated:
            return self.draft_max if self.hardware_allows() else 0
        return self.best_k(rates)

    def on(self) -> bool:
        """Whether a step now would draft at the model's k (not a try)."""
        return self.model_k() > 0 and (not self.costs.verify or self._opening() or self.guard.pays(self._base()))

    def _base(self) -> float:
        return 1.0 / self.costs.T(1)

    def _opening(self) -> bool:
        return self._protected and self._steps <= self.policy.opening_steps

    def begin_reply(self) -> None:
        """A reply starts: its opening keeps drafting on if it is on (or not yet judged) now."""
        self.guard.begin_reply()
        self.acceptance.begin_reply()
        self._steps, self._protected = 0, False
        self._protected = self.on()  # (judged as if there were no opening)

    def wants_prefill(self) -> bool:
        """Whether the draft model reads the prompt up front: drafting is on, or nothing was
        drafted yet and the hardware could pay (a first try comes after the opening)."""
        return self.on() or (not self.drafted and bool(self.costs.verify) and self.hardware_allows())

    def recheck_draft(self) -> bool:
        """Whether to time a draft pass now: drafting is ruled out on this hardware, only by the
        draft pass's cost, and that estimate rests on few samples (``policy.recheck_samples``)."""
        p = self.policy
        if not self.costs.verify or self.costs.draft.n_samples >= p.recheck_samples or self.hardware_allows():
            return False
        free = speeds(self.costs, p.optimistic_alpha, self.draft_max, t_draft=0.0)
        return float(free.max() / free[0]) >= p.probe_gain

    def choose(self, behind: Callable[[], int] | None = None) -> Choice:
        """This step's k, with the reason for it. ``behind``: how many tokens the drafter would
        have to read before drafting (asked only when a try is due)."""
        self._steps += 1
        self.last = self._choose(behind)
        return self.last

    def pick(self, copies: Sequence[Draft], k: int) -> Draft | None:
        return pick_copy(copies, k, self.policy)

    def state(self) -> Choice:
        """The last step's choice; before any step, what one would choose now (on a copy, so
        nothing is spent)."""
        if self.last is not None:
            return self.last
        return _copy.deepcopy(self).choose(lambda: self.tries.behind)

    def _choose(self, behind: Callable[[], int] | None) -> Choice:
        if not self.costs.verify:
            k = min(self.policy.unmeasured_k, self.draft_max)
            return Choice(k, math.nan, math.nan, reason=Reason.UNMEASURED, best_k=k)
        rates = self.speeds()
        k = self.model_k(rates)
        drafting = k > 0 and (self._opening() or self.guard.pays(float(rates[0])))
        if self.tries.started and self.tries.left == 0 and (self.guard.judged or not drafting):
            self.resumed = drafting  # the try's trial is over: drafting pays again, or not
            self.tries.judged(drafting)
        if drafting:
            self.tries.left = self.tries.steps_off = 0
            return self._on(k, rates)
        return self._off(k, rates, behind)

    def _on(self, k: int, rates: np.ndarray) -> Choice:
        base = float(rates[0])
        alpha, resumed = self.alpha, self.resumed
        if self.gated:  # the gate predicts each proposal, not the controller
            return Choice(k, math.nan, base, reason=Reason.GATED, alpha=alpha, best_k=k, resumed=resumed)
        draft_max = self.draft_max if self.extend_when_sure else 0
        speedup = float(rates[k] / base)
        choice = Choice(
            k, float(rates[k]), base, draft_max=draft_max, alpha=alpha, best_k=k, best_speedup=speedup, resumed=resumed
        )
        n = self.explorer.size(k, rates, self.alpha)
        if n == 1:  # T(1), by a step without drafting
            return replace(choice, k=0, predicted_tps=base, draft_max=0)
        return replace(choice, measure=n) if n else choice

    def _off(self, k_model: int, rates: np.ndarray, behind: Callable[[], int] | None) -> Choice:
        """Off: the model wants no drafting at the learnt acceptance, or the guard measured it
        slower. A try is a trial of ``policy.trial_steps`` steps: at the model's k where only the
        guard said no, else at ``policy.probe_k``; it is made once the budget affords its price."""
        probe_k = min(self.policy.probe_k, self.draft_max)
        base = float(rates[0])
        self.resumed = False
        best = float(rates[1:].max() / base) if len(rates) > 1 else 0.0
        off = Choice(0, base, base, reason=Reason.ACCEPTANCE, alpha=self.alpha, best_speedup=best)
        if k_model > 0:  # only the guard says no
            off = replace(off, reason=Reason.GUARD, best_k=k_model, guard_tps=self.guard.rate or 0.0)
        trying = replace(off, reason=Reason.TRY, k=probe_k, predicted_tps=float(rates[probe_k]))
        if self.tries.left > 0:
            self.tries.left -= 1
            return trying
        best_case = self.best_case()
        if best_case < self.policy.probe_gain:  # the hardware rules drafting out, whatever the acceptance
            opt = self.speeds(self.policy.optimistic_alpha)
            best_opt = float(opt[1:].max() / base)
            hardware = Reason.HARDWARE
            return replace(
                off, reason=hardware, alpha=self.policy.optimistic_alpha, best_speedup=best_opt, guard_tps=None
            )
        if self._steps <= self.policy.opening_steps and not (self._protected or self.drafted):
            return self._waiting(off)  # a first try waits out the opening, which says little of what follows
        self.tries.earn((best_case - 1.0) * self.costs.T(1))
        if self.drafted:
            k = probe_k if self.gated or k_model == 0 else k_model
            guard = self.guard if k_model else None
            if not self.tries.try_now(self.costs, rates, k, guard, behind):
                return self._waiting(off)
        self.guard.restart()
        self.tries.started, self.tries.steps_off = True, 0
        if k_model > 0:
            return replace(trying, k=k_model, predicted_tps=float(rates[k_model]))
        self.tries.left = self.policy.trial_steps - 1
        return trying

    def _waiting(self, off: Choice) -> Choice:
        return replace(off, next_try_in=self.tries.next_in(), outpaced=self.tries.outpaced)

    def observe(self, n_drafted: int, n_accepted: int, refused: bool = False) -> None:
        self._last_drafted = n_drafted
        if refused and self.policy.count_refusals:
            self.acceptance.observe(1, 0)
            self.tries.left = 0  # and a try's trial has its answer: not now
        elif n_drafted > 0:
            self.drafted = True
            self.acceptance.observe(n_drafted, n_accepted)

    def observe_rate(self, n_tokens: int, seconds: float, passes: int | None = None) -> None:
        """Tokens/s of a step that spent something on drafting (``passes`` draft passes, by
        default one a draft token, or a verify row); the opening's steps are not the guard's."""
        self.drafted = True
        if self._opening():
            return
        n = self._last_drafted
        modelled = (n if passes is None else passes) * self.costs.t_draft + self.costs.T(n + 1)
        self.guard.observe(n_tokens, seconds, modelled if self.costs.verify else 0.0)

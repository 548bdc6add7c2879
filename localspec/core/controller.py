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

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from .budget import Budget, Explorer
from .costs import READ_MIN, CostModel, speeds, step_seconds
from .estimates import DECAY, PRIOR_ALPHA, PRIOR_WEIGHT, TRIAL_STEPS, Acceptance, SpeedGuard
from .rules import MIN_GAIN

# Tuning choices, each with its reason:
# A reply's first steps never switch drafting off: chat models open with a phrase of their own
# ("Here is the updated code:") before what a draft predicts well, so the guard judges a reply
# on what follows. Only drafting that was on (or not judged yet) when the reply began is kept
# on, and at most these steps are spent where it does not pay.
OPENING_STEPS = 6
OPTIMISTIC_ALPHA = 0.95  # drafting's best case: if even this acceptance cannot pay, never try
# ... and it must pay by this much, or drafting is never tried on this hardware: a try also
# makes the draft model catch up on every token since it last ran, which the model leaves out.
PROBE_GAIN = 1.15
# A verdict of "never here" that rests on the draft pass is checked again: at each reply's start
# one pass is timed until the estimate holds this many samples (so a burst of load during the
# load's three samples is outvoted by the passes that follow).
RECHECK_SAMPLES = 9
PROBE_K = 2  # a try's draft length where the model wants none: cheap, and it tests two tokens
# While drafting is off, each step earns tries a share of what drafting could win at best, and
# a try spends what it is expected to lose (its price). The share starts at FIRST_TRY_SHARE, so
# where a try is cheap (a draft pass and the draft's catch-up cost little) one comes within a
# few steps of drafting switching off; it halves with each try in a row that did not switch
# drafting back on, down to TRY_SHARE, so tries that keep failing cost at most that share of
# drafting's best case. (The catch-up alone, a token read by the draft for each step off, can
# cost more than TRY_SHARE earns: then only the first tries are made, docs/design.md.)
FIRST_TRY_SHARE = 0.25
TRY_SHARE = 0.05
# A trial step is priced at no less than this share of its time: the model and the measured
# rate can both be optimistic, and a try priced at nothing would be made every step.
LOSS_FLOOR = 0.01
BANKED_STEPS = 256  # the try budget holds at most this many steps' earnings: no bursts of tries
UNMEASURED_K = 4  # before anything is timed (no calibration): a moderate start


@dataclass(frozen=True)
class Choice:
    k: int
    predicted_tps: float  # expected tokens/s at this k
    baseline_tps: float  # expected tokens/s of the target alone (k = 0)
    # > 0: pad this step's verify to this many tokens to measure T there (the padding rows are
    # evaluated and thrown away, like rejected drafts): budget.Explorer
    measure: int = 0
    draft_max: int = 0  # > k: a draft the drafter is sure of may run this long (rules.MarginalRule)

    @property
    def predicted_speedup(self) -> float:
        return self.predicted_tps / self.baseline_tps  # nan until something was measured


class Controller(Protocol):
    """What the engine asks of a controller."""

    costs: CostModel
    draft_max: int
    acceptance: Acceptance

    def choose(self, behind: Callable[[], int] | None = None) -> Choice: ...

    def begin_reply(self) -> None: ...

    def wants_prefill(self) -> bool: ...

    def recheck_draft(self) -> bool: ...

    def observe(self, n_drafted: int, n_accepted: int) -> None: ...

    def observe_rate(self, n_tokens: int, seconds: float, passes: int | None = None) -> None: ...


class FixedController:
    """``--no-adapt``: ``k`` drafts every step (0: the target alone); nothing is tried, guarded
    or measured. The acceptance is counted only for the predicted speed-up."""

    def __init__(self, costs: CostModel, k: int, reason: str = "fixed: --no-adapt") -> None:
        self.costs, self.k, self.draft_max = costs, k, k
        self.reason = reason  # what the drafting line says fixed it
        self.acceptance = Acceptance()

    def choose(self, behind: Callable[[], int] | None = None) -> Choice:
        if not self.costs.verify:
            return Choice(self.k, math.nan, math.nan)
        rates = speeds(self.costs, self.acceptance.alpha, self.k)
        return Choice(self.k, float(rates[self.k]), float(rates[0]))

    def begin_reply(self) -> None:
        pass

    def wants_prefill(self) -> bool:
        return self.k > 0

    def recheck_draft(self) -> bool:
        return False

    def observe(self, n_drafted: int, n_accepted: int) -> None:
        self.acceptance.observe(n_drafted, n_accepted)

    def observe_rate(self, n_tokens: int, seconds: float, passes: int | None = None) -> None:
        pass


def price_of_try(
    costs: CostModel,
    rates: np.ndarray,
    k: int,
    guard: SpeedGuard | None,
    behind: Callable[[], int] | None,
    steps_off: int = 0,
) -> float:
    """What a try of ``k`` drafts is expected to lose: the draft model's catch-up on the
    ``behind()`` tokens it has not read, and its trial steps' shortfall against the target
    alone, at the learnt acceptance or, where the ``guard`` said no, at the rate and step time
    it measured; each step at least LOSS_FLOOR of its time. What the guard's trial lost fades
    by DECAY a step in the ``steps_off`` since, as every verdict does: the machine's load
    changes (a busy stretch is the usual reason for a no), so a slow trial says less the older
    it is."""
    n_behind = behind() if behind else 0
    catch_up = costs.read(n_behind) if n_behind >= READ_MIN else 0.0
    step = step_seconds(costs, k)
    loss = step * max(1.0 - float(rates[k] / rates[0]), LOSS_FLOOR)
    if guard is not None and guard.rate is not None:
        step = max(step, guard.seconds / guard.weight)
        fade = DECAY**steps_off
        loss = max(loss, fade * step * (1.0 - guard.rate * costs.T(1)))
    return catch_up + TRIAL_STEPS * loss


class Tries:
    """Tries of drafting while it is off: each off step earns a share of what drafting could
    win at best (FIRST_TRY_SHARE, halved by each failed try in a row down to TRY_SHARE), and a
    try is made once the budget covers its price (``price_of_try``); a try where the model
    wants no drafting lasts TRIAL_STEPS steps at PROBE_K."""

    def __init__(self) -> None:
        self.budget = Budget(FIRST_TRY_SHARE)
        self.price = self.earning = 0.0  # the next try's price, and what a step earns
        self.behind, self.growth = 0, 0.0  # tokens the draft is behind on, and what the last step added to the price
        self.left = 0  # steps left of a try at PROBE_K
        self.started = False  # the guard's trial under way began as a try
        self.failed = 0  # tries in a row that did not switch drafting back on
        self.steps_off = 0  # steps since drafting last ran

    def earn(self, stake: float) -> None:
        """An off step: ``stake`` is what drafting could win in it at best."""
        self.steps_off += 1
        self.earning = self.budget.share * stake
        self.budget.earn(stake, cap=max(self.earning * BANKED_STEPS, self.price))

    def judged(self, on: bool) -> None:
        """A try's trial ended with drafting ``on`` again (the share starts over) or not (it halves)."""
        self.started = False
        self.failed = 0 if on else self.failed + 1
        self.budget.share = max(FIRST_TRY_SHARE / 2**self.failed, TRY_SHARE)

    def try_now(
        self, costs: CostModel, rates: np.ndarray, k: int, guard: SpeedGuard | None, behind: Callable[[], int] | None
    ) -> bool:
        """Whether the budget affords a try of ``k`` drafts now (``price_of_try``), the draft
        ``behind()`` tokens behind: each token it fell behind since the last step grew the price."""
        n_behind = behind() if behind else 0
        grown = n_behind - self.behind if self.behind and n_behind >= READ_MIN else 0
        self.behind = n_behind
        price = price_of_try(costs, rates, k, guard, lambda: n_behind, self.steps_off)
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
        prior: tuple[float, float] | None = None,
    ) -> None:
        self.costs, self.draft_max, self.gated, self.extend_when_sure = costs, draft_max, gated, extend_when_sure
        self.acceptance = Acceptance(*(prior or (PRIOR_ALPHA, PRIOR_WEIGHT)))
        self.guard = SpeedGuard()
        self.tries = Tries()
        self.explorer = Explorer(costs, draft_max)
        self.drafted = self.resumed = False  # anything verified yet; the last try found drafting pays
        self._steps, self._protected = 0, False  # this reply's steps; its opening keeps drafting on
        self._last_drafted = 0  # the last verify's drafts (the guard's modelled step)

    @property
    def alpha(self) -> float:
        return self.acceptance.alpha

    def speeds(self, alpha: float | None = None) -> np.ndarray:  # costs.speeds, k = 0..draft_max
        return speeds(self.costs, self.alpha if alpha is None else alpha, self.draft_max)

    def best_k(self, rates: np.ndarray | None = None) -> int:
        """The k of the best expected rate, or 0 where it is not MIN_GAIN better than none."""
        rates = self.speeds() if rates is None else rates
        k = int(np.argmax(rates))
        return k if rates[k] >= MIN_GAIN * rates[0] else 0

    def best_case(self) -> float:
        """Drafting's speed-up at OPTIMISTIC_ALPHA and its best k."""
        rates = self.speeds(OPTIMISTIC_ALPHA)
        return float(rates.max() / rates[0])

    def hardware_allows(self) -> bool:
        return self.best_case() >= PROBE_GAIN

    def model_k(self, rates: np.ndarray | None = None) -> int:
        """The k the model wants (a gate's cap whenever the hardware could pay)."""
        if not self.costs.verify:
            return min(UNMEASURED_K, self.draft_max)
        if self.gated:
            return self.draft_max if self.hardware_allows() else 0
        return self.best_k(rates)

    def on(self) -> bool:
        """Whether a step now would draft at the model's k (not a try)."""
        return self.model_k() > 0 and (not self.costs.verify or self._opening() or self.guard.pays(self._base()))

    def _base(self) -> float:
        return 1.0 / self.costs.T(1)

    def _opening(self) -> bool:
        return self._protected and self._steps <= OPENING_STEPS

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
        draft pass's cost, and that estimate rests on few samples (RECHECK_SAMPLES)."""
        if not self.costs.verify or self.costs.draft.n_samples >= RECHECK_SAMPLES or self.hardware_allows():
            return False
        free = speeds(self.costs, OPTIMISTIC_ALPHA, self.draft_max, t_draft=0.0)
        return float(free.max() / free[0]) >= PROBE_GAIN

    def choose(self, behind: Callable[[], int] | None = None) -> Choice:
        """This step's k. ``behind``: how many tokens the drafter would have to read before
        drafting (asked only when a try is due)."""
        self._steps += 1
        if not self.costs.verify:
            return Choice(min(UNMEASURED_K, self.draft_max), math.nan, math.nan)
        rates = self.speeds()
        k = self.model_k(rates)
        drafting = k > 0 and (self._opening() or self.guard.pays(float(rates[0])))
        if self.tries.started and self.tries.left == 0 and (self.guard.judged or not drafting):
            self.resumed = drafting  # the try's trial is over: drafting pays again, or not
            self.tries.judged(drafting)
        if drafting:
            self.tries.left = self.tries.steps_off = 0
            if self.gated:  # the gate predicts each proposal, not the controller
                return Choice(k, math.nan, float(rates[0]))
            choice = Choice(
                k, float(rates[k]), float(rates[0]), draft_max=self.draft_max if self.extend_when_sure else 0
            )
            n = self.explorer.size(k, rates, self.alpha)
            if n == 1:  # T(1), by a step without drafting
                return Choice(0, float(rates[0]), float(rates[0]))
            return replace(choice, measure=n) if n else choice
        return self._off(k, rates, behind)

    def _off(self, k_model: int, rates: np.ndarray, behind: Callable[[], int] | None) -> Choice:
        """Off: the model wants no drafting at the learnt acceptance, or the guard measured it
        slower. A try is a trial of TRIAL_STEPS steps: at the model's k where only the guard
        said no, else at PROBE_K; it is made once the budget affords its price."""
        base = float(rates[0])
        off = Choice(0, base, base)
        self.resumed = False
        if self.tries.left > 0:
            self.tries.left -= 1
            return Choice(PROBE_K, float(rates[PROBE_K]), base)
        best_case = self.best_case()
        if best_case < PROBE_GAIN:
            return off  # the hardware rules drafting out, whatever the acceptance
        if self._steps <= OPENING_STEPS and not (self._protected or self.drafted):
            return off  # a first try waits out the opening, which says little of what follows
        self.tries.earn((best_case - 1.0) * self.costs.T(1))
        if self.drafted:
            k = PROBE_K if self.gated or k_model == 0 else k_model
            guard = self.guard if k_model else None
            if not self.tries.try_now(self.costs, rates, k, guard, behind):
                return off
        self.guard.restart()
        self.tries.started, self.tries.steps_off = True, 0
        if k_model > 0:
            return Choice(k_model, float(rates[k_model]), base)
        self.tries.left = TRIAL_STEPS - 1
        return Choice(PROBE_K, float(rates[PROBE_K]), base)

    def observe(self, n_drafted: int, n_accepted: int) -> None:
        self._last_drafted = n_drafted
        if n_drafted > 0:
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

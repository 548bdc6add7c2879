"""Tries of drafting while it is off (``Tries``): every step off earns a share of what drafting
could win in it at best, and a try comes once the budget covers its price (``Tries.price_of``), so
tries cost at most that share. A try lasts long enough that its drafts could switch drafting on
(``trial_length``)."""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable

import numpy as np

from .costs import READ_MIN, CostModel, step_seconds
from .policy import DEFAULT, Policy

Behind = Callable[[], int] | None  # the tokens the draft must read before it drafts, asked only when needed
# A try lasts at most this many trials: past it, only an acceptance few prompts keep would switch drafting on.
TRIAL_MAX = 4


def trial_length(switches_on: Callable[[int], bool], trial_steps: int) -> int | None:
    """A try's steps: ``trial_steps`` past the steps its drafts, every one accepted, need to switch
    drafting on (``switches_on(n)``: n such steps would; at least a trial's), so a drafter good
    enough to pay still has a trial's steps for the rejections it meets; None where not even
    ``TRIAL_MAX`` trials of them would. From the prior acceptance (0.75) a trial of four steps of
    two drafts reaches 0.84, which a flat curve with a dear draft pass (an F16 target on a GPU)
    needs: there a try of ``trial_steps`` switched drafting on only if no draft was rejected."""
    if switches_on(trial_steps):
        return 2 * trial_steps
    steps = range(trial_steps + 1, TRIAL_MAX * trial_steps + 1)
    first = bisect.bisect_left(steps, True, key=switches_on)  # more steps accepted, a higher acceptance
    return steps[first] + trial_steps if first < len(steps) else None


class Tries:
    """The budget for tries: a step off earns ``share`` of its ``best_saving`` (what drafting could
    save in it at best), ``first_try_share`` divided by ``try_backoff`` (2) for each failed try in
    a row, down to ``try_share``. Nothing caps the budget: a long stretch off may fund a few tries
    in a row, which together still cost at most the share of what it could have won. A try lasts
    ``steps`` (``trial_length``; ``left`` of them to come)."""

    def __init__(self, costs: CostModel, policy: Policy = DEFAULT) -> None:
        self.costs, self.policy = costs, policy
        self.share, self.budget = policy.first_try_share, 0.0
        self.price = self.earning = self.growth = 0.0  # the last price asked; a step's earning; the catch-up's growth
        self.behind = self.left = self.failed = self.age = 0  # age: the try's steps so far
        self.started = False  # a try is under way
        self.steps = policy.trial_steps  # the try's length (``trial_length``)

    def due(self, rates: np.ndarray, k: int, behind: Behind, best_saving: float, priced: bool) -> bool:
        """A step off earns its share of ``best_saving``; whether a try of ``k`` drafts comes now,
        the draft ``behind()`` tokens behind. ``priced``: the try must be afforded (before anything
        was drafted it need not: the first try comes once the opening is over)."""
        self.earning = self.share * max(best_saving, 0.0)
        self.budget += self.earning
        if not priced:
            return True
        n_behind = behind() if behind else 0
        grown = n_behind - self.behind if self.behind and n_behind >= READ_MIN else 0
        self.behind = n_behind
        return self.afford(self.price_of(rates, k, n_behind), self.costs.read(max(grown, 0)))

    def price_of(self, rates: np.ndarray, k: int, behind: int = 0) -> float:
        """What a try of ``k`` drafts is expected to lose: the draft's catch-up on the ``behind``
        tokens it has not read, a trial's shortfall against the target alone (a try that fails
        ends once its drafts could no longer switch drafting on: ``trial_over``), each step at
        least ``min_gain`` - 1 of its time (the work the speed model leaves out), and where a
        change of batch size costs (a GPU), the two changes into the try's size and back."""
        costs, policy = self.costs, self.policy
        catch_up = costs.read(behind) if behind >= READ_MIN else 0.0
        loss = step_seconds(costs, k) * max(1.0 - float(rates[k] / rates[0]), policy.min_gain - 1.0)
        return catch_up + policy.trial_steps * loss + 2.0 * costs.change  # into the try's size and back

    def afford(self, price: float, growth: float = 0.0) -> bool:
        """Spend ``price`` if the budget holds it; ``growth``: what the catch-up grew by in the last step."""
        self.price, self.growth = price, growth
        if price > self.budget:
            return False
        self.budget -= price
        self.growth = 0.0  # the try's first pass reads what the draft is behind on
        return True

    def start(self, steps: int = 0) -> None:
        """A try of ``steps`` steps (0: ``trial_steps``) begins: its first step now, ``left`` after it."""
        self.steps = steps or self.policy.trial_steps
        self.started, self.left, self.age = True, self.steps - 1, 0

    def trial_over(self, on: bool, switches_on: Callable[[int], bool] | None = None) -> bool:
        """Whether a try's trial ends at this step, drafting ``on`` at the model's k or not: off,
        once its steps are spent or ``switches_on(left)`` says not even every draft left accepted
        would switch drafting on; on, once it has lasted its steps past the try's first step (the
        draft's catch-up)."""
        if not self.started:
            return False
        self.age += 1
        if not on and self.left > 0 and switches_on is not None and not switches_on(self.left):
            self.left = 0
        return (not on and self.left == 0) or (on and self.age > self.steps)

    def judged(self, on: bool) -> None:
        """A try's trial ended with drafting ``on`` again (the share starts over) or not (it backs off)."""
        self.started = False
        self.failed = 0 if on else self.failed + 1
        first, floor, backoff = self.policy.first_try_share, self.policy.try_share, self.policy.try_backoff
        # the share stops falling at its floor (nor does the power overflow in a long session)
        at_floor = math.ceil(math.log(first / floor, backoff)) if backoff > 1 and first > floor else 0
        self.share = max(first / backoff ** min(self.failed, at_floor), floor)

    @property
    def outpaced(self) -> bool:
        """The catch-up grows faster than a step earns: no try comes while that lasts."""
        return self.price > self.budget and self.growth >= self.earning > 0

    def next_in(self) -> int | None:
        """Steps until the budget covers the last price asked, the catch-up growing as in the last step."""
        short = self.price - self.budget
        if short <= 0 or self.earning <= 0:
            return 1
        if self.outpaced:
            return None
        return max(math.ceil(short / (self.earning - self.growth)), 1)

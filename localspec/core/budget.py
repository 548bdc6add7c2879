"""Tries of drafting while it is off (``Tries``): every step off earns a share of what drafting
could win in it at best, and a try comes once the credit covers its price (``Tries.price_of``), so
tries cost at most that share."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from .costs import READ_MIN, CostModel, step_seconds
from .estimates import SpeedGuard
from .policy import DEFAULT, Policy

Behind = Callable[[], int] | None  # the tokens the draft must read before it drafts, asked only when needed


class Tries:
    """The credit for tries: a step off earns ``share`` of its stake, ``first_try_share`` halved
    by each failed try in a row down to ``try_share``. Nothing caps the credit: a long stretch off
    may fund a few tries in a row, which together still cost at most the share of what it could
    have won. A try where the model wants no drafting lasts ``trial_steps`` steps (``left``)."""

    def __init__(self, costs: CostModel, policy: Policy = DEFAULT) -> None:
        self.costs, self.policy = costs, policy
        self.share, self.credit = policy.first_try_share, 0.0
        self.price = self.earning = self.growth = 0.0  # the last price asked; a step's earning; the catch-up's growth
        self.behind = self.left = self.failed = self.steps_off = 0
        self.started = False  # the guard's trial under way began as a try

    def due(
        self, rates: np.ndarray, k: int, guard: SpeedGuard | None, behind: Behind, stake: float, priced: bool
    ) -> bool:
        """A step off earns its share of ``stake``; whether a try of ``k`` drafts comes now, the
        draft ``behind()`` tokens behind. ``priced``: the try must be afforded (before anything
        was drafted it need not: the first try comes once the opening is over)."""
        self.steps_off += 1
        self.earning = self.share * max(stake, 0.0)
        self.credit += self.earning
        if not priced:
            return True
        n_behind = behind() if behind else 0
        grown = n_behind - self.behind if self.behind and n_behind >= READ_MIN else 0
        self.behind = n_behind
        return self.afford(self.price_of(rates, k, guard, n_behind), self.costs.read(max(grown, 0)))

    def price_of(self, rates: np.ndarray, k: int, guard: SpeedGuard | None, behind: int = 0) -> float:
        """What a try of ``k`` drafts is expected to lose: the draft's catch-up on the ``behind``
        tokens it has not read, and its trial's shortfall against the target alone, each step at
        least ``min_gain`` - 1 of its time (the work the speed model leaves out). Where the
        ``guard`` said no, the shortfall it measured counts too, fading by ``decay`` a step off
        since: a slow trial says less the older it is (a busy stretch passes)."""
        costs, policy = self.costs, self.policy
        catch_up = costs.read(behind) if behind >= READ_MIN else 0.0
        step = step_seconds(costs, k)
        loss = step * max(1.0 - float(rates[k] / rates[0]), policy.min_gain - 1.0)
        if guard is not None and guard.rate is not None:
            step = max(step, guard.seconds / guard.weight)
            loss = max(loss, policy.decay**self.steps_off * step * (1.0 - guard.rate * costs.T(1)))
        return catch_up + policy.trial_steps * loss

    def afford(self, price: float, growth: float = 0.0) -> bool:
        """Spend ``price`` if the credit holds it; ``growth``: what the catch-up grew by in the last step."""
        self.price, self.growth = price, growth
        if price > self.credit:
            return False
        self.credit -= price
        self.growth = 0.0  # the try's first pass reads what the draft is behind on
        return True

    def start(self, guard: SpeedGuard, k_model: int) -> None:
        """A try begins: the guard judges it afresh."""
        guard.restart()
        self.started, self.steps_off = True, 0
        if not k_model:
            self.left = self.policy.trial_steps - 1

    def judged(self, on: bool) -> None:
        """A try's trial ended with drafting ``on`` again (the share starts over) or not (it halves)."""
        self.started = False
        self.failed = 0 if on else self.failed + 1
        self.share = max(self.policy.first_try_share / 2**self.failed, self.policy.try_share)

    @property
    def outpaced(self) -> bool:
        """The catch-up grows faster than a step earns: no try comes while that lasts."""
        return self.price > self.credit and self.growth >= self.earning > 0

    def next_in(self) -> int | None:
        """Steps until the credit covers the last price asked, the catch-up growing as in the last step."""
        short = self.price - self.credit
        if short <= 0 or self.earning <= 0:
            return 1
        if self.outpaced:
            return None
        return max(math.ceil(short / (self.earning - self.growth)), 1)

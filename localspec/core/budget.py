"""The budget for tries of drafting while it is off (``Tries``, priced by ``price_of_try``):
it earns a share of what drafting could win every step off and spends only what it holds, so
tries cost at most that share."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from .costs import READ_MIN, CostModel, step_seconds
from .estimates import SpeedGuard
from .policy import DEFAULT, Policy


class Budget:
    """Seconds that optional work may spend: each step earns ``share`` of a stake, and a spend
    happens only once the credit covers it."""

    def __init__(self, share: float) -> None:
        self.share = share
        self.credit = 0.0

    def earn(self, stake: float) -> None:
        """Earn ``share`` of ``stake`` seconds. Nothing caps the credit: a try comes when it
        covers the price, so a long stretch off can fund a few tries in a row, and all of them
        together still cost at most the share of what the stretch could have won."""
        self.credit += self.share * max(stake, 0.0)

    def spend(self, cost: float) -> bool:
        if cost > self.credit:
            return False
        self.credit -= cost
        return True


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
    it measured; each step at least ``policy.min_gain`` - 1 of its time (the step's work the
    speed model leaves out, which a proposal must pay for too). What the guard's trial
    lost fades by ``policy.decay`` a step in the ``steps_off`` since, as every verdict does: the
    machine's load changes (a busy stretch is the usual reason for a no), so a slow trial says
    less the older it is."""
    n_behind = behind() if behind else 0
    catch_up = costs.read(n_behind) if n_behind >= READ_MIN else 0.0
    step = step_seconds(costs, k)
    loss = step * max(1.0 - float(rates[k] / rates[0]), policy.min_gain - 1.0)
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
        self.budget.earn(stake)

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

    def due(
        self,
        costs: CostModel,
        rates: np.ndarray,
        k: int,
        guard: SpeedGuard | None,
        behind: Callable[[], int] | None,
        stake: float,
        priced: bool,
    ) -> bool:
        """An off step: earn its share of ``stake``, and say whether a try of ``k`` drafts comes
        now (``priced``: it must be afforded; a first try, before anything was drafted, is not)."""
        self.earn(stake)
        return not priced or self.try_now(costs, rates, k, guard, behind)

    def start(self, guard: SpeedGuard, k_model: int) -> None:
        """A try begins: the guard judges it afresh; where the model wants no drafting it lasts
        ``policy.trial_steps`` steps (at ``policy.probe_k``)."""
        guard.restart()
        self.started, self.steps_off = True, 0
        if not k_model:
            self.left = self.policy.trial_steps - 1

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

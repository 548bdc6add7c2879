"""Budgets for work a step may do beyond the best k: tries of drafting while it is off
(``Tries``, priced by ``price_of_try``), and measurements of verify sizes the curve is unsure of
(``Explorer``). Each earns a share of something every step and spends only what it holds, so
the work costs at most that share."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from .costs import READ_MIN, STALE_AFTER, CostModel, speeds, step_seconds
from .estimates import SpeedGuard
from .policy import DEFAULT, Policy


class Budget:
    """Seconds that optional work may spend: each step earns ``share`` of a stake, and a spend
    happens only once the credit covers it."""

    def __init__(self, share: float) -> None:
        self.share = share
        self.credit = 0.0

    def earn(self, stake: float, cap: float) -> None:
        """Earn ``share`` of ``stake`` seconds, holding at most ``cap``."""
        self.credit = min(self.credit + self.share * max(stake, 0.0), cap)

    def spend(self, cost: float) -> bool:
        if cost > self.credit:
            return False
        self.credit -= cost
        return True


class Explorer:
    """Which verify size to measure this step, if any: a larger one by padding the step's
    verify (the padding rows are thrown away like rejected drafts), the single-token one by a
    step without drafting. A size whose estimate is uncertain (``VerifyCurve.uncertain``) and
    that would win were its estimate ``policy.explore_margin`` too high is measured, at most once
    in ``policy.explore_every`` steps, from a budget of ``policy.explore_share`` of decode time."""

    def __init__(self, costs: CostModel, draft_max: int, policy: Policy = DEFAULT) -> None:
        self.costs, self.draft_max, self.policy = costs, draft_max, policy
        self.budget = Budget(policy.explore_share)
        self.since = 0

    def size(self, k_now: int, rates: np.ndarray, alpha: float) -> int:
        """The size n = k + 1 to measure with this step of ``k_now`` drafts (0: none)."""
        step = step_seconds(self.costs, k_now)
        self.since += 1
        self.budget.earn(step, cap=step * self.policy.explore_every)
        if self.since < self.policy.explore_every:
            return 0
        n = self._most_promising(k_now, step, rates, alpha)
        if n:
            self.since = 0
            self.budget.spend(step if n == 1 else self.costs.T(n) - self.costs.T(k_now + 1))
        return n

    def _most_promising(self, k_now: int, step: float, rates: np.ndarray, alpha: float) -> int:
        """The uncertain size that would beat ``k_now`` by the most were its estimate
        ``policy.explore_margin`` too high, and that the budget affords. T(1) only once it is old: it is
        measured whenever drafting is off, and a step without drafting is dear."""
        ks = np.arange(self.draft_max + 1)
        curve = self.costs.curve(self.draft_max + 1)
        optimistic = speeds(self.costs, alpha, self.draft_max, verify_scale=1.0 - self.policy.explore_margin)
        cost = curve[1:] - curve[k_now + 1]
        cost[0] = step
        verify = self.costs.verify
        uncertain = np.array([verify.uncertain(n) for n in range(1, self.draft_max + 2)])
        larger = (ks > k_now) | ((ks == 0) & ((verify.age(1) or 0) > STALE_AFTER))
        could_win = uncertain & larger & (optimistic > rates[k_now]) & (cost <= self.budget.credit)
        if not could_win.any():
            return 0
        return int(np.argmax(np.where(could_win, optimistic, -np.inf))) + 1


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

"""Budgets for work a step may do beyond the best k: tries of drafting while it is off (the
controller's), and measurements of verify sizes the curve is unsure of (``Explorer``). Each
earns a share of something every step and spends only what it holds, so the work costs at
most that share."""

from __future__ import annotations

import numpy as np

from .costs import STALE_AFTER, CostModel, speeds, step_seconds
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

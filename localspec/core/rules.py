"""How far one draft should go: the marginal rule (a draft model's tokens, one at a time) and
the lookup gate (how much of a suffix match to propose). The controller picks the
step's k; these decide, token by token or match by match, what of it is worth proposing.
"""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np

from .costs import CostModel, speeds
from .policy import DEFAULT, Policy


class MarginalRule:
    """How far one draft should go: greedy maximisation of the step's expected tokens per
    second (in the spirit of SpecDec++, arXiv 2405.19715, which stops on a predicted rejection).

    A draft token of confidence c (the draft's probability for it, calibrated against the
    measured rejections by ``CostModel.acceptance``) adds p_chain * c expected tokens, where
    p_chain is the chance that every earlier draft token is accepted; it costs one more verify
    row, T(n+2) - T(n+1), and going on costs a draft pass. Adding something raises the step's
    rate E / time exactly when its own gain per second beats that rate. On a memory-bound
    target a verify row is nearly free, so even an unsure first token is worth proposing; on a
    compute-bound one only confident runs are.

    The rule looks ahead: a verify curve has steps (a kernel's tile size), and the row at a step
    alone never pays although the rows past it do, nearly free. So a token (or another pass) is
    judged on the best of going on by 1..(draft_max_now - n) tokens, those still to come taken at the
    last one's confidence. ``draft_max_now`` is ``k``, or ``draft_max`` while the draft is sure
    of every token so far (``policy.sure``).
    """

    def __init__(self, costs: CostModel, k: int = 64, draft_max: int = 0, policy: Policy = DEFAULT) -> None:
        self.costs, self.policy = costs, policy
        self.k, self.draft_max = k, max(draft_max, k)
        self.sure = True  # every token so far had raw confidence >= policy.sure
        self.p_chain, self.expected, self.n, self.passes = 1.0, 1.0, 0, 1
        self._curve = costs.curve(self.draft_max + 1)  # read once: the draft's tokens all use it

    @property
    def draft_max_now(self) -> int:
        return self.draft_max if self.sure else self.k

    def _pays(self, c: float, paid: bool) -> bool:
        """Whether going on by j = 1..(draft_max_now - n) tokens of calibrated acceptance c beats
        stopping here, for some j; ``paid``: the first of them is drafted already."""
        n_more = self.draft_max_now - self.n
        if n_more <= 0:
            return False
        js = np.arange(1, n_more + 1)
        t_draft = self.costs.t_draft
        expected = self.expected + np.cumsum(self.p_chain * c**js)
        seconds = (self.passes + js - paid) * t_draft + self._curve[self.n + 2 : self.n + 2 + n_more]
        rate = self.expected / (self.passes * t_draft + self._curve[self.n + 1])
        return bool((expected / seconds).max() > rate)

    def keep(self, c: float) -> bool:
        """Propose a token of confidence c? (Its draft pass is already paid for.)"""
        self.sure = self.sure and c >= self.policy.sure
        a = self.costs.acceptance(c)
        if not self._pays(a, paid=True):
            return False
        self.p_chain *= a
        self.expected += self.p_chain
        self.n += 1
        return True

    def another_pass(self, c_next: float) -> bool:
        """Run the draft again, expecting the next token's confidence to be about c_next?"""
        if not self._pays(self.costs.acceptance(c_next), paid=False):
            return False
        self.passes += 1
        return True


class LookupGate:
    """How much of a copy (a suffix match's walk) to propose, from what matches of its kind
    (``n``: a source and a match length, see ``suffix.bucket``) have earned so far.

    A 2-token match in prose ("of the") is mostly a coincidence and a 4-token one rarely is, so
    one acceptance rate for every lookup draft either blocks the good matches or lets the bad
    ones cost a verify row each. The gate keeps a geometric acceptance estimate per match
    length and proposes the prefix j of the match that maximises E(j) / T(j+1) (a copy costs no
    draft pass), nothing when that is not ``policy.min_gain`` better than j = 0. Text changes, so a
    blocked length must be able to win trust back: every match, proposed or not, is scored
    against what the step kept (``observe`` with what the drafter compared), which costs
    nothing.
    """

    def __init__(self, costs: CostModel, policy: Policy = DEFAULT, prior: tuple[float, float] = (1.0, 1.0)) -> None:
        self.costs, self.policy = costs, policy
        # [accepted, rejected] of a match length not seen yet: Laplace's rule, alpha 0.5 worth
        # two verdicts, so where a verify row is dear nothing is proposed until matches of the
        # length have earned it, and where a row is nearly free from the first match
        self.prior = prior
        self.counts: dict[Hashable, list[float]] = {}  # what a match is judged by -> [accepted, rejected]

    def alpha(self, n: Hashable) -> float:
        accepted, rejected = self.counts.get(n, self.prior)
        return accepted / (accepted + rejected)

    def length(self, n: Hashable, available: int) -> int:
        """Tokens of an ``n``-token match's continuation (``available`` of them) to propose."""
        if available <= 0 or not self.costs.verify:
            return available
        rates = speeds(self.costs, self.alpha(n), available, t_draft=0.0)
        j = int(np.argmax(rates))
        return j if rates[j] >= self.policy.min_gain * rates[0] else 0

    def observe(self, n: Hashable, n_tested: int, n_accepted: int) -> None:
        """A verdict on ``n_tested`` tokens of an ``n``-token match's continuation: the first
        ``n_accepted`` agreed with the target (one failure if it stopped short)."""
        if n_tested == 0:
            return
        accepted, rejected = self.counts.get(n, self.prior)
        decay = self.policy.decay
        self.counts[n] = [decay * accepted + n_accepted, decay * rejected + (n_accepted < n_tested)]

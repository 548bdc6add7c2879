"""How far one draft goes: the marginal rule (a draft model's tokens, one at a time) and the
lookup gate (how much of a suffix match to propose), within the controller's k."""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np

from .costs import CostModel, best_k, speeds
from .policy import DEFAULT, Policy

# What a kind of copy not seen yet starts from, as [accepted, rejected] verdicts: Laplace's rule
# of succession (the uniform prior: alpha 0.5, worth two verdicts), a convention rather than a
# tuning choice, so no Policy field. Tests that want a trusting gate pass their own.
LAPLACE = (1.0, 1.0)


class MarginalRule:
    """Greedy maximisation of the step's expected tokens per second (in the spirit of
    SpecDec++, arXiv 2405.19715). A token of calibrated confidence c (``CostModel.acceptance``)
    adds p_chain * c expected tokens, where p_chain is the chance every earlier one is accepted;
    it costs a verify row, T(n+2) - T(n+1), and going on costs a draft pass. It pays exactly when
    its gain per second beats the step's rate so far.

    A verify curve has steps (a kernel's tile size) where one row alone never pays but the rows
    past it do, nearly free: so a token is judged on the best of going on by 1..(draft_max_now -
    n) tokens at its confidence. ``draft_max_now`` is ``k``, or ``draft_max`` while every token
    so far was ``sure``."""

    def __init__(self, costs: CostModel, k: int = 64, draft_max: int = 0, policy: Policy = DEFAULT) -> None:
        self.costs, self.policy = costs, policy
        self.k, self.draft_max = k, max(draft_max, k)
        self.sure = True  # every token so far had raw confidence >= policy.sure
        self.p_chain, self.expected, self.n, self.passes = 1.0, 1.0, 0, 1
        # read once: the draft's tokens all use it; where the step's verify is padded to a steady
        # size its rows are paid for, and a draft past it pays two changes of size
        self._curve = costs.step_curve(self.draft_max + 1)

    @property
    def draft_max_now(self) -> int:
        return self.draft_max if self.sure else self.k

    def _pays(self, c: float, paid: bool) -> bool:
        """Whether going on by some j = 1..(draft_max_now - n) tokens of acceptance c beats
        stopping here; ``paid``: the first of them is drafted already."""
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
    (``n``: a source and a match length, ``suffix.bucket``) earned so far: a 2-token match in prose
    is mostly chance, a 4-token one rarely is. Each kind keeps a geometric acceptance estimate,
    and the gate proposes the prefix j that maximises E(j) / T(j+1) (a copy costs no draft
    pass), nothing unless that is ``min_gain`` better than j = 0. Every match, proposed or not,
    is scored against what the step kept (``observe``), for free, so a blocked kind wins trust
    back.

    A kind's copies from the context go only as far as its kept copies have earned (``reach``).

    A greedy reply to a prompt answered before (``prompts``, this process's) is that answer again:
    its copies of a full-depth history match are priced as sure until one fails
    (``suffix.SuffixDrafter``)."""

    def __init__(self, costs: CostModel, policy: Policy = DEFAULT, prior: tuple[float, float] = LAPLACE) -> None:
        self.costs, self.policy = costs, policy
        self.prior = prior  # [accepted, rejected] of a kind not seen yet
        self.counts: dict[Hashable, list[float]] = {}  # what a match is judged by -> [accepted, rejected]
        self.longest: dict[Hashable, int] = {}  # ... -> its longest run the target agreed with (tested or scored)
        self.prompts: set[int] = set()  # the prompts (``suffix.prompt_hash``) of the replies so far

    def alpha(self, n: Hashable) -> float:
        accepted, rejected = self.counts.get(n, self.prior)
        return accepted / (accepted + rejected)

    def length(self, n: Hashable, available: int, alpha: float | None = None, capped: bool = False) -> int:
        """Tokens of an ``n``-token match's continuation (``available`` of them) to propose, at
        the kind's acceptance or at ``alpha``; ``capped``: no further than ``reach``."""
        if available <= 0 or not self.costs.verify:
            return available
        available = self.reach(n, available) if capped else available
        alpha = self.alpha(n) if alpha is None else alpha
        rates = speeds(self.costs, alpha, available, t_draft=0.0, steady=self.costs.size)
        return best_k(rates, self.policy.min_gain)

    def reach(self, n: Hashable, available: int) -> int:
        """The longest copy of kind ``n`` (at most ``available``) whose verify costs at most
        ``copy_growth`` (2) times the verify of the longest run of its kind kept so far (at first,
        of ``probe_k`` tokens).
        A kind's acceptance is learnt mostly from short copies, often in a streak from one
        passage, while a long copy whose first token fails loses its whole verify: on a
        compute-bound curve that grows by most of T(1) a row. So a long copy is earned as TCP's
        slow start earns a window, by doubling; on a flat curve, where many rows cost what a
        few do, it binds nothing."""
        curve = self.costs.curve(available + 1)
        base = min(max(self.longest.get(n, 0), self.policy.probe_k), available)
        return max(1, int(np.searchsorted(curve[2:], self.policy.copy_growth * curve[base + 1], side="right")))

    def observe(self, n: Hashable, n_tested: int, n_accepted: int) -> None:
        """The first ``n_accepted`` of ``n_tested`` tokens of a copy agreed with the target."""
        if n_tested == 0:
            return
        self.longest[n] = max(self.longest.get(n, 0), n_accepted)
        accepted, rejected = self.counts.get(n, self.prior)
        decay = self.policy.decay
        self.counts[n] = [decay * accepted + n_accepted, decay * rejected + (n_accepted < n_tested)]

"""Choosing the draft length k: the one that maximises expected tokens per second, here.

Model (Leviathan et al. 2023, section 3, with measured costs in place of constants): with
per-token acceptance ``alpha``, a step that drafts k tokens yields on average

    E(k) = (1 - alpha^(k+1)) / (1 - alpha)        tokens (the target always adds one)

and costs ``k * t_draft + T(k+1)``, where T(n) is the measured time of a target evaluation of
n tokens (the pending token plus k drafts). k = 0 is the target alone: 1 / T(1) tokens/s.
On a compute-bound target T(n) grows almost linearly and k = 0 often wins; on a
memory-bound one (big model, GPU) T(n) is nearly flat and long drafts pay.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .costs import READ_MIN, STALE_AFTER, DraftCost, VerifyCurve

# Tuning choices, each with its reason:
EMA = 0.2  # weight of a new measured rate: follows a changing machine within ~5 steps
DECAY = 0.95  # acceptance counts fade so a new kind of text (prose after code) shows in ~20 steps
PRIOR_ACCEPTED, PRIOR_REJECTED = 3.0, 1.0  # alpha starts at 0.75: a typical same-family pair
FIRST_PROBE, MAX_PROBE = 16, 256  # steps between tries of drafting while k=0 looks best
PROBE_K = 2
# Drafting must promise at least this speed-up before it is used: the model leaves out the
# draft's catch-up on accepted tokens and per-step Python work, a few per cent together.
MIN_GAIN = 1.05
OPTIMISTIC_ALPHA = 0.95  # if even this acceptance cannot pay, probing is pointless
# A draft may run past the controller's k (up to Choice.reach) while every token's raw
# confidence is at least this: Leviathan's k assumes every token is accepted at the mean
# rate, which a run of near-certain tokens beats. Replaying the suite's F16 replies
# (scripts/replay_policy.py: the real draft model, the recorded target, the measured curve),
# 0.9, 0.95 and 0.98 all let code-binsearch's certain runs past k = 5, where auto had stood at
# 0.92x the best fixed configuration; 0.95 was the steadiest over noise seeds. Measured after:
# 1.01x there, and 0.96-1.08x on three more prompts (docs/benchmarks.md, sixth session).
SURE = 0.95
# ... and "pay" means by this much: a try after a stretch without drafting also makes the draft
# model catch up on every token since it last ran, which the model leaves out. On the Q4 target
# here (a draft pass 0.48 T(1), T(2) 1.43 T(1)) even 95 % acceptance promised only 1.07x, and
# one such try per reply cost 4-9 % of a 96-token reply.
PROBE_GAIN = 1.15
# ... and a try pays for that catch-up from a budget: each step without drafting earns this
# share of what drafting could win at best (the best case at OPTIMISTIC_ALPHA), and a try
# spends what it costs for sure: the draft model's catch-up (the tokens since it last ran,
# timed as reading: costs.DraftCost.read) and its trial steps' draft passes. So tries'
# catch-ups and passes cost at most a twentieth of drafting's best case: about 1 % of decode
# time on the Q4 target here (best case 1.2x), where one try in a 96-token reply measured
# 5-10 % of that reply; where drafting could double the speed (F16, GPU) a try of the same
# cost is afforded about 7x sooner.
TRY_SHARE = 0.05
# The model can be wrong where it is blind (drafts cut short by p_min, prose where the draft
# hesitates): so drafting must also *measure* faster than the target alone. A trial of this
# many drafting steps decides. A tie is not enough (GUARD_TOLERANCE 1): on the Q4 target here,
# where a draft pass costs half a target pass, drafting that measured within 3 % of the target
# alone still ran 6 % slower over whole replies (catch-up passes and trials are not judged).
TRIAL_STEPS = 4
GUARD_TOLERANCE = 1.0
# A new reply may be new text (prose after code), so at its start the guard's measured rate is
# carried with the weight of this many steps (between replies it holds about 1 / EMA = 5): the
# reply's own steps decide within a few. On the Q4 target here, carried at full weight, code
# replies' 1.2x kept drafting on for 15 steps of a prose reply that drafting ran at 0.84x
# (explain-gil 0.90x the target alone); at 2 steps' weight its first two steps (0.68x, 0.71x)
# turn it off, while where drafting runs at 2x it takes five steps in a row at 0.6x.
CARRY = 2.0
UNMEASURED_K = 4  # before any timing exists; llama.cpp's example measured best near 4 here
# Exploration: a verify size whose estimate is uncertain (costs.VerifyCurve.uncertain) and that
# would win were its estimate this much too high gets measured, at most once per EXPLORE_EVERY
# steps: so a wrong estimate is corrected within EXPLORE_EVERY steps per size that could win,
# and exploring costs at most a share 1/EXPLORE_EVERY of steps, each only a little slower.
EXPLORE_MARGIN = 0.3
EXPLORE_EVERY = 16
# ... and within a budget: each step earns EXPLORE_SHARE of its own (estimated) time, and a
# measurement spends what it costs beyond the step it pads; so exploring costs at most 1 % of
# decode time. Without it, padding to sizes past 8 on a compute-bound target (where T(17) is
# 4 passes) cost 5 % of the Q4 target's speed here; with 2 %, prompt lookup on prose (which
# rarely proposes) still lost a few per cent to it on the F16 target.
EXPLORE_SHARE = 0.01
# Prompt lookup: a match length not seen yet starts at alpha 0.5 with the weight of two
# verdicts, so one rejected try blocks it where a verify row is dear. With the controller's
# 3:1 prior a length took three rejected one-token tries to block; on the Q4 target here each
# costs 0.42 T(1), and three lengths' worth made lookup 6-7 % slower than the target alone on
# prose. Where a row is nearly free (F16, GPU) alpha 0.5 still proposes from the first match.
# (A blocked length is not tried again at a verify row's cost: the match it found is scored
# against what the step kept, for free; see drafters.PromptLookupDrafter.score.)
LOOKUP_PRIOR = (1.0, 1.0)


def decayed_counts(accepted: float, rejected: float, n_drafted: int, n_accepted: int) -> tuple[float, float]:
    """Geometric-model MLE with fading memory: a verify gives n_accepted successes and, if it
    stopped short of the draft, one failure."""
    return (DECAY * accepted + n_accepted, DECAY * rejected + (1.0 if n_accepted < n_drafted else 0.0))


def expected_tokens(alpha: float, k):
    """E(k) for an int k or a numpy array of them."""
    if alpha >= 1.0:
        return k + 1.0
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


class CostModel:
    """What the controller knows of this machine: the target's verify curve T(n) (shared by
    every mode of one target), the draft's seconds per pass, and how well the draft's
    confidence predicts acceptance."""

    def __init__(
        self, verify: Mapping[int, float] | VerifyCurve | None = None, t_draft: float | DraftCost = 0.0
    ) -> None:
        self.verify = verify if isinstance(verify, VerifyCurve) else VerifyCurve(verify)
        self.draft = t_draft if isinstance(t_draft, DraftCost) else DraftCost(t_draft)
        # The draft's confidence c is a biased guess of acceptance: measured rejections divided
        # by the rejections (sum of 1 - c) its confidences predicted, over the tokens tested.
        self.rejected = 1.0
        self.predicted_rejected = 1.0

    @property
    def t_draft(self) -> float:
        return self.draft.seconds

    def T(self, n: int) -> float:
        return self.verify.T(n)

    def curve(self, n_max: int) -> np.ndarray:
        return self.verify.curve(n_max)

    def observe_verify(self, n: int, seconds: float) -> None:
        self.verify.observe(n, seconds)

    def observe_draft(self, n_evals: int, seconds: float) -> None:
        self.draft.observe(n_evals, seconds)

    @property
    def rejection_scale(self) -> float:
        return self.rejected / max(self.predicted_rejected, 1e-9)

    def observe_confidence(self, confidence: Sequence[float], n_accepted: int) -> None:
        """Tokens x_1..x_{n_accepted+1} were tested (the rest were never looked at)."""
        tested = confidence[: n_accepted + 1]
        self.predicted_rejected = DECAY * self.predicted_rejected + sum(1.0 - c for c in tested)
        self.rejected = DECAY * self.rejected + (1.0 if n_accepted < len(confidence) else 0.0)

    def acceptance(self, c: float) -> float:
        """Calibrated chance that a draft token of confidence c is accepted."""
        return min(max(1.0 - (1.0 - c) * self.rejection_scale, 0.0), 1.0)


class MarginalRule:
    """How far one draft should go: greedy maximisation of the step's expected tokens per
    second (in the spirit of SpecDec++, arXiv 2405.19715, which stops on a predicted rejection).

    A draft token of confidence c (the draft's probability for it, calibrated against the
    measured rejections by ``CostModel.acceptance``) adds p_chain * c expected
    tokens, where p_chain is the chance that every earlier draft token is accepted; it costs
    one more verify row, T(n+2) - T(n+1), and going on costs a draft pass. Adding something
    raises the step's rate E / time exactly when its own gain per second beats that rate.
    On a memory-bound target a verify row is nearly free, so even an unsure first token is
    worth proposing; on a compute-bound one only confident runs are.

    The rule looks ahead: a verify curve has steps (on the F16 target here T(7) is 1.26 T(6)
    while T(6) is 1.03 T(5)), and the row at a step alone never pays although the rows past
    it do, nearly free. So a token (or another pass) is judged on the best of going on by
    1..(longest - n) tokens, those still to come taken at the last one's confidence.

    The longest is ``k`` (the controller's, from Leviathan's model at the mean acceptance),
    or ``reach`` for a run whose every token the draft is SURE of: the mean acceptance
    undervalues such a run (code the draft has seen a thousand times), and k = 5 cut runs of
    certain tokens that 8 would have kept whole (code-binsearch on the F16 target here).
    """

    def __init__(self, costs: CostModel, k: int = 64, reach: int = 0) -> None:
        self.costs = costs
        self.k, self.reach = k, max(reach, k)
        self.sure = True  # every token so far had raw confidence >= SURE
        self.p_chain, self.expected, self.n, self.passes = 1.0, 1.0, 0, 1

    @property
    def longest(self) -> int:
        return self.reach if self.sure else self.k

    def _rate(self) -> float:
        return self.expected / (self.passes * self.costs.t_draft + self.costs.T(self.n + 1))

    def _pays(self, c: float, paid: bool) -> bool:
        """Whether going on by j = 1..(longest - n) tokens of calibrated acceptance c beats
        stopping here, for some j; ``paid``: the first of them is drafted already."""
        js = np.arange(1, self.longest - self.n + 1)
        if len(js) == 0:
            return False
        expected = self.expected + np.cumsum(self.p_chain * c**js)
        seconds = (self.passes + js - paid) * self.costs.t_draft + self.costs.curve(self.n + 1 + js[-1])[self.n + 2 :]
        return bool((expected / seconds).max() > self._rate())

    def keep(self, c: float) -> bool:
        """Propose a token of confidence c? (Its draft pass is already paid for.)"""
        self.sure = self.sure and c >= SURE
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


@dataclass(frozen=True)
class Choice:
    k: int
    predicted_tps: float  # expected tokens/s at this k
    baseline_tps: float  # expected tokens/s of the target alone (k = 0)
    # > 0: pad this step's verify to this many tokens to measure T there (the padding rows
    # are evaluated and thrown away, like rejected drafts); see DraftController._explore
    measure: int = 0
    # > k: a draft the drafter is sure of may run this long (MarginalRule, SURE)
    reach: int = 0

    @property
    def predicted_speedup(self) -> float:
        return self.predicted_tps / self.baseline_tps  # nan until something was measured


class LookupGate:
    """How much of a prompt-lookup match to propose, from what matches of that length have
    earned so far.

    A 2-token match in prose ("of the") is mostly a coincidence and a 4-token one rarely is,
    so one acceptance rate for every lookup draft either blocks the good matches or lets the
    bad ones cost a verify row each (on prose that made lookup 12 % slower than the target
    alone). The gate keeps a geometric acceptance estimate per match length and proposes the
    prefix j of the match that maximises E(j) / T(j+1), nothing when that is not MIN_GAIN
    better than j = 0 (so a length not seen yet, at alpha 0.5, is not proposed where a verify
    row costs more than 0.43 of a pass, as on the Q4 target here). Text changes, so a blocked
    length must be able to win trust back: every match, proposed or not, is scored against
    what the step kept (``observe`` with what the drafter compared), which costs nothing.
    """

    def __init__(self, costs: CostModel, prior: tuple[float, float] = LOOKUP_PRIOR) -> None:
        self.costs = costs
        self.prior = prior  # [accepted, rejected] of a match length not seen yet
        self.counts: dict[int, list[float]] = {}  # match length -> [accepted, rejected]

    def alpha(self, n: int) -> float:
        accepted, rejected = self.counts.get(n, self.prior)
        return accepted / (accepted + rejected)

    def length(self, n: int, available: int) -> int:
        """Tokens of an ``n``-token match's continuation (``available`` of them) to propose."""
        if available <= 0 or not self.costs.verify:
            return available
        expected = expected_tokens(self.alpha(n), np.arange(available + 1))
        speeds = expected / self.costs.curve(available + 1)[1:]
        j = int(np.argmax(speeds))
        return j if speeds[j] >= MIN_GAIN * speeds[0] else 0

    def observe(self, n: int, n_tested: int, n_accepted: int) -> None:
        """A verdict on ``n_tested`` tokens of an ``n``-token match's continuation: the first
        ``n_accepted`` agreed with the target."""
        if n_tested == 0:
            return
        accepted, rejected = self.counts.get(n, self.prior)
        self.counts[n] = list(decayed_counts(accepted, rejected, n_tested, n_accepted))


class DraftController:
    """Picks k each step; ``fixed_k`` turns adaptation off (``--draft-max N --no-adapt``).

    ``gated``: the drafter decides how much of each proposal to make, and k is only its cap
    (prompt lookup, whose LookupGate weighs each match by what matches of its length have
    earned). One acceptance over all of lookup's proposals is the wrong model there: on the
    Q4 target here rejected 2-3-token copies in code brought it to 0.42, so k = 0 blocked the
    long copies a summary quotes (lookup fell from 1.3-1.8x to 1.00x on those prompts). A
    gated controller drafts whenever the hardware could pay at all and the measured guard
    agrees; it still counts the verdicts, for ``explain``.
    """

    def __init__(
        self, costs: CostModel, max_k: int = 16, fixed_k: int | None = None, gated: bool = False, reach: bool = False
    ) -> None:
        self.costs = costs
        self.max_k = max_k
        self.fixed_k = fixed_k
        self.gated = gated
        self.reach = reach and fixed_k is None  # sure runs may go to max_k (Choice.reach)
        self.accepted = PRIOR_ACCEPTED
        self.rejected = PRIOR_REJECTED
        self._probe_every = FIRST_PROBE
        self._since_draft = 0
        self._new_trial()
        self._since_explore = 0
        self._credit = 0.0  # seconds of exploration earned (EXPLORE_SHARE of every step)
        self._resumed = False  # the last trial found that drafting pays again
        self._try_credit = 0.0  # seconds a try may cost (TRY_SHARE)
        self._try_cost = 0.0  # the last try's cost, estimated when it was due
        self._drafted = False  # any draft verified yet (the first try is due at once)
        self._trial_left = 0  # steps left of a try whose catch-up is paid

    @property
    def alpha(self) -> float:
        return self.accepted / (self.accepted + self.rejected)

    def speed(self, k: int, alpha: float | None = None) -> float:
        verify = self.costs.curve(self.max_k + 1)[k + 1] if k <= self.max_k else self.costs.T(k + 1)
        seconds = k * self.costs.t_draft + verify
        return expected_tokens(self.alpha if alpha is None else alpha, k) / seconds

    def speeds(self, alpha: float | None = None) -> np.ndarray:
        """speed(k) for k = 0..max_k at once."""
        ks = np.arange(self.max_k + 1)
        expected = expected_tokens(self.alpha if alpha is None else alpha, ks)
        return expected / (ks * self.costs.t_draft + self.costs.curve(self.max_k + 1)[1:])

    def _best_k(self, alpha: float | None = None) -> tuple[int, float]:
        speeds = self.speeds(alpha)
        k = int(np.argmax(speeds))
        if speeds[k] < MIN_GAIN * speeds[0]:
            k = 0
        return k, speeds[k]

    def best(self) -> Choice:
        if not self.costs.verify:  # nothing measured yet (no calibration): start moderate
            k = self.fixed_k if self.fixed_k is not None else min(UNMEASURED_K, self.max_k)
            return Choice(k, float("nan"), float("nan"))
        base = 1.0 / self.costs.T(1)
        if self.fixed_k is not None:  # scalar T: the whole curve is not needed
            k = self.fixed_k
            return Choice(k, expected_tokens(self.alpha, k) / (k * self.costs.t_draft + self.costs.T(k + 1)), base)
        if self.gated:  # the drafter's gate predicts each proposal, not the controller
            k, speed = (self.max_k, float("nan")) if self.worth_trying() else (0, base)
        else:
            k, speed = self._best_k()
        if k > 0 and not self.drafting_pays():
            return Choice(0, base, base)
        return Choice(k, speed, base, reach=self.max_k if self.reach and k > 0 else 0)

    def modelled_k(self) -> int:
        """The k Leviathan's model picks at the learnt acceptance (gated or not)."""
        return self._best_k()[0] if self.costs.verify else min(UNMEASURED_K, self.max_k)

    def best_case(self) -> float:
        """Drafting's speed-up over the target alone at OPTIMISTIC_ALPHA and its best k."""
        speeds = self.speeds(OPTIMISTIC_ALPHA)
        return float(speeds.max() / speeds[0])

    def first_try_due(self) -> bool:
        """Nothing drafted yet, and the hardware could pay: the first reply tries drafting
        from its first step (so the engine has the draft model read the prompt up front)."""
        return self.fixed_k is None and bool(self.costs.verify) and not self._drafted and self.worth_trying()

    def worth_trying(self) -> bool:
        """Whether drafting could pay on this hardware at all: even at OPTIMISTIC_ALPHA it
        must promise PROBE_GAIN over the target alone, or it is never tried."""
        return self.best_case() >= PROBE_GAIN

    def drafting_pays(self) -> bool:
        """Measured, not modelled: the last trial's drafting steps kept up with the target alone."""
        if self._n_realized < TRIAL_STEPS or self._realized is None:
            return True  # still measuring
        return self._realized >= GUARD_TOLERANCE / self.costs.T(1)

    def _new_trial(self) -> None:
        """The guard starts measuring afresh: a trial of TRIAL_STEPS drafting steps."""
        self._realized: float | None = None  # tokens/s of steps that drafted (the guard's)
        self._n_realized = 0
        self._trial = [0.0, 0.0]  # tokens and seconds of the trial's steps, then fading sums
        self._weight = 0.0  # steps' worth of evidence in those sums (fading like them)

    def begin_reply(self) -> None:
        """A reply starts: what the guard measured before weighs CARRY steps at most (a
        trial under way is left to finish)."""
        if self._n_realized >= TRIAL_STEPS and self._weight > CARRY:
            scale = CARRY / self._weight
            self._trial = [scale * self._trial[0], scale * self._trial[1]]
            self._weight = CARRY

    def choose(self, behind: Callable[[], int] | None = None) -> Choice:
        """The k to draft this step (see ``_choose_k``), now and then with a verify size to
        measure (``_explore``). ``behind``: how many tokens the drafter would have to read
        before drafting (asked only when a try is due)."""
        choice = self._choose_k(behind)
        if self.fixed_k is not None or not self.costs.verify or self.gated:
            return choice  # (a gate's verify sizes follow its matches: no padding to measure)
        return self._explore(choice)

    def _explore(self, choice: Choice) -> Choice:
        """Every EXPLORE_EVERY steps at most, within the budget, measure a verify size whose estimate is uncertain (few,
        no or old samples) if it would win were its estimate EXPLORE_MARGIN too high: a size
        the controller believes too expensive is otherwise never used, so never corrected.
        A larger size is measured by padding this step's verify; the single-token size, by a
        step that drafts nothing."""
        step = choice.k * self.costs.t_draft + self.costs.T(choice.k + 1)
        self._since_explore += 1
        self._credit = min(self._credit + EXPLORE_SHARE * step, step * EXPLORE_EVERY)
        if self._since_explore < EXPLORE_EVERY:
            return choice
        n = self._size_to_measure(choice.k, step)
        if n is None:
            return choice
        self._since_explore = 0
        if n == 1:
            self._credit -= step
            return Choice(0, 1.0 / self.costs.T(1), choice.baseline_tps)
        self._credit -= self.costs.T(n) - self.costs.T(choice.k + 1)
        return Choice(choice.k, choice.predicted_tps, choice.baseline_tps, measure=n)

    def _size_to_measure(self, k_now: int, step: float) -> int | None:
        """The most promising size that could win and that the exploration budget affords:
        padding to size n costs T(n) - T(k_now + 1) more than this step, a forced step
        without drafting about a whole step."""
        speeds = self.speeds()
        ks = np.arange(self.max_k + 1)
        optimistic = expected_tokens(self.alpha, ks) / (
            ks * self.costs.t_draft + self.costs.curve(self.max_k + 1)[1:] * (1.0 - EXPLORE_MARGIN)
        )
        curve = self.costs.verify
        # sizes above this step's are measured by padding; T(1) only once it is old (it is
        # measured whenever k = 0 is chosen, and a step without drafting is costly to force)
        old_t1 = (curve.age(1) or 0) > STALE_AFTER
        curve_T = self.costs.curve(self.max_k + 1)
        cost = [step if k == 0 else curve_T[k + 1] - curve_T[k_now + 1] for k in range(self.max_k + 1)]
        could_win = [
            k
            for k in range(self.max_k + 1)
            if k != k_now
            and curve.uncertain(k + 1)
            and optimistic[k] > speeds[k_now]
            and (k > k_now or (k == 0 and old_t1))
            and cost[k] <= self._credit
        ]
        if not could_win:
            return None
        return max(could_win, key=lambda k: optimistic[k]) + 1

    def _choose_k(self, behind: Callable[[], int] | None = None) -> Choice:
        """The best k, except that while k = 0 wins it still tries drafting now and then: the
        acceptance (or the measured speed) can only change when something is drafted. Tries
        back off exponentially, wait until the budget affords the draft model's catch-up
        (``_try_due``), last TRIAL_STEPS steps once it is paid, and stop altogether when even
        a near-perfect draft could not pay on this hardware."""
        choice = self.best()
        if choice.k > 0 or self.fixed_k is not None or not self.costs.verify:
            self._trial_left = 0
            return choice
        best_case = self.best_case()
        # the model wants drafting (a gate: whenever the hardware could pay; worth_trying()
        # computed once a step) and only the measured guard said no
        model_on = best_case >= PROBE_GAIN if self.gated else self._best_k()[0] > 0
        if not model_on and best_case < PROBE_GAIN:
            return choice  # the hardware rules drafting out whatever the acceptance
        if self._trial_left > 0:  # the try goes on: its catch-up is paid
            self._trial_left -= 1
            return self._probe(choice)
        if not self._try_due(behind, self._try_earning(best_case), passes=not model_on):
            return choice
        self._probe_every = min(self._probe_every * 2, MAX_PROBE)
        if model_on:  # the guard said no: give drafting a new trial of TRIAL_STEPS steps
            self._new_trial()
            return self.best()
        self._trial_left = TRIAL_STEPS - 1
        return self._probe(choice)

    def _probe(self, off: Choice) -> Choice:
        """A try's step: PROBE_K drafts where the model (``off``) says none."""
        return Choice(PROBE_K, self.speed(PROBE_K), off.baseline_tps)

    def _try_due(self, behind: Callable[[], int] | None, earn: float, passes: bool = True) -> bool:
        """A step without drafting earns try budget; a try is due once the back-off has
        passed and the budget affords what it costs (``_cost_of_try``: the draft model's
        catch-up on the ``behind()`` tokens it has not read, and, with ``passes``, the trial's
        draft passes: not when the model expects them to pay and only the measured guard said
        no, which a few unlucky steps can do). The first try, before anything was drafted, is
        due at once and free."""
        self._since_draft += 1
        # banked up to one catch-up that is waiting, or MAX_PROBE steps' worth: never a burst
        self._try_credit = min(self._try_credit + earn, max(earn * MAX_PROBE, self._try_cost))
        if self._since_draft < self._probe_every and self._drafted:
            return False
        self._try_cost = self._cost_of_try(behind() if behind else 0, passes) if self._drafted else 0.0
        if self._try_cost > self._try_credit:
            return False  # tried as soon as the budget affords it
        self._try_credit -= self._try_cost
        self._since_draft = 0
        return True

    def _cost_of_try(self, n_behind: int, passes: bool = True) -> float:
        """What a try spends whatever it finds: the draft model's catch-up, and the draft
        passes of its TRIAL_STEPS steps. (Verify rows are spent only on what is proposed:
        prompt lookup proposes nothing without a match, and its gate learns from the matches
        it does not propose for free.)"""
        catch_up = self.costs.draft.read(n_behind) if n_behind >= READ_MIN else 0.0
        return catch_up + (TRIAL_STEPS * PROBE_K * self.costs.t_draft if passes else 0.0)

    def _try_earning(self, best_case: float | None = None) -> float:
        """Seconds of catch-up a step without drafting earns (TRY_SHARE of the best case)."""
        best_case = self.best_case() if best_case is None else best_case
        return TRY_SHARE * max(best_case - 1.0, 0.0) * self.costs.T(1)

    def next_try_in(self) -> int:
        """Steps until drafting is tried again: the back-off's, or until the budget affords
        the last known catch-up, whichever is later (an estimate: the catch-up grows)."""
        steps = self._probe_every - self._since_draft if self._drafted else 1
        short = self._try_cost - self._try_credit
        earn = self._try_earning()
        if short > 0 and earn > 0:
            steps = max(steps, math.ceil(short / earn))
        return max(steps, 1)

    def observe_rate(self, n_tokens: int, seconds: float) -> None:
        """Tokens/s of a step that spent something on drafting (a draft pass or a verify row)."""
        if seconds <= 0:
            return
        self._drafted = True
        # a trial is judged on all its steps together (an EMA seeded by one unlucky first step
        # switched drafting off on the F16 target here where it ran at 2x); after it, on sums
        # that fade like an EMA: tokens/s is total tokens over total time, not a mean of step
        # rates, which undervalues steps that take long and yield much (a long accepted copy)
        keep = 1.0 if self._n_realized < TRIAL_STEPS else 1.0 - EMA
        if self._realized is not None and self._n_realized >= TRIAL_STEPS:
            # one slow step (a page fault, a busy neighbour) counts as at most 2x slower
            seconds = min(seconds, 2.0 * n_tokens / self._realized)
        self._trial = [keep * self._trial[0] + n_tokens, keep * self._trial[1] + seconds]
        self._weight = keep * self._weight + 1.0
        self._realized = self._trial[0] / self._trial[1]
        self._n_realized += 1
        if self._n_realized == TRIAL_STEPS:
            pays = self.drafting_pays()
            self._resumed = pays and self._probe_every > FIRST_PROBE  # a try after a back-off
            if pays:
                self._probe_every = FIRST_PROBE

    def observe(self, n_drafted: int, n_accepted: int) -> None:
        """Count the verdict (``decayed_counts``); drafting that pays again resets the probes."""
        if n_drafted == 0:
            return
        self._drafted = True
        self.accepted, self.rejected = decayed_counts(self.accepted, self.rejected, n_drafted, n_accepted)
        # (a trial of the guard's still in progress has not paid yet: it keeps its back-off)
        if self.fixed_k is None and self._n_realized >= TRIAL_STEPS and self.best().k > 0:
            self._probe_every = FIRST_PROBE


@dataclass(frozen=True)
class DraftingState:
    """Why drafting is on or off right now, in numbers and plain words (the statistics panel,
    ``localspec run`` and the server show it)."""

    on: bool
    k: int  # the draft length the controller would ask for now (0: off)
    why: str  # a few words, with the measured numbers
    next_try_in: int | None = None  # off: steps until drafting is tried again (None: not tried)
    draft_cost: float | None = None  # a draft pass, in target passes T(1)
    verify_cost: float | None = None  # checking k + 1 tokens (2 when off), in target passes
    expected_speedup: float | None = None  # the model's speed-up at its best k

    @property
    def line(self) -> str:
        then = ""
        if not self.on and self.next_try_in is not None:
            then = f"; tries again in {self.next_try_in} steps"
        elif not self.on and self.next_try_in is None and self.draft_cost is not None:
            then = "; not tried again on this hardware"
        return f"{'on' if self.on else 'off'}: {self.why}{then}"

    def as_dict(self) -> dict:
        return {
            "on": self.on,
            "k": self.k,
            "why": self.why,
            "line": self.line,
            "next_try_in": self.next_try_in,
            "draft_cost": self.draft_cost,
            "verify_cost": self.verify_cost,
            "expected_speedup": self.expected_speedup,
        }


def explain(ctl: DraftController) -> DraftingState:
    """The controller's state in words: what it does, and the measurement that decided it."""
    if ctl.fixed_k == 0:
        return DraftingState(False, 0, "the target alone (no draft mode chosen)")
    if ctl.fixed_k is not None:
        return DraftingState(True, ctl.fixed_k, f"k={ctl.fixed_k} every step (fixed: --no-adapt)")
    if not ctl.costs.verify:
        k = min(UNMEASURED_K, ctl.max_k)
        return DraftingState(True, k, f"nothing measured yet: starting at k={k}")
    model_k, speed = ctl._best_k()
    if ctl.gated:  # on whenever the hardware could pay and the guard agrees (best())
        if not ctl.worth_trying():
            return _explain_off(ctl)
        return _explain_gated(ctl) if ctl.drafting_pays() else _explain_guard(ctl, speed)
    if model_k > 0 and ctl.drafting_pays():
        return _explain_on(ctl, model_k, speed)
    if model_k > 0:
        return _explain_guard(ctl, speed)
    return _explain_off(ctl)


def _explain_on(ctl: DraftController, k: int, speed: float) -> DraftingState:
    costs = ctl.costs
    t1 = costs.T(1)
    base = 1.0 / t1
    draft_cost = costs.t_draft / t1
    again = "a try found drafting pays again; " if ctl._resumed else ""
    cost = f"a draft token costs {draft_cost:.2f} of a target pass, " if costs.t_draft else ""
    reach = f"; up to {ctl.max_k} while the draft is sure of every token" if ctl.reach and ctl.max_k > k else ""
    return DraftingState(
        True,
        k,
        f"{again}k={k}, expected {speed / base:.2f}× ({cost}checking "
        f"{k + 1} tokens costs {costs.T(k + 1) / t1:.2f} passes, acceptance {ctl.alpha:.0%}){reach}",
        None,
        draft_cost,
        costs.T(k + 1) / t1,
        speed / base,
    )


def _explain_gated(ctl: DraftController) -> DraftingState:
    """On, with the drafter's gate deciding each proposal (prompt lookup)."""
    t1 = ctl.costs.T(1)
    again = "a try found proposing pays again; " if ctl._resumed else ""
    return DraftingState(
        True,
        ctl.max_k,
        f"{again}up to {ctl.max_k} tokens, as much of each match as matches of its length have "
        f"earned (checking 2 tokens costs {ctl.costs.T(2) / t1:.2f} passes, acceptance so far {ctl.alpha:.0%})",
        None,
        ctl.costs.t_draft / t1,
        ctl.costs.T(2) / t1,
    )


def _explain_guard(ctl: DraftController, speed: float) -> DraftingState:
    """Off although the model likes drafting: the measured guard (drafting_pays said no, so
    a rate was measured)."""
    costs = ctl.costs
    t1 = costs.T(1)
    base = 1.0 / t1
    realized = ctl._realized or 0.0
    return DraftingState(
        False,
        0,
        f"drafting measured {realized:.1f} tok/s against "
        f"{base:.1f} tok/s for the target alone ({realized / base:.2f}×)",
        ctl.next_try_in(),
        costs.t_draft / t1,
        costs.T(2) / t1,
        speed / base,
    )


def _explain_off(ctl: DraftController) -> DraftingState:
    """Off because the model says drafting does not pay: on this hardware at all, or at the
    measured acceptance (then it is tried again now and then)."""
    costs = ctl.costs
    t1 = costs.T(1)
    base = 1.0 / t1
    draft_cost = costs.t_draft / t1
    costs_words = (
        f"a draft token costs {draft_cost:.2f} of a target pass and " if costs.t_draft else ""
    ) + f"checking 2 tokens costs {costs.T(2) / t1:.2f} passes"
    if not ctl.worth_trying():
        best95 = ctl.speeds(OPTIMISTIC_ALPHA)[1:].max() / base
        return DraftingState(
            False,
            0,
            f"{costs_words}; drafting would run at about {best95:.2f}× even at {OPTIMISTIC_ALPHA:.0%} acceptance",
            None,
            draft_cost,
            costs.T(2) / t1,
            best95,
        )
    best_any = max(ctl.speeds()[1:].max(), 1e-12) / base
    return DraftingState(
        False,
        0,
        f"{costs_words}; at the measured acceptance ({ctl.alpha:.0%}) drafting would run at about {best_any:.2f}×",
        ctl.next_try_in(),
        draft_cost,
        costs.T(2) / t1,
        best_any,
    )

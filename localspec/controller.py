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

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

# Tuning choices, each with its reason:
EMA = 0.2  # weight of a new timing sample: follows a changing machine within ~5 steps
DECAY = 0.95  # acceptance counts fade so a new kind of text (prose after code) shows in ~20 steps
PRIOR_ACCEPTED, PRIOR_REJECTED = 3.0, 1.0  # alpha starts at 0.75: a typical same-family pair
FIRST_PROBE, MAX_PROBE = 16, 256  # steps between tries of drafting while k=0 looks best
PROBE_K = 2
# Drafting must promise at least this speed-up before it is used: the model leaves out the
# draft's catch-up on accepted tokens and per-step Python work, a few per cent together.
MIN_GAIN = 1.05
OPTIMISTIC_ALPHA = 0.95  # if even this acceptance cannot pay, probing is pointless
# The model can be wrong where it is blind (drafts cut short by p_min, prose where the draft
# hesitates): so drafting must also *measure* faster than the target alone. A trial of this
# many drafting steps decides; within GUARD_TOLERANCE of the baseline counts as a tie.
TRIAL_STEPS = 4
GUARD_TOLERANCE = 0.97
UNMEASURED_K = 4  # before any timing exists; llama.cpp's example measured best near 4 here


def decayed_counts(accepted: float, rejected: float, n_drafted: int, n_accepted: int) -> tuple[float, float]:
    """Geometric-model MLE with fading memory: a verify gives n_accepted successes and, if it
    stopped short of the draft, one failure."""
    return (DECAY * accepted + n_accepted,
            DECAY * rejected + (1.0 if n_accepted < n_drafted else 0.0))


def expected_tokens(alpha: float, k):
    """E(k) for an int k or a numpy array of them."""
    if alpha >= 1.0:
        return k + 1.0
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


@dataclass
class CostModel:
    """T(n): seconds for a target evaluation of n tokens; t_draft: seconds per draft pass."""

    verify: dict[int, float] = field(default_factory=dict)
    t_draft: float = 0.0
    # The draft's confidence c is a biased guess of acceptance: measured rejections divided by
    # the rejections (sum of 1 - c) its confidences predicted, over the tokens verify tested.
    rejected: float = 1.0
    predicted_rejected: float = 1.0

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

    def curve(self, n_max: int) -> np.ndarray:
        """T(0..n_max) as an array (T(0) = 0), kept until a timing changes: the controller
        reads the whole curve every step, and on a GPU a step is a few milliseconds."""
        key = (n_max, tuple(self.verify.items()))
        if getattr(self, "_curve_key", None) != key:
            self._curve = np.concatenate([[0.0], self._vector_T(np.arange(1, n_max + 1))])
            self._curve_key = key
        return self._curve

    def _vector_T(self, ns: np.ndarray) -> np.ndarray:
        """T(n) for many n in one go: the same rule as ``T``, kept apart because one scalar
        T costs a third of a whole curve, and the fixed-k and target-only steps need one or
        two values per step (tests/test_engine.py checks that the two agree)."""
        if not self.verify:
            return np.full(len(ns), np.nan)
        xs = np.array(sorted(self.verify), dtype=float)
        ys = np.array([self.verify[int(x)] for x in xs])
        if len(xs) == 1:
            return ys[0] * ns / xs[0]
        raw = np.interp(ns, xs, ys)
        hi, lo = ns > xs[-1], ns < xs[0]
        raw[hi] = ys[-1] + (ys[-1] - ys[-2]) / (xs[-1] - xs[-2]) * (ns[hi] - xs[-1])
        raw[lo] = ys[0] + (ys[1] - ys[0]) / (xs[1] - xs[0]) * (ns[lo] - xs[0])
        raw = np.maximum(raw, 1e-9)
        running = np.maximum.accumulate(ys)  # max of the measured times at sizes <= n
        idx = np.searchsorted(xs, ns, side="right") - 1
        floor = np.where(idx >= 0, running[np.maximum(idx, 0)], 0.0)
        return np.maximum(raw, floor)

    def T(self, n: int) -> float:
        """Measured where we have it, linear in between, slope of the last two points beyond;
        never less than a smaller batch's time (a k-token verify is not cheaper than k-1)."""
        xs = sorted(self.verify)
        if not xs:
            return float("nan")
        floor = max((self.verify[x] for x in xs if x <= n), default=0.0)
        return max(self._raw(n, xs), floor)

    def _raw(self, n: int, xs: list[int]) -> float:
        if n in self.verify:
            return self.verify[n]
        if len(xs) == 1:
            return self.verify[xs[0]] * n / xs[0]
        if n > xs[-1]:
            a, b = xs[-2], xs[-1]
        elif n < xs[0]:
            a, b = xs[0], xs[1]
        else:
            return float(np.interp(n, xs, [self.verify[x] for x in xs]))
        slope = (self.verify[b] - self.verify[a]) / (b - a)
        return max(self.verify[b] + slope * (n - b), 1e-9)

    def observe_verify(self, n: int, seconds: float) -> None:
        """A single-token step moves the whole curve (a busier or idler machine slows or
        speeds every batch size alike); a k-token verify refines its own point. Updating T(1)
        alone would let a noisy T(1) pass a stale T(2) and make drafting look free."""
        old = self.verify.get(n)
        self.verify[n] = _smooth(old, seconds)
        if n == 1 and old:
            scale = self.verify[1] / old
            for m in self.verify:
                if m != 1:
                    self.verify[m] *= scale

    def observe_draft(self, n_evals: int, seconds: float) -> None:
        if n_evals <= 0:
            return
        self.t_draft = _smooth(self.t_draft or None, seconds / n_evals)


def _smooth(old: float | None, sample: float) -> float:
    """EMA of timings, with one sample's pull clipped to [old/2, 2 old]: a page fault or a busy
    neighbour process must not flip the choice of k on its own."""
    if old is None:
        return sample
    return (1 - EMA) * old + EMA * min(max(sample, old / 2), old * 2)


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
    """

    def __init__(self, costs: CostModel) -> None:
        self.costs = costs
        self.p_chain, self.expected, self.n, self.passes = 1.0, 1.0, 0, 1

    def _rate(self) -> float:
        return self.expected / (self.passes * self.costs.t_draft + self.costs.T(self.n + 1))

    def _row(self) -> float:
        return max(self.costs.T(self.n + 2) - self.costs.T(self.n + 1), 1e-9)

    def keep(self, c: float) -> bool:
        """Propose a token of confidence c? (Its draft pass is already paid for.)"""
        c = self.costs.acceptance(c)
        if self.p_chain * c < self._rate() * self._row():
            return False
        self.p_chain *= c
        self.expected += self.p_chain
        self.n += 1
        return True

    def another_pass(self, c_next: float) -> bool:
        """Run the draft again, expecting the next token's confidence to be about c_next?"""
        c_next = self.costs.acceptance(c_next)
        if self.p_chain * c_next < self._rate() * (self.costs.t_draft + self._row()):
            return False
        self.passes += 1
        return True


@dataclass(frozen=True)
class Choice:
    k: int
    predicted_tps: float  # expected tokens/s at this k
    baseline_tps: float  # expected tokens/s of the target alone (k = 0)

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
    prefix j of the match that maximises E(j) / T(j+1), nothing when j = 0 wins. A blocked
    length still gets a one-token try now and then (backing off like the controller's probes),
    because text changes and the estimate can only move when something is proposed.
    """

    def __init__(self, costs: CostModel, prior: tuple[float, float] = (PRIOR_ACCEPTED, PRIOR_REJECTED)) -> None:
        self.costs = costs
        self.prior = prior  # [accepted, rejected] of a match length not seen yet
        self.counts: dict[int, list[float]] = {}  # match length -> [accepted, rejected]
        self._blocked: dict[int, int] = {}  # match length -> blocked proposals since the last try
        self._probe_every: dict[int, int] = {}

    def alpha(self, n: int) -> float:
        accepted, rejected = self.counts.get(n, self.prior)
        return accepted / (accepted + rejected)

    def length(self, n: int, available: int) -> int:
        """Tokens of an ``n``-token match's continuation (``available`` of them) to propose."""
        if available <= 0 or not self.costs.verify:
            return available
        expected = expected_tokens(self.alpha(n), np.arange(available + 1))
        j = int(np.argmax(expected / self.costs.curve(available + 1)[1:]))
        return j if j > 0 else self._probe(n)

    def _probe(self, n: int) -> int:
        self._blocked[n] = self._blocked.get(n, 0) + 1
        every = self._probe_every.get(n, FIRST_PROBE // 2)
        if self._blocked[n] < every:
            return 0
        self._blocked[n] = 0
        self._probe_every[n] = min(every * 2, MAX_PROBE)
        return 1

    def observe(self, n: int, n_drafted: int, n_accepted: int) -> None:
        if n_drafted == 0:
            return
        self.counts[n] = list(decayed_counts(*self.counts.get(n, self.prior), n_drafted, n_accepted))
        if n_accepted == n_drafted:
            self._probe_every.pop(n, None)  # it paid: try it again soon if it gets blocked


class DraftController:
    """Picks k each step; ``fixed_k`` turns adaptation off (``--draft-max N --no-adapt``)."""

    def __init__(self, costs: CostModel, max_k: int = 16, fixed_k: int | None = None) -> None:
        self.costs = costs
        self.max_k = max_k
        self.fixed_k = fixed_k
        self.accepted = PRIOR_ACCEPTED
        self.rejected = PRIOR_REJECTED
        self._probe_every = FIRST_PROBE
        self._since_draft = 0
        self._realized: float | None = None  # EMA tokens/s of steps that drafted
        self._n_realized = 0

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
        k, speed = self._best_k()
        if k > 0 and not self.drafting_pays():
            return Choice(0, base, base)
        return Choice(k, speed, base)

    def drafting_pays(self) -> bool:
        """Measured, not modelled: the last trial's drafting steps kept up with the target alone."""
        if self._n_realized < TRIAL_STEPS:
            return True  # still measuring
        return self._realized >= GUARD_TOLERANCE / self.costs.T(1)

    def choose(self) -> Choice:
        """The best k, except that while k = 0 wins it still tries drafting now and then: the
        acceptance (or the measured speed) can only change when something is drafted. Tries
        back off exponentially, and stop altogether when even a near-perfect draft could not
        pay on this hardware."""
        choice = self.best()
        if choice.k > 0 or self.fixed_k is not None or not self.costs.verify:
            return choice
        model_k, _ = self._best_k()
        if model_k == 0 and self._best_k(OPTIMISTIC_ALPHA)[0] == 0:
            return choice  # the hardware rules drafting out whatever the acceptance
        self._since_draft += 1
        if self._since_draft < self._probe_every:
            return choice
        self._since_draft = 0
        self._probe_every = min(self._probe_every * 2, MAX_PROBE)
        if model_k > 0:  # the guard said no: give drafting a new trial of TRIAL_STEPS steps
            self._realized, self._n_realized = None, 0
            return self.best()
        return Choice(PROBE_K, self.speed(PROBE_K), choice.baseline_tps)

    def observe_rate(self, n_tokens: int, seconds: float) -> None:
        """Tokens/s of a step that spent something on drafting (a draft pass or a verify row)."""
        if seconds <= 0:
            return
        self._realized = _smooth(self._realized, n_tokens / seconds)
        self._n_realized += 1
        if self._n_realized == TRIAL_STEPS and self.drafting_pays():
            self._probe_every = FIRST_PROBE

    def observe(self, n_drafted: int, n_accepted: int) -> None:
        """Count the verdict (``decayed_counts``); drafting that pays again resets the probes."""
        if n_drafted == 0:
            return
        self.accepted, self.rejected = decayed_counts(self.accepted, self.rejected, n_drafted, n_accepted)
        if self.fixed_k is None and self.best().k > 0:
            self._probe_every = FIRST_PROBE

"""What a step costs on this machine: T(n), the time of one target evaluation of n tokens with
logits on every row (a verify of n - 1 drafts), and the draft's time per pass. Both are measured,
never assumed: ``calibration.calibrate`` times every size at load as a verify runs (a filled cache, distinct
tokens, a logits row per token), and every verify afterwards adds a sample. Everything the
controller, the marginal rule and the lookup gate decide rests on T, so its estimate is robust:
a median of each size's recent samples (a thin size at its lowest), a monotone fit that lets no
size lift another, unmeasured sizes interpolated (past the largest along the median slope),
and the machine's speed followed as a whole (``VerifyCurve.level``). docs/design.md says why.
"""

from __future__ import annotations

import copy
import math
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from statistics import median

import numpy as np

from .policy import DEFAULT, Policy

# Tuning choices, each with its reason:
WINDOW = 9  # samples kept per size: the median ignores up to 4 outliers, and a machine that
#             changes speed shows after 5 samples of the new speed
MIN_SAMPLES = 3  # fewer samples than this: the estimate is thin (calibration takes 3)
LEVEL_WINDOW = 5  # recent verifies that decide the machine's speed: a change shows after 3, before
#                   it can flip the median of a size's own samples (3 from calibration + 3)
# ... and it moves only when that differs from the level by more than this (log; about 5 %):
# noise of a few per cent must not make sizes not in use jitter. The level is the median of the
# recent verifies' log ratio to their size's reference time, not a sum of shifts: a sum
# ratchets, since bursts of load come and go and the way back can fall inside the dead band
# (docs/design.md, "Why each constant has its value").
LEVEL_DEADBAND = 0.05
CURVE_SIZE = 64  # sizes computed at once: every verify the engine can ask for (k + 1 <= 64)
DRAFT_WINDOW = 15  # draft passes are many and noisy (each step's first pass catches up)
# A draft model that did not run for a while must read every token since (the prompt, too, when
# drafting was off at the start of a reply) before it drafts: passes of at least this many
# tokens are timed as reading, per token; shorter ones are ordinary draft passes. A measurement
# setting, not a Policy field: the drafter times a read by it, and a try's price
# (``budget.Tries``) counts a catch-up as a read from the same length, so the two agree.
READ_MIN = 8
READ_PRIOR = 0.25  # before any read is timed: a token read costs a quarter of a draft pass
# The machine running this much faster or slower than at calibration (a level past log 1.5) is
# no drift of a steady machine, whose bursts read 10-15 %: the calibration met another machine
# (a load under a burst of other work, a laptop that went on battery), and its shape is suspect
# too, most of all T(1), which no draft ever re-measures. The session times the curve again.
RECALIBRATE_AT = math.log(1.5)

clock: Callable[[], float] = time.perf_counter  # tests swap in a virtual clock


class VerifyCurve:
    """T(n) for n >= 1 from windows of measured samples (seconds)."""

    def __init__(
        self, points: Mapping[int, float] | None = None, samples: Mapping[int, Sequence[float]] | None = None
    ) -> None:
        self._samples: dict[int, deque[float]] = {}
        self._warmed: set[int] = set()  # sizes whose first (discarded) verify has run
        # log of the machine's speed now relative to calibration; the samples are stored
        # divided by exp(level) at their time, so every size moves with the machine
        self.level = 0.0
        self._reference: dict[int, float] = {}  # size -> its time at level 0 (at load)
        self._ratios: deque[float] = deque([0.0] * LEVEL_WINDOW, maxlen=LEVEL_WINDOW)
        self._full: np.ndarray | None = None  # T(0..) until the next sample
        self._seeds: dict[int, list[float]] = {}  # size -> what earlier loads measured (``seed``)
        # seconds a change of batch size adds at level 0 (``time_change``): 0 where the backend
        # does not settle (a CPU); on a GPU the steady sizes of a step's plan rest on it
        self.change = 0.0
        for n, seconds in (points or {}).items():  # a given point counts as a calibration
            for _ in range(MIN_SAMPLES):
                self.add(n, seconds)
        for n, timed in (samples or {}).items():  # calibration samples
            for seconds in timed:
                self.add(n, seconds)

    # --- samples ---------------------------------------------------------------------
    def add(self, n: int, seconds: float) -> None:
        """A calibration sample, taken before any step."""
        if n < 1 or not seconds > 0:
            return
        self._samples.setdefault(n, deque(maxlen=WINDOW)).append(float(seconds))
        self._reference[n] = median(self._group(n))
        self._full = None

    def seed(self, n: int, seconds: float) -> None:
        """T(n) an earlier load of this pair measured here (the profile's history), for a size
        this load calibrated: in the estimate beside this load's samples until they fill the
        window, so a burst during the load's three samples is outvoted. For a size past all it
        calibrated (a long verify an earlier load timed), the estimate there: a measurement beats
        the extrapolation. Never in ``points(own=True)``."""
        calibrated = n in self._samples
        if seconds > 0 and (calibrated or n > max(self._samples, default=n)):
            self._seeds.setdefault(n, []).append(float(seconds))
            if calibrated:
                self._reference[n] = median(self._group(n))
            self._full = None

    def _group(self, n: int) -> list[float]:
        """Size n's samples: this load's, then the seeds while the window has room."""
        own = list(self._samples.get(n, ()))
        return own + self._seeds.get(n, [])[: max(WINDOW - len(own), 0)]

    def observe(self, n: int, seconds: float) -> None:
        """A verify of n tokens took ``seconds``. A size with a reference also tells how fast
        the machine runs now (``_follow``); the sample is kept relative to that speed."""
        if n < 1 or not seconds > 0:
            return
        if n not in self._samples and n not in self._warmed:
            # the first verify of a size never seen builds its graph (on a GPU: picks its
            # kernels) and can be many times slower than the next: it warms, it is not kept
            self._warmed.add(n)
            return
        if n in self._reference:
            self._follow(math.log(seconds / self._reference[n]))
        samples = self._samples.setdefault(n, deque(maxlen=WINDOW))
        samples.append(seconds / self.time_scale)
        if n not in self._reference and len(samples) >= MIN_SAMPLES:  # first met online
            self._reference[n] = median(samples)
        self._full = None

    def _follow(self, ratio: float) -> None:
        """The machine's speed: the median of the last LEVEL_WINDOW verifies' log ratios to
        their sizes' references is the level of the whole curve (so sizes not in use follow a
        machine that slowed down or sped up). A majority must agree, so one outlier or a burst
        of two moves nothing; and it must differ from the level by more than LEVEL_DEADBAND,
        so the noise of a steady machine does not either."""
        self._ratios.append(ratio)
        level = median(self._ratios)
        if abs(level - self.level) > LEVEL_DEADBAND:
            self.level = level
            self._full = None

    def __bool__(self) -> bool:
        return bool(self._samples)

    @property
    def moved(self) -> bool:
        """Whether the machine runs so much faster or slower than at calibration
        (``RECALIBRATE_AT``) that the curve should be timed again (``CostModel.recalibrate``)."""
        return abs(self.level) > RECALIBRATE_AT

    def differs(self, n: int, seconds: float) -> bool:
        """Whether a verify of n tokens timed ``seconds`` says the machine ``moved`` (one
        probe before any verify was observed: the level has nothing to go by yet)."""
        return seconds > 0 and abs(math.log(seconds / self.T(n))) > RECALIBRATE_AT

    @property
    def sizes(self) -> list[int]:
        """The sizes timed: by this load, or past them by an earlier one (``seed``)."""
        return sorted({*self._samples, *self._seeds})

    def n_samples(self, n: int) -> int:
        return len(self._samples.get(n, ()))

    def copy(self) -> VerifyCurve:
        return copy.deepcopy(self)

    # --- the estimate ----------------------------------------------------------------
    @property
    def time_scale(self) -> float:
        """How much slower the machine runs now than at load (exp(level); below 1: faster)."""
        return math.exp(self.level)

    def points(self, own: bool = False) -> dict[int, float]:
        """The monotone estimate at each measured size; ``own``: from this load's samples alone
        (what its profile keeps, not the history it was seeded with)."""
        xs = sorted(self._samples) if own else self.sizes
        scale = self.time_scale
        # a thin size (fewer than MIN_SAMPLES, as one met only on long runs past k) is taken at
        # its lowest sample: load only ever adds time, and the median of two is their mean
        samples = (list(self._samples[n]) if own else self._group(n) for n in xs)
        groups = [s if len(s) >= MIN_SAMPLES else [min(s)] for s in samples]
        return {n: t * scale for n, t in zip(xs, isotonic(groups))}

    def curve(self, draft_max: int) -> np.ndarray:
        """T(0..draft_max) as an array (T(0) = 0; NaN where nothing is measured yet). Kept until
        the next sample: the controller reads it every step, and a GPU step is milliseconds."""
        if self._full is None or len(self._full) <= draft_max:
            size = max(draft_max, CURVE_SIZE)
            self._full = np.concatenate([[0.0], self._interpolate(np.arange(1, size + 1))])
        return self._full[: draft_max + 1]

    def T(self, n: int) -> float:
        return float(self.curve(n)[n]) if n >= 1 else 0.0

    def _interpolate(self, ns: np.ndarray) -> np.ndarray:
        pts = self.points()
        if not pts:
            return np.full(len(ns), np.nan)
        xs = np.array(sorted(pts), dtype=float)
        ys = np.array([pts[int(x)] for x in xs])
        if len(xs) == 1:  # one size known: assume the worst, a compute-bound linear curve
            return ys[0] * ns / xs[0]
        out = np.interp(ns, xs, ys)
        hi = ns > xs[-1]
        slope = max(median(np.diff(ys) / np.diff(xs)), 0.0)  # not the last step's
        out[hi] = ys[-1] + slope * (ns[hi] - xs[-1])
        lo = ns < xs[0]  # below the smallest measured size: proportional, never above it
        out[lo] = ys[0] * ns[lo] / xs[0]
        return np.maximum.accumulate(np.maximum(out, 1e-9))


def isotonic(samples: Sequence[Sequence[float]]) -> list[float]:
    """Non-decreasing fit to groups of samples, least absolute deviations (pool adjacent
    violators with medians): a block of sizes that violates the order gets the median of all
    their samples together, so one high size is outvoted by its neighbours instead of being
    averaged into them."""
    blocks: list[tuple[float, list[float], int]] = []  # (its median, all samples of the block, sizes in it)
    for group in samples:
        blocks.append((median(group), list(group), 1))
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (_, b, nb), (_, a, na) = blocks.pop(), blocks.pop()
            blocks.append((median(a + b), a + b, na + nb))
    return [m for m, _, count in blocks for _ in range(count)]


class DraftCost:
    """Seconds per draft pass: the median of the recent passes (the catch-up pass after a
    step reads the accepted tokens too, so single passes vary). And seconds per token read in
    a batch (``read``): what it costs the draft model to catch up on a stretch it did not see."""

    def __init__(self, seconds: float = 0.0) -> None:
        self._samples: deque[float] = deque(maxlen=DRAFT_WINDOW)
        self._own = 0  # samples measured here (the newest), as against seeded ones
        self._value = 0.0
        self._read: deque[float] = deque(maxlen=DRAFT_WINDOW)
        self.change = 0.0  # seconds a change of the draft model's batch size adds (``time_change``)
        if seconds > 0:
            self.observe(1, seconds)

    @property
    def seconds(self) -> float:
        return self._value

    @property
    def n_samples(self) -> int:
        return len(self._samples)

    @property
    def own_seconds(self) -> float:
        """The median of this load's own samples, without the seeded ones."""
        own = list(self._samples)[len(self._samples) - min(self._own, len(self._samples)) :]
        return median(own) if own else self._value

    def observe(self, n_evals: int, seconds: float) -> None:
        if n_evals <= 0 or not seconds > 0:
            return
        self._samples.append(seconds / n_evals)
        self._own += 1
        self._value = median(self._samples)

    def seed(self, seconds: float) -> None:
        """A pass an earlier load measured: in the median until this load's own samples push it
        out of the window, never in ``own_seconds``."""
        if seconds > 0 and len(self._samples) < DRAFT_WINDOW:
            self._samples.appendleft(seconds)
            self._value = median(self._samples)

    def observe_read(self, n_tokens: int, seconds: float) -> None:
        """A pass that read ``n_tokens`` >= READ_MIN tokens at once took ``seconds``."""
        if n_tokens >= READ_MIN and seconds > 0:
            self._read.append(seconds / n_tokens)

    def read(self, n_tokens: float) -> float:
        """Seconds to read ``n_tokens`` at once (the measured per-token median, times n)."""
        per_token = median(self._read) if self._read else READ_PRIOR * self._value
        return n_tokens * per_token

    def recalibrate(self, passes: Sequence[float], scale: float) -> None:
        """Fresh calibration ``passes`` in place of the passes so far; the reads, kept relative
        to a level that is now reset, are taken at ``scale`` (the machine's speed now)."""
        self._samples = deque([], maxlen=DRAFT_WINDOW)
        self._own, self._value = 0, 0.0
        for seconds in passes:
            self.observe(1, seconds)
        self._read = deque((seconds * scale for seconds in self._read), maxlen=DRAFT_WINDOW)

    def copy(self) -> DraftCost:
        return copy.deepcopy(self)


class CostModel:
    """What drafting costs here: the target's verify curve T(n) (shared by every mode of one
    target), the draft's seconds per pass, and how well the draft's confidence predicts
    acceptance."""

    def __init__(
        self,
        verify: Mapping[int, float] | VerifyCurve | None = None,
        t_draft: float | DraftCost = 0.0,
        policy: Policy = DEFAULT,
    ) -> None:
        self.verify = verify if isinstance(verify, VerifyCurve) else VerifyCurve(verify)
        self.draft = t_draft if isinstance(t_draft, DraftCost) else DraftCost(t_draft)
        self.decay = policy.decay  # the confidence calibration fades like the acceptance counts
        # The draft's confidence c is a biased guess of acceptance: measured rejections divided
        # by the rejections (sum of 1 - c) its confidences predicted, over the tokens tested.
        self.rejected = 1.0
        self.predicted_rejected = 1.0
        # The verify size this step's plan keeps steady (``step_curve``; 0: none, every size
        # priced at its steady cost), set by the controller where a change of size costs.
        self.size = 0

    # The draft's passes and reads are kept relative to the machine's speed when they were
    # timed (the verify curve's level, which the target's verifies, drafting or not, follow):
    # a stretch of load slows both models, and what the draft measured in it must not stay
    # its estimate once the target's passes say the machine is fast again.
    @property
    def t_draft(self) -> float:
        return self.draft.seconds * self.verify.time_scale

    @property
    def own_t_draft(self) -> float:
        """This load's own draft pass (``DraftCost.own_seconds``) at the machine's speed now."""
        return self.draft.own_seconds * self.verify.time_scale

    def read(self, n_tokens: float) -> float:
        """Seconds for the draft model to read ``n_tokens`` at once (``DraftCost.read``)."""
        return self.draft.read(n_tokens) * self.verify.time_scale

    @property
    def change(self) -> float:
        """Seconds a change of the target's batch size adds (0 where it settles at once: a CPU)."""
        return self.verify.change * self.verify.time_scale

    @property
    def draft_change(self) -> float:
        """Seconds a change of the draft model's batch size adds."""
        return self.draft.change * self.verify.time_scale

    def T(self, n: int) -> float:
        return self.verify.T(n)

    def curve(self, draft_max: int) -> np.ndarray:
        return self.verify.curve(draft_max)

    def step_curve(self, draft_max: int, size: int | None = None) -> np.ndarray:
        """T(0..draft_max) as a step pays it when the target runs steadily at ``size`` rows (None:
        ``self.size``): a verify of up to ``size`` rows is padded to it (``T(size)``, its rows past
        the draft read by no one), a longer one changes the size there and back, two changes more.
        Without a steady size, or where a change costs nothing, the verify curve itself."""
        size = self.size if size is None else size
        curve = self.curve(draft_max)
        if size <= 0 or not self.change:
            return curve
        ns = np.arange(len(curve))
        return np.where(ns == 0, 0.0, np.where(ns <= size, self.T(size), curve + 2.0 * self.change))

    def observe_verify(self, n: int, seconds: float) -> None:
        self.verify.observe(n, seconds)

    def observe_draft(self, n_evals: int, seconds: float) -> None:
        self.draft.observe(n_evals, seconds / self.verify.time_scale)

    def observe_read(self, n_tokens: int, seconds: float) -> None:
        self.draft.observe_read(n_tokens, seconds / self.verify.time_scale)

    @property
    def rejection_scale(self) -> float:
        return self.rejected / max(self.predicted_rejected, 1e-9)

    def observe_confidence(self, confidence: Sequence[float], n_accepted: int) -> None:
        """Tokens x_1..x_{n_accepted+1} were tested (the rest were never looked at)."""
        tested = confidence[: n_accepted + 1]
        self.predicted_rejected = self.decay * self.predicted_rejected + sum(1.0 - c for c in tested)
        self.rejected = self.decay * self.rejected + (1.0 if n_accepted < len(confidence) else 0.0)

    def recalibrate(self, verify: VerifyCurve, draft_passes: Sequence[float] = ()) -> None:
        """A fresh calibration in place of this one (the machine's speed ``moved``), in the very
        curve and draft cost every mode's costs share; a fresh calibration is not seeded with
        earlier loads: it was timed because this machine's speed now differs from theirs too.
        Without ``draft_passes`` the draft's passes are kept, at the machine's speed now."""
        scale = self.verify.time_scale
        change = self.verify.change * scale  # not re-timed: the recheck times steady costs
        self.verify.__dict__.update(verify.copy().__dict__)
        self.verify.change = change
        passes = draft_passes or [seconds * scale for seconds in self.draft._samples]
        self.draft.recalibrate(passes, scale)

    def acceptance(self, c: float) -> float:
        """Calibrated chance that a draft token of confidence c is accepted."""
        return min(max(1.0 - (1.0 - c) * self.rejection_scale, 0.0), 1.0)


def expected_tokens(alpha: float, k):
    """E(k) = (1 - alpha^(k+1)) / (1 - alpha): the tokens a step of k drafts yields on average
    at per-token acceptance ``alpha`` (the target always adds one); k an int or an array."""
    if alpha >= 1.0:
        return k + 1.0
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def speeds(
    costs: CostModel,
    alpha: float,
    draft_max: int,
    t_draft: float | None = None,
    verify_scale: float = 1.0,
    propose: float = 1.0,
    steady: int | None = None,
) -> np.ndarray:
    """Expected tokens per second of a step that drafts k = 0..draft_max tokens (Leviathan et al.
    2023, section 3, with measured costs in place of constants):

        E(k) / (k * t_draft + T(k + 1))

    where T(n) is the measured time of a target evaluation of n tokens (the pending token and
    k drafts). k = 0 is the target alone. ``t_draft``: another price of a drafted token (0 for a
    copy); ``verify_scale``: T taken that much lower or higher (what if it were cheaper?);
    ``propose``: the share of draft passes that propose anything (the others cost their pass
    and yield the target's one token); ``steady``: T as a step pays it while the target runs
    steadily at that many rows (``CostModel.step_curve``; None: the verify curve). The one place
    this is computed: the controller, the rules, the bench and the profiles call it."""
    ks = np.arange(draft_max + 1)
    per_token = costs.t_draft if t_draft is None else t_draft
    full = costs.curve(draft_max + 1) if steady is None else costs.step_curve(draft_max + 1, steady)
    curve = verify_scale * full[1:]
    tokens, seconds = expected_tokens(alpha, ks), ks * per_token + curve
    if propose < 1.0:
        tokens = np.where(ks > 0, propose * tokens + (1.0 - propose), tokens)
        seconds = np.where(ks > 0, propose * seconds + (1.0 - propose) * (per_token + curve[0]), seconds)
    return tokens / seconds


def extension_value(costs: CostModel, alpha_copy: float, j: int, alpha: float, m_max: int, rate: float) -> np.ndarray:
    """What a draft model's m = 0..m_max tokens after a copy of ``j`` tokens are worth, in tokens,
    where time buys ``rate`` tokens a second otherwise (the model's own steps): the tokens they
    add (each accepted at ``alpha``, and tested only where all the copy is, at ``alpha_copy``
    each), less ``rate`` times what they add to the step: m draft passes, the longer verify, and
    the read of the copied tokens that will not be kept (the model reads the kept ones after the
    copy's step anyway). One longer step yields one token fewer than a step of the copy and one
    of the model would, so this pays only where a verify row and a draft pass are cheap beside
    a whole verify. m = 0 is worth 0.

        alpha_copy^j (E(m; alpha) - 1) - rate (m t_draft + read(j + 1 - E(j; alpha_copy)) + T(j + m + 1) - T(j + 1))"""
    ms = np.arange(m_max + 1)
    tokens = alpha_copy**j * (expected_tokens(alpha, ms) - 1.0)
    wasted = costs.read(j + 1.0 - expected_tokens(alpha_copy, j))
    curve = costs.step_curve(j + m_max + 1)
    seconds = np.where(ms > 0, ms * costs.t_draft + wasted, 0.0) + curve[j + 1 + ms] - curve[j + 1]
    return tokens - rate * seconds


def best_k(rates: np.ndarray, min_gain: float) -> int:
    """The k of the best expected rate (``speeds``), or 0 where that is not ``min_gain`` times
    the rate of none: the one rule by which a draft length or a copy's length is chosen."""
    k = int(np.argmax(rates))
    return k if rates[k] >= min_gain * rates[0] else 0


def pays_to_change(rate_now: float, rate_new: float, tokens: float, change: float) -> bool:
    """Whether a step plan that makes ``rate_new`` tokens a second in place of ``rate_now`` saves
    more than ``change`` seconds (a change of batch size) over the next ``tokens`` tokens: the one
    rule by which a steady verify size changes."""
    return rate_now > 0 and rate_new > 0 and tokens * (1.0 / rate_now - 1.0 / rate_new) > change


def step_seconds(costs: CostModel, k: int) -> float:
    """The modelled time of a step that drafts k tokens: k draft passes and a verify of k + 1."""
    return k * costs.t_draft + costs.T(k + 1)

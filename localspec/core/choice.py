"""What a controller decides each step, and why: the ``Choice`` the engine acts on and that
``explain`` puts in words."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum


class Reason(Enum):
    """Why a step drafts what it does: the one decision, which ``explain`` only puts in words."""

    UNMEASURED = "unmeasured"  # nothing timed yet: drafts as a try does (policy.probe_k)
    FIXED = "fixed"  # a fixed k (--no-adapt, a seeded reply; 0: the target alone)
    ON = "on"  # the best k at the learnt acceptance
    GATED = "gated"  # k is a cap: the drafter's gate weighs each proposal (prompt lookup)
    TRY = "try"  # off, and a try's trial is under way
    HARDWARE = "hardware"  # off: even a draft always accepted could not pay here
    ACCEPTANCE = "acceptance"  # off: at the learnt acceptance drafting does not pay
    STEADY = "steady"  # the verify size stays: another would not save what a change of size costs
    READING = "reading"  # no draft: the prompt's reading costs more than the reply wins, or holds the first token


@dataclass(frozen=True)
class Choice:
    k: int
    predicted_tps: float  # expected tokens/s at this k
    baseline_tps: float  # expected tokens/s of the target alone (k = 0)
    draft_max: int = 0  # > k: a draft the drafter is sure of may run this long (rules.MarginalRule)
    reason: Reason = Reason.ON
    # the figures behind the reason
    alpha: float = math.nan  # the acceptance estimate the choice was made at
    propose: float = 1.0  # ... and the share of draft passes that proposed anything
    best_k: int = 0  # the k the speed model wants (a step that measures T(1) drafts none)
    best_speedup: float = math.nan  # expected speed-up at best_k (HARDWARE: every draft accepted)
    next_try_in: int | None = None  # off: steps until the next try (None: none comes)
    outpaced: bool = False  # off: the draft's catch-up grows faster than tries earn (Tries.outpaced)
    unreachable: bool = False  # off: no try, all its drafts accepted, would switch drafting on (trial_length)
    resumed: bool = False  # on: the last try found drafting pays again
    note: str = ""  # FIXED: what fixed it
    # the rows the target verifies, the draft padded to them, where a change of batch size costs
    # (a GPU; 0: as many as the draft has, plus one); STEADY: the size another choice wanted
    rows: int = 0
    wanted: int = 0

    @property
    def predicted_speedup(self) -> float:
        return self.predicted_tps / self.baseline_tps  # nan until something was measured

"""What the controller measures as it goes: the per-token acceptance (``Acceptance``) and the
speed drafting really runs at (``SpeedGuard``). Each is one estimate with its own prior and memory;
the controller (``controller.AdaptiveController``) decides from them."""

from __future__ import annotations

# Tuning choices, each with its reason:
DECAY = 0.95  # verdicts fade, so text of a new kind (prose after code) shows within ~20 steps
# An untried pair starts in the middle of what same-family pairs agree on at greedy: from about
# 0.67 on chat to 0.96 on edits of given code (docs/design.md).
PRIOR_ALPHA = 0.75
# The prior weighs this many verdicts, so one rejected draft moves 0.75 to 0.71, not (at a
# weight of 4) to 0.59, where two more switch drafting off. A pair's profile replaces the
# prior's alpha, with the weight of the verdicts it holds, up to this.
PRIOR_WEIGHT = 16.0
TRIAL_STEPS = 4  # drafting steps the guard judges together: one unlucky step decides nothing
EMA = 0.2  # after its trial the guard's sums fade by this a step: it follows within ~5 steps
CARRY = 2.0  # at a reply's start, what the guard measured before weighs this many steps
# The guard says no only where its steps took more than this times what the cost model gave
# them: within it the costs held (step times vary by a few per cent), so a slow trial was the
# text's acceptance, which the acceptance estimate judges over more steps (see SpeedGuard).
MISMATCH = 1.1


class Acceptance:
    """Per-token acceptance alpha, the geometric model's estimate: accepted tokens over
    accepted tokens plus rejections, each verdict fading by DECAY, from a prior worth
    ``weight`` verdicts. A reply is new text, so each starts again from the pair's long-run
    estimate (the prior with every verdict so far, unfaded), not from where the last ended."""

    def __init__(self, alpha: float = PRIOR_ALPHA, weight: float = PRIOR_WEIGHT) -> None:
        self.weight = weight
        self.total = [alpha * weight, (1.0 - alpha) * weight]  # the long run: [accepted, rejected]
        self.accepted, self.rejected = self.total

    def begin_reply(self) -> None:
        long_run = self.total[0] / sum(self.total)
        self.accepted, self.rejected = long_run * self.weight, (1.0 - long_run) * self.weight

    @property
    def alpha(self) -> float:
        return self.accepted / (self.accepted + self.rejected)

    def observe(self, n_drafted: int, n_accepted: int) -> None:
        """A verify kept ``n_accepted`` of ``n_drafted``: that many successes, and one failure
        if it stopped short."""
        if n_drafted > 0:
            self.accepted = DECAY * self.accepted + n_accepted
            self.rejected = DECAY * self.rejected + (n_accepted < n_drafted)
            self.total = [self.total[0] + n_accepted, self.total[1] + (n_accepted < n_drafted)]


def prior_from(accepted: int, rejected: int) -> tuple[float, float]:
    """(alpha, weight) of a prior from what a pair's profile counted (accepted tokens and
    rejections), shrunk toward PRIOR_ALPHA while it holds few verdicts."""
    n = accepted + rejected
    alpha = (accepted + PRIOR_ALPHA * PRIOR_WEIGHT) / (n + PRIOR_WEIGHT)
    return alpha, PRIOR_WEIGHT


class SpeedGuard:
    """Drafting must measure at least as fast as the target alone where the cost model is
    blind to what its steps cost (Python work, a catch-up, a busy machine): a trial that
    measured slower says no only if its steps also took longer than the model gave them
    (``costs_hold``). Slow steps that took their modelled time are the text's acceptance, which
    ``Acceptance`` weighs over more steps: a stretch the draft gets wrong (a list of names in
    a summary) would otherwise switch a pair that pays off for the rest of the reply.

    A trial of TRIAL_STEPS drafting steps is judged on their sums (tokens over seconds, not a
    mean of step rates, which would undervalue a long step that yields much); after it the sums
    fade by EMA a step, and one slow step counts as at most 2x slower."""

    def __init__(self) -> None:
        self.restart()

    def restart(self) -> None:
        self.tokens = self.seconds = self.weight = self.modelled = 0.0
        self.n = 0

    @property
    def costs_hold(self) -> bool:
        """Whether the steps took about the time the cost model gave them (MISMATCH): then a
        slow trial is the text's low acceptance, not a cost the model misses."""
        return self.modelled > 0 and self.seconds <= MISMATCH * self.modelled

    @property
    def judged(self) -> bool:
        return self.n >= TRIAL_STEPS

    @property
    def rate(self) -> float | None:
        return self.tokens / self.seconds if self.seconds > 0 else None

    def pays(self, baseline_tps: float) -> bool:
        return not self.judged or (self.rate or 0.0) >= baseline_tps or self.costs_hold

    def observe(self, n_tokens: int, seconds: float, modelled: float = 0.0) -> None:
        """A drafting step made ``n_tokens`` in ``seconds``; the cost model gave it ``modelled``."""
        if seconds <= 0:
            return
        keep = 1.0 - EMA if self.judged else 1.0
        if self.judged and self.rate:
            seconds = min(seconds, 2.0 * n_tokens / self.rate)
        self.tokens = keep * self.tokens + n_tokens
        self.seconds = keep * self.seconds + seconds
        self.modelled = keep * self.modelled + modelled
        self.weight = keep * self.weight + 1.0
        self.n += 1

    def begin_reply(self) -> None:
        """What was measured before weighs CARRY steps at most: a reply of new text is judged
        on its own steps (a trial under way is left to finish)."""
        if self.judged and self.weight > CARRY:
            scale = CARRY / self.weight
            self.tokens, self.seconds, self.modelled = scale * self.tokens, scale * self.seconds, scale * self.modelled
            self.weight = CARRY

"""What the controller measures as it goes: the per-token acceptance (``Acceptance``) and the
speed drafting really runs at (``SpeedGuard``)."""

from __future__ import annotations

from .policy import DEFAULT, Policy


class Acceptance:
    """Per-token acceptance alpha (the geometric model's): accepted tokens over accepted plus
    rejections, each verdict fading by ``decay``, from a prior of ``alpha`` (a profile's, else
    ``prior_alpha``) worth ``prior_weight`` verdicts. Each reply starts again from the pair's
    long-run estimate (every verdict so far, unfaded): a reply is new text.

    ``propose``: the share of draft passes that proposed anything, from ``trial_steps``
    proposals, fading by ``decay``. A refused first token cost its pass and tells alpha nothing,
    so a drafter that refuses every token (an MTP head that carries nothing) is priced off."""

    def __init__(self, alpha: float | None = None, policy: Policy = DEFAULT) -> None:
        self.decay, self.weight = policy.decay, policy.prior_weight
        alpha = policy.prior_alpha if alpha is None else alpha
        self.total = [alpha * self.weight, (1.0 - alpha) * self.weight]  # the long run: [accepted, rejected]
        self.accepted, self.rejected = self.total
        self.proposed, self.refused = float(policy.trial_steps), 0.0  # draft passes that proposed, or not

    def begin_reply(self) -> None:
        long_run = self.total[0] / sum(self.total)
        self.accepted, self.rejected = long_run * self.weight, (1.0 - long_run) * self.weight

    @property
    def alpha(self) -> float:
        return self.accepted / (self.accepted + self.rejected)

    @property
    def propose(self) -> float:
        return self.proposed / (self.proposed + self.refused)

    def observe(self, n_drafted: int, n_accepted: int, passes: int = 0) -> None:
        """A verify kept ``n_accepted`` of ``n_drafted`` (one failure if short); none drafted
        after ``passes`` > 0 draft passes is a refusal."""
        if n_drafted > 0 or passes > 0:
            proposed = n_drafted > 0
            self.proposed = self.decay * self.proposed + proposed
            self.refused = self.decay * self.refused + (not proposed)
        if n_drafted > 0:
            self.accepted = self.decay * self.accepted + n_accepted
            self.rejected = self.decay * self.rejected + (n_accepted < n_drafted)
            self.total = [self.total[0] + n_accepted, self.total[1] + (n_accepted < n_drafted)]


def prior_from(accepted: int, rejected: int, policy: Policy = DEFAULT) -> float:
    """The prior from a profile's counts, shrunk toward ``prior_alpha`` while they are few."""
    n = accepted + rejected
    return (accepted + policy.prior_alpha * policy.prior_weight) / (n + policy.prior_weight)


class SpeedGuard:
    """Drafting must measure at least as fast as the target alone where the cost model is blind
    (Python work, a catch-up, a busy machine): a slow trial says no only if its steps also took
    more than ``mismatch`` times their modelled time. Slow steps that took their modelled time
    are the text's acceptance, which ``Acceptance`` weighs over more steps.

    A trial of ``trial_steps`` steps is judged on its sums (tokens over seconds: a mean of rates
    would undervalue a long step that yields much); after it the sums fade by 1 / (trial_steps
    + 1) a step, a trial's mean age, and one slow step counts as at most 2x slower."""

    def __init__(self, policy: Policy = DEFAULT) -> None:
        self.policy = policy
        self.restart()

    def restart(self) -> None:
        self.tokens = self.seconds = self.weight = self.modelled = 0.0
        self.n = 0

    @property
    def costs_hold(self) -> bool:
        return self.modelled > 0 and self.seconds <= self.policy.mismatch * self.modelled

    @property
    def judged(self) -> bool:
        return self.n >= self.policy.trial_steps

    @property
    def rate(self) -> float | None:
        return self.tokens / self.seconds if self.seconds > 0 else None

    def pays(self, baseline_tps: float) -> bool:
        return not self.judged or (self.rate or 0.0) >= baseline_tps or self.costs_hold

    def observe(self, n_tokens: int, seconds: float, modelled: float = 0.0) -> None:
        if seconds <= 0:
            return
        keep = 1.0 - 1.0 / (self.policy.trial_steps + 1) if self.judged else 1.0
        if self.judged and self.rate:
            seconds = min(seconds, 2.0 * n_tokens / self.rate)
        self.tokens = keep * self.tokens + n_tokens
        self.seconds = keep * self.seconds + seconds
        self.modelled = keep * self.modelled + modelled
        self.weight = keep * self.weight + 1.0
        self.n += 1

    def begin_reply(self) -> None:
        """What was measured before weighs half a trial at most (a new text is judged on its own)."""
        carry = self.policy.trial_steps / 2
        if self.judged and self.weight > carry:
            scale = carry / self.weight
            self.tokens, self.seconds, self.modelled = scale * self.tokens, scale * self.seconds, scale * self.modelled
            self.weight = carry

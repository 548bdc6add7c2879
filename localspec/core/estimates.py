"""What the controller learns as it goes: the per-token acceptance and the proposal rate
(``Acceptance``)."""

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

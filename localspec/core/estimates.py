"""What the controller measures as it goes: the per-token acceptance (``Acceptance``) and the
speed drafting really runs at (``SpeedGuard``). Each is one estimate with its own prior and memory;
the controller (``controller.AdaptiveController``) decides from them."""

from __future__ import annotations

from .policy import DEFAULT, Policy


class Acceptance:
    """Per-token acceptance alpha, the geometric model's estimate: accepted tokens over
    accepted tokens plus rejections, each verdict fading by ``policy.decay``, from a prior of
    ``alpha`` worth ``policy.prior_weight`` verdicts (``policy.prior_alpha`` unless a profile
    gives one). A reply is new text, so each starts again from the pair's long-run estimate
    (the prior with every verdict so far, unfaded), not from where the last ended.

    Beside it, ``propose``: the share of draft passes that proposed anything. A drafter that
    refuses a first token (its rule found it not worth a verify row) has still cost its pass and
    tells alpha nothing, so without this a draft that refuses every token (an MTP head that
    carries nothing) would be paid for at every step. It starts at ``policy.trial_steps``
    proposals and fades by ``policy.decay``: a refusal or two decide nothing, a drafter that
    refuses every token is off within a few trials."""

    def __init__(self, alpha: float | None = None, policy: Policy = DEFAULT) -> None:
        self.decay, self.weight = policy.decay, policy.prior_weight
        alpha = policy.prior_alpha if alpha is None else alpha
        weight = self.weight
        self.total = [alpha * weight, (1.0 - alpha) * weight]  # the long run: [accepted, rejected]
        self.accepted, self.rejected = self.total
        # draft passes that proposed something, or nothing: from a trial's worth of proposals
        self.proposed, self.refused = float(policy.trial_steps), 0.0

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
        """A verify kept ``n_accepted`` of ``n_drafted``: that many successes, and one failure
        if it stopped short; none drafted after ``passes`` > 0 draft passes: a refusal."""
        if n_drafted > 0 or passes > 0:
            proposed = n_drafted > 0
            self.proposed = self.decay * self.proposed + proposed
            self.refused = self.decay * self.refused + (not proposed)
        if n_drafted > 0:
            self.accepted = self.decay * self.accepted + n_accepted
            self.rejected = self.decay * self.rejected + (n_accepted < n_drafted)
            self.total = [self.total[0] + n_accepted, self.total[1] + (n_accepted < n_drafted)]


def prior_from(accepted: int, rejected: int, policy: Policy = DEFAULT) -> float:
    """The prior acceptance from what a pair's profile counted (accepted tokens and
    rejections), shrunk toward ``policy.prior_alpha`` while it holds few verdicts."""
    n = accepted + rejected
    return (accepted + policy.prior_alpha * policy.prior_weight) / (n + policy.prior_weight)


class SpeedGuard:
    """Drafting must measure at least as fast as the target alone where the cost model is
    blind to what its steps cost (Python work, a catch-up, a busy machine): a trial that
    measured slower says no only if its steps also took longer than the model gave them
    (``costs_hold``). Slow steps that took their modelled time are the text's acceptance, which
    ``Acceptance`` weighs over more steps: a stretch the draft gets wrong (a list of names in
    a summary) would otherwise switch a pair that pays off for the rest of the reply.

    A trial of ``policy.trial_steps`` drafting steps is judged on their sums (tokens over
    seconds, not a mean of step rates, which would undervalue a long step that yields much);
    after it the sums fade by 1 / (trial_steps + 1) a step (what it weighs has a trial's mean
    age), and one slow step counts as at most 2x slower."""

    def __init__(self, policy: Policy = DEFAULT) -> None:
        self.policy = policy
        self.restart()

    def restart(self) -> None:
        self.tokens = self.seconds = self.weight = self.modelled = 0.0
        self.n = 0

    @property
    def costs_hold(self) -> bool:
        """Whether the steps took about the time the cost model gave them (``policy.mismatch``):
        then a slow trial is the text's low acceptance, not a cost the model misses."""
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
        """A drafting step made ``n_tokens`` in ``seconds``; the cost model gave it ``modelled``."""
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
        """What was measured before weighs half a trial at most: a reply of new text is judged
        on its own steps (a trial under way is left to finish)."""
        carry = self.policy.trial_steps / 2
        if self.judged and self.weight > carry:
            scale = carry / self.weight
            self.tokens, self.seconds, self.modelled = scale * self.tokens, scale * self.seconds, scale * self.modelled
            self.weight = carry

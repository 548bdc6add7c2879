"""The controller's estimates: the acceptance (a prior, fading verdicts, a fresh start each
reply from the long run)."""

from dataclasses import replace

import pytest

from localspec.core.estimates import Acceptance, prior_from
from localspec.core.policy import DEFAULT as P


class TestAcceptance:
    def test_one_rejected_draft_does_not_overturn_the_prior(self):
        a = Acceptance()
        a.observe(4, 0)
        assert a.alpha == pytest.approx((0.95 * P.prior_alpha * P.prior_weight) / (0.95 * P.prior_weight + 1))
        assert a.alpha > 0.7  # at the weight of 4 verdicts it fell to 0.59
        weak = Acceptance(policy=replace(P, prior_weight=4.0))
        weak.observe(4, 0)
        assert weak.alpha < 0.6

    def test_evidence_outweighs_the_prior_within_a_few_dozen_verdicts(self):
        a = Acceptance()
        for _ in range(40):
            a.observe(4, 0)
        assert a.alpha < 0.15

    def test_a_profile_prior_is_shrunk_toward_the_default_while_it_holds_few_verdicts(self):
        alpha = prior_from(accepted=900, rejected=100)
        assert alpha == pytest.approx((900 + P.prior_alpha * P.prior_weight) / (1000 + P.prior_weight))
        assert alpha > 0.88
        assert prior_from(accepted=1, rejected=1) == pytest.approx((1 + 12) / 18)  # two verdicts: near 0.75

    def test_each_reply_starts_from_the_pairs_long_run_acceptance(self):
        a = Acceptance(0.8)
        for _ in range(30):
            a.observe(4, 4)  # a reply of code the draft knows
        for _ in range(40):
            a.observe(4, 0)  # then a stretch of prose it does not
        assert a.alpha < 0.5
        a.begin_reply()  # the next reply is new text: the whole run so far, not its tail
        long_run = (0.8 * P.prior_weight + 120) / (P.prior_weight + 120 + 40)
        assert a.alpha == pytest.approx(long_run) and a.accepted + a.rejected == pytest.approx(P.prior_weight)

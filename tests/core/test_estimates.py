"""The controller's estimates: the acceptance (a prior, fading verdicts, a fresh start each
reply from the long run) and the guard (what drafting really ran at)."""

from dataclasses import replace

import pytest

from localspec.core.estimates import Acceptance, SpeedGuard, prior_from
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

    def test_only_a_slow_trial_the_costs_do_not_explain_says_no(self):
        # 1 token a step against the target alone's 1 token/s: both trials measured 0.67x
        explained, unexplained = SpeedGuard(), SpeedGuard()
        for _ in range(P.trial_steps):
            explained.observe(1, 1.5, modelled=1.45)  # the modelled time: little was accepted
            unexplained.observe(1, 1.5, modelled=1.0)  # slower than the costs said: the machine
        assert explained.judged and explained.rate == pytest.approx(1 / 1.5)
        assert explained.pays(1.0)  # the acceptance estimate's business, not the guard's
        assert not unexplained.pays(1.0)
        unexplained.begin_reply()
        assert not unexplained.pays(1.0)  # a cost the model misses is not the text's


class TestGuard:
    def test_a_trial_is_judged_on_all_its_steps_not_on_an_unlucky_first_one(self):
        # a first draft rejected (1 token in 2 passes), then 4 tokens in 1.7 passes a step
        g = SpeedGuard()
        g.observe(1, 2.0)
        for _ in range(P.trial_steps - 1):
            g.observe(4, 1.7)
        assert g.judged and g.pays(1.0) and g.rate == pytest.approx((1 + 4 * (P.trial_steps - 1)) / (2.0 + 1.7 * 3))

    @staticmethod
    def paying(tokens: int, seconds: float) -> SpeedGuard:
        """A guard past its trial, drafting at tokens/seconds (T(1) = 1 s)."""
        g = SpeedGuard()
        for _ in range(20):
            g.observe(tokens, seconds)
        assert g.pays(1.0) and g.rate == pytest.approx(tokens / seconds)
        return g

    def test_a_new_reply_is_judged_on_its_own_first_steps(self):
        # replies of code drafted at 1.2x, then a prose reply's first two steps ran at 0.68x
        # and 0.71x (1 token in 1.47 passes, 2 in 2.83)
        carried = self.paying(3, 2.5)
        carried.begin_reply()
        carried.observe(1, 1.47)
        carried.observe(2, 2.83)
        assert not carried.pays(1.0)
        old = self.paying(3, 2.5)  # ... which the last reply's rate, at full weight, outvoted
        old.observe(1, 1.47)
        old.observe(2, 2.83)
        assert old.pays(1.0)

    def test_where_drafting_pays_double_a_new_reply_keeps_it_through_a_few_slow_steps(self):
        g = self.paying(4, 2.0)
        g.begin_reply()
        for _ in range(4):
            g.observe(1, 1.67)  # 0.6x: a run of rejections
            assert g.pays(1.0)
        g.observe(1, 1.67)
        assert not g.pays(1.0)  # the fifth in a row is a change, not bad luck

    def test_a_new_reply_leaves_a_trial_under_way_alone(self):
        g = SpeedGuard()
        for _ in range(P.trial_steps - 1):
            g.observe(3, 1.0)
        g.begin_reply()
        g.observe(1, 2.0)
        assert g.rate == pytest.approx((3 * (P.trial_steps - 1) + 1) / (P.trial_steps - 1 + 2.0)) and g.pays(1.0)

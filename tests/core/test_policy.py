"""The Policy: every tunable of the draft-length decision in one object, and --set's parsing."""

import inspect
from dataclasses import FrozenInstanceError, replace

import pytest

from localspec.core.controller import AdaptiveController
from localspec.core.costs import CostModel
from localspec.core.modes import ModeContext, ReplySpec, draft_model
from localspec.core.policy import Policy
from tests.support.fakes import FakeModel, hashed_logits


class TestSettings:
    def test_a_setting_replaces_one_field_and_keeps_its_type(self):
        p = Policy()
        assert p.with_setting("opening_steps=0").opening_steps == 0
        assert p.with_setting("sure=0.9").sure == 0.9
        assert p.with_setting("trial_steps=6").trial_steps == 6
        assert p.with_setting("opening_steps=0") == replace(p, opening_steps=0)

    @pytest.mark.parametrize("bad", ["nope=1", "opening_steps", "opening_steps=x", "trial_steps=2.5", "sure=high"])
    def test_an_unknown_name_or_a_wrong_value_says_what_is_known(self, bad):
        with pytest.raises(ValueError, match="takes a value like|NAME one of"):
            Policy().with_setting(bad)

    def test_it_is_frozen_and_every_field_says_why(self):
        with pytest.raises(FrozenInstanceError):
            Policy().decay = 0.5  # type: ignore[misc]
        source = inspect.getsource(Policy)
        for name in Policy.names():
            after = source.split(f"    {name}:", 1)[1]
            assert after.split("\n", 2)[1].strip().startswith('"""'), name  # a docstring under each field


class TestDerived:
    def test_the_suffix_reads_follow_the_path_share(self):
        assert Policy().suffix_ends == 100
        assert replace(Policy(), min_path_prob=0.25).suffix_ends == 16

    @pytest.mark.parametrize("bad", ["min_path_prob=0", "min_path_prob=1.5"])
    def test_a_path_share_outside_0_to_1_is_refused(self, bad):
        with pytest.raises(ValueError, match="a share, above 0"):
            Policy().with_setting(bad)

    def test_the_confidence_calibration_fades_by_the_policy_decay(self):
        costs = CostModel({1: 1.0}, policy=replace(Policy(), decay=0.5))
        costs.observe_confidence([0.9, 0.9], 2)
        assert costs.predicted_rejected == pytest.approx(0.5 + 0.2) and costs.rejected == pytest.approx(0.5)


class TestOneObjectReachesEveryUser:
    """An override reaches every user of a value (the ablation tool's old setattr on one
    module reached some of them only)."""

    def test_the_trial_length_sets_both_a_try_and_the_proposal_rates_start(self):
        p = replace(Policy(), trial_steps=6)
        ctl = AdaptiveController(CostModel({1: 1.0, 2: 1.9}, 0.5), 8, policy=p)
        ctl.tries.start()
        assert ctl.tries.left == 5 and ctl.acceptance.proposed == 6.0

    def test_a_mode_hands_its_policy_to_the_controller_and_the_drafters(self):
        model = FakeModel(hashed_logits(1, 16), 16)
        p = replace(Policy(), sure=0.6, prior_weight=4.0)
        drafting = draft_model(ModeContext(model, model, CostModel({1: 1.0, 2: 1.05}, 0.1), 8, policy=p))
        assert drafting.controller.acceptance.weight == 4.0
        assert drafting.new_drafter(ReplySpec()).policy is p
        assert drafting.new_copiers is not None and drafting.new_copiers(ReplySpec())[0].gate.policy is p

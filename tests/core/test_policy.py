"""The Policy: every tunable of the draft-length decision in one object, and --set's parsing."""

import ast
import inspect
from dataclasses import FrozenInstanceError, replace
from pathlib import Path

import pytest

import localspec
from localspec.core.budget import Tries
from localspec.core.controller import AdaptiveController
from localspec.core.costs import CostModel
from localspec.core.modes import ModeContext, ReplySpec, draft_model
from localspec.core.policy import Policy
from localspec.core.rules import LookupGate
from localspec.core.sampling import SamplingParams
from localspec.core.suffix import SuffixDrafter, build
from tests.support.fakes import FakeModel, hashed_logits

PACKAGE = Path(localspec.__file__).parent
GREEDY = SamplingParams(temperature=0.0)


def policy_reads() -> set[str]:
    """The attributes read off a policy (``policy.x``, ``self.policy.x``, ``DEFAULT_POLICY.x``)
    anywhere in the package but ``policy.py`` itself."""
    read = set()
    for path in PACKAGE.rglob("*.py"):
        if path == PACKAGE / "core" / "policy.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                owner = node.value
                name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
                if name.lower().endswith("policy"):
                    read.add(node.attr)
    return read


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

    def test_every_field_is_read_off_the_policy_somewhere(self):
        """A field nothing reads is a tunable that tunes nothing, and a value written back into
        its reader as a number makes its field one."""
        assert sorted(set(Policy.names()) - policy_reads()) == []


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


class TestEachFieldSteersItsReader:
    """Each field, overridden, changes what the code that reads it does (one case a field, for
    the fields that were numbers in their readers)."""

    def test_try_backoff_sets_how_fast_failed_tries_thin_out(self):
        def shares(policy: Policy) -> list[float]:
            tries = Tries(CostModel({1: 1.0}), policy)
            out = []
            for _ in range(3):
                tries.judged(False)  # a try that did not switch drafting back on
                out.append(tries.share)
            return out

        assert shares(Policy()) == [0.125, 0.0625, 0.05]  # 0.25 halved per failed try, down to try_share
        assert shares(replace(Policy(), try_backoff=4.0)) == [0.0625, 0.05, 0.05]

    def test_copy_growth_sets_how_far_a_context_copy_may_reach(self):
        steep = CostModel({n: 1.0 + 0.5 * (n - 1) for n in (1, 2, 4, 8, 16, 33)})  # a row costs 0.5 T(1)
        key = ("context", 4)
        # nothing kept yet: probe_k = 2 tokens, T(3) = 2; doubled T(n + 1) <= 4, 6 tokens
        assert LookupGate(steep).reach(key, 31) == 6
        # tripled: T(n + 1) <= 6, 10 tokens
        assert LookupGate(steep, replace(Policy(), copy_growth=3.0)).reach(key, 31) == 10

    def test_long_match_sets_which_match_lengths_earn_trust_together(self):
        ctx = [1, 2, 3, 4, 5, 9, 1, 2, 3, 4, 5]  # "1 2 3 4 5" matched: 9 follows
        assert SuffixDrafter().draft(ctx, 3, GREEDY, None).match == ("context", 4)  # 4 or more: one kind
        apart = SuffixDrafter(policy=replace(Policy(), long_match=8)).draft(ctx, 3, GREEDY, None)
        assert apart.match == ("context", 5)

    def test_max_spec_factor_sets_how_far_a_short_history_match_walks(self):
        reply = list(range(100, 160))
        history = build([reply])
        once = SuffixDrafter(lambda: (history,)).draft(reply[:5], 64, GREEDY, None)
        assert once.ids == tuple(reply[5:10])  # a 5-token match: 5 tokens
        twice = SuffixDrafter(lambda: (history,), policy=replace(Policy(), max_spec_factor=2.0))
        assert twice.draft(reply[:5], 64, GREEDY, None).ids == tuple(reply[5:15])  # 10 tokens

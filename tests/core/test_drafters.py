"""The drafter seam, suffix drafts from the context and the model drafter's confidence stop."""

import inspect
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from localspec.bench.modes import OracleDrafter
from localspec.core import costs as costs_module
from localspec.core.controller import AdaptiveController, FixedController, pick_copy
from localspec.core.costs import CostModel, speeds
from localspec.core.drafters import (
    Draft,
    Drafter,
    ModelDrafter,
    NoDrafter,
)
from localspec.core.engine import SpeculativeEngine
from localspec.core.options import MAX_DRAFT
from localspec.core.policy import DEFAULT as P
from localspec.core.rules import LookupGate
from localspec.core.sampling import SamplingParams
from localspec.core.suffix import SuffixDrafter, build, match_context
from tests.support.fakes import (
    EOS,
    FakeModel,
    NoisyOracleDrafter,
    ScriptedDrafter,
    TimedModel,
    VirtualClock,
    hashed_logits,
)
from tests.support.forced import fixed

GREEDY = SamplingParams(temperature=0.0)

# every drafter, the tests' fakes included; typed as the Protocol so mypy checks each of them
DRAFTERS: tuple[Drafter, ...] = (
    NoDrafter(),
    ModelDrafter(FakeModel(hashed_logits(0, 8), 8), 8),
    SuffixDrafter(),
    OracleDrafter(1, [2, 3], 8),
    ScriptedDrafter(lambda context, k: ()),
    NoisyOracleDrafter(hashed_logits(0, 8), 1.0, VirtualClock(), 0.0),
)


class TestDrafterProtocol:
    @pytest.mark.parametrize("drafter", DRAFTERS, ids=lambda d: type(d).__name__)
    def test_every_drafter_has_the_protocol_s_methods_with_its_parameters(self, drafter):
        assert isinstance(drafter, Drafter)
        for method in ("draft", "behind", "observe"):
            want = list(inspect.signature(getattr(Drafter, method)).parameters)[1:]  # without self
            assert list(inspect.signature(getattr(drafter, method)).parameters) == want, method

    def test_the_hooks_of_a_drafter_without_them_do_nothing(self):
        drafter = OracleDrafter(1, [2, 3], 8)
        assert drafter.behind([1]) == 0
        drafter.observe(Draft((2, 3)), (2, 1), (2, 5))
        assert drafter.draft([1], 2, GREEDY, None).ids == (2, 3)  # the hooks changed nothing


class TestSuffixDrafterOnTheContext:
    def test_copies_what_followed_the_latest_match(self):
        ctx = [1, 2, 3, 4, 5, 9, 2, 3, 7, 8, 2, 3]
        d = SuffixDrafter().draft(ctx, 3, GREEDY, None)
        assert d.ids == (7, 8, 2)  # latest earlier "2 3" is followed by 7 8 2

    def test_a_growing_context_finds_what_a_fresh_one_finds(self):
        # the drafter converts only what the engine appended to its list since the last step
        rng = np.random.default_rng(5)
        growing, ctx = SuffixDrafter(), [int(t) for t in rng.integers(0, 6, 40)]

        def fresh(context):
            return SuffixDrafter().draft(list(context), 4, GREEDY, None).ids

        for _ in range(200):
            assert growing.draft(ctx, 4, GREEDY, None).ids == fresh(ctx)
            ctx.extend(int(t) for t in rng.integers(0, 6, int(rng.integers(1, 4))))
        other = ctx[:30]  # a new reply's list, shorter: read afresh
        assert growing.draft(other, 4, GREEDY, None).ids == fresh(other)
        assert growing.draft(ctx, 4, GREEDY, None).ids == fresh(ctx)
        del ctx[25:]  # the same list cut back (the engine never does): read afresh too
        ctx.extend([1, 2, 3, 1, 2])
        assert growing.draft(ctx, 4, GREEDY, None).ids == fresh(ctx) == (3, 1, 2)

    def test_no_match_drafts_nothing(self):
        assert SuffixDrafter().draft([1, 2, 3, 4], 5, GREEDY, None).ids == ()

    @given(st.lists(st.integers(0, 4), min_size=2, max_size=60), st.integers(1, 30))
    def test_the_match_is_the_longest_earlier_occurrence(self, ctx, depth):
        arr = np.array(ctx)
        m = match_context(arr, depth, 1000)

        def occurs(n, end):  # ctx[-n:] also ends at ``end`` < len - 1
            return end >= n - 1 and ctx[end - n + 1 : end + 1] == ctx[len(ctx) - n :]

        want = max(
            (n for n in range(1, min(depth, len(ctx) - 1) + 1) if any(occurs(n, e) for e in range(len(ctx) - 1))),
            default=0,
        )
        assert m.length == want
        assert list(m.ends) == [e for e in range(len(ctx) - 1) if want and occurs(want, e)]


class TestModelDrafter:
    def test_stops_when_unsure(self):
        def fn(h):  # confident for 2 tokens, then flat
            z = np.zeros(10, dtype=np.float32)
            if len(h) < 5:
                z[len(h)] = 10.0
            return z

        d = ModelDrafter(FakeModel(fn, 10), 10, p_min=0.5).draft([1, 2, 3], 8, GREEDY, None)
        assert d.ids == (3, 4)

    def test_stops_after_an_end_of_generation_token(self):
        def fn(h):  # certain of 3, 4, EOS, then 7 for ever
            z = np.zeros(10, dtype=np.float32)
            z[{3: 3, 4: 4, 5: EOS}.get(len(h), 7)] = 10.0
            return z

        model = FakeModel(fn, 10)
        d = ModelDrafter(model, 10, p_min=0.5).draft([1, 2, 3], 8, GREEDY, None)
        assert d.ids == (3, 4, EOS)
        assert d.n_evals == 3  # no pass after the end

    def test_never_proposes_banned_or_out_of_vocab_ids(self):
        def fn(h):
            z = np.zeros(12, dtype=np.float32)
            z[11] = 9.0  # id 11 exists only in the draft's vocab
            z[4] = 8.0  # id 4 is banned
            z[6] = 7.0
            return z

        d = ModelDrafter(FakeModel(fn, 12), 10, p_min=0.0, banned=[4]).draft([1, 2], 3, GREEDY, None)
        assert d.ids == (6, 6, 6)


class TestMarginalRule:
    @staticmethod
    def unsure_then_flat(h):
        z = np.zeros(10, dtype=np.float32)
        z[7] = 0.9  # top probability ~0.2: below any sensible p_min
        return z

    def test_cheap_verify_row_takes_an_unsure_first_token(self):
        # memory-bound target: a verify row costs 3 % of T(1), a draft pass 20 %
        costs = CostModel({1: 1.0, 2: 1.03, 3: 1.06, 4: 1.1}, t_draft=0.2)
        d = ModelDrafter(FakeModel(self.unsure_then_flat, 10), 10, p_min=0.75, costs=costs)
        assert d.draft([1, 2, 3], 8, GREEDY, None).ids == (7,)  # one token, then no more passes

    def test_expensive_verify_row_refuses_it(self):
        # compute-bound target: a verify row costs 50 % of T(1)
        costs = CostModel({1: 1.0, 2: 1.5, 3: 2.0, 4: 2.5}, t_draft=0.6)
        d = ModelDrafter(FakeModel(self.unsure_then_flat, 10), 10, p_min=0.75, costs=costs)
        assert d.draft([1, 2, 3], 8, GREEDY, None).ids == ()

    def test_confident_runs_go_long_on_cheap_rows(self):
        def confident(h):
            z = np.full(10, -10.0, dtype=np.float32)
            z[1 + len(h) % 9] = 10.0  # never EOS (0), after which nothing is drafted
            return z

        costs = CostModel({1: 1.0, 2: 1.03, 4: 1.1, 8: 1.4, 16: 2.0}, t_draft=0.1)
        d = ModelDrafter(FakeModel(confident, 10), 10, p_min=0.75, costs=costs)
        assert len(d.draft([1, 2, 3], 12, GREEDY, None).ids) == 12

    # the direct measurement of the F16 1.5B target here: T(7) is a step (1.26 T(6))
    F16_STEP = {1: 1.0, 2: 1.0, 3: 1.09, 4: 1.15, 5: 1.24, 6: 1.28, 7: 1.61, 8: 1.69, 9: 1.74, 10: 1.85}

    @staticmethod
    def sure_but(unsure_at=(), p_unsure=0.8, prompt_len=3):
        """Each draft token (0-based after the prompt) is certain, except at ``unsure_at``,
        where the top token has probability ``p_unsure``."""

        def fn(h):
            i = len(h) - prompt_len
            if i in unsure_at:
                z = np.full(10, np.log((1 - p_unsure) / 9), dtype=np.float32)
                z[len(h) % 10] = np.log(p_unsure)
                return z
            z = np.full(10, -20.0, dtype=np.float32)
            z[len(h) % 10] = 20.0
            return z

        return fn

    def test_a_step_in_the_curve_does_not_stop_a_run_of_certain_tokens(self):
        # the 6th token alone costs the step to T(7) and never pays; with the two tokens after
        # it (rows nearly free past the step) it does: 9 tokens for 1.6 + 1.74 passes beat
        # 6 for 1.0 + 1.28 (the rule without look-ahead stopped at 5)
        costs = CostModel(self.F16_STEP, t_draft=0.2)
        d = ModelDrafter(FakeModel(self.sure_but(), 10), 10, costs=costs)
        assert len(d.draft([1, 2, 3], 8, GREEDY, None).ids) == 8

    def test_a_sure_run_goes_past_k_up_to_reach(self):
        costs = CostModel(self.F16_STEP, t_draft=0.2)
        d = ModelDrafter(FakeModel(self.sure_but(), 10), 10, costs=costs)
        assert len(d.draft([1, 2, 3], 3, GREEDY, None).ids) == 3  # no draft_max: k is the cap
        assert len(d.draft([1, 2, 3], 3, GREEDY, None, draft_max=8).ids) == 8

    def test_past_k_an_unsure_token_ends_the_draft_that_k_would_have_kept_it_in(self):
        costs = CostModel(self.F16_STEP, t_draft=0.2)
        unsure = self.sure_but(unsure_at={4}, p_unsure=0.7)
        late = ModelDrafter(FakeModel(unsure, 10), 10, costs=costs)
        assert len(late.draft([1, 2, 3], 3, GREEDY, None, draft_max=8).ids) == 4  # the 5th, past k, is refused
        # within k the same token (0.7, a row of 0.09 T(1)) is proposed and the run goes on to k
        early = ModelDrafter(FakeModel(self.sure_but(unsure_at={1}, p_unsure=0.7), 10), 10, costs=costs)
        assert len(early.draft([1, 2, 3], 5, GREEDY, None, draft_max=8).ids) == 5

    def test_a_fairly_sure_token_does_not_end_a_run_past_k(self):
        # 0.85 is at least SURE (0.8): on a flat curve the run goes on to draft_max (at 0.95, the
        # old SURE, it stopped at k = 3, and code lost its runs past k: docs/design.md)
        costs = CostModel({1: 1.0, 2: 1.03, 4: 1.1, 8: 1.4, 16: 2.0}, t_draft=0.1)
        d = ModelDrafter(FakeModel(self.sure_but(unsure_at={2, 4}, p_unsure=0.85), 10), 10, costs=costs)
        assert len(d.draft([1, 2, 3], 3, GREEDY, None, draft_max=8).ids) == 8

    def test_confidence_is_calibrated_by_measured_rejections(self):
        costs = CostModel({1: 1.0, 2: 1.1})
        assert costs.acceptance(0.8) == pytest.approx(0.8)  # no evidence yet: taken at face value
        for _ in range(100):  # drafts of confidence 0.8 that the target always accepts
            costs.observe_confidence([0.8, 0.8, 0.8, 0.8], n_accepted=4)
        assert costs.acceptance(0.8) > 0.97
        for _ in range(100):  # now the first token is always rejected
            costs.observe_confidence([0.8, 0.8], n_accepted=0)
        assert costs.acceptance(0.8) < 0.5


class TestOracleDrafter:
    """The bench's oracle: a controlled acceptance at zero draft cost."""

    def _run(self, corrupt, k=4, n=40, fixed=True):
        fn = hashed_logits(3, 50)
        prompt = [5, 6, 7]
        ref = [t for s in SpeculativeEngine(FakeModel(fn, 50)).generate(prompt, GREEDY, n) for t in s.emitted]
        oracle = OracleDrafter(len(prompt), ref, 50, corrupt=corrupt, seed=1)
        engine = SpeculativeEngine(FakeModel(fn, 50), oracle, FixedController(CostModel(), k))
        steps = list(engine.generate(prompt, GREEDY, n))
        return ref, [t for s in steps for t in s.emitted], steps, oracle

    def test_all_right_accepts_everything(self):
        ref, got, steps, _ = self._run(0.0)
        assert got == ref
        drafted = sum(len(s.drafted) for s in steps)
        assert drafted > 0 and sum(s.n_accepted for s in steps) == drafted
        assert max(len(s.emitted) for s in steps) == 5  # k accepted + the bonus token

    def test_all_wrong_accepts_nothing_and_output_is_still_the_targets(self):
        ref, got, steps, _ = self._run(1.0)
        assert got == ref
        assert sum(len(s.drafted) for s in steps) > 0
        assert sum(s.n_accepted for s in steps) == 0

    def test_partly_wrong_accepts_part(self):
        ref, got, steps, _ = self._run(0.3)
        assert got == ref
        rate = sum(s.n_accepted for s in steps) / sum(len(s.drafted) for s in steps)
        assert 0.2 < rate < 0.9

    def test_corrupted_positions_do_not_depend_on_k(self):
        a = OracleDrafter(2, list(range(10, 40)), 100, corrupt=0.5, seed=7)
        b = OracleDrafter(2, list(range(10, 40)), 100, corrupt=0.5, seed=7)
        assert a.draft([0, 1], 8, GREEDY, None).ids[:3] == b.draft([0, 1], 3, GREEDY, None).ids
        n_wrong = sum(p != r for p, r in zip(a.proposals, a.reference))
        assert 5 <= n_wrong <= 25  # about half of 30

    def test_stops_proposing_once_the_reply_leaves_the_reference(self):
        o = OracleDrafter(2, [10, 11, 12, 13, 14], 100)
        assert o.draft([0, 1, 10], 2, GREEDY, None).ids == (11, 12)
        assert o.draft([0, 1, 10, 11, 99], 2, GREEDY, None).ids == ()
        assert o.left_reference_at == 2
        assert o.draft([0, 1, 10, 11, 99, 5], 2, GREEDY, None).ids == ()

    def test_rejects_a_bad_fraction(self):
        with pytest.raises(ValueError, match="corrupt"):
            OracleDrafter(0, [1], 10, corrupt=1.5)


class TestLookupGate:
    """Prompt lookup proposes as much of a match as matches of its length have earned."""

    def _gate(self, curve=None):
        return LookupGate(CostModel(curve or {1: 1.0, 2: 1.1, 4: 1.3, 8: 1.8, 16: 3.0}))

    def test_a_length_that_keeps_failing_is_blocked_and_a_good_one_is_not(self):
        gate = self._gate()
        for _ in range(30):
            gate.observe(2, 3, 0)
            gate.observe(4, 3, 3)
        assert gate.alpha(2) < 0.1 < 0.9 < gate.alpha(4)
        assert gate.length(4, 8) >= 4
        assert [gate.length(2, 8) for _ in range(5)] == [0] * 5

    def test_a_blocked_length_wins_trust_back_for_free_from_what_steps_kept(self):
        gate = self._gate({1: 1.0, 2: 1.42, 4: 2.2, 8: 4.0})  # Q4-like: a row costs 0.42 T(1)
        d = SuffixDrafter(gate=gate)
        for _ in range(30):
            gate.observe(("context", 2), 3, 0)
        ctx = [5, 6, 7, 8, 1, 5, 6]  # "5 6" matched: 7 8 1 follows
        proposed = []
        for _ in range(40):  # the text now repeats: each step keeps what the match said
            proposed.append(len(d.draft(ctx, 3, GREEDY, None).ids))
            d.observe(d.draft(ctx, 3, GREEDY, None), None, (7,))  # another proposal was verified; 7 kept
        assert proposed[0] == 0 and proposed[-1] > 0  # blocked at first, trusted again later
        assert gate.alpha(("context", 2)) > 0.6

    def test_a_match_is_scored_only_as_far_as_the_step_kept(self):
        gate = self._gate({1: 1.0, 2: 1.42, 4: 2.2, 8: 4.0})
        d = SuffixDrafter(gate=gate)
        key = ("context", 2)
        gate.observe(key, 1, 0)  # blocked: nothing is proposed
        proposal = d.draft([5, 6, 7, 8, 1, 5, 6], 3, GREEDY, None)
        assert proposal.ids == ()
        before = list(gate.counts[key])
        d.observe(proposal, (0, 0), (7, 9))  # 7 agreed, 9 did not (8 was the match's)
        assert gate.counts[key] == pytest.approx([0.95 * before[0] + 1, 0.95 * before[1] + 1])
        d.observe(Draft(), (0, 0), (7, 9))  # a step that found no match: nothing to score
        assert gate.counts[key] == pytest.approx([0.95 * before[0] + 1, 0.95 * before[1] + 1])

    # a compute-bound curve (a row costs 0.5 T(1)) and a flat one (33 rows cost 2 T(1))
    STEEP = {n: 1.0 + 0.5 * (n - 1) for n in (1, 2, 4, 8, 16, 33)}
    FLAT = {1: 1.0, 2: 1.05, 4: 1.1, 8: 1.3, 16: 1.6, 33: 2.0}

    def test_a_long_context_copy_is_earned_by_doubling_the_cost_of_kept_ones(self):
        gate = self._gate(self.STEEP)
        key = ("context", 4)
        for _ in range(30):  # a kind trusted from many short copies, all kept
            gate.observe(key, 3, 3)
        assert gate.alpha(key) > 0.95
        # the rate alone bets 20 tokens (alpha 0.997: E(20) = 20.3 in T(21) = 11)
        assert gate.length(key, 31) == 20
        # kept runs of 3 (T(4) = 2.5) earn copies whose verify costs at most 5: 8 tokens, T(9) = 5
        assert gate.reach(key, 31) == 8 and gate.length(key, 31, capped=True) <= 8
        gate.observe(key, 8, 8)  # a kept run of 8 doubles again: T(n + 1) <= 10, 18 tokens
        assert gate.reach(key, 31) == 18

    def test_on_a_flat_curve_or_for_an_unseen_kind_the_reach_binds_little(self):
        flat, steep = self._gate(self.FLAT), self._gate(self.STEEP)
        key = ("context", 4)
        assert flat.reach(key, 31) == 31  # T(32) < 2 T(3): nothing yet kept, and no limit
        assert steep.reach(key, 31) == 6  # probe_k = 2 tokens: T(3) = 2, so T(n + 1) <= 4
        assert steep.reach(key, 2) == 2  # never past what is available

    def test_one_rejection_blocks_an_unseen_length_where_a_row_is_dear(self):
        gate = self._gate({1: 1.0, 2: 1.42, 4: 2.2, 8: 4.0})
        assert gate.length(2, 4) == 1  # alpha 0.5 from the prior: (1 + 0.5) / 1.42 > 1
        gate.observe(2, 1, 0)
        assert gate.length(2, 4) == 0  # alpha 0.33: (1 + 0.33) / 1.42 < 1

    def test_unknown_lengths_start_from_the_prior_and_no_costs_means_no_gate(self):
        assert self._gate().length(3, 5) > 0
        assert LookupGate(CostModel()).length(3, 5) == 5

    def test_on_a_compute_bound_target_only_sure_matches_pass(self):
        gate = self._gate({1: 1.0, 2: 1.7, 4: 2.5, 8: 7.3})
        for _ in range(30):
            gate.observe(3, 2, 1)  # about half accepted
        assert [gate.length(3, 4) for _ in range(10)] == [0] * 10
        assert self._gate().length(3, 4) > 0  # the same acceptance pays where a row is cheap

    def test_drafter_reports_the_verdict_to_the_length_it_used(self):
        gate = LookupGate(CostModel({1: 1.0, 2: 1.1, 4: 1.3}))
        d = SuffixDrafter(gate=gate)
        ctx = [1, 2, 3, 4, 5, 9, 2, 3, 7, 8, 2, 3]  # only a 2-token match ("2 3")
        proposal = d.draft(ctx, 3, GREEDY, None)
        assert proposal.ids == (7, 8)  # alpha 0.5: E(2) / T(3) beats E(3) / T(4)
        d.observe(proposal, (2, 0), (9,))
        assert gate.counts[("context", 2)][1] > 1.0 and len(gate.counts) == 1

    # the calibration's sizes, best at 6 (1.43 tokens per T(1)); 33 rows as a load times them
    CALIBRATED = {1: 1.0, 2: 1.75, 4: 3.0, 6: 4.2, 8: 6.0}

    @pytest.mark.parametrize("t33, whole", [(14.0, True), (24.0, False)])
    def test_a_trusted_walk_is_proposed_whole_where_the_longest_verify_timed_cheap(self, t33, whole):
        gate = LookupGate(CostModel({**self.CALIBRATED, 33: t33}), P, (200.0, 0.5))  # alpha 0.998
        assert (gate.length(4, 32) == 32) == whole
        assert gate.length(4, 32) >= 1

    @pytest.mark.parametrize("slope_past_8, long_copies", [(0.25, True), (1.0, False)])
    def test_the_engine_copies_long_only_where_long_verifies_cost_less(self, monkeypatch, slope_past_8, long_copies):
        fn = hashed_logits(7, 50, order=2, eos_bias=-50.0)  # logits of the last 2 tokens and the position mod 7
        prompt = [5, 6, 7, 8, 9, 10]
        first = [t for s in SpeculativeEngine(FakeModel(fn, 50)).generate(prompt, GREEDY, 141) for t in s.emitted]
        prompt = prompt + first + prompt  # asked again (147 tokens on): the context holds the reply it will write
        ref = [t for s in SpeculativeEngine(FakeModel(fn, 50)).generate(prompt, GREEDY, 141) for t in s.emitted]
        assert ref == first
        clock = VirtualClock()
        monkeypatch.setattr(costs_module, "clock", clock)

        def seconds(n, call):
            timed = self.CALIBRATED
            return float(np.interp(min(n, 8), list(timed), list(timed.values()))) + slope_past_8 * max(n - 8, 0)

        costs = CostModel({**self.CALIBRATED, 33: seconds(33, 0)}, t_draft=5.0)  # a draft pass never pays
        drafter = ModelDrafter(FakeModel(hashed_logits(8, 50), 50), 50, costs=costs)
        copier = SuffixDrafter(gate=LookupGate(costs, P, (200.0, 0.5)))
        engine = SpeculativeEngine(TimedModel(fn, 50, clock, seconds), drafter, AdaptiveController(costs, 8), (copier,))
        steps = list(engine.generate(prompt, GREEDY, 141))
        assert [t for s in steps for t in s.emitted] == ref
        n_long = sum(len(s.drafted) > 16 for s in steps)
        assert (n_long >= 3) == long_copies and (n_long == 0) == (not long_copies)

    def test_greedy_output_is_the_targets_with_the_gate(self, monkeypatch):
        fn = hashed_logits(5, 12, order=2)  # a small vocabulary repeats n-grams often
        ref = [t for s in SpeculativeEngine(FakeModel(fn, 12)).generate([3, 4, 5], GREEDY, 60) for t in s.emitted]
        curve = {1: 1.0, 2: 1.05, 4: 1.2, 8: 1.6, 16: 2.5}
        clock = VirtualClock()  # the timings the engine learns from are the curve's, not this machine's
        monkeypatch.setattr(costs_module, "clock", clock)
        target = TimedModel(fn, 12, clock, lambda n, call: float(np.interp(n, list(curve), list(curve.values()))))
        costs = CostModel(dict(curve))
        gate = LookupGate(costs)
        drafter = SuffixDrafter(gate=gate)
        engine = SpeculativeEngine(target, drafter, AdaptiveController(costs, 8))
        steps = list(engine.generate([3, 4, 5], GREEDY, 60))
        assert [t for s in steps for t in s.emitted] == ref
        assert sum(len(s.drafted) for s in steps) > 0 and gate.counts


class TestCopiesBesideADraftModel:
    """Beside a draft model, a copy from the context that promises more tokens per second is
    verified in its place (``controller.pick_copy``), and every match is scored against what the
    step kept."""

    CTX = [1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 12, 1, 2, 3]  # "1 2 3" came before, then 4 5 6 ...
    KEY = ("context", 3)  # what the gate judges a 3-token match of the context by

    COSTS = CostModel({1: 1.0, 2: 1.02, 4: 1.08, 8: 1.2, 16: 1.5}, t_draft=0.2)

    @pytest.fixture(autouse=True)
    def fresh_costs(self, monkeypatch):
        """Each test's own costs: an engine's reads and passes refine those it was given."""
        monkeypatch.setattr(type(self), "COSTS", CostModel(self.COSTS.verify.points(), t_draft=0.2))

    @classmethod
    def lookup(cls, prior=(3.0, 1.0)):  # unseen match lengths start at alpha 0.75
        return SuffixDrafter(gate=LookupGate(cls.COSTS, P, prior))

    @classmethod
    def fixed(cls, k: int, draft_max: int = 6) -> FixedController:
        ctl = FixedController(cls.COSTS, k)
        ctl.draft_max = draft_max  # a copy may run to the longest draft: it costs no pass
        return ctl

    @classmethod
    def pick(cls, copies, alpha: float, k: int, room: int = 0):  # beside k model drafts accepted at alpha
        copy, n_extend = pick_copy(copies, cls.COSTS, lambda: speeds(cls.COSTS, alpha, k), k, P, alpha, room)
        return (copy, n_extend) if room else copy

    @staticmethod
    def counting_model():
        calls = []

        def fn(h):
            calls.append(len(h))
            z = np.zeros(20, dtype=np.float32)
            z[9] = 10.0  # the model always says 9
            return z

        return FakeModel(fn, 20), calls

    def copying_engine(self, ref, reads_ahead=True):
        """Draft mode whose target and draft model both say ``ref``, beside a lookup gate that
        trusts copies (alpha 0.97): the engine, the draft model, the controller and the copier."""
        say = np.eye(20, dtype=np.float32) * 10

        def fn(h):
            return say[ref[len(h)]]

        model = FakeModel(fn, 20)
        model.reads_ahead = reads_ahead
        ctl = AdaptiveController(self.COSTS, 8, prior=0.9)
        lookup = self.lookup(prior=(30.0, 1.0))
        engine = SpeculativeEngine(FakeModel(fn, 20), ModelDrafter(model, 20, costs=ctl.costs), ctl, (lookup,))
        return engine, model, ctl, lookup

    def test_a_match_trusted_enough_is_picked(self):
        copy = self.lookup().draft(self.CTX, 16, GREEDY, None)
        assert copy.ids[:4] == (4, 5, 6, 7) and copy.alpha == pytest.approx(0.75) and not copy.copied
        short, empty = replace(copy, ids=copy.ids[:1]), replace(copy, ids=())
        # beside 2 drafts of a model accepted at 0.9, the longer copy makes more a second (no pass)
        assert self.pick([short, copy], 0.9, 2) is copy
        assert self.pick([short], 0.9, 2) is None
        assert self.pick([short], 0.5, 2) is short  # beside a worse draft it wins
        # in place of the target alone: the first the gate proposed (it priced it against that)
        assert self.pick([empty, copy], 0.75, 0) is copy and self.pick([empty], 0.75, 0) is None

    def test_a_trusted_copy_is_extended_by_the_models_tokens_where_they_pay(self):
        trusted = self.lookup(prior=(30.0, 1.0)).draft(self.CTX, 16, GREEDY, None)  # alpha 0.97
        copy = replace(trusted, ids=trusted.ids[:4])  # all 4 kept: 0.88
        # beside 2 drafts accepted at 0.9 (1.96 tokens a second, with min_gain): 2 more after the
        # copy add 0.88 * 1.71 tokens in 0.48 s (2 passes, 2 verify rows, 0.16 tokens read in vain)
        assert self.pick([copy], 0.9, 2, room=16) == (copy, 2)
        assert self.pick([copy], 0.9, 4, room=16) == (copy, 4)
        assert self.pick([copy], 0.9, 4, room=6) == (copy, 2)  # a verify's rows left for two
        assert self.pick([copy], 0.9, 0, room=16) == (copy, 0)  # the target alone: nothing to extend
        # a long copy: 11 tokens, all kept 0.70, 3 of them read in vain
        assert self.pick([trusted], 0.9, 4, room=16) == (trusted, 0)
        # the same copy on a steep curve (each verify row 0.5 T(1)): none
        steep = CostModel({1: 1.0, 2: 1.5, 4: 2.5, 8: 4.5, 16: 8.5}, t_draft=0.2)
        assert pick_copy([copy], steep, lambda: speeds(steep, 0.9, 2), 2, P, 0.9, 16) == (copy, 0)

    def test_in_the_engine_a_copy_the_model_extends_is_verified_with_it(self):
        """The model reads the copy with its first pass and drafts on; one verify takes both;
        the accepted tokens are counted by where they came from."""
        ref = [7, 1, 2, 9, 1, 2, 9, 1, 2, 3, 4, 5, 6, 8, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19]
        engine, model, ctl, lookup = self.copying_engine(ref)
        step = next(engine.generate(ref[:6], GREEDY, 16))  # "1 2" came before: copy 9 1 2
        n_model = len(step.drafted) - 3
        assert step.drafted == tuple(ref[6 : 9 + n_model]) and n_model > 0
        assert step.extended == ("draft", n_model) and step.n_accepted == len(step.drafted)
        assert step.accepted_by_source() == {"context": 3, "draft": n_model}
        assert model.cached[:9] == ref[:9]  # the prompt and the copy, read before drafting on
        assert ctl.acceptance.alpha > 0.9  # the model's own tokens, all kept, count as its acceptance
        accepted, rejected = lookup.gate.counts[("context", 2)]
        assert (accepted, rejected) == pytest.approx((0.95 * 30 + 3, 0.95 * 1))  # the copy's 3, all kept
        # a draft that reads the target's hidden states (MTP) cannot read the copy: the copy alone
        engine = self.copying_engine(ref, reads_ahead=False)[0]
        step = next(engine.generate(ref[:6], GREEDY, 16))
        assert step.drafted == (9, 1, 2) and step.extended is None

    def test_a_copy_through_an_end_of_generation_token_is_cut_there_and_not_extended(self):
        ref = [7, 1, 2, EOS, 5, 6, 1, 2, EOS, 5, 6, 1, 2, 3, 4, 5, 6, 8, 10, 11, 12, 13, 14, 15]
        engine, model, _, _ = self.copying_engine(ref)
        steps = list(engine.generate(ref[:8], GREEDY, 16))  # "1 2" came before: copy EOS 5 6 1 2 ...
        assert steps[0].drafted == (EOS,) and steps[0].extended is None  # the rest is never kept
        assert len(steps) == 1 and steps[0].finish == "eos" and steps[0].emitted == ()
        assert model.cached == []  # no pass: the copy ended the reply before the draft read the prompt

    def test_a_model_that_will_not_draft_on_from_a_copy_is_counted_as_a_refusal(self):
        """The model read the copy and proposed nothing after it: its pass proposed nothing, as
        a refused first token does, so the proposal rate learns it."""
        ref = [7, 1, 2, 9, 1, 2, 9, 1, 2, 3, 4, 5, 6, 8, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19]
        say = np.eye(20, dtype=np.float32) * 10
        unsure = FakeModel(lambda h: np.zeros(20, dtype=np.float32), 20)  # every token at 1/20
        ctl = AdaptiveController(self.COSTS, 8, prior=0.9)
        drafter = ModelDrafter(unsure, 20, p_min=0.5)  # no costs: the floor alone decides
        target = FakeModel(lambda h: say[ref[len(h)]], 20)
        engine = SpeculativeEngine(target, drafter, ctl, (self.lookup(prior=(30.0, 1.0)),))
        propose = ctl.acceptance.propose
        step = next(engine.generate(ref[:6], GREEDY, 16))
        assert step.drafted == (9, 1, 2) and step.extended is None and step.n_accepted == 3
        assert unsure.cached[:9] == ref[:9]  # it read the copy to draft on
        assert ctl.acceptance.propose < propose

    def test_an_unused_match_is_scored_against_what_the_step_kept(self):
        d = self.lookup()
        for _ in range(20):  # 3-token matches keep failing
            d.gate.observe(self.KEY, 4, 0)
        copy = d.draft(self.CTX, 16, GREEDY, None)
        assert self.pick([copy], 0.75, 2) is None
        accepted, rejected = d.gate.counts[self.KEY]
        d.observe(copy, None, (4,))  # the target's token agreed with the copy's first token
        assert d.gate.counts[self.KEY] == pytest.approx([0.95 * accepted + 1, 0.95 * rejected])
        d.observe(d.draft(self.CTX, 16, GREEDY, None), None, (8,))  # and now it did not
        assert d.gate.counts[self.KEY][1] > 0.95 * rejected

    def test_a_verified_copy_teaches_the_gate_its_verdict(self):
        d = self.lookup()
        copy = d.draft(self.CTX, 16, GREEDY, None)
        d.observe(copy, (5, 2), (4, 5, 9))
        assert d.gate.counts[self.KEY] == pytest.approx([0.95 * 3 + 2, 0.95 * 1 + 1])

    def test_in_the_engine_a_trusted_copy_costs_no_draft_pass_and_runs_past_k(self):
        """... and past the longest model draft: as far as the reply's budget (8: 7 drafts and
        the target's token) and a verify's rows (options.MAX_DRAFT) allow."""
        model, calls = self.counting_model()
        target = FakeModel(lambda h: np.eye(20, dtype=np.float32)[(h[-1] + 1) % 20] * 10, 20)  # says t + 1
        ctl = self.fixed(2, draft_max=2)
        engine = SpeculativeEngine(target, ModelDrafter(model, 20, costs=self.COSTS), ctl, (self.lookup(),))
        step = next(engine.generate(self.CTX, GREEDY, 8))
        assert step.drafted == (4, 5, 6, 7, 8, 10, 11) and step.model_k == 2
        assert calls == []  # no draft pass, and so the prompt is not read

    def test_in_the_engine_a_verified_copy_is_judged_by_its_verify_not_by_what_followed(self):
        model, _ = self.counting_model()
        target = FakeModel(lambda h: np.eye(20, dtype=np.float32)[(h[-1] + 1) % 20] * 10, 20)  # says t + 1
        lookup = self.lookup()
        engine = SpeculativeEngine(target, ModelDrafter(model, 20, costs=self.COSTS), self.fixed(2), (lookup,))
        step = next(engine.generate(self.CTX, GREEDY, 4))  # the budget cuts the copy to 3 tokens
        assert step.drafted == (4, 5, 6) and step.n_accepted == 3
        # the verify tested 3 and kept 3: no rejection (the match's 4th token, 7, was never tested)
        assert lookup.gate.counts[self.KEY] == pytest.approx([0.95 * 3 + 3, 0.95 * 1])

    def test_in_the_engine_an_untrusted_copy_leaves_the_step_to_the_model(self):
        model, calls = self.counting_model()
        target = FakeModel(lambda h: np.eye(20, dtype=np.float32)[(h[-1] + 1) % 20] * 10, 20)
        costs = CostModel({1: 1.0, 2: 1.02, 4: 1.08, 8: 1.2, 16: 1.5}, t_draft=0.2)
        engine = SpeculativeEngine(target, ModelDrafter(model, 20, costs=costs), fixed(2), (self.lookup((1.0, 3.0)),))
        step = next(engine.generate(self.CTX, GREEDY, 8))
        assert step.drafted == (9, 9) and calls  # the model drafted

    def test_greedy_output_is_the_targets(self):
        fn = hashed_logits(5, 12, order=2)
        ref = [t for s in SpeculativeEngine(FakeModel(fn, 12)).generate([3, 4, 5], GREEDY, 60) for t in s.emitted]
        costs = CostModel({1: 1.0, 2: 1.05, 4: 1.2, 8: 1.6, 16: 2.5}, t_draft=0.1)
        drafter = ModelDrafter(FakeModel(hashed_logits(6, 12, order=2), 12), 12, costs=costs)
        copier = SuffixDrafter(gate=LookupGate(costs))
        engine = SpeculativeEngine(FakeModel(fn, 12), drafter, AdaptiveController(costs, 8), (copier,))
        assert [t for s in engine.generate([3, 4, 5], GREEDY, 60) for t in s.emitted] == ref


class TestLongCopies:
    def test_a_copy_runs_to_what_one_verify_takes_and_no_further(self):
        """A regenerated reply copied from the history: 32 tokens a verify (options.MAX_DRAFT,
        the rows llama/backend.py reserves), not the model drafts' 16, with the budget to spare."""
        reply = list(range(100, 200))
        history = build([reply])
        target = FakeModel(lambda h: np.eye(200, dtype=np.float32)[(h[-1] + 1) % 200] * 10, 200)  # says t + 1
        engine = SpeculativeEngine(target, None, FixedController(CostModel(), 0), (SuffixDrafter(lambda: (history,)),))
        steps = list(engine.generate(reply[:24], GREEDY, 50))  # a full-depth match, as a regenerate's
        assert [len(s.drafted) for s in steps] == [MAX_DRAFT, 50 - (MAX_DRAFT + 1) - 1]  # each with its bonus token
        assert [t for s in steps for t in s.emitted] == reply[24:74]

    def test_a_suffix_matchs_tokens_are_a_copys_in_any_mode(self):
        """Whether a copier beside a model proposed them or the lookup mode's drafter did, a suffix
        match's tokens are a copy's: its verdict is its gate's, not counted as a drafter's own."""
        reply = list(range(100, 200))
        history = build([reply])
        target = FakeModel(lambda h: np.eye(200, dtype=np.float32)[(h[-1] + 1) % 200] * 10, 200)  # says t + 1
        engine = SpeculativeEngine(target, SuffixDrafter(lambda: (history,)), FixedController(CostModel(), 8))
        step = next(engine.generate(reply[:24], GREEDY, 16))
        assert step.drafted == tuple(reply[24:32]) and step.n_copied == 8 and step.own_verdict() == (0, 0)


def test_a_sure_copy_is_extended_only_where_the_models_tokens_beat_its_own_rate():
    """A regenerate's copy (acceptance 1) copies on next step: the model's tokens after it must
    beat that, not the drafts' rate."""
    t = TestCopiesBesideADraftModel
    trusted = t.lookup(prior=(30.0, 1.0)).draft(t.CTX, 16, GREEDY, None)
    copy = replace(trusted, ids=trusted.ids[:4])
    assert t.pick([copy], 0.9, 2, room=16) == (copy, 2)  # trusted, not sure: extended
    sure = replace(copy, alpha=1.0)
    assert t.pick([sure], 0.9, 2, room=16) == (sure, 0)


class TestSteadyCatchUp:
    """Where a change of the draft model's batch size costs more than the passes it saves (a
    GPU), its catch-up after a verify reads one token at a time, so every pass keeps one size."""

    @pytest.mark.parametrize("change, sizes", [(0.0, [2, 1]), (1.0, [1, 1, 1])])
    def test_a_two_token_catch_up(self, change, sizes):
        model = FakeModel(hashed_logits(seed=4, n_vocab=50), 50)
        costs = CostModel({1: 1.0, 2: 1.1, 4: 1.3}, 0.1)
        costs.draft.change = change
        drafter = ModelDrafter(model, 50, p_min=0.0, costs=costs)
        context = [5, 6, 7, 8]
        drafter.draft(context, 1, GREEDY, np.random.default_rng(0))
        model.decode_calls.clear()
        context += [9, 10]  # the verify kept the draft and added its own token
        draft = drafter.draft(context, 2, GREEDY, np.random.default_rng(0))
        assert [n for n, _ in model.decode_calls] == sizes[: len(model.decode_calls)]
        assert draft.n_evals == len(model.decode_calls)  # each pass counted in the draft's cost

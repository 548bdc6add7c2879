"""Prompt lookup and the model drafter's confidence stop."""

import numpy as np
import pytest
from hypothesis import given, strategies as st

from fakes import FakeModel
from localspec.controller import CostModel
from localspec.drafters import ModelDrafter, PromptLookupDrafter, find_latest_ngram
from localspec.sampling import SamplingParams

GREEDY = SamplingParams(temperature=0.0)


class TestPromptLookup:
    def test_copies_what_followed_the_latest_match(self):
        ctx = [1, 2, 3, 4, 5, 9, 2, 3, 7, 8, 2, 3]
        d = PromptLookupDrafter(max_ngram=2, min_ngram=2).draft(ctx, 3, GREEDY, None)
        assert d.ids == (7, 8, 2)  # latest earlier "2 3" is followed by 7 8 2

    def test_no_match_drafts_nothing(self):
        assert PromptLookupDrafter().draft([1, 2, 3, 4], 5, GREEDY, None).ids == ()

    @given(st.lists(st.integers(0, 4), min_size=2, max_size=60), st.integers(1, 4))
    def test_match_is_a_real_earlier_occurrence(self, ctx, n):
        ctx = np.array(ctx)
        start = find_latest_ngram(ctx, n)
        if start is None:
            tail = list(ctx[-n:])
            assert all(list(ctx[s : s + n]) != tail for s in range(len(ctx) - n))
        else:
            assert start + n < len(ctx)
            assert list(ctx[start : start + n]) == list(ctx[-n:])
            later = [s for s in range(start + 1, len(ctx) - n) if list(ctx[s : s + n]) == list(ctx[-n:])]
            assert later == []


class TestModelDrafter:
    def test_stops_when_unsure(self):
        def fn(h):  # confident for 2 tokens, then flat
            z = np.zeros(10, dtype=np.float32)
            if len(h) < 5:
                z[len(h)] = 10.0
            return z

        d = ModelDrafter(FakeModel(fn, 10), 10, p_min=0.5).draft([1, 2, 3], 8, GREEDY, None)
        assert d.ids == (3, 4)

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
            z[len(h) % 10] = 10.0
            return z

        costs = CostModel({1: 1.0, 2: 1.03, 4: 1.1, 8: 1.4, 16: 2.0}, t_draft=0.1)
        d = ModelDrafter(FakeModel(confident, 10), 10, p_min=0.75, costs=costs)
        assert len(d.draft([1, 2, 3], 12, GREEDY, None).ids) == 12

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
        from localspec.controller import DraftController
        from localspec.drafters import OracleDrafter
        from localspec.engine import SpeculativeEngine
        from fakes import hashed_logits

        fn = hashed_logits(3, 50)
        prompt = [5, 6, 7]
        ref = [t for s in SpeculativeEngine(FakeModel(fn, 50)).generate(prompt, GREEDY, n) for t in s.emitted]
        oracle = OracleDrafter(len(prompt), ref, 50, corrupt=corrupt, seed=1)
        engine = SpeculativeEngine(FakeModel(fn, 50), oracle, DraftController(CostModel(), 8, fixed_k=k))
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
        from localspec.drafters import OracleDrafter

        a = OracleDrafter(2, list(range(10, 40)), 100, corrupt=0.5, seed=7)
        b = OracleDrafter(2, list(range(10, 40)), 100, corrupt=0.5, seed=7)
        assert a.draft([0, 1], 8, GREEDY, None).ids[:3] == b.draft([0, 1], 3, GREEDY, None).ids
        n_wrong = sum(p != r for p, r in zip(a.proposals, a.reference))
        assert 5 <= n_wrong <= 25  # about half of 30

    def test_stops_proposing_once_the_reply_leaves_the_reference(self):
        from localspec.drafters import OracleDrafter

        o = OracleDrafter(2, [10, 11, 12, 13, 14], 100)
        assert o.draft([0, 1, 10], 2, GREEDY, None).ids == (11, 12)
        assert o.draft([0, 1, 10, 11, 99], 2, GREEDY, None).ids == ()
        assert o.left_reference_at == 2
        assert o.draft([0, 1, 10, 11, 99, 5], 2, GREEDY, None).ids == ()

    def test_rejects_a_bad_fraction(self):
        from localspec.drafters import OracleDrafter

        with pytest.raises(ValueError, match="corrupt"):
            OracleDrafter(0, [1], 10, corrupt=1.5)

"""Prompt lookup and the model drafter's confidence stop."""

import numpy as np
from hypothesis import given, strategies as st

from fakes import FakeModel
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

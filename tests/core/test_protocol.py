"""The cache bookkeeping every model shares (evaluate, truncate, sync), on a scripted fake."""

import pytest

from localspec.core.protocol import ContextFull, common_prefix
from tests.support.fakes import FakeModel, hashed_logits

V = 16


def model(n_ctx=32) -> FakeModel:
    return FakeModel(hashed_logits(0, V), V, n_ctx)


class TestEvaluate:
    def test_appends_and_returns_the_last_rows(self):
        m = model()
        rows = m.evaluate([1, 2, 3], n_logits=2)
        assert m.cached == [1, 2, 3] and len(rows) == 2 and m.decode_calls == [(3, 2)]

    def test_nothing_to_evaluate_or_past_the_context_is_refused(self):
        m = model(n_ctx=4)
        with pytest.raises(ValueError):
            m.evaluate([])
        m.evaluate([1, 2, 3])
        with pytest.raises(ContextFull, match="5 tokens > context 4"):
            m.evaluate([4, 5])
        assert m.cached == [1, 2, 3]  # the refused tokens were never added

    def test_steady_once_the_settle_evaluations_before_had_the_same_size(self):
        m = model(n_ctx=64)
        m.evaluate([1, 2, 3])
        assert m.steady  # a CPU's model (settle 0) runs every evaluation at its steady cost
        m.settle = 2  # a GPU's: the two evaluations after a change of size run without a graph
        seen = []
        for tokens in ([4], [5], [6], [7, 8], [9], [10], [11], [12]):
            m.evaluate(tokens)
            seen.append(m.steady)
        assert seen == [False, False, True, False, False, False, True, True]
        m.truncate(3)  # a rollback evaluates nothing: the sizes stand
        m.evaluate([13])
        assert m.steady

    def test_truncate_rolls_back(self):
        m = model()
        m.evaluate([1, 2, 3, 4])
        m.truncate(2)
        m.truncate(3)  # longer than the cache: nothing to do
        assert m.cached == [1, 2]


class TestSync:
    def test_a_follow_up_evaluates_only_what_is_new(self):
        m = model()
        m.sync([1, 2, 3])
        assert m.sync([1, 2, 3, 4, 5]) is None  # no rows asked for
        assert m.cached == [1, 2, 3, 4, 5] and m.decode_calls[-1] == (2, 1)

    def test_a_different_history_is_rolled_back_to_the_shared_prefix(self):
        m = model()
        m.sync([1, 2, 3, 4])
        m.sync([1, 2, 9])
        assert m.cached == [1, 2, 9] and m.decode_calls[-1] == (1, 1)

    def test_rows_asked_for_are_re_evaluated_when_cached(self):
        m = model()
        m.sync([1, 2, 3])
        rows = m.sync([1, 2, 3], n_logits=1)
        assert rows is not None and len(rows) == 1 and m.decode_calls[-1] == (1, 1)

    def test_known_skips_the_comparison_of_a_vouched_prefix(self):
        m = model()
        m.sync([1, 2, 3])
        m.sync([1, 2, 3, 4], known=3)
        assert m.cached == [1, 2, 3, 4] and m.decode_calls[-1] == (1, 1)


@pytest.mark.parametrize(
    "a, b, n",
    [([], [1], 0), ([1, 2, 3], [1, 2, 3], 3), ([1, 2, 3], [1, 2], 2), ([1, 2, 3], [1, 5, 3], 1), ([4], [5], 0)],
)
def test_common_prefix(a, b, n):
    assert common_prefix(a, b) == n

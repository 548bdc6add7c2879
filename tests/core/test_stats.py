"""A reply's statistics from hand-written steps."""

import math

import pytest

from localspec.core.engine import Step
from localspec.core.stats import RunStats


def step(drafted, n_accepted, emitted, k, predicted, prefill, draft, verify, wall, finish=None) -> Step:
    token = emitted[-1] if emitted else -1
    return Step(
        drafted=tuple(drafted),
        n_accepted=n_accepted,
        token=token,
        emitted=tuple(emitted),
        text="",
        model_k=k,
        predicted_speedup=predicted,
        prefill_seconds=prefill,
        draft_seconds=draft,
        verify_seconds=verify,
        step_seconds=wall,
        finish=finish,
    )


# drafts 1 2 3, the target keeps 1 2 and corrects to 7: 3 tokens in one pass
FIRST = step([1, 2, 3], 2, [1, 2, 7], k=3, predicted=1.5, prefill=0.5, draft=0.1, verify=0.2, wall=0.4)
# drafts 4 5, both kept, plus the bonus 9: 3 tokens; the budget ends the reply
SECOND = step([4, 5], 2, [4, 5, 9], 2, math.nan, prefill=0.0, draft=0.05, verify=0.15, wall=0.25, finish="length")
# what the engine yields when the context is full: no pass, no tokens
FINAL = step([], 0, [], k=0, predicted=math.nan, prefill=0.0, draft=0.0, verify=0.0, wall=0.0, finish="context")


def stats(*steps) -> RunStats:
    s = RunStats()
    for x in steps:
        s.add(x)
    return s


class TestTwoSteps:
    def test_counts(self):
        s = stats(FIRST, SECOND)
        assert (s.n_tokens, s.n_steps, s.n_drafted, s.n_accepted) == (6, 2, 5, 4)
        assert (s.last_k, s.k_sum, s.finish) == (2, 5, "length")
        assert s.tokens_per_pass_history == [3.0, 3.0]

    def test_rates(self):
        s = stats(FIRST, SECOND)
        assert s.acceptance_rate == pytest.approx(4 / 5)
        assert s.tokens_per_pass == 3.0 and s.mean_draft_length == 2.5
        assert s.decode_seconds == pytest.approx(0.65)  # 0.4 + 0.25; the prefill is apart
        assert s.tokens_per_second == pytest.approx(6 / 0.65)

    def test_times(self):
        s = stats(FIRST, SECOND)
        assert s.first_token_seconds == pytest.approx(0.9)  # prefill 0.5 + the first step 0.4
        assert s.overhead_seconds == pytest.approx(0.65 - 0.15 - 0.35)  # decode - draft - verify
        assert s.predicted_speedup == 1.5  # the last step's nan does not overwrite it

    def test_a_step_without_a_pass_is_not_counted_as_one(self):
        s = stats(FIRST, SECOND, FINAL)
        assert s.n_steps == 2 and s.n_tokens == 6 and s.finish == "context"

    def test_as_dict_rounds_and_has_no_nan(self):
        d = stats(FINAL).as_dict()
        assert d["predicted_speedup"] is None and d["acceptance_rate"] is None
        assert d["time_to_first_token"] is None and d["tokens_per_second"] == 0.0
        assert stats(FIRST).as_dict()["draft_seconds"] == 0.1


class TestSpeedup:
    def test_over_the_target_alone(self):
        assert stats(FIRST, SECOND).speedup(5.0) == pytest.approx((6 / 0.65) / 5.0)

    def test_exactly_one_when_nothing_was_drafted(self):
        plain = step([], 0, [7], k=0, predicted=1.0, prefill=0.1, draft=0.0, verify=0.2, wall=0.2)
        assert stats(plain).speedup(100.0) == 1.0  # whatever the baseline measured
        assert stats(FINAL).speedup(5.0) is None  # no tokens: nothing to compare

    @pytest.mark.parametrize("baseline", [None, 0.0, -1.0, math.nan, math.inf])
    def test_none_without_a_usable_baseline(self, baseline):
        assert stats(FIRST).speedup(baseline) is None

"""Whether the draft model reads a reply's prompt (``core.reading``): only where reading it costs
less than what drafting is expected to save, and never before the first token where that would
delay it; the output stays the target's own either way."""

from __future__ import annotations

import math

import pytest

from localspec.core.controller import AdaptiveController
from localspec.core.costs import CostModel, speeds
from localspec.core.drafters import ModelDrafter
from localspec.core.engine import SpeculativeEngine
from localspec.core.explain import explain
from localspec.core.policy import DEFAULT as P
from localspec.core.reading import plan_reading, win_seconds
from localspec.core.sampling import SamplingParams
from tests.support import plans
from tests.support.fakes import FakeModel, hashed_logits

V = 50
GREEDY = SamplingParams(temperature=0.0)
FLAT = {1: 1.0, 2: 1.02, 4: 1.05, 8: 1.1, 16: 1.2}  # memory-bound: drafting pays


def costs(read_per_token: float, t_draft: float = 0.1) -> CostModel:
    c = CostModel(FLAT, t_draft=t_draft)
    c.observe_read(100, 100 * read_per_token)
    return c


class TestThePlan:
    def test_what_drafting_saves_is_the_reply_at_the_best_rate_against_the_target_alone(self):
        assert win_seconds([1.0, 2.0, 1.5], 10) == pytest.approx(10 * (1.0 - 0.5))
        assert win_seconds([1.0, 0.9], 10) == 0.0  # nothing beats the target

    def test_a_prompt_that_costs_more_to_read_than_half_the_saving_is_skipped(self):
        c = costs(0.05)
        rates = speeds(c, 0.8, 8)
        win = win_seconds(rates, 100)
        cheap = int(P.read_share * win / 0.05) - 1
        assert not plan_reading(c, rates, cheap, cheap, 100, P).skip
        dear = plan_reading(c, rates, cheap + 2, cheap + 2, 100, P)
        assert dear.skip and dear.read_seconds == pytest.approx((cheap + 2) * 0.05)
        assert not plan_reading(c, rates, cheap + 2, cheap + 2, 1000, P).skip  # a longer reply pays for it
        assert "sits this reply out" in dear.line and f"{cheap + 2:,} prompt tokens" in dear.line

    def test_what_the_cache_holds_is_not_read_again(self):
        c, rates = costs(0.05), speeds(costs(0.05), 0.8, 8)
        assert plan_reading(c, rates, 5000, 0, 100, P).skip is False  # a follow-up with it all read

    def test_where_drafting_does_not_pay_the_tries_price_the_reading_instead(self):
        c = costs(0.05)
        assert not plan_reading(c, speeds(c, 0.0, 8), 4000, 4000, 100, P).skip

    def test_a_read_longer_than_a_target_pass_holds_the_first_step(self):
        c, rates = costs(0.01), speeds(costs(0.01), 0.8, 8)
        assert plan_reading(c, rates, 150, 150, 1000, P).hold  # 1.5 target passes
        assert not plan_reading(c, rates, 50, 50, 1000, P).hold

    def test_before_anything_is_timed_the_draft_reads(self):
        r = plan_reading(CostModel(), [1.0], 4000, 4000, 100, P)
        assert not r.skip and not r.hold and math.isnan(r.read_seconds)


def engine(read_per_token: float, prompt_len: int):
    fn = hashed_logits(seed=3, n_vocab=V, eos_bias=-100)
    target, draft = FakeModel(fn, V, n_ctx=4096), FakeModel(fn, V, n_ctx=4096)
    ctl = AdaptiveController(costs(read_per_token), draft_max=8, prior=0.9)
    e = SpeculativeEngine(target, ModelDrafter(draft, V, p_min=0.0, costs=ctl.costs), ctl)
    return e, ctl, draft, [5 + j % 40 for j in range(prompt_len)], fn


def target_alone(fn, prompt, n):
    out = SpeculativeEngine(FakeModel(fn, V, n_ctx=4096)).generate(prompt, GREEDY, n)
    return [t for s in out for t in s.emitted]


class TestInTheEngine:
    def test_a_prompt_too_dear_to_read_is_never_read_and_the_reply_is_the_target_s(self):
        e, ctl, draft, prompt, fn = engine(read_per_token=0.05, prompt_len=2000)
        steps = list(e.generate(prompt, GREEDY, 24))
        assert ctl.reading is not None and ctl.reading.skip
        assert draft.decode_calls == [] and all(s.k == 0 for s in steps)
        assert [t for s in steps for t in s.emitted] == target_alone(fn, prompt, 24)
        said = explain(ctl.state(), ctl.costs, reading=ctl.reading).line
        assert said.startswith("off: no draft this step") and "sits this reply out" in said
        assert "tried again" not in said  # no try is waited for: the reading decides

    def test_a_cheap_prompt_is_read_after_the_first_token_where_it_would_delay_it(self):
        e, ctl, draft, prompt, fn = engine(read_per_token=0.01, prompt_len=300)
        steps = e.generate(prompt, GREEDY, 24)
        first = next(steps)
        assert ctl.reading is not None and ctl.reading.hold and not ctl.reading.skip
        assert first.k == 0 and draft.decode_calls == []  # the first token: the target's alone
        second = next(steps)
        assert second.k > 0 and draft.decode_calls[0] == (len(prompt) + 1, 1)  # read in step 2's draft time
        assert second.draft_seconds > 0
        rest = [first, second, *steps]
        assert [t for s in rest for t in s.emitted] == target_alone(fn, prompt, 24)

    def test_a_short_prompt_is_read_with_the_first_draft(self):
        e, ctl, draft, prompt, _ = engine(read_per_token=0.01, prompt_len=20)
        first = next(e.generate(prompt, GREEDY, 24))
        assert first.k > 0 and draft.decode_calls[0] == (len(prompt), 1)

    def test_the_reply_s_expected_length_weighs_the_reading(self):
        e, ctl, _, prompt, _ = engine(read_per_token=0.05, prompt_len=600)
        list(e.generate(prompt, GREEDY, 2000, expected_tokens=20))
        assert ctl.reading is not None and ctl.reading.skip and ctl.reading.n_reply == 20
        e, ctl, _, prompt, _ = engine(read_per_token=0.05, prompt_len=600)
        next(e.generate(prompt, GREEDY, 2000))  # nothing known: the budget
        assert ctl.reading is not None and not ctl.reading.skip and ctl.reading.n_reply == 2000


class TestOff:
    """Drafting off at the learnt acceptance: a try would read the prompt."""

    STEEP = {1: 1.0, 2: 1.6, 4: 2.6, 8: 4.6, 16: 8.6}  # compute-bound: pays only near acceptance 1

    def controller(self) -> AdaptiveController:
        c = CostModel(self.STEEP, t_draft=0.1)
        c.observe_read(100, 100 * 0.05)
        ctl = AdaptiveController(c, draft_max=8, prior=0.5)
        assert ctl.model_k() == 0 and ctl.best_case() > P.min_gain
        return ctl

    def test_the_first_try_which_no_budget_prices_reads_only_what_drafting_could_win_at_best(self):
        ctl = self.controller()
        win = win_seconds(ctl.speeds(1.0), 128)
        assert ctl.plan_read(4000, 4000, 128).skip  # a document: no try reads it
        assert win > 0 and not ctl.plan_read(20, 20, 128).skip  # a chat turn: the first try comes

    def test_after_a_try_the_tries_price_the_reading_themselves(self):
        ctl = self.controller()
        ctl.observe(2, 0)  # a try was made
        assert not ctl.plan_read(4000, 4000, 128).skip


class TestWhereAChangeOfSizeCosts:
    """A GPU (a change of batch size costs): the step that waits on the prompt's reading verifies
    one row, and the first drafting step after it chooses its size afresh, as after the prompt."""

    def test_the_held_first_step_does_not_fix_the_size_of_the_steps_after_it(self):
        c = plans.costs(plans.H200_F16, draft_pass=0.56, read=0.01, change=1.0)
        ctl = plans.draft_mode(c, prior=0.9)
        ctl.begin_reply()
        assert ctl.plan_read(150, 150, 1000).hold
        held = ctl.choose()
        assert (held.reason.value, held.k, held.rows, c.size) == ("reading", 0, 1, 1)  # copies priced at 1 row
        assert ctl.steady.size == 0  # no size to keep yet: the next step's is chosen as after the prompt
        after = ctl.choose()
        assert after.reason.value == "on" and after.k > 0 and after.rows == after.k + 1

"""The budget for tries while drafting is off: what it earns, spends and says."""

import pytest

from localspec.core.budget import TRIAL_MAX, Tries, trial_length
from localspec.core.costs import CostModel, speeds
from localspec.core.policy import DEFAULT as P


class TestTries:
    def test_a_step_off_earns_its_share_and_a_try_spends_only_what_is_held(self):
        costs = CostModel({1: 1.0, 2: 1.1, 3: 1.2})
        rates = speeds(costs, 0.5, 2)
        tries = Tries(costs)
        assert tries.due(rates, 2, None, best_saving=10.0, priced=False)  # a first try is free
        assert tries.budget == pytest.approx(P.first_try_share * 10.0)
        assert not tries.afford(tries.budget + 0.1) and tries.budget == pytest.approx(2.5)
        assert tries.afford(2.0) and tries.budget == pytest.approx(0.5)
        tries.due(rates, 2, None, best_saving=-3.0, priced=False)  # a best saving below nothing earns nothing
        assert tries.budget == pytest.approx(0.5)

    def test_a_countdown_without_a_catch_up_is_the_price_over_the_earning(self):
        tries = Tries(CostModel())
        tries.budget, tries.earning = 1.0, 0.5
        tries.afford(3.0)  # no catch-up grew: 2.0 short at 0.5 a step
        assert tries.next_in() == 4 and not tries.outpaced
        tries.afford(3.0, growth=0.25)  # 0.25 of each step's 0.5 goes to the catch-up
        assert tries.next_in() == 8 and not tries.outpaced
        tries.afford(3.0, growth=0.5)
        assert tries.next_in() is None and tries.outpaced
        tries.budget = 3.0
        assert tries.afford(3.0, growth=0.5) and not tries.outpaced  # covered: the try is made

    def test_each_failed_try_in_a_row_halves_the_share_and_one_that_pays_restores_it(self):
        tries = Tries(CostModel())
        shares = []
        for _ in range(4):
            tries.started = True
            tries.judged(False)
            shares.append(tries.share)
        assert shares == [P.first_try_share / 2, P.first_try_share / 4, P.try_share, P.try_share] and tries.failed == 4
        tries.judged(True)
        assert tries.share == P.first_try_share and tries.failed == 0 and not tries.started

    def test_a_try_is_judged_off_once_its_steps_are_spent_and_on_after_a_trial(self):
        tries = Tries(CostModel())
        assert not tries.trial_over(True)  # no try under way
        tries.start()  # its first step: a catch-up, then trial_steps - 1 more
        for _ in range(P.trial_steps - 1):
            assert not tries.trial_over(False)
            tries.left -= 1  # the controller spends a try's step
        assert tries.left == 0 and tries.trial_over(False)  # spent, and the model still wants none
        tries.start()
        ons = [tries.trial_over(True) for _ in range(P.trial_steps + 1)]
        assert ons == [False] * P.trial_steps + [True]  # drafting back on: judged after a trial's steps


def test_a_long_session_of_failed_tries_stays_at_the_floor():
    tries = Tries(CostModel({1: 1.0, 2: 1.5}))
    for _ in range(5000):  # once past 1,024 failures, 2 ** failures would overflow a float
        tries.judged(False)
    assert tries.share == P.try_share
    tries.judged(True)
    assert tries.share == P.first_try_share


class TestTrialLength:
    def test_a_trial_past_the_steps_its_drafts_need_to_switch_drafting_on(self):
        assert trial_length(lambda n: n >= 1, 4) == 8  # at least a trial's steps, then a trial
        assert trial_length(lambda n: n >= 7, 4) == 11
        assert trial_length(lambda n: n >= TRIAL_MAX * 4, 4) == TRIAL_MAX * 4 + 4
        assert trial_length(lambda n: n > TRIAL_MAX * 4, 4) is None  # not even TRIAL_MAX trials of them

    def test_a_try_ends_once_the_steps_it_has_left_could_no_longer_switch_drafting_on(self):
        tries = Tries(CostModel({1: 1.0, 2: 1.1}))
        tries.start(10)
        assert tries.left == 9
        assert not tries.trial_over(False, lambda n: n >= 9)  # nine left would still do
        tries.left -= 1
        assert tries.trial_over(False, lambda n: n >= 9) and tries.left == 0  # eight would not

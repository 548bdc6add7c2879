"""The controller: k from measured costs, tries while drafting is off, and convergence to the
best k for the true cost curve on timed fakes (a virtual clock: the timings are exact)."""

import math
import sys
from dataclasses import replace

import numpy as np
import pytest

from localspec.core import costs as costs_module
from localspec.core import engine as engine_module
from localspec.core.calibration import calibrate
from localspec.core.controller import (
    AdaptiveController,
    FixedController,
    Reason,
    switches_on,
)
from localspec.core.costs import READ_MIN, CostModel, expected_tokens, speeds
from localspec.core.drafters import Draft, ModelDrafter, NoDrafter
from localspec.core.engine import SpeculativeEngine
from localspec.core.estimates import Acceptance
from localspec.core.explain import explain
from localspec.core.modes import Drafting, ModeContext, ReplySpec, draft_model, prompt_lookup, target_alone
from localspec.core.policy import DEFAULT as P
from localspec.core.sampling import SamplingParams
from tests.support.fakes import (
    FakeModel,
    NoisyOracleDrafter,
    ScriptedDrafter,
    TimedModel,
    VirtualClock,
    hashed_logits,
    oracle_greedy,
)

V = 50


def said(ctl, copies=False):
    """The drafting line's state for ``ctl`` now, as the session shows it."""
    return explain(ctl.state(), ctl.costs, copies)


GREEDY = SamplingParams(temperature=0.0)
PROMPT = [5, 6, 7, 8, 9, 10]


CHEAP = {1: 1.0, 2: 1.05, 4: 1.3, 8: 1.8, 17: 3.0}  # a memory-bound target: a verify row nearly free
LINEAR = {n: float(n) for n in range(1, 18)}  # a compute-bound one: every row a whole pass


class TestSpeeds:
    def test_one_formula_for_every_k(self):
        costs = CostModel({1: 1.0, 2: 1.1, 4: 1.4, 8: 2.0}, t_draft=0.1)
        rates = speeds(costs, 0.8, 10)
        for k in range(11):
            assert rates[k] == pytest.approx(expected_tokens(0.8, k) / (k * 0.1 + costs.T(k + 1)))
        assert speeds(costs, 1.0, 3)[3] == pytest.approx(4 / (0.3 + costs.T(4)))
        assert speeds(costs, 0.8, 4, t_draft=0.0)[2] == pytest.approx(expected_tokens(0.8, 2) / costs.T(3))
        assert AdaptiveController(costs, 10).speeds(0.8) == pytest.approx(rates)


class TestChoice:
    def test_backs_off_when_verify_is_expensive(self):
        # compute-bound target: T(n) = n, drafting costs 0.3 per token, acceptance ~0.5
        c = AdaptiveController(CostModel(LINEAR, t_draft=0.3), draft_max=8)
        for _ in range(30):
            c.observe(4, 2)
        assert c.choose().k == 0

    def test_drafts_long_when_verify_is_cheap(self):
        c = AdaptiveController(CostModel({1: 1.0, 2: 1.05, 4: 1.31, 8: 1.83, 16: 3.0}, t_draft=0.1), draft_max=16)
        for _ in range(30):
            c.observe(8, 8)
            c.observe(8, 6)
        choice = c.choose()
        assert 4 <= choice.k <= 16 and choice.predicted_speedup > 1.5


class TestReach:
    """A draft mode's controller lets a run the draft is sure of go past k (MarginalRule)."""

    CHEAP = {1: 1.0, 2: 1.0, 3: 1.09, 4: 1.15, 5: 1.24, 6: 1.28, 7: 1.61, 8: 1.69, 9: 1.74, 16: 2.55}

    def test_reach_is_the_longest_draft_while_drafting_and_nothing_otherwise(self):
        on = AdaptiveController(CostModel(self.CHEAP, t_draft=0.2), draft_max=16, extend_when_sure=True)
        assert 0 < on.choose().k < 16 and on.choose().draft_max == 16
        assert AdaptiveController(CostModel(self.CHEAP, t_draft=0.2), draft_max=16).choose().draft_max == 0
        assert FixedController(CostModel(self.CHEAP, t_draft=0.2), 4).choose().draft_max == 0
        off = AdaptiveController(CostModel(LINEAR, t_draft=0.5), draft_max=16, extend_when_sure=True)
        assert off.choose().k == 0 and off.choose().draft_max == 0

    def test_a_sure_run_goes_past_k_but_never_past_the_reply_s_budget(self):
        def certain(history):
            z = np.full(V, -20.0, dtype=np.float32)
            z[1 + (len(history) * 7) % (V - 1)] = 20.0
            return z

        target, draft = FakeModel(certain, V), FakeModel(certain, V)
        # (no copies: the reply repeats, and copies run as far as their match anyway)
        mode = draft_model(ModeContext(target, draft, CostModel(self.CHEAP, t_draft=0.2), draft_max=16, copy=False))
        engine = SpeculativeEngine(target, mode.new_drafter(ReplySpec(len(PROMPT))), mode.controller)
        steps = list(engine.generate(list(PROMPT), GREEDY, 40))
        assert [t for s in steps for t in s.emitted] == oracle_greedy(certain, PROMPT, 40)
        assert max(len(s.drafted) - s.model_k for s in steps) > 0  # runs went past the controller's k
        budget = 40
        for s in steps:
            assert len(s.drafted) <= budget - 1  # drafting past the budget is wasted work
            budget -= len(s.emitted)
        # and no draft pass was spent past it: the draft model read at most the reply's tokens
        assert len(draft.cached) <= len(PROMPT) + 40


class TestPriors:
    def test_the_prior_sets_where_drafting_starts(self):
        # a verify row at 0.3 of a pass: drafting pays above about alpha 0.55
        costs = CostModel({1: 1.0, 2: 1.3, 3: 1.6, 5: 2.2, 9: 3.4}, t_draft=0.15)
        assert AdaptiveController(costs, 8, prior=0.9).model_k() > 0
        assert AdaptiveController(costs, 8, prior=0.4).model_k() == 0


class TestAcrossReplies:
    def test_drafting_after_prose_comes_back_for_code(self):
        # a memory-bound target: prose measured slow, only because its drafts were rejected
        c = AdaptiveController(CostModel({n: t for n, t in CHEAP.items() for _ in range(3)}, 0.1), draft_max=8)
        c.begin_reply()
        off = []
        for _ in range(30):
            k = c.choose().k
            c.observe(k, 0)
            off.append(not c.on())
        assert any(off)
        while not off[-1]:  # (end the reply where it is off)
            k = c.choose().k
            c.observe(k, 0)
            off.append(not c.on())
        c.begin_reply()
        assert c.on() and c.choose().k > 0


class TestTries:
    def test_no_tries_when_even_perfect_drafts_cannot_pay(self):
        # verify cost grows 1:1 with n and drafting is not free: no acceptance can win
        c = AdaptiveController(CostModel(LINEAR, t_draft=0.3), draft_max=8)
        assert all(c.choose().k == 0 for _ in range(300))

    def off_after_bad_drafts(self, verify, t_draft) -> AdaptiveController:
        c = AdaptiveController(CostModel({n: t for n, t in verify.items() for _ in range(3)}, t_draft), draft_max=8)
        for _ in range(40):
            c.observe(4, 0)  # a run of bad drafts: k = 0 now looks best
        assert c.choose().k == 0
        return c

    def test_tries_last_at_least_a_trial_and_cost_at_most_their_budget(self):
        c = self.off_after_bad_drafts({1: 1.0, 2: 1.3, 3: 1.6, 5: 2.2, 9: 3.4}, 0.15)
        ks = [c.choose().k for _ in range(2000)]
        tries = [i for i in range(1, 2000) if ks[i] and not ks[i - 1]]
        # no verdict comes, so each try lasts as long as the last: until the steps it has left,
        # every draft accepted, could no longer switch drafting on
        lasted = {ks.index(0, i) - i for i in tries if 0 in ks[i:]}
        assert len(tries) >= 3 and len(lasted) == 1 and min(lasted) >= P.trial_steps
        earned = P.try_share * (c.best_case() - 1.0) * c.costs.T(1) * 2000
        # the first tries in a row earn at a higher share (P.first_try_share, halved by each
        # failure): at most those tries' prices over P.try_share's budget
        first = math.ceil(math.log2(P.first_try_share / P.try_share))
        assert len(tries) * c.tries.price <= earned + first * c.tries.price
        assert c.tries.failed == len(tries) and c.tries.share == P.try_share

    # an F16 target on a GPU: a verify row nearly free, a draft pass dear (the H200's 1.5B F16
    # shape, a draft pass 0.6 T(1)): drafting pays from about 0.87, which a trial of four steps of
    # two drafts, every one accepted, does not reach from the prior (0.75; it reaches 0.84)
    FLAT_DEAR = {1: 1.0, 2: 1.27, 3: 1.3, 4: 1.34, 5: 1.36, 6: 1.38, 7: 1.41, 8: 1.43, 9: 1.47, 10: 1.5}

    def flat_dear(self) -> tuple[AdaptiveController, int]:
        """A controller on FLAT_DEAR, and the try steps its drafts, every one accepted, need."""
        c = AdaptiveController(CostModel({n: t for n, t in self.FLAT_DEAR.items() for _ in range(3)}, 0.6), draft_max=8)
        needed = next(n for n in range(1, 40) if switches_on(c, n))
        assert needed > P.trial_steps and not c.on()
        return c, needed

    def test_a_try_lasts_until_its_drafts_could_switch_drafting_on(self):
        c, needed = self.flat_dear()
        ks = []
        while not c.on() and len(ks) < 40:
            ks.append(c.choose().k)
            c.observe(ks[-1], ks[-1])  # every draft accepted
        assert ks == [0] * P.opening_steps + [P.probe_k] * needed  # the first try switched drafting on

    def test_a_try_ends_once_its_drafts_could_no_longer_switch_drafting_on(self):
        c, needed = self.flat_dear()
        ks = [c.choose().k for _ in range(P.opening_steps)]
        while (k := c.choose().k) > 0:
            ks.append(k)
            c.observe(k, 0)  # every draft rejected
        tried = len(ks) - P.opening_steps
        assert 0 < tried < P.trial_steps and c.tries.failed == 1 and not c.on()

    def test_no_try_where_no_trial_could_switch_drafting_on(self):
        c, _ = self.flat_dear()
        for _ in range(40):
            c.observe(4, 0)  # the acceptance so low that even TRIAL_MAX trials of accepted drafts fall short
        assert all(c.choose().k == 0 for _ in range(200))
        assert c.state().unreachable and "not tried again at this acceptance" in said(c).line

    @staticmethod
    def tries_after_rejections(verify, t_draft) -> list[int]:
        """Steps between tries where the model liked drafting (acceptance 0.95) and from now on
        every draft is rejected, each step taking the time the costs give it (T(1) = 1 s)."""
        c = AdaptiveController(CostModel({n: t for n, t in verify.items() for _ in range(3)}, t_draft), draft_max=8)
        for _ in range(60):
            c.observe(4, 4 if _ % 20 else 3)
        assert c.model_k() > 0
        ks = []
        for _ in range(600):
            ks.append(c.choose().k)
            if ks[-1]:
                c.observe(ks[-1], 0)
        starts = [i for i in range(1, 600) if ks[i] and not ks[i - 1]]
        return [b - a for a, b in zip(starts, starts[1:])]

    def test_where_a_draft_pass_is_cheap_a_failed_try_is_retried_within_a_few_steps(self):
        # the F16 target on 2 cores: a draft pass 0.2 T(1), a verify row 0.03-0.1 of a pass;
        # each failed try lowers the acceptance, so the next is priced a little higher
        f16 = {1: 1.0, 2: 1.03, 3: 1.11, 4: 1.16, 6: 1.28, 8: 1.7, 9: 1.78}
        gaps = self.tries_after_rejections(f16, 0.2)
        assert len(gaps) > 10 and gaps[0] <= 16 + P.trial_steps and max(gaps) < 40, gaps

    def test_where_a_draft_pass_is_dear_tries_are_far_apart(self):
        # compute-bound, a draft pass 0.4 T(1): drafting could win 37 % at best (every draft
        # accepted); the first retry comes sooner (P.first_try_share), and each failure puts the
        # next further off (a failed try ends once it could no longer switch drafting on)
        q4 = {1: 1.0, 2: 1.45, 3: 1.7, 4: 1.72, 6: 2.4, 8: 2.9, 9: 3.2}
        gaps = self.tries_after_rejections(q4, 0.4)
        assert len(gaps) >= 2 and gaps[0] >= 15 and min(gaps[1:]) >= 35 and gaps == sorted(gaps), gaps

    # The F16 target with the 0.5B draft on 2 Zen 4 cores (docs/benchmarks.md, 2026-12-02):
    # T(n)/T(1), a draft pass 0.26 T(1), and the draft reads a token in 0.061 T(1), which is more
    # than P.try_share earns a step (about 0.047 T(1)): a catch-up that grows by a token a step
    ZEN4 = {1: 1.0, 2: 1.42, 3: 1.57, 4: 1.66, 6: 1.90, 8: 2.61}

    def off_on_zen4(self) -> AdaptiveController:
        """Drafting switched off on the Zen 4's costs by a run of rejected drafts (the draft reads
        a token in 0.061 T(1))."""
        costs = CostModel({n: t for n, t in self.ZEN4.items() for _ in range(3)}, 0.26)
        costs.draft.observe_read(100, 6.1)
        c = AdaptiveController(costs, draft_max=16)
        for _ in range(40):
            c.observe(4, 0)
        assert not c.on()
        return c

    def test_the_countdown_counts_the_catch_up_growing_and_says_when_it_outgrows_the_budget(self):
        # off on the Zen 4's costs, after three failed tries in a row (the share is
        # P.first_try_share / 8, about 0.034 T(1) a step): each step off adds a token, 0.061 T(1),
        # to the draft's catch-up, so the budget never covers the price and no try comes
        c = self.off_on_zen4()
        c.tries.failed, c.tries.share = 3, P.first_try_share / 8
        behind = [READ_MIN]
        waits, lines = [], []
        for _ in range(60):
            assert c.choose(lambda: behind[0]).k == 0
            behind[0] += 1
            state = said(c)
            waits.append(state.next_try_in)
            lines.append(state.line)
        assert c.tries.growth == pytest.approx(c.costs.read(1)) and c.tries.growth > c.tries.earning
        assert c.tries.outpaced and waits[-1] is None and said(c).outpaced
        ending = "; not tried again while each step off adds more to the draft's catch-up than tries earn"
        assert lines[-1].endswith(ending)
        assert said(c).as_dict()["outpaced"] is True

    def test_a_countdown_under_a_growing_catch_up_is_kept(self):
        # where a step earns more than the catch-up grows, the wait said is the wait there is
        c = self.off_on_zen4()  # off: the acceptance, which the steps off do not change (nor the price)
        c.tries.share = 0.5  # (a share that outruns a token's read)
        behind = [READ_MIN]
        assert c.choose(lambda: behind[0]).k == 0
        behind[0] += 1
        assert c.choose(lambda: behind[0]).k == 0
        wait = said(c).next_try_in
        assert wait is not None and wait > 2 and not c.tries.outpaced
        ks = []
        for _ in range(wait + 1):
            behind[0] += 1
            ks.append(c.choose(lambda: behind[0]).k)
        assert not any(ks[: wait - 1]) and ks[wait - 1] > 0, (wait, ks)


class TestMeasuredDraftCost:
    def test_a_drafter_slower_than_believed_is_measured_and_switched_off(self, monkeypatch):
        # the costs start out believing a draft pass nearly free, but each really takes 3 target
        # passes: the engine times the passes, drafting goes off, and the text stays exact
        clock = VirtualClock()
        monkeypatch.setattr(costs_module, "clock", clock)
        fn = hashed_logits(seed=21, n_vocab=V, eos_bias=-100)
        target = TimedModel(fn, V, clock, lambda n, call: 0.01 + 0.0001 * n)
        slow = NoisyOracleDrafter(fn, alpha=0.9, clock=clock, t_draft=0.03)
        c = AdaptiveController(CostModel({n: 0.01 + 0.0001 * n for n in (1, 2, 4, 8)}, t_draft=0.0001), draft_max=4)
        steps = list(SpeculativeEngine(target, slow, c).generate(PROMPT, GREEDY, 80))
        ks = [s.model_k for s in steps]
        assert ks[0] > 0 and ks[1] == 0  # it liked drafting, until it timed a pass
        assert sum(k > 0 for k in ks) <= P.trial_steps and c.costs.t_draft > c.costs.T(1)
        plain = SpeculativeEngine(FakeModel(fn, V), NoDrafter(), FixedController(CostModel({1: 1.0}), 0))
        assert [t for s in steps for t in s.emitted] == [
            t for s in plain.generate(PROMPT, GREEDY, 80) for t in s.emitted
        ]


class TestRejectedOpening:
    """A cold reply that opens with a sentence the draft does not predict, then copies code it
    does: the opening's rejections are the acceptance estimate's to weigh, and they do not switch
    drafting off for the rest of the reply."""

    F16 = {1: 1.0, 2: 1.03, 3: 1.11, 4: 1.16, 5: 1.25, 6: 1.28, 8: 1.7, 9: 1.78}

    def reply(self, policy=P) -> list[int]:
        costs = CostModel({n: t for n, t in self.F16.items() for _ in range(3)}, 0.2)
        c = AdaptiveController(costs, 8, policy=policy)
        c.begin_reply()
        ks = []
        for step in range(40):
            k = c.choose().k
            ks.append(k)
            if k:  # the opening sentence: every draft rejected; then code: every draft kept
                c.observe(k, 0 if step < 5 else k)
        return ks

    def test_a_rejected_opening_does_not_switch_drafting_off(self):
        ks = self.reply()
        assert all(ks) and sum(ks[10:]) >= 30 * 4

    def test_nor_does_it_from_a_weak_prior(self):
        assert all(self.reply(replace(P, prior_weight=4.0)))
        assert not all(self.reply(replace(P, prior_weight=1.0)))  # (a prior of one verdict gives way)


# --- convergence on timed fakes -------------------------------------------------------------
# True curves (seconds for a verify of n tokens), in the shapes seen on real machines.
def gpu_like(n):  # flat to 8, then rising: a memory-bound target
    return 0.010 * (1.0 + 0.01 * n if n <= 8 else 1.08 + 0.08 * (n - 8))


def cpu_linear(n):  # compute-bound: every token costs most of a pass
    return 0.010 * (0.3 + 0.7 * n)


def f16_cpu(n):  # the direct measurement of the F16 1.5B target here (T(k)/T(1))
    ratios = {1: 1.0, 2: 1.03, 3: 1.11, 4: 1.16, 5: 1.25, 6: 1.28, 8: 1.7, 9: 1.78, 12: 2.0, 16: 2.52}
    xs = sorted(ratios)
    return 0.16 * float(np.interp(n, xs, [ratios[x] for x in xs], right=2.52 + 0.13 * (n - 16)))


def true_speeds(curve, alpha, t_draft, draft_max):
    ks = np.arange(draft_max + 1)
    return expected_tokens(alpha, ks) / (ks * t_draft + np.array([curve(k + 1) for k in ks]))


def run_timed(
    monkeypatch,
    curve,
    alpha,
    t_draft,
    steps,
    draft_max=8,
    calibration_curve=None,
    slow_after=None,
    calibrate_sizes=(1, 2, 3, 4, 6, 8),
    first_use=1.0,
):
    """Calibrate on ``calibration_curve`` (default: the true one), then generate; returns the
    controller and each step's k. ``slow_after``: (call, factor) makes the target that much
    slower from that evaluation on; ``first_use``: the first evaluation of each size costs
    that many times more (a GPU building a graph, picking kernels)."""
    clock = VirtualClock()
    monkeypatch.setattr(costs_module, "clock", clock)
    fn = hashed_logits(seed=3, n_vocab=V, eos_bias=-100)
    calibrating = [True]
    used: set[int] = set()

    def seconds(n, call):
        spike = first_use if n not in used else 1.0
        used.add(n)
        if calibrating[0]:
            return (calibration_curve or curve)(n) * spike
        factor = slow_after[1] if slow_after and call >= slow_after[0] else 1.0
        return curve(n) * factor * spike

    target = TimedModel(fn, V, clock, seconds)
    verify, _ = calibrate(target, calibrate_sizes)
    calibrating[0] = False
    target.calls = 0
    ctl = AdaptiveController(CostModel(verify, t_draft), draft_max=draft_max)
    drafter = NoisyOracleDrafter(fn, alpha, clock, t_draft, seed=7)
    run_timed.steps = list(SpeculativeEngine(target, drafter, ctl).generate(PROMPT, GREEDY, steps))
    return ctl, [s.model_k for s in run_timed.steps]


def good_enough(curve, alpha, t_draft, draft_max, k):
    """k is as good as the best, within 5 %, on the true curve."""
    speeds = true_speeds(curve, alpha, t_draft, draft_max)
    return speeds[k] >= 0.95 * speeds.max()


CASES = {
    # name: (true curve, alpha, draft seconds per token)
    "gpu_flat_to_8": (gpu_like, 0.9, 0.0005),
    "cpu_linear": (cpu_linear, 0.8, 0.005),
    "f16_cpu_here": (f16_cpu, 0.9, 0.033),
}


def graph_like(n):  # a GPU's steady cost of a verify of n: flat, then rising
    return 0.004 * (1.0 + 0.1 * min(n - 1, 7) + 0.01 * max(n - 8, 0))


GRAPH_EXTRA = 0.0012  # CUDA: an evaluation after a change of batch size runs without its graph


def run_settling(monkeypatch, alpha, steps=300, settle=2):
    """The engine on a backend that settles: an evaluation costs graph_like(n) once the two
    before it had its size, GRAPH_EXTRA more otherwise. Returns the engine's T(1)."""
    clock = VirtualClock()
    monkeypatch.setattr(costs_module, "clock", clock)
    fn = hashed_logits(seed=3, n_vocab=V, eos_bias=-100)
    sizes: list[int] = []

    def seconds(n, call):
        sizes.append(n)
        return graph_like(n) + (0.0 if sizes[-3:] == [n] * 3 else GRAPH_EXTRA)

    target = TimedModel(fn, V, clock, seconds)
    target.settle = settle
    verify, _ = calibrate(target, (1, 2, 3, 4, 6, 8))
    ctl = AdaptiveController(CostModel(verify, 0.0014), draft_max=16)
    drafter = NoisyOracleDrafter(fn, alpha, clock, 0.0014, seed=7)
    run_settling.steps = list(SpeculativeEngine(target, drafter, ctl).generate(PROMPT, GREEDY, steps))
    return ctl.costs.T(1)


class TestSettlingBackend:
    """On a GPU a change of batch size costs more than either size; the curve holds each size's
    steady cost, so 1 / T(1), the target alone's speed every speed-up is shown against, stays
    the target alone's (and drafting, whose verifies change size, does not move it)."""

    @pytest.mark.parametrize("alpha", [0.0, 0.8, 0.97])
    def test_the_target_alone_speed_stays_its_steady_one(self, monkeypatch, alpha):
        t1 = run_settling(monkeypatch, alpha)
        assert t1 == pytest.approx(graph_like(1), rel=0.05)
        if alpha > 0.9:  # it drafted
            assert sum(len(s.drafted) for s in run_settling.steps) > 100

    def test_a_backend_that_says_it_does_not_settle_reads_the_changes_into_t1(self, monkeypatch):
        # (what the flag is for: without it the interleaved calibration reads T(1) after other sizes)
        assert run_settling(monkeypatch, 0.97, settle=0) > 1.15 * graph_like(1)


class TestSteadySizes:
    """Where a change of batch size costs (a GPU), a step's plan keeps the verify's size: the
    draft padded to it, another size only where it saves a change over the tokens ahead."""

    def settled(self, change: float, alpha: float = 0.9) -> AdaptiveController:
        costs = CostModel({1: 1.0, 2: 1.1, 3: 1.2, 4: 1.35, 6: 1.7, 8: 2.1}, 0.1)  # at 0.9: k = 5
        costs.verify.change = change
        return AdaptiveController(costs, draft_max=8, prior=alpha)

    def test_on_a_cpu_no_rows_are_planned(self):
        ctl = self.settled(0.0)
        choice = ctl.choose()
        assert choice.rows == 0 and ctl.costs.size == 0 and choice.k > 0

    def test_a_steady_size_is_the_best_k_plus_one_and_held_against_a_small_gain(self):
        ctl = self.settled(1.0)
        first = ctl.choose(budget=200)
        assert first.reason is Reason.ON and first.rows == first.k + 1 == ctl.costs.size
        ctl.observe(first.k, first.k - 1)  # the model now wants a shorter draft ...
        held = ctl.choose(budget=200)  # ... but it saves less than a change of size costs
        assert held.best_k < first.k and held.wanted == held.best_k + 1
        assert held.reason is Reason.STEADY and held.rows == first.rows and held.k == first.k
        assert "padded" in explain(held, ctl.costs).why

    def test_a_size_changes_where_the_gain_pays_for_the_change(self):
        ctl = self.settled(0.2)  # a change costs a fifth of a pass
        first = ctl.choose(budget=200)
        for _ in range(6):
            ctl.observe(first.k, 0)  # every draft rejected: a short draft saves far more than 0.2
        shorter = ctl.choose(budget=200)
        assert shorter.reason is Reason.ON and shorter.rows == shorter.k + 1 < first.rows

    def test_the_reply_s_budget_bounds_what_a_change_may_save(self):
        ctl = self.settled(1.0, alpha=0.0)
        assert ctl.choose(budget=200).rows == 1  # off
        ctl.acceptance = Acceptance(0.95)  # drafting pays, more than a change costs over 200 tokens
        assert ctl.choose(budget=200).rows > 1
        ctl2 = self.settled(1.0, alpha=0.0)
        ctl2.choose(budget=1)
        ctl2.acceptance = Acceptance(0.95)
        assert ctl2.choose(budget=1).rows == 1  # one token left: a change would not pay

    @pytest.mark.parametrize("change, runs_to", [(0.0, 8), (1.0, 0)])
    def test_a_sure_draft_runs_past_k_only_where_a_change_costs_nothing(self, change, runs_to):
        ctl = self.settled(change)
        ctl.extend_when_sure = True
        first = ctl.choose(budget=200)
        ctl.observe(first.k, first.k - 1)
        held = ctl.choose(budget=200)  # on a GPU: held at the first size
        assert first.k > 0 and first.draft_max == held.draft_max == runs_to
        assert held.reason is (Reason.STEADY if change else Reason.ON)

    def test_a_try_counts_its_two_changes(self):
        ctl = self.settled(0.0)
        charged = self.settled(3.0)
        rates = ctl.speeds()
        assert charged.tries.price_of(rates, 2) == pytest.approx(ctl.tries.price_of(rates, 2) + 6.0)


def run_charged(monkeypatch, alpha, steps=200, padding=True):
    """The engine on a backend whose every change of batch size costs CHANGE more (the first
    evaluation after it), measured at load as a session does; returns the target's evaluation
    sizes during the reply and the reply's virtual seconds."""
    clock = VirtualClock()
    monkeypatch.setattr(costs_module, "clock", clock)
    if not padding:
        monkeypatch.setattr(engine_module, "pad", lambda *a: [])
    fn = hashed_logits(seed=3, n_vocab=V, eos_bias=-100)
    sizes: list[int] = []

    def seconds(n, call):
        changed = bool(sizes) and sizes[-1] != n
        sizes.append(n)
        return graph_like(n) + (CHANGE if changed else 0.0)

    target = TimedModel(fn, V, clock, seconds)
    target.settle = 2
    verify, _ = calibrate(target, (1, 2, 3, 4, 6, 8))
    ctl = AdaptiveController(CostModel(verify, 0.0014), draft_max=16)
    drafter = ShortStopping(fn, alpha, clock, 0.0014, seed=7)
    sizes.clear()
    start = clock.now
    run_charged.steps = list(SpeculativeEngine(target, drafter, ctl).generate(PROMPT, GREEDY, steps))
    return sizes[1:], clock.now - start  # [0]: the prefill


class ShortStopping(NoisyOracleDrafter):
    """Drafts as many tokens as a draft model's confidence allows, here 1..k by position: so the
    drafts' lengths change from step to step, as a real draft's and a copy's do."""

    def draft(self, context, k, params, rng, draft_max=0, after=()):
        stop = 1 + int(np.random.default_rng([self.seed, 99, len(context)]).integers(k)) if k else 0
        return super().draft(context, stop, params, rng, draft_max, after)


CHANGE = 0.004  # a change of batch size: a whole T(1) more (the H200 measured 0.98-1.80 T(1))


class TestChargedChanges:
    def test_the_change_is_measured_at_load(self, monkeypatch):
        run_charged(monkeypatch, 0.9, steps=4)
        assert run_charged.steps  # (ran)
        clock = VirtualClock()
        monkeypatch.setattr(costs_module, "clock", clock)
        sizes: list[int] = []

        def seconds(n, call):
            changed = bool(sizes) and sizes[-1] != n
            sizes.append(n)
            return graph_like(n) + (CHANGE if changed else 0.0)

        target = TimedModel(hashed_logits(seed=3, n_vocab=V), V, clock, seconds)
        target.settle = 2
        verify, _ = calibrate(target, (1, 2, 4))
        assert verify.change == pytest.approx(CHANGE)

    def test_verifies_keep_one_size_while_drafting_is_on(self, monkeypatch):
        sizes, _ = run_charged(monkeypatch, 0.9)
        changes = sum(a != b for a, b in zip(sizes, sizes[1:]))
        assert changes <= len(sizes) / 10, sizes  # not one a step: the drafts are padded to the steady size
        assert any(s.n_padded for s in run_charged.steps)

    def test_padding_pays_where_a_change_costs(self, monkeypatch):
        # the test that fails when padding is turned off
        padded, t_padded = run_charged(monkeypatch, 0.9)
        unpadded, t_unpadded = run_charged(monkeypatch, 0.9, padding=False)
        assert sum(a != b for a, b in zip(unpadded, unpadded[1:])) > 10
        assert t_padded < 0.9 * t_unpadded

    @pytest.mark.parametrize("alpha, bound", [(0.7, 0.95), (0.9, 0.85)])
    def test_faster_than_the_target_alone_where_drafting_pays(self, monkeypatch, alpha, bound):
        _, seconds = run_charged(monkeypatch, alpha)
        tokens = sum(len(s.emitted) for s in run_charged.steps)
        assert seconds / tokens <= bound * graph_like(1)

    def test_where_no_draft_is_kept_the_tries_cost_about_what_they_cost_where_changes_are_free(self, monkeypatch):
        _, charged = run_charged(monkeypatch, 0.0)
        monkeypatch.setattr(sys.modules[__name__], "CHANGE", 0.0)
        _, free = run_charged(monkeypatch, 0.0)  # (the prior's acceptance takes steps to unlearn)
        assert charged <= 1.05 * free


class TestShortDrafts:
    def test_a_longest_draft_of_0_drafts_nothing(self):
        ctl = AdaptiveController(CostModel({1: 1.0, 2: 1.1, 4: 1.3}, 0.05), draft_max=0)
        assert {ctl.choose().k for _ in range(20)} == {0}

    def test_a_try_fits_a_longest_draft_shorter_than_probe_k(self):
        # a request's draft_max of 1: a try drafts 1, not policy.probe_k (2)
        ctl = AdaptiveController(CostModel({1: 1.0, 2: 1.1, 4: 1.3}, 0.05), draft_max=1, prior=0.2)
        ctl.observe(1, 0)  # drafted once: off at the learnt acceptance, tried again now and then
        choices = [ctl.choose() for _ in range(200)]
        assert {c.reason for c in choices} == {Reason.ACCEPTANCE, Reason.TRY}
        assert {c.k for c in choices if c.reason is Reason.TRY} == {1}


class TestConvergence:
    """Within 300 tokens (about 100 steps, of which at most one in P.explore_every measures a
    size) the last 30 steps' k are as good as the best k for the true curve."""

    @pytest.mark.parametrize("case", CASES)
    def test_converges_to_the_best_k(self, monkeypatch, case):
        curve, alpha, t_draft = CASES[case]
        ctl, ks = run_timed(monkeypatch, curve, alpha, t_draft, 300)
        late = [k for k in ks[-30:]]
        ok = [good_enough(curve, alpha, t_draft, 8, k) for k in late]
        assert sum(ok) >= 27, (late, true_speeds(curve, alpha, t_draft, 8).round(1))

    def test_the_compute_bound_cpu_is_not_drafted_on_when_drafting_cannot_pay(self, monkeypatch):
        ctl, ks = run_timed(monkeypatch, cpu_linear, 0.6, 0.008, 200)
        assert np.argmax(true_speeds(cpu_linear, 0.6, 0.008, 8)) == 0
        assert sum(k == 0 for k in ks[-50:]) >= 47

    def test_a_3x_calibration_spike_at_one_size_is_corrected(self, monkeypatch):
        # every calibration sample of T(4) is 3x (a systematic first-use spike): the curve
        # says drafting 3 is expensive; verifies of other sizes and drafts that run past k
        # must find out within a bounded number of steps
        def spiked(n):
            return 3 * gpu_like(n) if n == 4 else gpu_like(n)

        ctl, ks = run_timed(monkeypatch, gpu_like, 0.9, 0.0005, 300, calibration_curve=spiked)
        assert ctl.costs.T(4) == pytest.approx(gpu_like(4), rel=0.15)
        assert sum(good_enough(gpu_like, 0.9, 0.0005, 8, k) for k in ks[-30:]) >= 27

    def test_sizes_never_calibrated_are_measured_when_they_could_win(self, monkeypatch):
        # calibrated only at 1 and 2: the linear extrapolation makes long drafts look costly
        ctl, ks = run_timed(monkeypatch, gpu_like, 0.95, 0.0005, 400, calibrate_sizes=(1, 2))
        assert ctl.costs.verify.n_samples(9) > 0  # k = 8 was tried
        assert sum(good_enough(gpu_like, 0.95, 0.0005, 8, k) for k in ks[-30:]) >= 27

    def test_first_use_spikes_of_every_size_on_a_gpu(self, monkeypatch):
        # the first evaluation of every batch size is 20x slower, in calibration and after
        ctl, ks = run_timed(monkeypatch, gpu_like, 0.9, 0.0005, 300, calibrate_sizes=(1, 2, 4), first_use=20.0)
        assert sum(good_enough(gpu_like, 0.9, 0.0005, 8, k) for k in ks[-30:]) >= 27
        for n in (1, 2, 4):
            assert ctl.costs.T(n) == pytest.approx(gpu_like(n), rel=0.15)

    def test_a_machine_that_slows_down_2x_mid_reply(self, monkeypatch):
        # the target slows 2x after its 60th evaluation (the draft does not): long drafts pay more
        def slowed(n):
            return 2 * f16_cpu(n)

        ctl, ks = run_timed(monkeypatch, f16_cpu, 0.9, 0.033, 400, slow_after=(60, 2.0))
        assert ctl.costs.T(1) == pytest.approx(slowed(1), rel=0.15)
        assert sum(good_enough(slowed, 0.9, 0.033, 8, k) for k in ks[-30:]) >= 27


# --- tries and the draft model's catch-up ----------------------------------------------------
def q4_cpu(n):  # the direct measurement of the Q4 1.5B target here (T(k)/T(1)): compute-bound
    ratios = {1: 1.0, 2: 1.45, 3: 1.7, 4: 1.72, 6: 2.4, 8: 2.9, 9: 3.2, 16: 4.2}
    xs = sorted(ratios)
    return 0.075 * float(np.interp(n, xs, [ratios[x] for x in xs], right=4.2 + 0.2 * (n - 16)))


def draft_pass(n):  # the 0.5B draft here: a pass 0.47 T(1), reading 60 tokens at once 4.4 T(1)
    return 0.03 + 0.005 * n


class TestTriesPayForTheCatchUp:
    """A try of drafting after a stretch without it makes the draft model read every token
    since: on a compute-bound target that read costs several target passes, so tries spend
    a budget (P.try_share of drafting's best case) and cannot make the target slower."""

    def chat(self, monkeypatch, draft_seed, replies=12, tokens=96, p_min=0.0):
        clock = VirtualClock()
        monkeypatch.setattr(costs_module, "clock", clock)
        fn = hashed_logits(seed=3, n_vocab=V, eos_bias=-100)
        target = TimedModel(fn, V, clock, lambda n, call: q4_cpu(n))
        draft_fn = hashed_logits(seed=draft_seed, n_vocab=V, eos_bias=-100)
        draft = TimedModel(draft_fn, V, clock, lambda n, call: draft_pass(n))
        verify, draft_cost = calibrate(target, (1, 2, 3, 4, 6, 8), draft=draft)
        ctl = AdaptiveController(CostModel(verify, draft_cost), draft_max=8)
        engine = SpeculativeEngine(target, ModelDrafter(draft, V, p_min=p_min, costs=ctl.costs), ctl)
        alone = SpeculativeEngine(target, NoDrafter(), FixedController(CostModel(verify), 0))
        prompts = [[5 + (i * 7 + j) % 40 for j in range(60)] for i in range(replies)]
        spent = [sum(s.step_seconds for s in e.generate(p, GREEDY, tokens)) for p in prompts for e in (engine, alone)]
        return ctl, sum(spent[0::2]), sum(spent[1::2])

    def test_the_catch_up_read_is_measured_at_load(self, monkeypatch):
        ctl, _, _ = self.chat(monkeypatch, draft_seed=4, replies=0)
        assert ctl.costs.draft.read(60) == pytest.approx(draft_pass(48) / 48 * 60, rel=0.01)
        assert ctl.costs.t_draft == pytest.approx(draft_pass(1))
        assert P.min_gain <= ctl.best_case() < 1.5, ctl.best_case()  # so it tries

    def test_a_draft_that_never_agrees_costs_at_most_the_budget(self, monkeypatch):
        # a draft unrelated to the target: every try fails, and pays for its catch-up
        ctl, drafting, alone = self.chat(monkeypatch, draft_seed=4)
        budget = P.try_share * (ctl.best_case() - 1.0)
        assert drafting <= (1.0 + budget + 0.01) * alone, drafting / alone
        assert ctl.drafted  # it did try (its first reply)

    def test_the_first_reply_reads_the_prompt_with_its_first_try_after_its_opening(self, monkeypatch):
        clock = VirtualClock()
        monkeypatch.setattr(costs_module, "clock", clock)
        fn = hashed_logits(seed=3, n_vocab=V, eos_bias=-100)
        target = TimedModel(fn, V, clock, lambda n, call: q4_cpu(n))
        draft = TimedModel(fn, V, clock, lambda n, call: draft_pass(n))
        verify, draft_cost = calibrate(target, (1, 2, 3, 4, 6, 8), draft=draft)
        ctl = AdaptiveController(CostModel(verify, draft_cost), draft_max=8)
        ctl.begin_reply()
        assert ctl.model_k() == 0  # the prior acceptance says no, the hardware maybe
        engine = SpeculativeEngine(target, ModelDrafter(draft, V, p_min=0.0, costs=ctl.costs), ctl)
        prompt = [5 + j % 40 for j in range(60)]
        steps = engine.generate(prompt, GREEDY, 128)  # (for 32 tokens the prompt costs more than it can win)
        opening = [next(steps) for _ in range(P.opening_steps)]
        assert draft.cached == [] and ctl.reading is not None and not ctl.reading.skip  # nothing read yet
        tried = next(steps)
        assert [s.model_k for s in opening] == [0] * P.opening_steps and tried.model_k == P.probe_k
        assert draft.cached[:60] == prompt  # the try read the prompt, in its own step's time
        assert tried.draft_seconds >= draft_pass(len(prompt)) > draft_pass(READ_MIN)
        list(steps)
        assert ctl.drafted and not ctl.on()


class TestGatedLookup:
    """Prompt lookup's controller is gated: its gate weighs each match, k is only the cap. One
    acceptance over all of lookup's proposals (low after code, where short matches are
    coincidences) blocked the long copies a summary quotes."""

    @staticmethod
    def scripted(replies):
        """A target whose greedy reply to each prompt is scripted (a sure one-hot)."""

        def fn(history):
            z = np.zeros(V, dtype=np.float32)
            for prompt, reply in replies.items():
                if tuple(history[: len(prompt)]) == prompt and len(history) >= len(prompt):
                    z[reply[(len(history) - len(prompt)) % len(reply)]] = 5.0
            return z

        return fn

    def chat(self, monkeypatch, gated=True):
        clock = VirtualClock()
        monkeypatch.setattr(costs_module, "clock", clock)
        rng = np.random.default_rng(7)
        code = [tuple(int(t) for t in (40 + i, *rng.integers(1, 8, 30))) for i in range(6)]
        passage = [int(t) for t in rng.permutation(np.arange(11, 39))] * 2  # quoted back in the reply
        summary = (46, *passage, 9, 10)
        replies = {p: [int(t) for t in rng.integers(1, 8, 64)] for p in code} | {summary: passage}
        target = TimedModel(self.scripted(replies), V, clock, lambda n, call: q4_cpu(n))
        verify, _ = calibrate(target, (1, 2, 3, 4, 6, 8, 16))
        ctx = ModeContext(target, None, CostModel(verify), draft_max=16)
        lookup = prompt_lookup(ctx)
        if not gated:  # the controller before: one acceptance for every proposal decides k
            lookup = Drafting(AdaptiveController(lookup.controller.costs, 16), lookup.new_drafter)
        alone = target_alone(ctx)
        spent = {}
        for prompt in [*code, summary]:
            for name, mode in (("lookup", lookup), ("alone", alone)):
                engine = SpeculativeEngine(target, mode.new_drafter(ReplySpec(len(prompt))), mode.controller)
                steps = list(engine.generate(list(prompt), GREEDY, 56))
                assert [t for s in steps for t in s.emitted] == replies[prompt][:56]
                spent[prompt, name] = sum(s.step_seconds for s in steps)
        on_code = sum(spent[p, "lookup"] for p in code) / sum(spent[p, "alone"] for p in code)
        return on_code, spent[summary, "lookup"] / spent[summary, "alone"]

    def test_a_quote_after_code_is_still_copied_and_code_is_not_slower(self, monkeypatch):
        on_code, on_summary = self.chat(monkeypatch)
        assert on_code <= 1.03  # short coincidental matches: blocked by their gate, not copied
        assert on_summary <= 0.6  # the quote: long copies, 56 tokens in a few passes

    def test_rejected_short_copies_do_not_block_the_long_ones(self):
        # the Q4 target here, after code: lookup's proposals accepted 42 % of the time
        verify = {n: q4_cpu(n) for n in (1, 2, 3, 4, 6, 8, 16)}
        before, gated = AdaptiveController(CostModel(verify), 16), AdaptiveController(CostModel(verify), 16, gated=True)
        for ctl in (before, gated):
            for i in range(40):
                ctl.observe(3, 1 if i % 4 else 0)
        assert before.alpha < 0.5 and before.model_k() == 0  # one acceptance for all: off
        assert gated.choose().k == 16 and said(gated).on  # the gate decides each match
        assert "as much of each match as matches of its source and length have earned" in said(gated).line

    def test_where_nothing_could_pay_a_gated_controller_is_off(self):
        linear = AdaptiveController(CostModel(LINEAR), 16, gated=True)
        assert linear.choose().k == 0 and not said(linear).on and said(linear).next_try_in is None
        # nearly linear: perfect copies would gain 3 %, not the P.min_gain any proposal needs
        steep = AdaptiveController(CostModel({n: 0.97 * n + 0.03 for n in range(1, 18)}), 16, gated=True)
        for _ in range(100):
            steep.observe(8, 8)
        assert 1.0 < steep.best_case() < P.min_gain
        assert steep.choose().k == 0 and not said(steep).on and steep.state().reason is Reason.HARDWARE


class TestOracleAgreesWithEngine:
    def test_adaptive_text_is_the_target_s_own(self, monkeypatch):
        clock = VirtualClock()
        monkeypatch.setattr(costs_module, "clock", clock)
        fn = hashed_logits(seed=5, n_vocab=V)
        target = TimedModel(fn, V, clock, lambda n, call: gpu_like(n))
        verify, _ = calibrate(target, (1, 2, 4, 8))
        ctl = AdaptiveController(CostModel(verify, 0.0005), draft_max=8)
        drafter = ScriptedDrafter(lambda ctx, n: oracle_greedy(fn, ctx, n))
        got = [t for s in SpeculativeEngine(target, drafter, ctl).generate(PROMPT, GREEDY, 120) for t in s.emitted]
        plain = SpeculativeEngine(FakeModel(fn, V), NoDrafter(), FixedController(CostModel({1: 1.0}), 0))
        assert got == [t for s in plain.generate(PROMPT, GREEDY, 120) for t in s.emitted]


class TestExplain:
    """The drafting line: on with k and why, or off with the measured reason and what next."""

    def test_compute_bound_cpu_is_off_for_good_with_the_numbers(self):
        # a Q4 target on 2 cores: a draft pass 0.62 T(1), checking 2 tokens 1.9 passes
        costs = CostModel({n: 0.05 * (0.1 + 0.9 * n) for n in range(1, 10)}, t_draft=0.031)
        state = said(AdaptiveController(costs, draft_max=8))
        assert not state.on and state.model_k == 0 and state.next_try_in is None
        assert state.draft_cost == pytest.approx(0.62) and state.verify_cost == pytest.approx(1.9)
        assert state.line.startswith(
            "off: a draft token costs 0.62 of a target pass and checking 2 tokens costs 1.90 passes"
        )
        assert "not tried again" in state.line and state.expected_speedup < 1

    def test_memory_bound_is_on_with_k_and_the_expected_gain(self):
        ctl = AdaptiveController(CostModel({1: 1.0, 2: 1.03, 4: 1.16, 8: 1.7}, t_draft=0.2), draft_max=8)
        for _ in range(20):
            ctl.observe(5, 5)
        state = said(ctl)
        assert state.on and state.model_k > 1 and state.expected_speedup > 1.3
        assert state.line.startswith(f"on: k={state.model_k}, expected ") and "a draft token costs 0.20" in state.line
        assert "sure" not in state.line  # not extended: k is the draft_max
        wide = AdaptiveController(
            CostModel({1: 1.0, 2: 1.03, 4: 1.16, 8: 1.7, 16: 3.4}, t_draft=0.2), 16, extend_when_sure=True
        )
        for _ in range(20):
            wide.observe(5, 5)
        assert wide.choose().k < 16 and said(wide).line.endswith("; up to 16 while the draft is sure of every token")

    def poor(self) -> AdaptiveController:
        ctl = AdaptiveController(CostModel({1: 1.0, 2: 1.3, 3: 1.6, 5: 2.2, 9: 3.4}, t_draft=0.15), draft_max=8)
        for _ in range(40):
            ctl.observe(4, 0)
        return ctl

    def test_poor_acceptance_is_off_and_says_when_it_tries_again(self):
        ctl = self.poor()
        assert ctl.choose().k == 0
        state = said(ctl)
        wait = math.ceil((ctl.tries.price - ctl.tries.budget) / ctl.tries.earning)
        assert not state.on and "at the measured acceptance (" in state.line and wait > 1
        assert state.next_try_in == wait and f"tries again in {wait} steps" in state.line
        ks = [ctl.choose().k for _ in range(wait)]
        assert not any(ks[:-1]) and ks[-1] > 0  # and then it tries, as it said

    def test_a_try_waiting_for_its_catch_up_budget_says_when(self):
        ctl = self.poor()
        ctl.costs.draft.observe_read(100, 2.0)  # reading costs 0.02 s a token: 500 tokens, 10 passes
        assert ctl.choose(lambda: 500).k == 0
        assert ctl.tries.price > 10.0  # the catch-up and the trial's loss
        wait = said(ctl).next_try_in
        assert wait is not None and wait > 10 and f"tries again in {wait} steps" in said(ctl).line
        ks = [ctl.choose(lambda: 500).k for _ in range(wait + 1)]
        assert not any(ks[:-2]) and any(ks[-2:])

    def test_off_says_that_copies_are_still_proposed_where_the_mode_copies(self):
        ctl = self.poor()
        copies = "; copies from the context still proposed where a match is trusted"
        assert said(ctl, copies=True).line == said(ctl).line + copies
        assert said(ctl, copies=True).as_dict()["copies"] is True and copies not in said(ctl).line
        on = AdaptiveController(CostModel({1: 1.0, 2: 1.03, 4: 1.16, 8: 1.7}, t_draft=0.2), draft_max=8)
        assert said(on, copies=True).on and not said(on, copies=True).copies  # on: the line says k
        ctx = ModeContext(FakeModel(hashed_logits(1, 8), 8), FakeModel(hashed_logits(2, 8), 8), ctl.costs)
        assert draft_model(ctx).copies and not draft_model(replace(ctx, copy=False)).copies
        assert not draft_model(replace(ctx, adaptive=False)).copies and not prompt_lookup(ctx).copies

    def test_the_line_names_the_past_replies_copies_may_come_from(self):
        off, history = self.poor(), "12 past replies"
        line = explain(off.state(), off.costs, copies=True, history=history).line
        assert line.endswith("; copies from the context and 12 past replies still proposed where a match is trusted")
        on = AdaptiveController(CostModel({1: 1.0, 2: 1.03, 4: 1.16, 8: 1.7}, t_draft=0.2), draft_max=8)
        assert explain(on.state(), on.costs, copies=True, history=history).line.endswith(
            "; matches from the context and 12 past replies"
        )
        assert "past replies" not in explain(on.state(), on.costs, copies=True).line
        assert "past replies" not in explain(off.state(), off.costs, history=history).line  # off, nothing copied
        assert explain(on.state(), on.costs, history=history).as_dict()["history"] == history

    def test_fixed_and_target_alone(self):
        assert said(FixedController(CostModel({1: 1.0}), 0)).line == "off: the target alone (no draft mode chosen)"
        assert said(FixedController(CostModel({1: 1.0}), 5)).line == "on: k=5 every step (fixed: --no-adapt)"


class TestFixed:
    def test_drafts_k_every_step_whatever_it_measures(self):
        ctl = FixedController(CostModel(LINEAR, t_draft=0.5), 3)
        ctl.begin_reply()
        for _ in range(50):
            assert ctl.choose().k == 3
            ctl.observe(3, 0)


class RefusingDrafter(NoisyOracleDrafter):
    """Runs a pass and proposes nothing ``refuse`` of the time (an MTP head that carries
    nothing refuses every first token); otherwise the noisy oracle's draft."""

    name = "refusing"

    def __init__(self, fn, alpha, clock, t_draft, refuse: float) -> None:
        super().__init__(fn, alpha, clock, t_draft, seed=7)
        self.refuse = refuse

    def draft(self, context, k, params, rng, draft_max=0, after=()):
        if np.random.default_rng([8, len(context)]).random() < self.refuse:
            self.clock.now += self.t_draft
            return Draft((), n_evals=1)
        return super().draft(context, k, params, rng, draft_max)


class TestRefusals:
    """A draft pass that proposes nothing costs its pass and teaches the acceptance nothing: the
    proposal rate (``Acceptance.propose``) counts it, so a drafter that refuses every token stops
    costing within an opening, and one that refuses now and then is priced for it."""

    def replies(self, monkeypatch, refuse, curve=f16_cpu, t_draft=0.02, n=4, tokens=48):
        clock = VirtualClock()
        monkeypatch.setattr(costs_module, "clock", clock)
        fn = hashed_logits(seed=3, n_vocab=V, eos_bias=-100)
        target = TimedModel(fn, V, clock, lambda n_tokens, call: curve(n_tokens))
        verify, _ = calibrate(target, (1, 2, 3, 4, 6, 8))
        ctl = AdaptiveController(CostModel(verify, t_draft), draft_max=8)
        drafter = RefusingDrafter(fn, 0.9, clock, t_draft, refuse)
        alone = SpeculativeEngine(target, NoDrafter(), FixedController(CostModel(verify), 0))
        engine = SpeculativeEngine(target, drafter, ctl)
        prompts = [[5 + (i * 7 + j) % 40 for j in range(30)] for i in range(n)]
        spent = [sum(s.step_seconds for s in e.generate(p, GREEDY, tokens)) for p in prompts for e in (engine, alone)]
        return ctl, sum(spent[1::2]) / sum(spent[0::2])

    def test_a_drafter_that_refuses_every_token_stops_costing(self, monkeypatch):
        ctl, speedup = self.replies(monkeypatch, refuse=1.0)
        assert speedup >= 0.97 and ctl.acceptance.propose < 0.2, speedup
        assert not ctl.on() and "the draft proposing in 3% of its passes" in said(ctl).line

    def test_one_that_refuses_now_and_then_still_drafts_and_pays(self, monkeypatch):
        ctl, speedup = self.replies(monkeypatch, refuse=0.2)
        assert speedup >= 1.3 and 0.5 < ctl.acceptance.propose < 0.99, speedup
        assert ctl.on()

    def test_a_refusal_is_counted_apart_from_the_acceptance(self):
        a = Acceptance()
        alpha, prior = a.alpha, P.trial_steps * P.decay  # a trial's worth of proposals, faded once
        a.observe(0, 0, passes=1)
        assert a.alpha == alpha and a.propose == pytest.approx(prior / (prior + 1))
        a.observe(0, 0, passes=0)  # no pass ran (drafting off): nothing learnt
        assert a.propose == pytest.approx(prior / (prior + 1))
        a.observe(3, 1)
        assert a.propose > prior / (prior + 1)

    def test_the_speed_model_prices_a_refused_pass(self):
        costs = CostModel({1: 1.0, 2: 1.05, 4: 1.1, 8: 1.3}, t_draft=0.1)
        always, half = speeds(costs, 0.8, 4), speeds(costs, 0.8, 4, propose=0.5)
        assert half[0] == always[0]
        # half the passes: the step of k drafts, or one pass and the target's token
        k = 3
        tokens = 0.5 * expected_tokens(0.8, k) + 0.5
        seconds = 0.5 * (k * 0.1 + costs.T(k + 1)) + 0.5 * (0.1 + costs.T(1))
        assert half[k] == pytest.approx(tokens / seconds)

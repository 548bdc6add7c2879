"""The speculative loop on scripted fakes: greedy identity, stopping, rollback, the bonus token."""

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pytest

from localspec.core.controller import AdaptiveController, FixedController
from localspec.core.costs import CostModel
from localspec.core.drafters import ModelDrafter, NoDrafter
from localspec.core.engine import SpeculativeEngine
from localspec.core.policy import DEFAULT as P
from localspec.core.rules import LookupGate
from localspec.core.sampling import SamplingParams
from localspec.core.suffix import SuffixDrafter
from tests.support.fakes import EOS, FakeModel, ScriptedDrafter, hashed_logits, oracle_greedy

V = 50
GREEDY = SamplingParams(temperature=0.0)
PROMPT = [5, 6, 7, 8, 9, 10]


def fixed(k):
    return FixedController(CostModel(verify={1: 1.0}), k)


def run(engine, prompt=PROMPT, params=GREEDY, max_tokens=40, stop=()):
    steps = list(engine.generate(prompt, params, max_tokens, stop))
    return [t for s in steps for t in s.emitted], steps


def target_only(fn, **kw):
    return run(SpeculativeEngine(FakeModel(fn, V), NoDrafter(), fixed(0)), **kw)


class TestGreedyIdentity:
    @pytest.mark.parametrize("k", [1, 3, 8])
    @pytest.mark.parametrize(
        "drafter_kind",
        ["perfect", "always_wrong", "random_model", "noisy_model", "noisy_model_marginal_rule", "lookup"],
    )
    def test_speculative_equals_target_only(self, k, drafter_kind):
        fn = hashed_logits(seed=1, n_vocab=V)
        expected, _ = target_only(fn)
        target = FakeModel(fn, V)
        if drafter_kind == "perfect":
            drafter = ScriptedDrafter(lambda ctx, n: oracle_greedy(fn, ctx, n))
        elif drafter_kind == "always_wrong":
            drafter = ScriptedDrafter(lambda ctx, n: [(t + 1) % V for t in oracle_greedy(fn, ctx, n)])
        elif drafter_kind == "random_model":
            drafter = ModelDrafter(FakeModel(hashed_logits(seed=99, n_vocab=V), V), V, p_min=0.0)
        elif drafter_kind in ("noisy_model", "noisy_model_marginal_rule"):
            noisy = lambda h: fn(h) + np.random.default_rng(len(h)).standard_normal(V).astype(np.float32)
            costs = CostModel({1: 1.0, 2: 1.05, 4: 1.3, 8: 1.8}, 0.1) if "rule" in drafter_kind else None
            drafter = ModelDrafter(FakeModel(noisy, V), V, p_min=0.0, costs=costs)
        else:
            drafter = SuffixDrafter()
        got, steps = run(SpeculativeEngine(target, drafter, fixed(k)))
        assert got == expected
        assert sum(len(s.drafted) for s in steps) > 0 or drafter_kind == "lookup"

    def test_perfect_drafter_accepts_everything_and_takes_bonus(self):
        fn = hashed_logits(seed=2, n_vocab=V, eos_bias=-50)  # no EOS: full-length steps
        drafter = ScriptedDrafter(lambda ctx, n: oracle_greedy(fn, ctx, n))
        got, steps = run(SpeculativeEngine(FakeModel(fn, V), drafter, fixed(4)), max_tokens=25)
        assert got == target_only(fn, max_tokens=25)[0]
        full = steps[:-1]  # the last step may be cut by max_tokens
        assert all(s.n_accepted == 4 and len(s.emitted) == 5 for s in full)  # 4 accepted + bonus
        assert len(steps) == 5  # 25 tokens in 5 target passes instead of 25

    def test_always_wrong_drafter_still_yields_one_token_per_step(self):
        fn = hashed_logits(seed=3, n_vocab=V, eos_bias=-50)
        drafter = ScriptedDrafter(lambda ctx, n: [(t + 1) % V for t in oracle_greedy(fn, ctx, n)])
        _, steps = run(SpeculativeEngine(FakeModel(fn, V), drafter, fixed(3)), max_tokens=10)
        assert all(s.n_accepted == 0 and len(s.emitted) == 1 for s in steps)


class TestStopping:
    def test_eos_inside_accepted_run_ends_the_reply_there(self):
        # target: 11, 12, EOS, 13 ... ; the drafter proposes all of it and more
        script = {6: 11, 7: 12, 8: EOS, 9: 13, 10: 14}

        def fn(h):
            z = np.zeros(V, dtype=np.float32)
            z[script.get(len(h), 20)] = 5.0
            return z

        drafter = ScriptedDrafter(lambda ctx, n: [11, 12, EOS, 13, 14][len(ctx) - 6 :][:n])
        got, steps = run(SpeculativeEngine(FakeModel(fn, V), drafter, fixed(5)))
        assert got == [11, 12]
        assert steps[-1].finish == "eos"
        assert len(steps) == 1  # one verify, cut at EOS
        assert steps[0].drafted == (11, 12, EOS)  # nothing after an end is verified: it is never kept

    def test_max_tokens_cuts_mid_run(self):
        fn = hashed_logits(seed=4, n_vocab=V, eos_bias=-50)
        drafter = ScriptedDrafter(lambda ctx, n: oracle_greedy(fn, ctx, n))
        got, steps = run(SpeculativeEngine(FakeModel(fn, V), drafter, fixed(8)), max_tokens=7)
        assert got == target_only(fn, max_tokens=7)[0]
        assert len(got) == 7 and steps[-1].finish == "length"

    def test_stop_string_inside_run(self):
        fn = hashed_logits(seed=5, n_vocab=V, eos_bias=-50)
        full, _ = target_only(fn, max_tokens=12)
        stop = f"<{full[3]}><{full[4]}>"
        drafter = ScriptedDrafter(lambda ctx, n: oracle_greedy(fn, ctx, n))
        _, steps = run(SpeculativeEngine(FakeModel(fn, V), drafter, fixed(8)), stop=[stop], max_tokens=12)
        text = "".join(s.text for s in steps)
        assert steps[-1].finish == "stop"
        assert text == "".join(f"<{t}>" for t in full[:3])

    def test_context_full_ends_with_reason(self):
        fn = hashed_logits(seed=6, n_vocab=V, eos_bias=-50)
        target = FakeModel(fn, V, n_ctx=12)
        drafter = ScriptedDrafter(lambda ctx, n: oracle_greedy(fn, ctx, n))
        got, steps = run(SpeculativeEngine(target, drafter, fixed(4)), max_tokens=100)
        assert steps[-1].finish == "context"
        assert len(PROMPT) + len(got) == 12
        assert got == target_only(fn, max_tokens=len(got))[0]


class TestRollback:
    def test_cache_holds_context_minus_pending_after_each_step(self):
        fn = hashed_logits(seed=7, n_vocab=V)
        target = FakeModel(fn, V)
        drafter = ScriptedDrafter(lambda ctx, n: [(t + (i % 2)) % V for i, t in enumerate(oracle_greedy(fn, ctx, n))])
        context = list(PROMPT)
        for step in SpeculativeEngine(target, drafter, fixed(4)).generate(PROMPT, GREEDY, 30):
            context.extend(step.emitted)
            if not step.finish:
                assert target.cached == context[:-1]

    def test_each_verify_is_one_batched_evaluation(self):
        fn = hashed_logits(seed=8, n_vocab=V, eos_bias=-50)
        target = FakeModel(fn, V)
        drafter = ScriptedDrafter(lambda ctx, n: oracle_greedy(fn, ctx, n))
        _, steps = run(SpeculativeEngine(target, drafter, fixed(4)), max_tokens=20)
        verifies = target.decode_calls[1:]  # [0] is the prefill
        assert len(verifies) == len(steps)
        assert all(n_tok == n_log == 5 for n_tok, n_log in verifies[:-1])

    def test_follow_up_turn_evaluates_only_new_tokens(self):
        fn = hashed_logits(seed=9, n_vocab=V)
        target = FakeModel(fn, V)
        engine = SpeculativeEngine(target, NoDrafter(), fixed(0))
        first, _ = run(engine, max_tokens=10)
        target.decode_calls.clear()
        follow = PROMPT + first + [3, 4, 5]
        run(engine, prompt=follow, max_tokens=3)
        prefill_tokens = target.decode_calls[0][0]
        assert prefill_tokens <= 4  # the new turn's tokens, not the whole history


class Watched(Sequence):
    """A verify's rows that remember which were read (a slice reads what it holds)."""

    def __init__(self, rows, read: set[int]) -> None:
        self.rows, self.read = rows, read

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        if isinstance(i, slice):
            self.read.update(range(len(self.rows))[i])
            return self.rows[i]
        self.read.add(i)
        return self.rows[i]


class WatchedModel(FakeModel):
    """A target whose last evaluation's rows say which were read, and that counts checkpoints
    (a hybrid target keeps one before a verify that may drop more than its snapshots reach)."""

    def __init__(self, fn, rollback_depth=None) -> None:
        super().__init__(fn, V)
        self.rollback_depth, self.checkpoints, self.read = rollback_depth, 0, [set()]

    def _decode(self, tokens, start, n_logits):
        self.read.append(set())
        return Watched(super()._decode(tokens, start, n_logits), self.read[-1])

    def checkpoint(self, lasting=False):
        self.checkpoints += not lasting


class Padded(FixedController):
    """k drafts, each verify planned at ``rows`` rows (a steady size on a GPU)."""

    def __init__(self, k, rows):
        super().__init__(CostModel(verify={1: 1.0}), k)
        self.rows = rows

    def choose(self, behind=None, budget=None):
        return replace(super().choose(behind, budget), rows=self.rows)


class TestPadding:
    """A verify padded to a steady size: the rows past the draft are evaluated, never read, and
    dropped with the rejected drafts."""

    @pytest.mark.parametrize("params", [GREEDY, SamplingParams(temperature=0.8, seed=3)])
    def test_padded_rows_are_never_read_and_the_reply_is_the_same(self, params):
        fn = hashed_logits(seed=7, n_vocab=V)
        drafter = ScriptedDrafter(lambda ctx, n: [(t + (len(ctx) % 3 == 0)) % V for t in oracle_greedy(fn, ctx, n)])
        plain, _ = run(SpeculativeEngine(FakeModel(fn, V), drafter, fixed(2)), params=params)
        target = WatchedModel(fn)
        padded, steps = run(SpeculativeEngine(target, drafter, Padded(2, 6)), params=params)
        assert padded == plain
        verifies = target.decode_calls[1:]  # [0]: the prefill
        assert all(n == n_logits == 6 for n, n_logits in verifies[:-1])  # every verify 6 rows
        assert all(s.n_padded == 5 - len(s.drafted) for s in steps[:-1])
        for step, read in zip(steps, target.read[2:]):
            assert max(read) <= len(step.drafted)  # no padded row read

    def test_the_cache_drops_the_padding_with_the_rejected_drafts(self):
        fn = hashed_logits(seed=7, n_vocab=V)
        target = WatchedModel(fn)
        drafter = ScriptedDrafter(lambda ctx, n: oracle_greedy(fn, ctx, n)[: 1 + len(ctx) % 2])
        context = list(PROMPT)
        for step in SpeculativeEngine(target, drafter, Padded(2, 8)).generate(PROMPT, GREEDY, 30):
            context.extend(step.emitted)
            if not step.finish:
                assert target.cached == context[:-1]

    def test_a_hybrid_target_keeps_a_checkpoint_where_the_padding_passes_its_snapshots(self):
        # snapshots reach 3 tokens back: a draft of 2 needs none, 2 drafts and 3 padding rows do
        fn = hashed_logits(seed=7, n_vocab=V)
        drafter = ScriptedDrafter(lambda ctx, n: oracle_greedy(fn, ctx, n))
        bare, padded = WatchedModel(fn, rollback_depth=3), WatchedModel(fn, rollback_depth=3)
        run(SpeculativeEngine(bare, drafter, Padded(2, 0)), max_tokens=12)
        _, steps = run(SpeculativeEngine(padded, drafter, Padded(2, 6)), max_tokens=12)
        assert bare.checkpoints == 0 and padded.checkpoints == len(steps)

    def test_padding_stops_at_the_context_s_end(self):
        fn = hashed_logits(seed=7, n_vocab=V, eos_bias=-50)
        target = FakeModel(fn, V, n_ctx=len(PROMPT) + 10)
        _, steps = run(SpeculativeEngine(target, NoDrafter(), Padded(0, 8)), max_tokens=20)
        assert steps[-1].finish == "context" and max(len(target.cached), 0) <= target.n_ctx


class TestAdaptive:
    # A drafter slower than the costs believed, timed and switched off in the engine with the
    # text the target's own, is test_controller.py::TestMeasuredDraftCost, on timed fakes.
    def test_adaptive_engine_stays_exact(self):
        fn = hashed_logits(seed=11, n_vocab=V)
        drafter = ScriptedDrafter(lambda ctx, n: oracle_greedy(fn, ctx, n))
        engine = SpeculativeEngine(FakeModel(fn, V), drafter, AdaptiveController(CostModel(), draft_max=8))
        assert run(engine)[0] == target_only(fn)[0]

    def test_while_drafting_is_off_a_trusted_copy_is_still_verified_and_the_draft_model_never_drafts(self):
        # a draft pass of 5 T(1): drafting never pays here, but a copy costs no pass
        fn = hashed_logits(seed=1, n_vocab=V, order=1)  # the text falls into a cycle: n-grams recur
        costs = CostModel({1: 1.0, 2: 1.02, 4: 1.08, 8: 1.2, 16: 1.5}, t_draft=5.0)
        draft = FakeModel(hashed_logits(seed=4, n_vocab=V), V)
        # alpha 0.9: copied, even for the target
        trusting = SuffixDrafter(gate=LookupGate(costs, P, (9.0, 1.0)))
        drafter = ModelDrafter(draft, V, costs=costs)
        got, steps = run(SpeculativeEngine(FakeModel(fn, V), drafter, AdaptiveController(costs, 8), (trusting,)))
        assert got == target_only(fn)[0]
        assert all(s.model_k == 0 for s in steps) and sum(s.n_accepted for s in steps) >= 5
        assert draft.decode_calls == []  # the draft model never ran


class TestSampling:
    @pytest.mark.parametrize("rule", ["speculative", "match"])
    def test_same_seed_same_output(self, rule):
        fn = hashed_logits(seed=12, n_vocab=V)
        params = SamplingParams(temperature=0.8, seed=42, rule=rule)

        def once():
            drafter = ModelDrafter(FakeModel(hashed_logits(seed=13, n_vocab=V), V), V, p_min=0.0)
            return run(SpeculativeEngine(FakeModel(fn, V), drafter, fixed(3)), params=params)[0]

        assert once() == once()


class TestDraftPrefill:
    def test_draft_model_reads_the_prompt_with_its_first_draft(self):
        fn = hashed_logits(1, V)
        draft = FakeModel(hashed_logits(2, V), V)
        costs = CostModel({1: 1.0, 2: 1.05, 4: 1.2, 8: 1.6}, t_draft=0.1)
        controller = AdaptiveController(costs, 4)
        engine = SpeculativeEngine(FakeModel(fn, V), ModelDrafter(draft, V, p_min=0.0), controller)
        steps = engine.generate(PROMPT, GREEDY, 20)
        first = next(steps)
        assert draft.decode_calls[0] == (len(PROMPT), 1)  # the prompt, read in the step's draft time
        assert first.k > 0 and first.prefill_seconds > 0 and first.draft_seconds > 0
        rest = list(steps)
        got = [t for s in [first, *rest] for t in s.emitted]
        assert got == target_only(fn, max_tokens=20)[0]

    def test_no_draft_prefill_when_drafting_does_not_pay(self):
        draft = FakeModel(hashed_logits(2, V), V)
        costs = CostModel({1: 1.0, 2: 2.0, 4: 4.0}, t_draft=0.9)  # compute-bound: k = 0
        engine = SpeculativeEngine(
            FakeModel(hashed_logits(1, V), V), ModelDrafter(draft, V), AdaptiveController(costs, 4)
        )
        next(engine.generate(PROMPT, GREEDY, 5))
        assert draft.decode_calls == []

    def test_a_prompt_longer_than_the_drafts_context_is_not_prefilled_there(self):
        fn = hashed_logits(1, V)
        draft = FakeModel(hashed_logits(2, V), V, n_ctx=4)  # holds less than the prompt
        costs = CostModel({1: 1.0, 2: 1.05, 4: 1.2, 8: 1.6}, t_draft=0.1)
        engine = SpeculativeEngine(FakeModel(fn, V), ModelDrafter(draft, V, p_min=0.0), AdaptiveController(costs, 4))
        got, _ = run(engine, max_tokens=10)
        assert got == target_only(fn, max_tokens=10)[0]
        assert draft.cached == []

"""The bench's verdicts mode on scripted fakes: the draft model's passes as in draft mode, its
tokens and confidences the recorded verdicts', nothing proposed where nothing was recorded."""

from types import SimpleNamespace

import numpy as np
import pytest

from localspec.bench import modes as bench_modes
from localspec.bench.modes import VerdictDrafter, VerdictReplay
from localspec.bench.verdicts import PromptVerdicts, RecordedVerdicts
from localspec.core.costs import CostModel
from localspec.core.modes import ModeContext, ReplySpec, builtin_modes
from localspec.core.sampling import SamplingParams
from tests.support.fakes import EOS, FakeModel, fixed_k, hashed_logits, mode_context, oracle_greedy

V = 32
PROMPT = [1, 2, 3]
REFERENCE = [5, 6, 7, 8, 9, 10]
GREEDY = SamplingParams()
RNG = np.random.default_rng(0)


def verdicts(agree: str, confidence=None, prompt_id="p1") -> PromptVerdicts:
    conf = confidence or [0.9] * len(agree)
    return PromptVerdicts(prompt_id, "tiny", tuple(a == "1" for a in agree), tuple(conf))


def drafter(recorded: PromptVerdicts | None, reference=REFERENCE, p_min=0.0) -> tuple[VerdictDrafter, FakeModel]:
    draft = FakeModel(hashed_logits(1, V), V)
    return VerdictDrafter(draft, V, recorded, len(PROMPT), reference, p_min=p_min), draft


class TestVerdictDrafter:
    def test_right_where_the_real_draft_agreed_wrong_where_not_with_its_confidence(self):
        d, draft = drafter(verdicts("1101", [0.9, 0.8, 0.7, 0.6]))
        out = d.draft(PROMPT, 4, GREEDY, RNG)
        assert out.ids[:2] == (5, 6) and out.ids[3] == 8  # positions 0, 1, 3 agreed
        assert out.ids[2] not in (7, EOS)  # position 2 did not: a wrong token, and no end
        assert out.confidence == (0.9, 0.8, 0.7, 0.6)  # the recorded ones, not the fake's
        assert out.q_draft is None and out.source == "draft"

    def test_its_passes_are_the_draft_models(self):
        d, draft = drafter(verdicts("1101"))
        out = d.draft(PROMPT, 4, GREEDY, RNG)
        # one pass reads the prompt and gives the first row, then one pass per further token,
        # each reading the token proposed before it
        assert out.n_evals == 4 and draft.decode_calls == [(3, 1), (1, 1), (1, 1), (1, 1)]
        assert draft.cached == [*PROMPT, *out.ids[:3]]

    def test_p_min_stops_at_the_recorded_confidence(self):
        d, draft = drafter(verdicts("1111", [0.9, 0.8, 0.7, 0.95]), p_min=0.75)
        out = d.draft(PROMPT, 4, GREEDY, RNG)
        assert out.ids == (5, 6)  # 0.7 at position 2 ends the draft, after the pass that read it
        assert out.n_evals == 3

    def test_the_draft_goes_on_from_the_reply_so_far(self):
        d, _ = drafter(verdicts("101101"))
        out = d.draft([*PROMPT, 5, 6, 7], 3, GREEDY, RNG)  # positions 3, 4, 5
        assert out.ids[0] == 8 and out.ids[1] != 9 and out.ids[2] == 10

    def test_nothing_past_the_recording_and_no_pass(self):
        d, draft = drafter(verdicts("111"))  # three positions recorded, six in the reference
        assert d.draft([*PROMPT, 5, 6], 4, GREEDY, RNG).ids == (7,)  # the draft is cut at the end
        calls = len(draft.decode_calls)
        assert d.draft([*PROMPT, 5, 6, 7], 4, GREEDY, RNG).ids == ()
        assert len(draft.decode_calls) == calls

    def test_nothing_past_the_reference(self):
        d, _ = drafter(verdicts("1111"), reference=[5, 6])
        assert d.draft(PROMPT, 4, GREEDY, RNG).ids == (5, 6)

    def test_nothing_for_a_prompt_without_a_recording(self):
        d, draft = drafter(None)
        assert d.draft(PROMPT, 4, GREEDY, RNG).ids == () and draft.decode_calls == []

    def test_nothing_once_the_reply_has_left_the_reference(self):
        d, draft = drafter(verdicts("111111"))
        assert d.draft([*PROMPT, 5, 99], 4, GREEDY, RNG).ids == () and draft.decode_calls == []

    def test_a_sampled_reply_is_refused(self):
        d, _ = drafter(verdicts("11"))
        with pytest.raises(ValueError, match="temperature 0"):
            d.draft(PROMPT, 2, SamplingParams(temperature=0.8), RNG)


def recording(*prompts: PromptVerdicts) -> RecordedVerdicts:
    return RecordedVerdicts("fake+pair", "t.gguf", "d.gguf", "0", "2026-01-01", {p.prompt_id: p for p in prompts})


def context(draft=True, **kw) -> ModeContext:
    return mode_context(V, draft, **kw)


class TestVerdictReplay:
    def test_draft_modes_controller_and_the_draft_pass_no_copies(self):
        ctx = context(draft_max=6)
        mode = VerdictReplay(recording(verdicts("11")))
        mode.replay("p1", REFERENCE, 0)
        drafting = mode(ctx)
        assert fixed_k(drafting.controller) is None  # auto
        assert drafting.controller.costs.t_draft == 0.2  # a draft token costs the draft pass
        drafter = drafting.new_drafter(ReplySpec(len(PROMPT)))
        assert isinstance(drafter, VerdictDrafter) and drafter.costs is drafting.controller.costs
        assert not drafting.copies

    def test_the_target_keeps_the_run_of_agreeing_positions(self):
        target_fn = hashed_logits(0, V)
        reference = oracle_greedy(target_fn, PROMPT, 8)
        assert EOS not in reference
        # k = 4 every step: the first keeps positions 0-1 and the target writes 2; the second
        # drafts 3-6, all kept, and the target adds 7
        mode = VerdictReplay(recording(verdicts("11011110")))
        mode.replay("p1", reference, 0)
        ctx = context(draft_max=4, adaptive=False)
        engine = mode(ctx).engine(ctx.target, ReplySpec(len(PROMPT)))
        steps = list(engine.generate(PROMPT, GREEDY, 8))
        assert [s.n_accepted for s in steps] == [2, 4]
        assert [t for s in steps for t in s.emitted] == reference  # greedy: the target's own reply

    def test_the_bench_registers_it_with_its_recording(self):
        session = SimpleNamespace(modes=builtin_modes())
        rec = recording(verdicts("1"))
        bench_modes.register_modes(session, ["none", "draft", bench_modes.VERDICTS], rec)
        build = session.modes[bench_modes.VERDICTS].build
        assert isinstance(build, VerdictReplay) and build.recorded is rec
        assert not session.modes[bench_modes.VERDICTS].counts_as_use
        with pytest.raises(ValueError, match="--verdicts"):
            bench_modes.register_modes(SimpleNamespace(modes=builtin_modes()), [bench_modes.VERDICTS])

    def test_it_needs_a_draft_model_and_the_target_alone_first(self):
        mode = VerdictReplay(recording())
        with pytest.raises(ValueError, match="--draft"):
            mode(context(draft=False))
        with pytest.raises(ValueError, match="target-only run"):
            mode(context()).new_drafter(ReplySpec(len(PROMPT)))


class TestChanging:
    def test_it_plans_no_rows_where_the_session_s_costs_price_a_change(self):
        from localspec.bench.modes import changing
        from localspec.core.modes import ModeContext, draft_model
        from tests.support.fakes import FakeModel, hashed_logits

        target, draft = FakeModel(hashed_logits(1, 40), 40), FakeModel(hashed_logits(2, 40), 40)
        costs = CostModel({1: 1.0, 2: 1.05, 4: 1.1, 8: 1.2}, 0.05)
        costs.verify.change = 1.0  # a GPU's: a change of batch size costs a pass
        ctx = ModeContext(target, draft, costs, prior=0.9)
        steady, free = draft_model(ctx).controller.choose(), changing(ctx).controller.choose()
        assert steady.rows == steady.k + 1 and free.rows == 0 and free.k == steady.k
        assert costs.verify.change == 1.0  # the session's costs are left as they were

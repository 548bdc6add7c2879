"""bench/replay.py, the policy replay: a recorded greedy reply through the real engine, timed on
a virtual clock from the measured curve, with the draft's rows memoised; and ``localspec bench
--record`` / ``--replay``, which run it."""

import json
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest

from localspec.bench import replay
from localspec.cli import build_parser, main
from localspec.cli.replay import recording_problem, replay_options
from localspec.core import costs as costs_module
from localspec.core.costs import CostModel, DraftCost, VerifyCurve
from localspec.core.modes import ModeContext, ReplySpec, draft_model, target_alone
from localspec.core.sampling import SamplingParams
from tests.support.fakes import FakeModel, hashed_logits, oracle_greedy

V = 40
PROMPT = [3, 4, 5, 6]
CURVE = {n: 1.0 + 0.05 * (n - 1) for n in range(1, 18)}


class Forbidden(FakeModel):
    def _decode(self, tokens, start, n_logits):
        raise AssertionError("the memo should have answered")


def run(mode_name, target_fn, draft_model_, memo, monkeypatch):
    clock = replay.Clock(0.0, 0)
    monkeypatch.setattr(costs_module, "clock", clock)
    reply = oracle_greedy(target_fn, PROMPT, 24)
    target = replay.ReplayTarget(FakeModel(target_fn, V), CURVE, clock)
    target.true = PROMPT + reply
    draft = replay.MemoDraft(draft_model_, 0.2, 0.05, clock, memo)
    ctx = ModeContext(target, draft, CostModel(VerifyCurve(CURVE), DraftCost(0.2)), draft_max=8)
    mode = target_alone(ctx) if mode_name == "none" else draft_model(ctx)
    engine = mode.engine(target, ReplySpec(len(PROMPT)))
    steps = list(engine.generate(list(PROMPT), SamplingParams(), 24))
    return reply, steps, clock


def recording(target_fn, ids=("p1",)) -> dict:
    """A recording as --record writes it (its curve's keys strings, as JSON has them)."""
    reply = oracle_greedy(target_fn, PROMPT, 24)
    prompts = [{"id": i, "prompt": PROMPT, "reply": reply} for i in ids]
    return {"curve": {str(n): t for n, t in CURVE.items()}, "t_draft": 0.2, "read": 0.05, "prompts": prompts}


class TestReplayedModels:
    def test_the_replayed_target_gives_the_recorded_reply_whatever_the_draft(self, monkeypatch):
        target_fn = hashed_logits(1, V)
        drafts = FakeModel(hashed_logits(2, V), V)  # another model: most drafts are wrong
        reply, steps, _ = run("draft", target_fn, drafts, {}, monkeypatch)
        assert [t for s in steps for t in s.emitted] == reply
        assert sum(len(s.drafted) for s in steps) > 0

    def test_the_target_alone_costs_t1_a_token_on_the_virtual_clock(self, monkeypatch):
        target_fn = hashed_logits(1, V)
        reply, steps, _ = run("none", target_fn, FakeModel(target_fn, V), {}, monkeypatch)
        assert sum(s.step_seconds for s in steps) == pytest.approx(len(reply) * CURVE[1])

    def test_a_second_replay_reads_the_draft_from_the_memo_with_the_same_top_token(self, monkeypatch):
        target_fn = hashed_logits(1, V)
        memo: dict = {}
        _, first, _ = run("draft", target_fn, FakeModel(target_fn, V), memo, monkeypatch)
        assert memo
        _, again, _ = run("draft", target_fn, Forbidden(target_fn, V), memo, monkeypatch)
        assert [s.drafted for s in again] == [s.drafted for s in first]
        ids, logits, lse = next(iter(memo.values()))
        assert len(ids) == replay.TOP and np.all(logits <= lse)

    def test_another_machine_s_shape_at_this_recording_s_pace(self):
        curve = {n: 0.2 * (1.0 + 0.05 * (n - 1)) for n in range(1, 8)}
        shaped, t_draft = replay.reshape(curve, 0.05, [1.6, 1.8, 2.0], 0.3)
        assert shaped[1] == pytest.approx(0.2) and shaped[2] == pytest.approx(0.32) and shaped[4] == pytest.approx(0.4)
        assert shaped[6] == pytest.approx(0.2 * 2.4)  # past the shape: its last step, 0.2, per token
        assert t_draft == pytest.approx(0.06)
        assert replay.reshape(curve, 0.05, [1.6], None)[1] == 0.05  # the recording's own draft pass


class TestBurst:
    def test_a_burst_slows_the_target_evaluations_it_spans_and_the_draft_passes_among_them(self):
        clock = replay.Clock(0.0, 0, burst=(2, 3, 2.0))
        target = replay.ReplayTarget(FakeModel(hashed_logits(1, V), V), CURVE, clock)
        target.true = PROMPT + [7] * 10
        seconds = []
        for i in range(6):  # the prefill, then single tokens: evaluations 1..6
            before = clock.now
            target.sync(PROMPT + [7] * i, n_logits=1)
            seconds.append(clock.now - before)
        assert seconds == pytest.approx([CURVE[4], 2.0, 2.0, 2.0, 1.0, 1.0])  # evaluations 2, 3 and 4
        clock.work(0.5)  # a draft pass after the burst
        assert clock.now - sum(seconds) == pytest.approx(0.5)
        clock.evals = 3
        before = clock.now
        clock.work(0.5)  # and one within it
        assert clock.now - before == pytest.approx(1.0)

    @pytest.mark.parametrize("text", ["8,12", "8,12,1.6,2", "a,12,2", "8,0,2", "-1,12,2", "8,12,0", "8,12,x"])
    def test_a_malformed_burst_says_what_it_wants(self, text):
        with pytest.raises(ValueError, match="START,LENGTH,FACTOR"):
            replay.parse_burst(text)

    def test_a_burst_parses_to_its_three_numbers(self):
        assert replay.parse_burst("8,12,1.6") == (8, 12, 1.6)


class TestBlind:
    def test_a_verify_s_rows_cost_more_after_the_verify_is_timed(self):
        clock = replay.Clock(0.0, 0)
        target = replay.ReplayTarget(FakeModel(hashed_logits(1, V), V), CURVE, clock, blind=0.5)
        target.true = PROMPT + [7] * 10
        t0 = clock()
        target.evaluate([7], 1)  # one row: nothing after it
        assert clock() - t0 == pytest.approx(CURVE[1]) and clock() - t0 == pytest.approx(CURVE[1])
        t0 = clock()
        target.evaluate([7, 7, 7], 3)
        assert clock() - t0 == pytest.approx(CURVE[3])  # the verify's own time, as the engine reads it
        assert clock() - t0 == pytest.approx(CURVE[3] + 0.5 * CURVE[1] * 2)  # then its two rows past the first

    def test_blind_costs_slow_drafting_and_not_the_target_alone(self):
        target_fn = hashed_logits(1, V)
        seen, blind = (
            replay.replay(recording(target_fn), FakeModel(target_fn, V), {}, options).results["p1"]
            for options in (
                replay.ReplayOptions(policies=("none", "auto"), max_tokens=24),
                replay.ReplayOptions(policies=("none", "auto"), max_tokens=24, blind=0.5),
            )
        )
        assert blind["none"] == seen["none"]
        assert blind["auto"].tokens_per_second < 0.8 * seen["auto"].tokens_per_second

    @pytest.mark.parametrize("text", ["-0.1", "x", "nan"])
    def test_a_blind_cost_below_nothing_is_refused_by_the_parser(self, text, capsys):
        with pytest.raises(SystemExit):
            main(["bench", "--replay", "r.json", "--draft", "d.gguf", "--blind", text])
        assert "give a cost in T(1)s, 0 or more" in capsys.readouterr().err

    def test_a_dearer_prompt_read_slows_drafting_and_not_the_target_alone(self):
        """``--draft-read``: what the draft pays to read the prompt at its first draft, priced by
        the load as it is paid (``costs_for``), and counted in the whole request either way."""
        target_fn = hashed_logits(1, V)
        cheap, dear = (
            replay.replay(recording(target_fn), FakeModel(target_fn, V), {}, options).results["p1"]
            for options in (
                replay.ReplayOptions(policies=("none", "auto"), max_tokens=24, draft_read=0.0),
                replay.ReplayOptions(policies=("none", "auto"), max_tokens=24, draft_read=0.5),
            )
        )
        assert dear["none"] == cheap["none"]
        assert dear["auto"].wall_tokens_per_second < cheap["auto"].wall_tokens_per_second
        args = build_parser().parse_args(["bench", "--replay", "r.json", "--draft", "d.gguf", "--draft-read", "0.01"])
        assert replay_options(args).draft_read == 0.01

    def test_the_blind_cost_reaches_the_replay(self):
        args = build_parser().parse_args(["bench", "--replay", "r.json", "--draft", "d.gguf", "--blind", "0.3"])
        assert recording_problem(args) is None and replay_options(args).blind == 0.3


class TestSizeChange:
    def test_an_evaluation_of_another_size_costs_more_and_is_no_sample_until_it_settles(self):
        clock = replay.Clock(0.0, 0)
        target = replay.ReplayTarget(FakeModel(hashed_logits(1, V), V), CURVE, clock, size_change=1.5)
        target.true = PROMPT + [7] * 20
        seconds, steady = [], []
        for n in (1, 1, 1, 3, 3, 3, 1):
            before = clock.now
            target.evaluate([7] * n, n)
            seconds.append(clock.now - before)
            steady.append(target.steady)
        change = 1.5 * CURVE[1]
        assert seconds == pytest.approx([CURVE[1]] * 3 + [CURVE[3] + change, CURVE[3], CURVE[3], CURVE[1] + change])
        assert steady == [False, False, True, False, False, True, False]  # as a GPU's (llama.backend.GPU_SETTLE)

    def test_the_size_change_cost_reaches_the_replay_and_a_negative_one_is_refused(self, capsys):
        argv = ["bench", "--replay", "r.json", "--draft", "d.gguf", "--size-change", "1.35"]
        assert replay_options(build_parser().parse_args(argv)).size_change == 1.35
        with pytest.raises(SystemExit):
            main([*argv[:-1], "-1"])
        assert "give a cost in T(1)s, 0 or more" in capsys.readouterr().err


class TestReplay:
    def test_each_policy_replays_each_prompt_and_the_real_clock_comes_back(self):
        target_fn = hashed_logits(1, V)
        before = costs_module.clock
        options = replay.ReplayOptions(policies=("none", "auto"), max_tokens=24)
        # the draft is the target itself: every drafted token is accepted
        out = replay.replay(recording(target_fn), FakeModel(target_fn, V), {}, options)
        assert costs_module.clock is before
        none, auto = out.results["p1"]["none"], out.results["p1"]["auto"]
        assert none.mean_draft_length == 0 and none.acceptance == 0
        assert auto.acceptance == 1.0 and auto.tokens_per_second > none.tokens_per_second
        assert out.trace == []
        # every verify kept every draft: none dropped a token; the target alone verified nothing
        assert set(out.dropped) == {"auto"} and set(out.dropped["auto"]) == {0}

    def test_the_verifies_dropping_more_than_n_tokens(self):
        lines = replay.dropped_report({"auto": Counter({0: 6, 1: 2, 5: 1, 9: 1})}, beyond=(0, 4, 8, 12))
        assert lines == ["auto: of 10 verifies, dropping more than 0 / 4 / 8 / 12 tokens: 40.0% / 20.0% / 10.0% / 0.0%"]

    def test_the_real_clock_comes_back_when_a_replay_fails(self):
        target_fn = hashed_logits(1, V)
        before = costs_module.clock
        options = replay.ReplayOptions(policies=("auto",), max_tokens=24)
        with pytest.raises(AssertionError, match="memo"):
            replay.replay(recording(target_fn), Forbidden(target_fn, V), {}, options)  # an empty memo
        assert costs_module.clock is before

    def test_cold_without_a_profile_starts_every_prompt_afresh(self):
        target_fn = hashed_logits(1, V)
        drafts = FakeModel(hashed_logits(2, V), V)
        rec = recording(target_fn, ids=("a", "b"))  # the same prompt and reply twice
        cold = replay.ReplayOptions(policies=("auto",), cold=True, no_profile=True, max_tokens=24)
        out = replay.replay(rec, drafts, {}, cold).results
        assert out["b"]["auto"] == pytest.approx(out["a"]["auto"])
        warm = replay.replay(rec, drafts, {}, replay.ReplayOptions(policies=("auto",), max_tokens=24)).results
        # warm, the controller learnt on "a" that this draft is wrong, and drafts less on "b"
        assert warm["b"]["auto"].mean_draft_length < warm["a"]["auto"].mean_draft_length

    def test_kept_replies_are_copied_by_the_prompts_after_them(self):
        target_fn = hashed_logits(1, V)
        wrong = FakeModel(hashed_logits(2, V), V)  # a draft the target never agrees with
        rec = recording(target_fn, ids=("a", "b"))  # the same prompt and reply twice
        plain = replay.replay(rec, wrong, {}, replay.ReplayOptions(policies=("auto",), max_tokens=24)).results
        kept = replay.ReplayOptions(policies=("auto",), max_tokens=24, keep_replies=True)
        out = replay.replay(rec, wrong, {}, kept).results
        assert out["a"]["auto"] == plain["a"]["auto"]  # nothing kept before the first reply
        assert out["b"]["auto"].tokens_per_second > 1.5 * plain["b"]["auto"].tokens_per_second
        assert out["b"]["auto"].acceptance > 0.9  # "a"'s reply, copied

    def test_a_regenerate_replays_each_prompt_again_after_its_reply(self):
        target_fn = hashed_logits(1, V)
        wrong = FakeModel(hashed_logits(2, V), V)
        options = replay.ReplayOptions(policies=("none", "auto"), max_tokens=24, regenerate=True)
        out = replay.replay(recording(target_fn, ids=("a", "b")), wrong, {}, options).results
        assert list(out) == ["a", "a:regenerate", "b", "b:regenerate"]
        again, first = out["a:regenerate"]["auto"], out["a"]["auto"]
        assert again.tokens_per_second > 1.5 * first.tokens_per_second and again.acceptance > 0.9
        assert out["a:regenerate"]["none"] == out["a"]["none"]  # the target alone copies nothing
        no_copy = replay.replay(recording(target_fn, ids=("a",)), wrong, {}, replace(options, copy=False)).results
        plain = no_copy["a:regenerate"]["auto"]  # --no-copy: the draft model alone, which is always wrong
        assert plain.acceptance < 0.5 and plain.tokens_per_second < again.tokens_per_second / 1.5

    def test_every_step_reports_the_draft_length_it_proposed(self, monkeypatch):
        """Issue 66's honest numbers: over a replay with copies, their extensions and runs past k
        (a regenerate copies 20-odd tokens a step where k is 2-4), each step's draft length, as
        the statistics' last k and the inspector show it, is the tokens it proposed; the speed
        model's k is apart (Step.model_k)."""
        seen: list[tuple[int, int, int, int]] = []

        class Watched(replay.RunStats):
            def add(self, step):
                super().add(step)
                seen.append((step.k, self.last_k, len(step.drafted), step.model_k))

        monkeypatch.setattr(replay, "RunStats", Watched)
        target_fn = hashed_logits(1, V)
        options = replay.ReplayOptions(policies=("auto",), max_tokens=24, regenerate=True)
        replay.replay(recording(target_fn, ids=("a", "b")), FakeModel(target_fn, V), {}, options)
        assert seen and all(k == last == proposed for k, last, proposed, _ in seen)
        assert any(proposed > model_k for _, _, proposed, model_k in seen)  # copies ran past the model's k

    def test_a_trace_gives_the_prompt_s_steps_and_the_drafting_line_where_it_changes(self):
        target_fn = hashed_logits(1, V)
        options = replay.ReplayOptions(policies=("none", "auto"), trace="p2", max_tokens=24)
        out = replay.replay(recording(target_fn, ids=("p1", "p2")), FakeModel(target_fn, V), {}, options)
        assert out.trace[0].startswith("none k=0 drafted=0 accepted=0 time=1.00  ")  # the first step names its line
        assert out.trace[1] == "none k=0 drafted=0 accepted=0 time=1.00"  # unchanged: the step alone, a T(1)
        assert any(line.startswith("auto k=") and " from=" in line for line in out.trace)  # drafts say their source

    def test_the_prompts_are_picked_by_id_patterns(self):
        names = ("code-lru", "edit-js", "explain-gil", "held-explain-hash", "held-edit-guards-py")
        prompts = [{"id": i} for i in names]

        def ids(picked):
            return [p["id"] for p in picked]

        assert ids(replay.select(prompts)) == [p["id"] for p in prompts]
        code = ["code-lru", "edit-js", "held-edit-guards-py"]
        assert ids(replay.select(prompts, "code-*,edit-*,held-edit-*")) == code
        assert ids(replay.select(prompts, "*explain-*", skip="held-explain-hash")) == ["explain-gil"]
        assert replay.select(prompts, "summary-*") == []


class TestSettings:
    def test_a_setting_changes_the_policy_field_it_names(self):
        assert replay.policy_from(["opening_steps=0"]).opening_steps == 0
        assert replay.policy_from([]) == replay.ReplayOptions().policy

    def test_an_unknown_setting_lists_the_known_names(self):
        with pytest.raises(ValueError, match="NAME one of: .*opening_steps"):
            replay.policy_from(["opening_steps=0", "nope=1"])

    @pytest.mark.parametrize("policy", ["none", "auto", "fixed-k4-p0", "fixed-k8-p0.75"])
    def test_the_policies_a_replay_runs(self, policy):
        assert replay.policy_problem(policy) is None

    def test_another_policy_is_refused_by_name(self):
        assert "'fixed-4'" in replay.policy_problem("fixed-4")


class TestReport:
    # two prompts: "a" at 10 tok/s alone, auto 20 (2.00x) and fixed 15 (1.50x); "b" at 10, 12
    # (1.20x) and 18 (1.80x)
    Out = replay.Outcome
    RESULTS = {  # decode tokens/s, draft length, acceptance, whole-request tokens/s
        "a": {
            "none": Out(10.0, 0.0, 0.0, 8.0),
            "auto": Out(20.0, 4.0, 0.9, 12.0),
            "fixed-k4-p0": Out(15.0, 4.0, 0.8, 10.0),
        },
        "b": {
            "none": Out(10.0, 0.0, 0.0, 8.0),
            "auto": Out(12.0, 2.5, 0.6, 7.6),
            "fixed-k4-p0": Out(18.0, 4.0, 0.95, 12.0),
        },
    }

    def test_a_row_per_prompt_of_speed_up_draft_length_and_acceptance(self):
        lines = replay.report(self.RESULTS, ["none", "auto", "fixed-k4-p0"])  # type: ignore[arg-type]
        header = "prompt" + " " * 12 + " " * 16 + "none" + " " * 16 + "auto" + " " * 9 + "fixed-k4-p0"
        assert lines[0] == header + "   (speed-up, draft length, acceptance)"
        assert lines[1] == "a" + " " * 17 + "     1.00   0.0 0.00" + "     2.00   4.0 0.90" + "     1.50   4.0 0.80"
        assert lines[3] == "median" + " " * 12 + "  1.00".rjust(20) + "  1.60".rjust(20) + "  1.65".rjust(20)
        # whole requests, the prompt's read included: auto 12 / 8 and 7.6 / 8
        whole = "1.00 (worst 1.00)".rjust(20) + "1.23 (worst 0.95)".rjust(20) + "1.38 (worst 1.25)".rjust(20)
        assert lines[4] == "whole request".ljust(18) + whole
        # auto / best fixed: 20 / 15 and 12 / 18
        assert lines[5] == "auto / best fixed: 1.33 0.67  (min 0.67)"

    def test_without_a_fixed_policy_there_is_no_auto_over_fixed_line(self):
        lines = replay.report(self.RESULTS, ["none", "auto"])  # type: ignore[arg-type]
        assert len(lines) == 5 and lines[-1].startswith("whole request")


class TestCostsReport:
    def test_the_recording_s_own_costs_are_said_with_where_they_come_from(self):
        rec = recording(hashed_logits(V, 1))
        (line,) = replay.costs_report(rec, replay.ReplayOptions())
        # T(n) / T(1) of CURVE: 1 + 0.05 (n - 1); a draft pass 0.2 and a read 0.05 at T(1) = 1
        assert line == (
            "costs replayed, in T(1): T(n), n = 2 / 4 / 8 / 16: 1.05 / 1.15 / 1.35 / 1.75 (this recording's machine); "
            "a draft pass 0.20 (this recording's machine); the draft's read of a prompt token 0.050 (this "
            "recording's machine); a change of batch size nothing (a CPU's; --size-change for a GPU's)"
        )

    def test_another_machine_s_costs_name_the_flags_they_come_from(self):
        options = replay.ReplayOptions(shape=(1.3, 1.4, 1.5), draft_pass=0.5, draft_read=0.01, size_change=0.68)
        (line,) = replay.costs_report(recording(hashed_logits(V, 1)), options)
        # past the shape T(n) grows by its last step (0.1 a row): T(8) = 1.5 + 4 * 0.1
        assert "T(n), n = 2 / 4 / 8 / 16: 1.30 / 1.50 / 1.90 / 2.70 (--shape)" in line
        assert "a draft pass 0.50 (--draft-pass)" in line and "a prompt token 0.010 (--draft-read)" in line
        assert line.endswith("a change of batch size 0.68 each way, into a size and out of it (--size-change)")


class TestRecordingFiles:
    def test_the_memo_is_kept_beside_the_recording(self, tmp_path):
        path = tmp_path / "rec.json"
        path.write_text(json.dumps(recording(hashed_logits(1, V))))
        assert replay.read_recording(path)[1] == {}
        replay.write_memo(path, {1: "row"})
        assert (tmp_path / "rec.json.memo").exists() and replay.read_recording(path)[1] == {1: "row"}

    @pytest.mark.parametrize("content", [None, "{", '{"prompts": []}'])
    def test_what_is_not_a_recording_is_refused(self, tmp_path, content):
        path = tmp_path / "rec.json"
        if content is not None:
            path.write_text(content)
        with pytest.raises(ValueError, match="recording"):
            replay.read_recording(path)


class TestReplayCli:
    SUITE = {
        "name": "tiny",
        "prompts": [
            {"id": "p1", "category": "code", "prompt": "def x = 1 + 2 def x = 1 + 2 def"},
            {"id": "p2", "category": "chat", "prompt": "hello world the model is fast"},
        ],
    }

    def test_a_recording_replays_with_each_policy_and_again_from_its_memo(self, tiny_pair, tmp_path, capsys):
        suite, rec = tmp_path / "suite.json", tmp_path / "rec.json"
        suite.write_text(json.dumps(self.SUITE))
        target, draft = (str(p) for p in tiny_pair)
        record = ["bench", "--record", str(rec), "--target", target, "--draft", draft, "--threads", "1"]
        assert main([*record, "--ctx", "512", "--suite", str(suite), "--max-tokens", "12"]) == 0
        assert [p["id"] for p in json.loads(rec.read_text())["prompts"]] == ["p1", "p2"]
        capsys.readouterr()
        argv = ["bench", "--replay", str(rec), "--draft", draft, "--policies", "none,auto,fixed-k4-p0", "--cold"]
        assert main([*argv, "--max-tokens", "12"]) == 0
        captured = capsys.readouterr()
        first, first_err = captured.out.splitlines(), captured.err
        assert first[0].startswith("costs replayed, in T(1): ") and "(this recording's machine)" in first[0]
        assert [line.split()[0] for line in first[1:7]] == ["prompt", "p1", "p2", "median", "whole", "auto"]
        # then, per policy that verified drafts, how many tokens its verifies dropped
        assert first[7:] and all(line.split(":")[0] in ("auto", "fixed-k4-p0") for line in first[7:])
        assert "fixed-k4-p0: of " in first[-1]
        assert (tmp_path / "rec.json.memo").exists()
        assert main([*argv, "--max-tokens", "12"]) == 0
        again = capsys.readouterr()
        assert again.out.splitlines() == first  # greedy and modelled: the same replay
        assert "draft rows were computed now" in first_err and again.err == ""  # all from the memo

    def test_no_copy_reaches_the_replay(self):
        args = build_parser().parse_args(["bench", "--replay", "r.json", "--draft", "d.gguf", "--no-copy"])
        assert recording_problem(args) is None and replay_options(args).copy is False

    def test_an_unknown_setting_stops_the_replay_before_anything_loads(self, tmp_path, capsys):
        argv = ["bench", "--replay", str(tmp_path / "absent.json"), "--draft", str(tmp_path / "absent.gguf")]
        assert main([*argv, "--set", "opening_steps=0", "--set", "nope=1"]) == 2
        err = capsys.readouterr().err
        assert "error: --set 'nope=1': give NAME=VALUE with NAME one of:" in err and "opening_steps" in err

    @pytest.mark.parametrize(
        "argv, message",
        [
            (["--noise", "0.05"], "--noise is an option of --replay FILE"),
            (["--regenerate"], "--regenerate is an option of --replay FILE"),
            (["--replay", "r.json", "--draft", "d.gguf", "--sweep"], "not with --sweep"),
            (["--replay", "r.json", "--draft", "d.gguf", "--temp", "0.5"], "not with --temp"),
            (["--replay", "r.json", "--draft", "d.gguf", "--threads", "2"], "not with --threads"),
            (["--replay", "r.json", "--draft", "d.gguf", "--target", "t.gguf"], "not with --target"),
            (["--replay", "r.json"], "--replay needs --draft"),
            (["--record", "r.json", "--draft", "d.gguf"], "--record needs --target and --draft"),
            (["--record", "r.json", "--target", "t.gguf", "--draft", "d.gguf", "--trace", "p1"], "--trace is an"),
            (["--record", "r.json", "--replay", "r.json"], "one at a time"),
            (["--replay", "r.json", "--draft", "d.gguf", "--policies", "none,fixed"], "unknown policy 'fixed'"),
            (["--replay", "r.json", "--draft", "d.gguf"], "--replay r.json: cannot read a recording"),
        ],
    )
    def test_flags_that_do_not_fit_are_refused_with_why(self, tmp_path, monkeypatch, capsys, argv, message):
        monkeypatch.chdir(tmp_path)
        assert main(["bench", *argv]) == 2
        assert message in capsys.readouterr().err

    def test_a_malformed_burst_is_refused_by_the_parser(self, capsys):
        with pytest.raises(SystemExit):
            main(["bench", "--replay", "r.json", "--draft", "d.gguf", "--burst", "8,12"])
        assert "START,LENGTH,FACTOR" in capsys.readouterr().err

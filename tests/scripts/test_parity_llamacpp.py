"""scripts/parity_llamacpp.py's reading of llama-speculative-simple's log and its comparison,
on log lines written as the binary writes them (common/speculative.cpp's SPC_DBG lines,
examples/speculative-simple's LOG_DBG lines)."""

import numpy as np
import pytest

from localspec.core.costs import CostModel
from tests.support.scripts import load_script

parity = load_script("parity_llamacpp")
Step, Run = parity.Step, parity.Run


def candidate(k: int, i: int, token: int, p: float) -> bytes:
    return (
        f"0.00.074.355 D spec        draft:  - seq_id 0, draft candidate {k:3d}, pos {i:3d}: {token:6d} ({p:8.3f}) 'x'"
    ).encode()


def draft_pass(i: int, *top: tuple[int, float]) -> list[bytes]:
    return [candidate(k, i, t, p) for k, (t, p) in enumerate(top)]


def called(hist: int, gen: int) -> bytes:
    line = f"0.00.074.767 D spec common_specu: called impl draft-mtp, hist size = {hist}, call_count = 1, gen = {gen}"
    return line.encode()


def accepted(a: int, b: int, token: int) -> bytes:
    return f"0.00.086.324 D accepted {a}/{b} draft tokens, the last target token is: ({token})".encode()


def partial(a: int, b: int) -> bytes:
    return f"0.00.076.650 D partial acceptance: {a} < {b}, restoring checkpoint".encode()


TOP = ((5, 0.5), (6, 0.25), (7, 0.125))  # a pass's top 3 as logged


def tops(*best: int) -> tuple:
    return tuple(((t, 0.5), (6, 0.25), (7, 0.125)) for t in best)


class TestParseSteps:
    def test_a_draft_its_verdict_and_the_next_position(self):
        log = [b"noise", *draft_pass(0, (11, 0.5), *TOP[1:]), *draft_pass(1, (12, 0.5), *TOP[1:])]
        log += [called(39, 2), accepted(1, 2, 87)]
        log += [*draft_pass(0, (13, 0.5), *TOP[1:]), called(41, 1), accepted(1, 1, 90)]
        steps = parity.parse_steps(b"\n".join(log))
        # 1 accepted + the target's token: the next draft starts 2 positions on
        assert steps == [Step(39, (11, 12), 1, 87, tops(11, 12)), Step(41, (13,), 1, 90, tops(13))]

    def test_a_draft_cut_to_the_budget_keeps_its_first_passes(self):
        log = [*draft_pass(0, (11, 0.5)), *draft_pass(1, (12, 0.5)), *draft_pass(2, (13, 0.5))]
        log += [b"0.00.097.893 D spec common_specu: truncating draft to 1 tokens", called(57, 1), accepted(0, 1, 22)]
        assert parity.parse_steps(b"\n".join(log)) == [Step(57, (11,), 0, 22, (((11, 0.5),),))]

    def test_a_partial_acceptance_and_its_replay_are_a_draft_step_then_a_target_step(self):
        log = [*draft_pass(0, (11, 0.5)), *draft_pass(1, (12, 0.5)), *draft_pass(2, (13, 0.5)), called(61, 3)]
        # 1 of 3 accepted; the replay re-reads [accepted, correction] and adds token 117
        log += [partial(1, 3), accepted(2, 2, 117)]
        log += [*draft_pass(0, (14, 0.5)), called(64, 1), accepted(1, 1, 63)]
        steps = parity.parse_steps(b"\n".join(log))
        assert steps == [
            Step(61, (11, 12, 13), 1, None, (((11, 0.5),), ((12, 0.5),), ((13, 0.5),))),
            Step(63, (), 0, 117),  # after the accepted draft (62) and the correction (63)
            Step(64, (14,), 1, 63, (((14, 0.5),),)),
        ]

    def test_a_piece_with_a_line_break_does_not_lose_the_candidate(self):
        log = candidate(0, 0, 13, 0.4)[:-3] + b"'\n'\n" + called(10, 1) + b"\n" + accepted(0, 1, 4)
        assert parity.parse_steps(log) == [Step(10, (13,), 0, 4, (((13, 0.4),),))]


class TestParseRun:
    def test_prompt_and_generated_text_from_stdout(self):
        stdout = b"\n\n<s> hello world slow\x15Tk\n\n\n\n"
        assert parity.split_output(stdout, b"<s> hello world") == (b"<s> hello world", b" slow\x15Tk")

    def test_counters_and_prompt_length(self):
        stderr = b"\n".join([called(39, 0), accepted(0, 0, 5), b"0.00 I n_drafted = 34", b"0.00 I n_accept  = 11"])
        run = parity.parse_run(b"\n\n<s> a b\n\n\n\n", stderr, b"<s> a")
        assert (run.n_prompt, run.text, run.counters) == (40, b" b", {"n_drafted": 34, "n_accept": 11})


def run(*steps, text=b"abc", n_prompt=10):
    return Run(tuple(steps), text, n_prompt, b"<s>")


class TestCompare:
    def test_equal_runs_match_and_the_budget_0_step_is_left_out(self):
        ours = [Step(9, (1, 2), 1, 3, tops(1, 2)), Step(11, (4,), 0, 5, tops(4))]
        # with 4 tokens to generate the step at 9 + 3 = 12 has no budget: llama.cpp drafts anyway
        theirs = [*ours, Step(12, (6, 7), 2, 8, tops(6, 7))]
        v = parity.compare("mtp", 2, run(*theirs), run(*ours, Step(12, (), 0, 9)), n_tokens=4)
        assert (v.compared, v.matching, v.same_candidates, v.drafted, v.accepted) == (2, 2, 2, (3, 3), (1, 1))
        assert v.ok and v.first_mismatch is None

    def test_the_first_different_draft_is_named(self):
        theirs = run(Step(9, (1, 2), 0, 3, tops(1, 2)), Step(10, (4,), 0, 5, tops(4)))
        ours = run(Step(9, (1, 2), 0, 3, tops(1, 2)), Step(10, (6,), 0, 5, tops(6)))
        v = parity.compare("mtp", 2, theirs, ours, n_tokens=64)
        assert (v.matching, v.ok) == (1, False)
        assert v.first_mismatch["pos"] == 10 and v.first_mismatch["step"] == 1
        assert v.first_mismatch["localspec"]["drafted"] == (6,)

    def test_a_step_on_one_side_only_is_a_mismatch(self):
        v = parity.compare("hybrid", 1, run(Step(9, (1,), 0, 3)), run(Step(9, (1,), 0, 3), Step(10, (), 0, 4)), 64)
        assert (v.compared, v.matching) == (2, 1)
        assert v.first_mismatch["llama.cpp"] is None

    def test_the_same_tokens_with_other_probabilities_match_tokens_only(self):
        theirs = run(Step(9, (1,), 0, 3, (((1, 0.5), (2, 0.3), (3, 0.1)),)))
        ours = run(Step(9, (1,), 0, 3, (((1, 0.5004), (2, 0.31), (3, 0.1)),)))  # 0.31: off by 0.01
        v = parity.compare("mtp", 1, theirs, ours, 64)
        assert (v.matching, v.same_candidates, v.ok) == (1, 0, False)

    @pytest.mark.parametrize(
        "ours, same",
        [
            (((1, 0.5004), (3, 0.0755), (2, 0.0754)), True),  # tied runners-up swapped by another CPU's sums
            (((1, 0.5004), (2, 0.0755), (4, 0.0750)), True),  # the last shown: its runner-up is not shown
            (((2, 0.5004), (1, 0.0755), (3, 0.0754)), False),  # the top swapped with a runner-up far below it
            (((1, 0.5004), (2, 0.0775), (3, 0.0754)), False),  # a p off by 0.0015
        ],
    )
    def test_a_tie_may_swap_ranks_and_nothing_else(self, ours, same):
        theirs = ((1, 0.5), (2, 0.076), (3, 0.075))
        assert parity.same_top(theirs, ours) is same

    @pytest.mark.parametrize(
        "theirs_text, ours_text, same",
        [
            (b"abcd", b"abc", True),  # llama.cpp runs past the budget
            (b"abd", b"abc", False),
            (b"abc", b"", False),  # nothing generated is no evidence
        ],
    )
    def test_text(self, theirs_text, ours_text, same):
        v = parity.compare(
            "mtp", 1, run(Step(9, (), 0, 1), text=theirs_text), run(Step(9, (), 0, 1), text=ours_text), 64
        )
        assert v.text_same is same

    def test_an_unknown_target_token_is_not_compared(self):
        assert parity.same(Step(9, (1,), 0, None), Step(9, (1,), 0, 7))
        assert not parity.same(Step(9, (1,), 0, 6), Step(9, (1,), 0, 7))
        assert not parity.same(Step(9, (1,), 0, 7), None)


class TestTopCandidates:
    def test_softmax_over_the_ten_best(self):
        logits = np.full(40, -50.0, dtype=np.float32)
        logits[[3, 8]] = [2.0, 2.0 - np.log(3.0)]  # p 3:1 between the two, the rest ~0
        got = parity.top_candidates(logits)
        assert [t for t, _ in got] == [3, 8, 0]
        assert got[0][1] == pytest.approx(0.75, abs=1e-4) and got[1][1] == pytest.approx(0.25, abs=1e-4)


class TestReplayAligned:
    def test_no_draft_after_a_partial_acceptance_only(self):
        c = parity.ReplayAligned(CostModel(), 3)
        assert c.choose().k == 3
        c.observe(3, 1)  # partial: llama.cpp replays, which adds one target token
        assert c.choose().k == 0
        c.observe(0, 0)
        assert c.choose().k == 3
        c.observe(3, 3)  # all kept: no replay
        assert c.choose().k == 3

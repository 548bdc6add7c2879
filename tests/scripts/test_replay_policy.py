"""scripts/replay_policy.py, the policy replay: a recorded greedy reply through the real engine,
timed on a virtual clock from the measured curve, with the draft's rows memoised."""

import math

import numpy as np
import pytest

from localspec.core import costs as costs_module
from localspec.core.costs import CostModel, DraftCost, VerifyCurve
from localspec.core.modes import ModeContext, ReplySpec, draft_model, target_alone
from localspec.core.sampling import SamplingParams
from tests.support.fakes import FakeModel, hashed_logits, oracle_greedy
from tests.support.scripts import load_script

replay_policy = load_script("replay_policy")

V = 40
PROMPT = [3, 4, 5, 6]
CURVE = {n: 1.0 + 0.05 * (n - 1) for n in range(1, 18)}


class Forbidden(FakeModel):
    def _decode(self, tokens, start, n_logits):
        raise AssertionError("the memo should have answered")


def run(mode_name, target_fn, draft_model_, memo, monkeypatch):
    clock = replay_policy.Clock(0.0, 0)
    monkeypatch.setattr(costs_module, "clock", clock)
    reply = oracle_greedy(target_fn, PROMPT, 24)
    target = replay_policy.ReplayTarget(FakeModel(target_fn, V), CURVE, clock)
    target.true = PROMPT + reply
    draft = replay_policy.MemoDraft(draft_model_, 0.2, 0.05, clock, memo)
    ctx = ModeContext(target, draft, CostModel(VerifyCurve(CURVE), DraftCost(0.2)), draft_max=8)
    mode = target_alone(ctx) if mode_name == "none" else draft_model(ctx)
    engine = mode.engine(target, ReplySpec(len(PROMPT)))
    steps = list(engine.generate(list(PROMPT), SamplingParams(), 24))
    return reply, steps, clock


def test_the_replayed_target_gives_the_recorded_reply_whatever_the_draft(monkeypatch):
    target_fn = hashed_logits(1, V)
    drafts = FakeModel(hashed_logits(2, V), V)  # another model: most drafts are wrong
    reply, steps, _ = run("draft", target_fn, drafts, {}, monkeypatch)
    assert [t for s in steps for t in s.emitted] == reply
    assert sum(len(s.drafted) for s in steps) > 0


def test_the_target_alone_costs_t1_a_token_on_the_virtual_clock(monkeypatch):
    target_fn = hashed_logits(1, V)
    reply, steps, _ = run("none", target_fn, FakeModel(target_fn, V), {}, monkeypatch)
    assert sum(s.step_seconds for s in steps) == pytest.approx(len(reply) * CURVE[1])


def test_a_second_replay_reads_the_draft_from_the_memo_with_the_same_top_token(monkeypatch):
    target_fn = hashed_logits(1, V)
    memo: dict = {}
    _, first, _ = run("draft", target_fn, FakeModel(target_fn, V), memo, monkeypatch)
    assert memo
    _, again, _ = run("draft", target_fn, Forbidden(target_fn, V), memo, monkeypatch)
    assert [s.drafted for s in again] == [s.drafted for s in first]
    ids, logits, lse = next(iter(memo.values()))
    assert len(ids) == replay_policy.TOP and np.all(logits <= lse)


def test_another_machine_s_shape_at_this_recording_s_pace():
    curve = {n: 0.2 * (1.0 + 0.05 * (n - 1)) for n in range(1, 8)}
    shaped, t_draft = replay_policy.reshape(curve, 0.05, [1.6, 1.8, 2.0], 0.3)
    assert shaped[1] == pytest.approx(0.2) and shaped[2] == pytest.approx(0.32) and shaped[4] == pytest.approx(0.4)
    assert shaped[6] == pytest.approx(0.2 * 2.4)  # past the shape: its last step, 0.2, per token
    assert t_draft == pytest.approx(0.06)
    assert replay_policy.reshape(curve, 0.05, [1.6], None)[1] == 0.05  # the recording's own draft pass


def test_a_burst_slows_the_target_evaluations_it_spans_and_the_draft_passes_among_them():
    clock = replay_policy.Clock(0.0, 0, burst=(2, 3, 2.0))
    target = replay_policy.ReplayTarget(FakeModel(hashed_logits(1, V), V), CURVE, clock)
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
def test_a_malformed_burst_says_what_it_wants(text):
    with pytest.raises(Exception, match="START,LENGTH,FACTOR"):
        replay_policy.parse_burst(text)


def test_a_burst_parses_to_its_three_numbers():
    assert replay_policy.parse_burst("8,12,1.6") == (8, 12, 1.6)


def memo_row(top: int, p: float):
    """A memoised draft row whose top token is ``top`` at probability ``p`` (the rest elsewhere)."""
    logits = np.array([math.log(p), math.log((1 - p) / 2)], np.float32)
    return (np.array([top, top + 1]), logits, 0.0)


def test_first_token_runs_count_the_accepted_prefix_by_the_first_token_s_confidence():
    prompt, reply = [1, 2], [10, 11, 12, 13, 14, 15]
    # the draft's top token: right at positions 0-2, wrong at 3, right after; sure except at 0
    guesses = {0: (10, 0.5), 1: (11, 0.99), 2: (12, 0.99), 3: (99, 0.99), 4: (14, 0.99), 5: (15, 0.99)}
    memo = {replay_policy.memo_key(prompt + reply[:i]): memo_row(*guesses[i]) for i in range(len(reply))}
    rows = replay_policy.first_token_runs([{"prompt": prompt, "reply": reply}], memo, n=4)
    by_bin = {r["confidence"]: r for r in rows}
    unsure = by_bin[(0.4, 0.6)]  # position 0: three accepted before the miss at 3
    assert unsure["n"] == 1 and unsure["mean_accepted"] == 3 and unsure["all_accepted"] == 0
    assert unsure["look_ahead"] == pytest.approx(0.5 + 0.25 + 0.125 + 0.0625)
    sure = by_bin[(0.95, 1.0)]  # position 1: 11, 12 then the miss (positions 2+ lack 4 rows after them)
    assert sure["n"] == 1 and sure["mean_accepted"] == 2


def test_unsure_positions_count_the_reply_s_token_as_the_draft_s_first_or_second_choice():
    prompt, reply = [1, 2], [10, 11, 12, 13]
    # memo_row's second choice is top + 1: position 0 first (unsure), 1 second (unsure), 2 neither
    # (unsure), 3 sure and so not counted
    guesses = {0: (10, 0.5), 1: (10, 0.4), 2: (50, 0.3), 3: (13, 0.9)}
    memo = {replay_policy.memo_key(prompt + reply[:i]): memo_row(*guesses[i]) for i in range(len(reply))}
    counted = replay_policy.unsure_choices([{"prompt": prompt, "reply": reply}], memo)
    assert counted["n"] == 3 and counted["first"] == pytest.approx(1 / 3) and counted["second"] == pytest.approx(1 / 3)
    assert replay_policy.unsure_choices([{"prompt": prompt, "reply": reply}], {})["n"] == 0


def test_positions_the_memo_lacks_are_left_out():
    prompt, reply = [1], [10, 11, 12, 13, 14]
    memo = {replay_policy.memo_key(prompt + reply[:i]): memo_row(10 + i, 0.99) for i in (0, 1, 2)}  # 3 lacks its row
    assert replay_policy.first_token_runs([{"prompt": prompt, "reply": reply}], memo, n=4) == []


def test_runs_pick_a_kind_of_text_by_prompt_id_patterns():
    prompts = [{"id": i} for i in ("code-lru", "edit-js", "explain-gil", "held-explain-hash", "held-edit-guards-py")]

    def ids(picked):
        return [p["id"] for p in picked]

    assert ids(replay_policy.select(prompts)) == [p["id"] for p in prompts]
    code = ["code-lru", "edit-js", "held-edit-guards-py"]
    assert ids(replay_policy.select(prompts, "code-*,edit-*,held-edit-*")) == code
    assert ids(replay_policy.select(prompts, "*explain-*", skip="held-explain-hash")) == ["explain-gil"]
    assert replay_policy.select(prompts, "summary-*") == []


def test_a_tree_keeps_the_second_choice_s_branch_and_pays_its_passes_and_rows():
    prompt, reply = [1, 2], [10, 11, 12, 13, 14]
    # the top token: right at 0, wrong at 1 (unsure; its second choice, 11, is right), right after
    guesses = {0: (10, 0.99), 1: (10, 0.4), 2: (12, 0.99), 3: (13, 0.99), 4: (14, 0.99)}
    memo = {replay_policy.memo_key(prompt + reply[:i]): memo_row(*guesses[i]) for i in range(len(reply))}
    rows = replay_policy.memo_rows(memo)
    assert replay_policy.walk(rows, prompt, reply, 0, 4, None) == (1, 4, 5)  # linear: 10 kept, 11 missed
    # the tree: 10, then the second branch 11 12 13 (its first token from the same row, no pass)
    assert replay_policy.walk(rows, prompt, reply, 0, 4, 0.6) == (4, 6, 8)
    assert replay_policy.walk(rows, prompt, reply, 0, 4, 0.3) == (1, 4, 5)  # nothing under 0.3: linear
    wrong_both = dict(memo) | {replay_policy.memo_key(prompt + reply[:1]): memo_row(50, 0.4)}
    assert replay_policy.walk(replay_policy.memo_rows(wrong_both), prompt, reply, 0, 4, 0.6) == (
        1,
        6,
        8,
    )  # rows paid, nothing kept


def test_a_tree_pays_where_rows_are_free_and_loses_where_they_cost_a_pass():
    prompt, reply = [1, 2], [10, 11, 12, 13, 14, 15, 16, 17, 18]
    guesses = {i: (reply[i], 0.99) for i in range(len(reply))} | {1: (10, 0.4), 5: (10, 0.4)}  # 11, 15: second choices
    memo = {replay_policy.memo_key(prompt + reply[:i]): memo_row(*guesses[i]) for i in range(len(reply))}
    p = {"prompt": prompt, "reply": reply}
    flat = replay_policy.tree_speedups(p, replay_policy.memo_rows(memo), lambda n: 1.0, 0.1, 4, 0.6, batched=0.1)
    steep = replay_policy.tree_speedups(p, replay_policy.memo_rows(memo), lambda n: float(n), 0.5, 4, 0.6, batched=1.0)
    assert flat[1] > flat[0] and steep[1] < steep[0]
    sure = {
        k: memo_row(reply[i], 0.99)
        for i, k in enumerate(replay_policy.memo_key(prompt + reply[:i]) for i in range(len(reply)))
    }
    same = replay_policy.tree_speedups(
        p, replay_policy.memo_rows(sure), lambda n: 1.0 + 0.1 * n, 0.1, 4, 0.6, batched=1.0
    )
    assert same[0] == pytest.approx(same[1])  # no unsure token: the tree is the linear draft


def test_a_row_the_memo_lacks_is_computed_by_the_draft_and_kept():
    with pytest.raises(SystemExit, match="give --draft"):
        replay_policy.walk(replay_policy.memo_rows({}), [1], [10, 11], 0, 1, 0.6)
    target_fn = hashed_logits(3, V)
    memo: dict = {}
    rows = replay_policy.memo_rows(memo, FakeModel(target_fn, V))
    top = int(np.argmax(target_fn([1])))
    assert replay_policy.walk(rows, [1], [top, 5], 0, 1, None) == (1, 1, 2)
    assert replay_policy.memo_key([1]) in memo

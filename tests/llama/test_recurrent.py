"""Hybrid caches rolled back without a new prefill: tiny qwen35 models (gated delta-net layers
beside full attention, as Qwen3.5/3.6 have) that the tests write, F32 weights (exact identity).

A delta-net layer keeps one recurrent state, so dropping rejected drafts means going back to an
earlier state: from the verify's snapshots (llama.cpp's ``n_rs_seq``), or from a checkpoint
(``llama/recurrent.py``). Every case checks greedy output against the target alone, and that no
evaluation after the prompt's re-reads the conversation."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from localspec.chat.session import LoadOptions, PairSpec, Session
from localspec.core.drafters import ModelDrafter, NoDrafter
from localspec.core.options import MAX_DRAFT
from localspec.llama import recurrent
from localspec.llama.backend import LlamaModel
from localspec.llama.recurrent import Checkpoint, Rollback
from tests.support.forced import GREEDY, generate
from tests.support.hybrid_gguf import write_tiny_qwen35
from tests.support.tiny_gguf import write_tiny_gguf

TEXT = "the model is fast and the draft is slow; def x = 1 + 2 hello world"
SNAPSHOTS = 4  # the target's n_rs_seq here: drafts longer than this need a checkpoint


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("hybrid")
    return {
        "target": write_tiny_qwen35(d / "target.gguf", seed=1),
        # the target plus noise: agrees often, not always, so drafts are accepted and rejected
        "draft": write_tiny_qwen35(d / "draft.gguf", seed=2, noise_of=1, noise=0.15),
        "llama_draft": write_tiny_gguf(d / "llama.gguf", seed=3, n_ctx=2048),
    }


class Recorder:
    """Every evaluation a model makes from now on: (first position, tokens) of each llama_decode
    on its context, whatever it was for (rows read, greedy tokens picked, or a replay)."""

    def __init__(self, monkeypatch, model: LlamaModel) -> None:
        import llama_cpp as L

        self.calls: list[tuple[int, int]] = []
        decode = L.llama_decode

        def recorded(ctx, batch):
            if ctx is model.ctx:
                self.calls.append((int(batch.pos[0]), int(batch.n_tokens)))
            return decode(ctx, batch)

        monkeypatch.setattr(L, "llama_decode", recorded)

    def longest_after(self, position: int) -> int:
        return max((n for start, n in self.calls if start >= position), default=0)


@pytest.fixture
def target(files):
    m = LlamaModel.load(files["target"], n_ctx=2048, threads=1, snapshots=SNAPSHOTS)
    yield m
    m.close()


@pytest.fixture
def draft(files):
    m = LlamaModel.load(files["draft"], n_ctx=2048, threads=1)
    yield m
    m.close()


class TestTheTinyHybrid:
    def test_it_is_hybrid_and_its_cache_cannot_drop_a_tail_by_itself(self, files):
        plain = LlamaModel.load(files["target"], n_ctx=512, threads=1)
        try:
            assert plain.rollback_depth == 0 and plain.rollback is not None
            plain.evaluate(plain.tokenize(TEXT), 1)
            import llama_cpp as L

            memory = L.llama_get_memory(plain.ctx)
            assert not L.llama_memory_seq_rm(memory, 0, 5, -1)  # what the old code re-prefilled on
        finally:
            plain.close()

    def test_snapshots_are_what_was_asked_for(self, target):
        assert target.rollback_depth == SNAPSHOTS


class TestGreedyIdentity:
    @pytest.mark.parametrize("k", [1, 3, SNAPSHOTS, SNAPSHOTS + 3])
    def test_forced_drafting_with_rejections_is_the_target_alone(self, target, draft, monkeypatch, k):
        prompt = target.tokenize(TEXT)
        expected, _ = generate(target, NoDrafter(), 0, prompt)
        target.truncate(0)
        rec = Recorder(monkeypatch, target)
        got, steps = generate(target, ModelDrafter(draft, target.n_vocab), k, prompt)
        assert got == expected
        drafted = sum(len(s.drafted) for s in steps)
        accepted = sum(s.n_accepted for s in steps)
        assert drafted > 0 and 0 < accepted < drafted  # rejections happened, and acceptances
        # no evaluation after the prompt's reads more than a verify: rejections re-read nothing
        assert 0 < rec.longest_after(len(prompt)) <= k + 1
        assert target.rollback.prefills == 0 and draft.rollback.prefills == 0

    def test_drafts_past_the_snapshots_roll_back_by_checkpoint(self, target, draft):
        prompt = target.tokenize(TEXT)
        generate(target, ModelDrafter(draft, target.n_vocab), SNAPSHOTS + 3, prompt)
        assert target.rollback.restores > 0  # (a draft model's passes always need one)
        assert draft.rollback.restores > 0

    def test_drafts_within_the_snapshots_need_no_checkpoint(self, target, draft):
        prompt = target.tokenize(TEXT)
        generate(target, ModelDrafter(draft, target.n_vocab), SNAPSHOTS, prompt)
        assert target.rollback.restores == 0

    def test_a_hybrid_draft_beside_an_attention_target(self, files, draft):
        target = LlamaModel.load(files["llama_draft"], n_ctx=2048, threads=1)
        try:
            prompt = target.tokenize(TEXT)
            expected, _ = generate(target, NoDrafter(), 0, prompt)
            target.truncate(0)
            got, _ = generate(target, ModelDrafter(draft, target.n_vocab), 5, prompt)
            assert got == expected
            assert draft.rollback.prefills == 0
        finally:
            target.close()

    def test_the_context_nearly_full(self, files, draft):
        target = LlamaModel.load(files["target"], n_ctx=256, threads=1, snapshots=SNAPSHOTS)
        try:
            prompt = (target.tokenize(TEXT) * 12)[:200]
            expected, _ = generate(target, NoDrafter(), 0, prompt, n=200)
            target.truncate(0)
            got, steps = generate(target, ModelDrafter(draft, target.n_vocab), 6, prompt, n=200)
            assert got == expected
            assert steps[-1].finish == "context" and len(prompt) + len(got) >= 255
        finally:
            target.close()


class TestSession:
    """Across turns, on regenerate: the app's path (Session.chat), hybrid target and draft."""

    @pytest.fixture
    def pair(self, files):
        options = LoadOptions(n_ctx=2048, threads=1, adaptive=False, draft_max=6)
        alone = Session.load(PairSpec(files["target"]), options)
        both = Session.load(PairSpec(files["target"], files["draft"]), options)
        yield alone, both
        alone.close()
        both.close()

    def reply(self, session, messages):
        steps = list(session.chat(messages, GREEDY, 40))
        return [t for s in steps for t in s.emitted], "".join(s.text for s in steps)

    def test_turns_and_regenerate_are_the_target_alone(self, pair, monkeypatch):
        alone, both = pair
        turn1 = [{"role": "user", "content": "hello world"}]
        first, text = self.reply(both, turn1)
        assert first == self.reply(alone, turn1)[0]
        turn2 = turn1 + [{"role": "assistant", "content": text}, {"role": "user", "content": "def x = 1 + 2"}]
        second, _ = self.reply(both, turn2)
        assert second == self.reply(alone, turn2)[0]
        assert sum(len(s.drafted) for s in both.chat(turn2, GREEDY, 40)) > 0  # it drafted
        rec = Recorder(monkeypatch, both.target)
        again, _ = self.reply(both, turn2)  # regenerate: the same conversation once more
        assert again == second
        # the prompt is not read again (the prefill's checkpoint is restored): every
        # evaluation is a verify, of at most draft_max + 1 tokens, or a copy's of MAX_DRAFT + 1
        assert len(both.prompt_tokens(turn2)) > MAX_DRAFT + 1
        assert max(n for _, n in rec.calls) <= MAX_DRAFT + 1
        assert both.target.rollback.prefills == 0 and both.draft.rollback.prefills == 0


class TestRefusedStates:
    """Where llama.cpp will not copy a checkpoint out, or put one back: each rollback that
    needed it evaluates the kept tokens again (the reply is still the target's), and the model
    counts it and logs the first as a warning."""

    @pytest.mark.parametrize(
        "call, count, says",
        [
            ("llama_state_seq_get_data_ext", "failed_saves", "llama.cpp could not copy out the recurrent state after "),
            ("llama_state_seq_set_data_ext", "failed_restores", "llama.cpp refused the recurrent state saved after "),
        ],
    )
    def test_it_is_counted_logged_and_prefilled(self, target, draft, monkeypatch, caplog, call, count, says):
        prompt = target.tokenize(TEXT)
        expected, _ = generate(target, NoDrafter(), 0, prompt)
        target.truncate(0)
        monkeypatch.setattr(recurrent.L, call, lambda *args: 0)  # llama.cpp's "0 bytes"
        with caplog.at_level(logging.WARNING, logger="localspec.llama.recurrent"):
            got, _ = generate(target, ModelDrafter(draft, target.n_vocab), SNAPSHOTS + 3, prompt)
        assert got == expected
        for model in (target, draft):
            assert model.rollback is not None
            assert getattr(model.rollback, count) > 1 and model.rollback.prefills > 0
        warnings = [r.getMessage() for r in caplog.records]
        assert len(warnings) == 2 and all(w.startswith(says) for w in warnings)  # the first of each model's

    def test_none_in_a_normal_run(self, target, draft):
        generate(target, ModelDrafter(draft, target.n_vocab), SNAPSHOTS + 3, target.tokenize(TEXT))
        for model in (target, draft):
            assert model.rollback is not None
            assert (model.rollback.failed_saves, model.rollback.failed_restores) == (0, 0)


class TestRollbackPlan:
    """Which rollbacks the snapshots reach: only within the latest evaluation, never all of it."""

    def plan(self, evaluations, n_cached, keep, snapshots=4):
        r = Rollback(ctx=None, snapshots=snapshots)
        for start, n in evaluations:
            r.evaluated(start, n)
        return r.by_snapshot(n_cached, keep)

    def test_a_verify_drops_its_rejected_drafts_by_snapshot(self):
        assert self.plan([(0, 50), (50, 5)], 55, 51)  # kept the pending token, dropped 4

    def test_never_the_whole_evaluation(self):
        assert not self.plan([(0, 50), (50, 5)], 55, 50)  # the state before it is not kept

    def test_not_past_the_snapshots(self):
        assert not self.plan([(0, 50), (50, 9)], 59, 51, snapshots=4)

    def test_not_after_one_token_passes(self):
        # a draft model's passes: each evaluation holds one token, so none can be dropped
        assert not self.plan([(0, 50), (50, 1), (51, 1), (52, 1)], 53, 51)

    def test_not_twice_without_an_evaluation_between(self):
        r = Rollback(ctx=None, snapshots=4)
        r.evaluated(50, 5)
        assert r.by_snapshot(55, 53)
        r.dropped(53)
        assert not r.by_snapshot(53, 52)

    def test_the_latest_checkpoint_at_or_before(self):
        r = Rollback(ctx=None, snapshots=0)
        r.checkpoints = [Checkpoint(n, bytearray()) for n in (10, 40, 60)]
        assert r.latest(50).n_tokens == 40
        assert r.latest(5) is None
        r.dropped(45)
        assert [c.n_tokens for c in r.checkpoints] == [10, 40]


def test_logits_match_one_token_at_a_time(files):
    """The delta-net's chunked (batch) kernel and its one-token one agree closely enough that
    greedy identity holds; a sanity check on the tiny model's numerics."""
    m = LlamaModel.load(files["target"], n_ctx=512, threads=1)
    try:
        ids = m.tokenize(TEXT)[:12]
        batch = [np.array(r) for r in m.evaluate(ids, len(ids))]
        m.truncate(0)
        single = [np.array(m.evaluate([t], 1)[0]) for t in ids]
        assert max(float(np.abs(a - b).max()) for a, b in zip(batch, single)) < 1e-3
        assert [int(np.argmax(a)) for a in batch] == [int(np.argmax(b)) for b in single]
    finally:
        m.close()


class TestStateSize:
    """The recurrent state's size, read from the file's header, against llama.cpp's own."""

    def test_the_header_gives_llama_cpps_state_size(self, files, target):
        import llama_cpp as L

        from localspec.llama import ggufinfo

        expected = ggufinfo.state_bytes(files["target"])
        assert expected == 3 * 4 * ((4 - 1) * (64 + 2 * 2 * 16) + 16 * 64)  # 3 delta-net layers
        target.evaluate(target.tokenize("hello"), 1)  # (an empty cache has no state to size)
        got = L.llama_state_seq_get_size_ext(target.ctx, 0, 1)  # PARTIAL_ONLY: the recurrent part
        assert expected <= got <= expected * 1.01  # (plus llama.cpp's few bytes of bookkeeping)

"""Drafts from past replies on tiny real GGUFs: a reply is kept, a new session drafts the same
reply from it, and the output stays the target's own."""

import numpy as np
import pytest

from localspec.chat.history import HistoryStore
from localspec.chat.replies import LEAD_IN
from localspec.chat.session import LoadOptions, PairSpec, Session
from localspec.core.costs import CostModel
from localspec.core.sampling import SamplingParams
from localspec.core.stats import RunStats

GREEDY = SamplingParams(temperature=0.0)
ASK = [{"role": "user", "content": "write the function again"}]


def load(tiny_pair, store, draft=False, profiles=None, **kw):
    opts = LoadOptions(n_ctx=512, threads=1, **kw)
    return Session.load(PairSpec(tiny_pair[0], tiny_pair[1] if draft else None), opts, profiles=profiles, history=store)


def reply(session, mode, n=40) -> tuple[list[int], RunStats]:
    stats, tokens = RunStats(), []
    for step in session.chat(ASK, GREEDY, n, mode=mode):
        stats.add(step)
        tokens += step.emitted
    return tokens, stats


class TestHistoryDrafts:
    @pytest.mark.parametrize("mode", ["lookup", "draft"])
    def test_a_new_session_drafts_a_regenerated_reply_from_the_history_and_stays_the_targets(
        self, tiny_pair, tmp_path, mode
    ):
        store = HistoryStore(tmp_path / "history")
        first = load(tiny_pair, store, draft=mode == "draft")
        try:
            ref, _ = reply(first, "none")  # the target alone's reply, now kept
        finally:
            first.close()
        assert sum(s.replies for s in store.summary()) == 1
        # lookup without adaptation: every step proposes what the suffix matches say, whatever
        # this (busy) machine times; draft mode's copies need its adaptive gate
        again = load(tiny_pair, store, draft=mode == "draft", adaptive=mode == "draft")
        try:
            got, stats = reply(again, mode)
            line = again.drafting_state(mode).line
            assert "past repl" not in again.drafting_state("none").line  # the target alone reads none
        finally:
            again.close()
        # the regenerate was the same reply: kept once
        assert line.endswith("the context and 1 past reply") or "the context and 1 past reply still" in line
        assert got == ref
        assert stats.accepted_by_source.get("history", 0) >= len(ref) // 2
        assert stats.tokens_per_pass > 2

    def test_an_answer_given_twice_is_copied_whole_from_the_first_step_in_a_new_session(
        self, tiny_pair, tmp_path, monkeypatch
    ):
        import localspec.chat.session as session_module

        store = HistoryStore(tmp_path / "history")
        firsts, replies = [], []
        monkeypatch.setattr(session_module, "recheck", lambda *args, **kwargs: False)  # never timed again
        for _ in range(3):  # each a new process: a fresh gate, at Laplace's trust
            s = load(tiny_pair, store)
            # costs written out, not timed (a busy machine's flat curve would let Laplace's
            # trust propose more): a verify row costs 0.3 of T(1), so at trust 1/2 one token pays
            s.costs = CostModel({n: 0.7 + 0.3 * n for n in (1, 2, 4, 8, 16, 33)})
            try:
                steps = list(s.chat(ASK, GREEDY, 40, mode="lookup"))
            finally:
                s.close()
            firsts.append(steps[0])
            replies.append([t for step in steps for t in step.emitted])
        assert replies[0] == replies[1] == replies[2]  # the target's own, every time
        # given once, an answer is no promise (a batched verify may part from it at a near-tie):
        # the gate's trust proposes a token or two; given twice, it is copied as far as a verify pays
        assert len(firsts[1].drafted) <= 2
        assert firsts[2].source == "history" and len(firsts[2].drafted) >= 4

    def test_no_history_reads_and_writes_nothing(self, tiny_pair, tmp_path):
        store = HistoryStore(tmp_path / "history")
        s = load(tiny_pair, store, history=False)
        try:
            assert s.replies is None
            reply(s, "lookup")
        finally:
            s.close()
        assert store.summary() == [] and not any((tmp_path / "history").rglob("*.npz"))

    def test_replies_of_two_tokenizers_are_kept_apart(self, tiny_pair, tmp_path):
        store = HistoryStore(tmp_path / "history")
        s = load(tiny_pair, store)
        try:
            reply(s, "none", 8)
            key = s.replies.key
        finally:
            s.close()
        assert [x.key for x in store.summary()] == [key]
        assert store.load("0" * 16)[0] == ()


class TestADamagedHistory:
    def test_an_id_past_the_vocabulary_is_set_aside_and_the_reply_goes_on(self, tiny_pair, tmp_path):
        """Issue 66: one id of a kept reply changed to 4,000,000,000 (past the vocabulary, below
        the separator) stopped every reply on that tokenizer sizing a table by it (29.8 GiB)."""
        store = HistoryStore(tmp_path / "history")
        first = load(tiny_pair, store)
        try:
            ref, _ = reply(first, "none")
            folder, n_vocab = store.folder(first.replies.key), first.target.n_vocab
        finally:
            first.close()
        path = folder / "recent.npz"
        with np.load(path) as z:
            arrays = {name: z[name] for name in z.files}
        arrays["tokens"][-2] = 4_000_000_000  # the kept reply's last token
        with open(path, "wb") as f:
            np.savez(f, **arrays)
        again = load(tiny_pair, store)
        try:
            (warning,) = again.replies.warnings
            got, _ = reply(again, "lookup")
        finally:
            again.close()
        assert f"token id 4000000000 is not in this tokenizer's vocabulary of {n_vocab:,}" in warning
        assert "set aside as recent.npz.bad-" in warning and got == ref
        assert [s.replies for s in store.summary()] == [1]  # this reply, kept anew


def target_p(s, ids, params):
    """The target alone's processed distribution after ``ids`` (from empty caches)."""
    import numpy as np

    from localspec.core.sampling import process

    s.reset()
    row = np.array(s.target.sync(ids, n_logits=1)[0])
    return process(row, ids[-max(params.repeat_last_n, 1) :], params)


def propose_every_step(s, store, ids, x, monkeypatch):
    """The history holds one reply, x x x after the prompt's last LEAD_IN tokens, and keeps no
    other, so x is every step's proposal."""
    store.add(s.replies.key, ids[-LEAD_IN:] + [x, x, x], 0.0)
    s.replies = type(s.replies)(store, s.replies.tokenizer)  # read the history again
    monkeypatch.setattr(s.replies, "keep", lambda prompt, reply, greedy: None)


def chi2(counts, p, n):
    """Pearson's statistic of ``n`` draws ``counts`` against ``p``; none may fall outside its support."""
    support = p > 0
    assert counts[~support].sum() == 0
    expected = p[support] * n
    return float((((counts[support] - expected) ** 2) / expected).sum())


class TestSampledHistoryDrafts:
    def test_the_first_token_keeps_the_targets_distribution(self, tiny_pair, tmp_path, monkeypatch):
        """A history draft is a deterministic proposal x (q one-hot): accepted with p(x), else the
        token is drawn from p without x. The first token through Session is then distributed as
        the target alone's p (chi-square over 600 seeds; p < 0.001 would fail)."""
        import numpy as np

        from localspec.chat.prompts import prompt_tokens

        store = HistoryStore(tmp_path / "history")
        s = load(tiny_pair, store, adaptive=False)  # no gate: every step proposes what the history says
        try:
            params = SamplingParams(temperature=1.5, top_k=8)
            ids = prompt_tokens(s.target, ASK)
            p_target = target_p(s, ids, params)
            x = int(np.argsort(p_target)[-2])  # the second most likely: rejected often, not always
            propose_every_step(s, store, ids, x, monkeypatch)
            counts, drafted = np.zeros(s.target.n_vocab), 0
            n = 600
            for seed in range(n):
                s.reset()
                steps = list(s.chat(ASK, params.model_copy(update={"seed": seed}), 2, "lookup", repeatable=False))
                drafted += sum(st.source == "history" for st in steps)
                counts[steps[0].emitted[0]] += 1
        finally:
            s.close()
        assert drafted == n  # the history's x was proposed every time
        statistic = chi2(counts, p_target, n)
        assert statistic < 24.3, (statistic, counts[p_target > 0], p_target[p_target > 0] * n)  # 7 dof: p < 0.001

    def test_a_copy_the_draft_model_extends_keeps_the_targets_distribution(self, tiny_pair, tmp_path, monkeypatch):
        """The history's x (q one-hot), then the draft model's token after it, drawn from its q,
        in one verify: the first token is distributed as the target alone's p, and the second,
        after x, as p after x (chi-square over 1,500 seeds; p < 0.001 would fail). The controller
        is made to extend every copy by one token, and the model to propose it: this tests the
        verify, not the choice."""
        from dataclasses import replace

        import numpy as np

        from localspec.chat.prompts import prompt_tokens
        from localspec.core.controller import AdaptiveController
        from localspec.core.rules import MarginalRule

        store = HistoryStore(tmp_path / "history")
        s = load(tiny_pair, store, draft=True)
        try:
            params = SamplingParams(temperature=1.5, top_k=8)
            ids = prompt_tokens(s.target, ASK)
            p_target = target_p(s, ids, params)
            x = int(np.argsort(p_target)[-1])  # the most likely: accepted often enough to test the second
            p_after = target_p(s, ids + [x], params)
            propose_every_step(s, store, ids, x, monkeypatch)

            def pick(self, copies, k, room=0):  # the match's first token, and one of the draft model's
                return (replace(copies[0], ids=copies[0].continuation[:1]), 1) if copies else (None, 0)

            monkeypatch.setattr(AdaptiveController, "pick", pick)
            monkeypatch.setattr(MarginalRule, "keep", lambda self, c: True)  # and the model proposes it
            first, second, extended = np.zeros(s.target.n_vocab), np.zeros(s.target.n_vocab), 0
            n = 1500
            for seed in range(n):
                s.reset()
                steps = list(s.chat(ASK, params.model_copy(update={"seed": seed}), 3, "draft", repeatable=False))
                extended += steps[0].extended == ("draft", 1) and steps[0].drafted[0] == x
                out = [t for st in steps for t in st.emitted]
                first[out[0]] += 1
                if out[0] == x:
                    second[out[1]] += 1
        finally:
            s.close()
        assert extended == n  # x, then the draft model's token, every time
        assert chi2(first, p_target, n) < 24.3  # 7 degrees of freedom: p < 0.001
        assert second.sum() > 200 and chi2(second, p_after, second.sum()) < 24.3


class Replay:
    """An engine that yields the steps it is given (``Session.chat`` counts what it yields)."""

    after_prefill = None
    drafter, copiers = None, ()  # a drafter of some kind: the session rechecks its costs

    def __init__(self, steps) -> None:
        self.steps = steps

    def generate(self, prompt, *args, **kwargs):
        yield from self.steps


class TestProfileUse:
    def test_copies_from_the_history_do_not_count_as_the_draft_models_acceptance(
        self, tiny_pair, tmp_path, monkeypatch
    ):
        """The pair's prior is what its draft model was accepted at: a regenerate's copies,
        accepted whole, must not make a draft that cannot pay look as if it could."""
        from localspec.core.engine import Step
        from localspec.models.profiles import ProfileStore

        fields = dict(drafted=(1, 2, 3), n_accepted=3, token=4, emitted=(1, 2, 3, 4), text="", model_k=3)
        times = dict(predicted_speedup=1.0, prefill_seconds=0.0, draft_seconds=0.0, verify_seconds=0.1)
        steps = [
            Step(**fields, **times, step_seconds=0.1, source=source, n_copied=n_copied)
            for source, n_copied in (("history", 3), ("context", 3), ("draft", 0))
        ]
        profiles = ProfileStore(tmp_path / "profiles.json")
        s = load(tiny_pair, HistoryStore(tmp_path / "history"), draft=True, profiles=profiles)
        try:
            monkeypatch.setattr(s, "engine", lambda *args, **kwargs: Replay(steps))
            list(s.chat(ASK, GREEDY, 12, mode="draft"))
            s.save_profile()
            use = profiles.get(s.profile_keys.target).use[str(tiny_pair[1].resolve())]  # the draft's, by its path
        finally:
            s.close()
        assert use.tokens == 12
        assert (use.drafted, use.accepted, use.rejected) == (3, 3, 0)  # the draft model's step alone

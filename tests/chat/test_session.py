"""Session behaviour on tiny real GGUFs: trimming long conversations, cancellation, prefix reuse."""

import shutil
from pathlib import Path

import pytest

from localspec.chat.session import ContextOverflow, LoadOptions, PairSpec, Session
from localspec.core.costs import CostModel
from localspec.core.sampling import SamplingParams
from localspec.models.profiles import ProfileStore
from tests.support.fakes import fixed_k

GREEDY = SamplingParams(temperature=0.0)


def load(tiny_pair, draft=True, profiles=None, **kw):
    opts = LoadOptions(n_ctx=kw.pop("n_ctx", 512), threads=1, **kw)
    return Session.load(PairSpec(tiny_pair[0], tiny_pair[1] if draft else None), opts, profiles=profiles)


def reply(session, msgs, n=12, mode=None):
    return "".join(s.text for s in session.chat(msgs, GREEDY, n, mode=mode))


def measured_at_load(monkeypatch, verify: dict[int, float], t_draft: float) -> None:
    """The next load's calibration measures ``verify`` (T(n), seconds) and a draft pass of
    ``t_draft`` seconds, as written, whatever this machine times."""
    import localspec.chat.session as session_module
    from localspec.core.costs import DraftCost, VerifyCurve

    monkeypatch.setattr(session_module, "calibrate", lambda *_, **__: (VerifyCurve(verify), DraftCost(t_draft)))


def fresh_reply(tiny_pair, msgs, n=12):
    """The same conversation evaluated from scratch by the target alone."""
    fresh = load(tiny_pair, draft=False)
    try:
        return reply(fresh, msgs, n)
    finally:
        fresh.close()


def long_history(turns=12):
    msgs = [{"role": "system", "content": "be brief"}]
    for i in range(turns):
        msgs += [
            {"role": "user", "content": f"question {i} " + "the model is fast " * 4},
            {"role": "assistant", "content": "the draft is slow " * 4},
        ]
    return msgs + [{"role": "user", "content": "last question"}]


class TestTrimming:
    def test_oldest_turns_dropped_system_kept(self, tiny_pair):
        s = load(tiny_pair)
        try:
            msgs = long_history()
            ids, kept = s.fit(msgs, 64)
            assert len(ids) + 64 <= s.target.n_ctx
            assert kept[0]["role"] == "system" and kept[-1] == msgs[-1]
            assert len(kept) < len(msgs)
            assert kept[1:] == msgs[len(msgs) - len(kept) + 1 :]  # a suffix of the history
        finally:
            s.close()

    def test_output_after_trim_equals_fresh_evaluation_of_trimmed_history(self, tiny_pair):
        s = load(tiny_pair)
        try:
            reply(s, long_history(3))  # warm caches with a different, earlier conversation
            msgs = long_history()
            got = reply(s, msgs)
            _, kept = s.fit(msgs, 12)
        finally:
            s.close()
        assert got == fresh_reply(tiny_pair, kept)

    def test_refuse_setting_raises_clear_error(self, tiny_pair):
        s = load(tiny_pair, overflow="refuse")
        try:
            with pytest.raises(ContextOverflow, match="raise the context size"):
                reply(s, long_history())
        finally:
            s.close()


class TestCancellation:
    @pytest.mark.parametrize("stop_after", [1, 3])
    def test_next_turn_after_cancel_equals_fresh_run(self, tiny_pair, stop_after):
        s = load(tiny_pair)
        msgs = [{"role": "user", "content": "hello world the model"}]
        try:
            gen = s.chat(msgs, GREEDY, 40, mode="draft")
            for i, _ in enumerate(gen):
                if i + 1 == stop_after:
                    break
            gen.close()  # Esc: stop iterating between steps
            follow = msgs + [{"role": "assistant", "content": "partial"}, {"role": "user", "content": "again"}]
            got = reply(s, follow, mode="draft")
        finally:
            s.close()
        assert got == fresh_reply(tiny_pair, follow)


class TestModes:
    def test_lookup_is_not_charged_for_draft_model_passes(self, tiny_pair):
        s = load(tiny_pair)
        try:
            assert s.costs.t_draft > 0
            assert s.engine("lookup").controller.costs.t_draft == 0.0
            assert s.engine("draft").controller.costs.t_draft == s.costs.t_draft
            assert s.engine("lookup").controller.costs.verify is s.engine("draft").controller.costs.verify
        finally:
            s.close()

    def test_draft_mode_copies_unless_told_not_to_and_keeps_its_gate_across_turns(self, tiny_pair):
        from localspec.cli import build_parser
        from localspec.cli.run import spec_and_options

        s = load(tiny_pair)
        try:
            (first,), (second,) = s.engine("draft").copiers, s.engine("draft").copiers
            assert first is not second and first.gate is second.gate and first.gate is not None
            assert first.gate.alpha(3) == 0.5  # copies start distrusted
            assert s.engine("draft").controller.draft_max == s.options.draft_max  # a copy's longest
        finally:
            s.close()
        args = build_parser().parse_args(["run", "x", "--target", "t.gguf", "--draft", "d.gguf", "--no-copy"])
        assert spec_and_options(args)[1].copy is False
        s = load(tiny_pair, copy=False)
        try:
            assert s.engine("draft").copiers == ()
        finally:
            s.close()

    def test_each_mode_configuration_keeps_a_controller_of_its_own(self, tiny_pair):
        from localspec.bench import modes as bench

        s = load(tiny_pair)
        try:
            bench.register_modes(s, ["fixed-k2-p0", "fixed-k4-p0", "draft:match"])
            k2, k4 = s.drafting("fixed-k2-p0").controller, s.drafting("fixed-k4-p0").controller
            assert (fixed_k(k2), fixed_k(k4)) == (2, 4)
            assert s.drafting("draft:match").controller is not s.drafting("draft").controller
            assert s.drafting("draft", draft_max=4).controller is not s.drafting("draft").controller
            assert s.drafting("draft").controller is s.engine("draft").controller  # kept across replies
            bench.register_modes(s, ["fixed-k2-p0"])  # the same configuration again: the same state
            assert s.drafting("fixed-k2-p0").controller is k2
            with pytest.raises(ValueError, match="unknown drafting mode 'fixed-k3-p0'"):
                s.engine("fixed-k3-p0")
        finally:
            s.close()

    def test_the_bench_s_modes_are_not_the_user_s_use(self, tiny_pair, tmp_path):
        from localspec.bench import modes as bench

        store = ProfileStore(tmp_path / "profiles.json")
        s = load(tiny_pair, profiles=store)

        def use():  # what the pair's profile has counted, by way of drafting
            s.save_profile()
            return store.get(s.profile_keys.target).use

        try:
            bench.register_modes(s, ["fixed-k2-p0"])
            msgs = [{"role": "user", "content": "hello"}]
            assert reply(s, msgs, mode="fixed-k2-p0") and use() == {}
            assert reply(s, msgs, mode="draft") and list(use()) == [str(tiny_pair[1].resolve())]
        finally:
            s.close()

    def test_a_reply_s_expected_length_is_what_this_target_s_replies_have_been(self, tiny_pair, tmp_path):
        store = ProfileStore(tmp_path / "profiles.json")
        s = load(tiny_pair, profiles=store)
        msgs = [{"role": "user", "content": "hello"}]
        try:
            assert reply(s, msgs, n=6)
            assert s.drafting("draft").controller.reading.n_reply == 6  # nothing known: max_tokens
            s.save_profile()
            use = store.get(s.profile_keys.target).use
            assert sum(u.replies for u in use.values()) == 1 and sum(u.tokens for u in use.values()) == 6
            assert s.expected_reply() == 6
            assert reply(s, msgs, n=40)
            assert s.drafting("draft").controller.reading.n_reply == 40  # asked for: what is asked
            list(s.chat(msgs, GREEDY, 40, expected_tokens=s.expected_reply()))
            assert s.drafting("draft").controller.reading.n_reply < 40  # none asked: the usual length
        finally:
            s.close()


class TestSeededReplies:
    """A sampled reply with a seed repeats, whatever the machine's timings do meanwhile: the
    speculative rule's random draws depend on each step's draft length, so those lengths must
    not follow the clock (modes.repeatable)."""

    SAMPLED = SamplingParams(temperature=0.9, top_p=0.95, seed=7)
    GPU_LIKE = {1: 1.0, 2: 1.0, 4: 1.0, 8: 1.0}  # T(n), seconds: verify rows free
    COMPUTE_BOUND = {n: float(n) for n in range(1, 9)}  # each row costs a whole pass
    MSGS = [{"role": "user", "content": "the model is fast and the draft"}]

    @staticmethod
    def jittery_clock(monkeypatch, seed):
        """Every reading of the engine's clock moves on by a random 0-50 ms: verify and draft
        times, and so any draft length picked from them, change from run to run."""
        import random

        from localspec.core import costs

        rng, now = random.Random(seed), [0.0]

        def clock():
            now[0] += rng.uniform(0.0, 0.05)
            return now[0]

        monkeypatch.setattr(costs, "clock", clock)

    def replies(self, session, monkeypatch, **kw):
        out, drafted = [], 0
        for jitter in (1, 2, 3):
            self.jittery_clock(monkeypatch, jitter)
            steps = list(session.chat(self.MSGS, self.SAMPLED, 24, **kw))
            out.append([t for s in steps for t in s.emitted])
            drafted += sum(len(s.drafted) for s in steps)
        return out, drafted

    def test_the_same_seed_gives_the_same_reply(self, tiny_pair, monkeypatch):
        # a GPU-like curve measured at load (verify rows free, a cheap draft) makes the seeded
        # mode draft, though the live costs say drafting does not pay now
        measured_at_load(monkeypatch, self.GPU_LIKE, t_draft=0.01)
        s = load(tiny_pair, draft_max=4)
        try:
            s.costs = CostModel(self.COMPUTE_BOUND, t_draft=0.5)
            (first, *others), drafted = self.replies(s, monkeypatch)
            assert all(o == first for o in others) and len(first) == 24
            assert fixed_k(s.engine(repeatable=True).controller) == 4 and drafted > 0
        finally:
            s.close()

    def test_no_adapt_drafts_the_users_length_with_a_seed_too(self, tiny_pair, monkeypatch):
        # a compute-bound curve at load: the seeded form of auto mode would draft nothing, but
        # --no-adapt is the user's k
        measured_at_load(monkeypatch, self.COMPUTE_BOUND, t_draft=0.5)
        s = load(tiny_pair, draft_max=3, adaptive=False)
        try:
            assert fixed_k(s.engine(repeatable=True).controller) == 3
            steps = list(s.chat(self.MSGS, self.SAMPLED, 24))
            assert all(len(x.drafted) == 3 for x in steps[:10]) and s.drafting_state().line.startswith("on: k=3")
        finally:
            s.close()

    def test_the_drafting_line_of_a_seeded_reply_says_what_it_drafts(self, tiny_pair, monkeypatch):
        measured_at_load(monkeypatch, self.GPU_LIKE, t_draft=0.01)
        s = load(tiny_pair, draft_max=4)
        try:
            s.costs = CostModel(self.COMPUTE_BOUND, t_draft=0.5)  # live: drafting does not pay now
            state = s.drafting_state(params=self.SAMPLED)
            assert state.line == "on: k=4 every step (fixed for a seeded reply, as the costs measured at load chose)"
            assert not s.drafting_state(params=GREEDY).line.endswith(
                "seeded reply, as the costs measured at load chose)"
            )
        finally:
            s.close()

    def test_repeatable_draft_length_is_the_choice_of_the_costs_measured_at_load(self, tiny_pair):
        s = load(tiny_pair, draft_max=4)
        try:
            at_load = fixed_k(s.engine(repeatable=True).controller)
            for _ in range(3):  # replies move the live costs; the seeded choice stays put
                list(s.chat(self.MSGS, GREEDY, 12))
            assert fixed_k(s.engine(repeatable=True).controller) == at_load
        finally:
            s.close()


class TestFilesChangedWhileLoaded:
    """The loaded models answer whatever happens to their files meanwhile (a re-download, a
    moved models folder): the pair is keyed in the profiles once, at load."""

    def test_replies_after_the_models_folder_moved_away(self, tiny_pair, tmp_path):
        folder = tmp_path / "models"
        folder.mkdir()
        target, draft = (Path(shutil.copy(f, folder / f.name)) for f in tiny_pair)  # tiny_pair's own stay put
        how = str(draft.resolve())  # the draft's use is counted under its path as loaded
        store = ProfileStore(tmp_path / "profiles.json")
        s = Session.load(PairSpec(target, draft), LoadOptions(n_ctx=512, threads=1), profiles=store)
        msgs = [{"role": "user", "content": "hello"}]
        try:
            folder.rename(tmp_path / "moved")
            # the first reply builds its mode's drafting (the prior from the profile); a server
            # request with its own longest draft builds another
            steps = [*s.chat(msgs, GREEDY, 12), *s.chat(msgs, GREEDY, 12, draft_max=2)]
        finally:
            s.close()
        assert len(steps) >= 2 and all(x.emitted for x in steps)
        # and what they measured is kept under the pair as it was loaded
        assert store.get(s.profile_keys.target).use[how].tokens == sum(len(x.emitted) for x in steps)

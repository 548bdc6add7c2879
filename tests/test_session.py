"""Session behaviour on tiny real GGUFs: trimming long conversations, cancellation, prefix reuse."""

import pytest
from tiny_gguf import write_tiny_gguf

from localspec.core.sampling import SamplingParams
from localspec.session import ContextOverflow, LoadOptions, PairSpec, Session

GREEDY = SamplingParams(temperature=0.0)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    d = tmp_path_factory.mktemp("gguf")
    return (
        write_tiny_gguf(d / "t.gguf", seed=0, n_ctx=512),
        write_tiny_gguf(d / "d.gguf", seed=1, noise_of=0, noise=0.6, n_ctx=512),
    )


def load(pair, draft=True, **kw):
    opts = LoadOptions(n_ctx=kw.pop("n_ctx", 512), threads=1, **kw)
    return Session.load(PairSpec(pair[0], pair[1] if draft else None), opts)


def reply(session, msgs, n=12, mode=None):
    return "".join(s.text for s in session.chat(msgs, GREEDY, n, mode=mode))


def fresh_reply(pair, msgs, n=12):
    """The same conversation evaluated from scratch by the target alone."""
    fresh = load(pair, draft=False)
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
    def test_oldest_turns_dropped_system_kept(self, pair):
        s = load(pair)
        try:
            msgs = long_history()
            ids, kept = s.fit(msgs, 64)
            assert len(ids) + 64 <= s.target.n_ctx
            assert kept[0]["role"] == "system" and kept[-1] == msgs[-1]
            assert len(kept) < len(msgs)
            assert kept[1:] == msgs[len(msgs) - len(kept) + 1 :]  # a suffix of the history
        finally:
            s.close()

    def test_output_after_trim_equals_fresh_evaluation_of_trimmed_history(self, pair):
        s = load(pair)
        try:
            reply(s, long_history(3))  # warm caches with a different, earlier conversation
            msgs = long_history()
            got = reply(s, msgs)
            _, kept = s.fit(msgs, 12)
        finally:
            s.close()
        assert got == fresh_reply(pair, kept)

    def test_refuse_setting_raises_clear_error(self, pair):
        s = load(pair, overflow="refuse")
        try:
            with pytest.raises(ContextOverflow, match="raise the context size"):
                reply(s, long_history())
        finally:
            s.close()


class TestCancellation:
    @pytest.mark.parametrize("stop_after", [1, 3])
    def test_next_turn_after_cancel_equals_fresh_run(self, pair, stop_after):
        s = load(pair)
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
        assert got == fresh_reply(pair, follow)


class TestModes:
    def test_lookup_is_not_charged_for_draft_model_passes(self, pair):
        s = load(pair)
        try:
            assert s.costs.t_draft > 0
            assert s.engine("lookup").controller.costs.t_draft == 0.0
            assert s.engine("draft").controller.costs.t_draft == s.costs.t_draft
            assert s.engine("lookup").controller.costs.verify is s.engine("draft").controller.costs.verify
        finally:
            s.close()

    def test_draft_mode_copies_unless_told_not_to_and_keeps_its_gate_across_turns(self, pair):
        from localspec.cli import build_parser
        from localspec.cli.run import spec_and_options

        s = load(pair)
        try:
            first, second = s.engine("draft").drafter, s.engine("draft").drafter
            assert first.lookup is not None and first.lookup.gate is second.lookup.gate
            assert first.lookup.gate.alpha(3) == 0.5  # copies start distrusted
            assert s.engine("draft").drafter.max_copy == s.options.max_k
        finally:
            s.close()
        args = build_parser().parse_args(["run", "x", "--target", "t.gguf", "--draft", "d.gguf", "--no-copy"])
        assert spec_and_options(args)[1].copy is False
        s = load(pair, copy=False)
        try:
            assert s.engine("draft").drafter.lookup is None
        finally:
            s.close()

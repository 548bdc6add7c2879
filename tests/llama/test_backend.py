"""The real llama.cpp path on tiny GGUF files the tests write (F32 weights: exact identity)."""

import json

import numpy as np
import pytest

from localspec.chat.session import IncompatiblePair, LoadOptions, PairSpec, Session
from localspec.core.drafters import ModelDrafter, NoDrafter
from localspec.core.protocol import Argmax, ContextFull
from localspec.core.sampling import SamplingParams
from localspec.core.suffix import SuffixDrafter
from localspec.llama.backend import (
    MAX_LOGIT_ROWS,
    BackendError,
    ChatTemplateError,
    LlamaModel,
    ModelLoadError,
    supports_gpu_offload,
)
from localspec.llama.compat import check_compatible
from tests.support.forced import generate
from tests.support.tiny_gguf import write_no_vocab_gguf, write_tiny_gguf

GREEDY = SamplingParams(temperature=0.0)
TEXT = "the model is fast and the draft is slow; def x = 1 + 2 안녕 세계 😀"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("gguf")
    return {
        "target": write_tiny_gguf(d / "target.gguf", seed=0, n_ctx=2048),
        # the target plus noise: agrees often, not always (a realistic draft)
        "draft": write_tiny_gguf(d / "draft.gguf", seed=1, noise_of=0, noise=0.6, n_ctx=2048),
        "other": write_tiny_gguf(d / "other.gguf", seed=2, n_ctx=2048),
        "big_vocab": write_tiny_gguf(d / "big.gguf", seed=3, extra_pieces=200),
        "renamed": write_tiny_gguf(d / "renamed.gguf", seed=4, rename={270: "▁zzz"}),
        "other_eos": write_tiny_gguf(d / "eos.gguf", seed=5, eos=1),
    }


@pytest.fixture(scope="module")
def target(tiny):
    m = LlamaModel.load(tiny["target"], n_ctx=2048, threads=1)
    yield m
    m.close()


class TestGreedyIdentity:
    @pytest.mark.parametrize("k", [2, 5])
    def test_draft_model_matches_target_only(self, tiny, target, k):
        prompt = target.tokenize(TEXT)
        expected, _ = generate(target, NoDrafter(), 0, prompt)
        draft = LlamaModel.load(tiny["draft"], n_ctx=2048, threads=1)
        try:
            got, steps = generate(target, ModelDrafter(draft, target.n_vocab, p_min=0.0), k, prompt)
        finally:
            draft.close()
        assert got == expected
        n_drafted = sum(len(s.drafted) for s in steps)
        n_accepted = sum(s.n_accepted for s in steps)
        assert 0 < n_accepted < n_drafted  # the noisy draft is partly right: a real test of rollback

    def test_lookup_matches_target_only(self, target):
        prompt = target.tokenize(TEXT * 3)
        expected, _ = generate(target, NoDrafter(), 0, prompt)
        got, _ = generate(target, SuffixDrafter(), 6, prompt)
        assert got == expected

    def test_target_as_its_own_draft_accepts_everything(self, tiny, target):
        prompt = target.tokenize(TEXT)
        same = LlamaModel.load(tiny["target"], n_ctx=2048, threads=1)
        try:
            _, steps = generate(target, ModelDrafter(same, target.n_vocab, p_min=0.0), 4, prompt, n=40)
        finally:
            same.close()
        drafted = sum(len(s.drafted) for s in steps)
        assert drafted > 0 and sum(s.n_accepted for s in steps) == drafted


class Sampler:
    """Whether a backend sampler is attached to ``model``'s context, as llama.cpp is told
    (``llama_set_sampler``) from now on: a model just loaded has none."""

    def __init__(self, monkeypatch, model: LlamaModel) -> None:
        import llama_cpp as L

        self.attached = False
        set_sampler = L.llama_set_sampler

        def told(ctx, seq_id, chain):
            ok = set_sampler(ctx, seq_id, chain)
            if ctx is model.ctx:
                self.attached = chain is not None and bool(ok)
            return ok

        monkeypatch.setattr(L, "llama_set_sampler", told)


class TestGreedyPickedByLlamaCpp:
    """Where the logits are computed on a GPU, a greedy verify without a repetition penalty
    reads each row's argmax as llama.cpp's backend sampling picked it (no logits reach Python);
    everything else reads the rows. The CPU build here runs the same llama.cpp path when asked."""

    @pytest.fixture(autouse=True)
    def picking(self, target):
        target.can_pick = True
        yield
        target.can_pick = False

    @pytest.fixture
    def fresh(self, tiny, monkeypatch):
        """A target just loaded, asked to pick, and the sampler llama.cpp is told it has."""
        m = LlamaModel.load(tiny["target"], n_ctx=2048, threads=1)
        m.can_pick = True
        yield m, Sampler(monkeypatch, m)
        m.close()

    def test_a_cpu_build_reads_the_rows(self, tiny, monkeypatch):
        if supports_gpu_offload():
            pytest.skip("a GPU build: the logits are computed on the device, and picked there")
        m = LlamaModel.load(tiny["target"], n_ctx=2048, threads=1)
        sampler = Sampler(monkeypatch, m)
        try:
            assert not m.can_pick  # nothing to save on a CPU, and the buffers would cost
            assert m.settle == 0  # no graph to re-capture: T(1) is timed among the other sizes
            ids = m.tokenize(TEXT)
            assert isinstance(m.sync_greedy(ids[:12], n_logits=3), Argmax) and not sampler.attached
        finally:
            m.close()

    def test_picked_tokens_are_the_rows_argmax_and_the_modes_alternate(self, fresh):
        target, sampler = fresh
        ids = target.tokenize(TEXT * 2)
        target.sync_greedy(ids[:20])  # a prefill in the picking mode
        picked = target.sync_greedy(ids[:37], n_logits=17)  # a verify of 16 drafts
        assert sampler.attached and not isinstance(picked, Argmax)  # this build picks on its backend when asked
        target.truncate(20)
        rows = target.sync(ids[:37], n_logits=17)  # the same verify, rows read (the sampler detached)
        assert not sampler.attached
        assert list(picked) == [int(np.argmax(r)) for r in rows]
        target.truncate(20)
        again = target.sync_greedy(ids[:37], n_logits=17)
        assert sampler.attached and list(again) == list(picked)  # and on again

    def test_a_reply_is_the_same_picked_or_read(self, tiny, target):
        # the identity of a greedy reply through either path, on a noisy draft (rollbacks)
        prompt = target.tokenize(TEXT)
        target.truncate(0)
        picked, _ = generate(target, NoDrafter(), 0, prompt)
        target.truncate(0)
        target.can_pick = False  # as on a CPU, or where llama.cpp refuses a backend sampler
        read, _ = generate(target, NoDrafter(), 0, prompt)
        draft = LlamaModel.load(tiny["draft"], n_ctx=2048, threads=1)
        try:
            target.truncate(0)
            read_drafted, _ = generate(target, ModelDrafter(draft, target.n_vocab, p_min=0.0), 4, prompt)
            target.can_pick = True
            target.truncate(0)
            picked_drafted, _ = generate(target, ModelDrafter(draft, target.n_vocab, p_min=0.0), 4, prompt)
        finally:
            draft.close()
        assert picked == read == read_drafted == picked_drafted

    def test_a_repetition_penalty_reads_the_rows(self, fresh):
        target, sampler = fresh
        prompt = target.tokenize(TEXT)
        generate(target, NoDrafter(), 0, prompt, n=8)
        assert sampler.attached
        target.truncate(0)
        penalised = SamplingParams(temperature=0.0, repeat_penalty=1.3)
        generate(target, NoDrafter(), 0, prompt, n=8, params=penalised)
        assert not sampler.attached  # llama.cpp's greedy sampler knows no penalty
        target.truncate(0)
        generate(target, NoDrafter(), 0, prompt, n=8)
        assert sampler.attached


class TestCache:
    def test_rollback_then_continue_equals_fresh_evaluation(self, tiny, target):
        ids = target.tokenize(TEXT)
        target.truncate(0)
        target.evaluate(ids[:10], 1)
        target.evaluate(ids[10:20], 3)  # speculative tokens...
        target.truncate(12)  # ...mostly rejected
        rolled = np.array(target.evaluate(ids[12:25], 1)[0])
        fresh_model = LlamaModel.load(tiny["target"], n_ctx=2048, threads=1)
        try:
            fresh = np.array(fresh_model.evaluate(ids[:25], 1)[0])
        finally:
            fresh_model.close()
        np.testing.assert_allclose(rolled, fresh, rtol=1e-4, atol=1e-4)
        assert int(rolled.argmax()) == int(fresh.argmax())

    def test_prompt_longer_than_one_batch(self, target):
        ids = target.tokenize(TEXT * 30)
        assert len(ids) > 600
        target.truncate(0)
        target.sync(ids[:-1])
        assert target.cached == ids[:-1]


class TestText:
    def test_korean_and_emoji_round_trip_through_token_bytes(self, target):
        ids = target.tokenize("안녕 세계 😀", add_bos=False)
        assert b"".join(target.token_bytes(t) for t in ids).decode() == " 안녕 세계 😀"


class TestCompatibility:
    def test_pair_of_same_vocab_is_compatible(self, tiny, target):
        other = LlamaModel.load(tiny["other"], n_ctx=256, threads=1)
        try:
            assert check_compatible(target.vocab_info(), other.vocab_info()).ok
        finally:
            other.close()

    @pytest.mark.parametrize(
        "name,fragment",
        [
            ("big_vocab", "vocab sizes differ"),
            ("renamed", "different text"),
            ("other_eos", "EOS differs"),
        ],
    )
    def test_incompatible_pair_is_refused_with_reason(self, tiny, name, fragment):
        spec = PairSpec(tiny["target"], tiny[name])
        with pytest.raises(IncompatiblePair) as e:
            Session.load(spec, LoadOptions(n_ctx=256, threads=1))
        assert fragment in str(e.value)

    def test_missing_and_non_gguf_files(self, tmp_path):
        with pytest.raises(ModelLoadError, match="no such file"):
            LlamaModel.load(tmp_path / "nope.gguf")
        bad = tmp_path / "bad.gguf"
        bad.write_bytes(b"not a gguf at all" * 10)
        with pytest.raises(ModelLoadError, match="could not load"):
            LlamaModel.load(bad)


class TestPreconditions:
    """Each call that could reach a llama.cpp assert (an abort: exit status 134, no message) is
    checked first and raises instead (issue 12)."""

    @pytest.mark.parametrize("n_ctx", [16, 300])
    def test_a_context_below_or_off_256_keeps_n_batch_above_any_single_decode(self, tiny, n_ctx):
        # llama.cpp caps n_batch at the n_ctx it is asked for and pads its cache to a multiple
        # of 256: asked for 300 it had n_batch 300 and 512 cells, and a 400-token prompt aborted
        m = LlamaModel.load(tiny["target"], n_ctx=n_ctx, threads=1)
        try:
            assert m.n_ctx == n_ctx and m.n_batch >= 256
            ids = m.tokenize(TEXT * 10)[:n_ctx]
            m.evaluate(ids, 1)  # the whole context in one call: chunked at n_batch
            assert len(m.cached) == n_ctx
            with pytest.raises(ContextFull):
                m.evaluate(ids[:1], 1)
        finally:
            m.close()

    def test_more_logit_rows_than_reserved_is_an_error_not_an_abort(self, target):
        target.truncate(0)
        with pytest.raises(BackendError, match="logit rows"):
            target.evaluate([5] * 100, n_logits=MAX_LOGIT_ROWS + 1)
        assert target.cached == []
        assert len(target.evaluate([5] * 100, n_logits=MAX_LOGIT_ROWS)) == MAX_LOGIT_ROWS
        target.truncate(0)

    @pytest.mark.parametrize("bad", [-1, 10**6])
    def test_token_ids_outside_the_vocabulary(self, target, bad):
        target.truncate(0)
        with pytest.raises(BackendError, match="outside the vocabulary"):
            target.evaluate([5, bad, 6], 1)
        for read in (target.token_bytes, target.token_text):  # std::vector::at would throw through C
            with pytest.raises(BackendError, match="outside the vocabulary"):
                read(bad)
        assert target.cached == []

    def test_threads_beyond_the_machine_are_clamped(self, tiny):
        import llama_cpp as L

        from localspec.core.options import usable_cpus

        m = LlamaModel.load(tiny["target"], n_ctx=256, threads=999)
        try:
            assert L.llama_n_threads(m.ctx) == usable_cpus()
        finally:
            m.close()

    def test_a_device_is_not_a_file(self):
        with pytest.raises(ModelLoadError, match="/dev/null: not a regular file"):
            LlamaModel.load("/dev/null")

    def test_a_model_without_a_tokenizer_is_refused_at_load(self, tmp_path):
        with pytest.raises(ModelLoadError, match="no tokenizer"):
            LlamaModel.load(write_no_vocab_gguf(tmp_path / "novocab.gguf"), n_ctx=64, threads=1)

    def test_a_failing_chat_template_is_a_clear_error(self, tmp_path, capsys):
        from localspec.cli import main

        path = write_tiny_gguf(tmp_path / "t.gguf", seed=0, chat_template="{{ raise_exception('nope') }}")
        m = LlamaModel.load(path, n_ctx=256, threads=1)
        try:
            with pytest.raises(ChatTemplateError, match="chat template failed.*nope.*--raw"):
                m.apply_chat_template([{"role": "user", "content": "hi"}])
        finally:
            m.close()
        # the prompt is checked (so the template rendered) as soon as the target loads
        with pytest.raises(SystemExit) as exit_:
            main(["run", "--target", str(path), "--threads", "1", "--ctx", "256", "hi"])
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert "chat template failed" in err and len(err.strip().splitlines()) == 1
        assert (
            main(["run", "--target", str(path), "--threads", "1", "--ctx", "256", "--raw", "--max-tokens", "4", "hi"])
            == 0
        )


class TestSession:
    def test_chat_turns_reuse_the_prefix(self, tiny):
        s = Session.load(PairSpec(tiny["target"], tiny["draft"]), LoadOptions(n_ctx=1024, threads=1))
        try:
            msgs = [{"role": "user", "content": "hello world"}]
            reply = "".join(st.text for st in s.chat(msgs, GREEDY, 20))
            first_len = len(s.target.cached)
            msgs += [{"role": "assistant", "content": reply}, {"role": "user", "content": "more"}]
            steps = list(s.chat(msgs, GREEDY, 5))
            assert len(s.target.cached) > first_len
            assert steps[0].prefill_seconds >= 0
            # identical to a fresh session's answer to the same history
            fresh = Session.load(PairSpec(tiny["target"]), LoadOptions(n_ctx=1024, threads=1))
            try:
                assert [st.text for st in fresh.chat(msgs, GREEDY, 5)] != [] and "".join(
                    st.text for st in fresh.chat(msgs, GREEDY, 5)
                ) == "".join(st.text for st in steps)
            finally:
                fresh.close()
        finally:
            s.close()


class TestCli:
    def test_run_json(self, tiny, capsys):
        from localspec.cli import main

        rc = main(
            [
                "run",
                "--target",
                str(tiny["target"]),
                "--draft",
                str(tiny["draft"]),
                "--threads",
                "1",
                "--ctx",
                "512",
                "--max-tokens",
                "16",
                "--json",
                "hello",
            ]
        )
        assert rc == 0
        out = json.loads(capsys.readouterr().out)
        for key in (
            "text",
            "n_tokens",
            "tokens_per_second",
            "acceptance_rate",
            "tokens_per_pass",
            "draft_length",
            "draft_seconds",
            "verify_seconds",
            "mode",
        ):
            assert key in out
        assert out["mode"] == "draft" and out["n_tokens"] == 16

    def test_run_streams_text_and_stats_line(self, tiny, capsys):
        from localspec.cli import main

        rc = main(
            [
                "run",
                "--target",
                str(tiny["target"]),
                "--lookup",
                "--threads",
                "1",
                "--ctx",
                "512",
                "--max-tokens",
                "8",
                "--raw",
                "hello hello hello",
            ]
        )
        captured = capsys.readouterr()
        assert rc == 0 and "tok/s" in captured.err and "[lookup]" in captured.err

    def test_missing_file_exits_nonzero_with_message(self, tmp_path, capsys):
        from localspec.cli import main

        with pytest.raises(SystemExit) as e:
            main(["run", "--target", str(tmp_path / "missing.gguf"), "hi"])
        assert e.value.code == 2 and "no such file" in capsys.readouterr().err


class TestCheckIdentity:
    """``localspec run --check-identity``: the target alone runs too, and the first divergence
    (with the target's top-2 logit gap there) is reported; without the flag nothing is said."""

    def run_json(self, tiny, capsys, *extra) -> dict:
        from localspec.cli import main

        argv = ["run", "--target", str(tiny["target"]), "--draft", str(tiny["draft"]), "--threads", "1"]
        assert main([*argv, "--ctx", "512", "--max-tokens", "24", "--json", *extra, "hello world"]) == 0
        return json.loads(capsys.readouterr().out)

    def test_greedy_f32_reply_is_identical_and_says_so(self, tiny, capsys):
        out = self.run_json(tiny, capsys, "--check-identity", "--no-adapt", "--draft-max", "3")
        assert out["identity"] == {"identical": True, "n_tokens": out["n_tokens"], "first_divergence": None}
        assert out["n_drafted"] > 0  # the reply drafted: the check compared two ways of decoding

    def test_without_the_flag_nothing_is_claimed(self, tiny, capsys):
        assert "identity" not in self.run_json(tiny, capsys)

    def test_sampling_is_refused_before_any_load(self, tiny, capsys):
        from localspec.cli import main

        assert main(["run", "--target", str(tiny["target"]), "--temp", "0.7", "--check-identity", "hi"]) == 2
        assert "--check-identity compares greedy replies" in capsys.readouterr().err

    def test_a_divergence_names_its_token_and_gap(self, tiny):
        session = Session.load(PairSpec(tiny["target"]), LoadOptions(n_ctx=512, threads=1))
        try:
            msgs = [{"role": "user", "content": "hello world"}]
            ref = [t for s in session.chat(msgs, GREEDY, 8) for t in s.emitted]
            got = ref[:3] + [(ref[3] + 1) % session.target.n_vocab] + ref[4:]
            where = session.divergence(msgs, ref, got)
            assert where["index"] == 3 and where["gap"] >= 0
            assert session.divergence(msgs, ref, ref) is None
            assert session.divergence(msgs, ref, ref[:5]) == {"index": 5, "gap": None}
        finally:
            session.close()

    @pytest.mark.parametrize(
        "gap, says", [(0.01, "a near-tie"), (2.5, "not a near-tie"), (None, "a prefix of the other")]
    )
    def test_the_line_says_what_the_gap_means(self, gap, says):
        from localspec.cli.run import identity_line

        line = identity_line({"identical": False, "n_tokens": 9, "first_divergence": {"index": 4, "gap": gap}})
        assert "at token 4" in line and says in line

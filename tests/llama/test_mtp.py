"""Drafting with the target's own next-token-prediction layer (MTP), on tiny qwen35 models with an
MTP block that the tests write (F32 weights: exact identity). The block is built to agree with
the target often but not always, and only when it reads the target's hidden states
(``hybrid_gguf``), so steps accept some drafts and reject others."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from localspec.chat.session import LoadOptions, PairSpec, Session
from localspec.core.drafters import ModelDrafter, NoDrafter
from localspec.core.sampling import SamplingParams, process
from localspec.llama.backend import BackendError, LlamaModel, ModelLoadError
from localspec.llama.log import llama_errors
from localspec.llama.mtp import MtpModel, add_entry, heads_note
from tests.support.forced import GREEDY, acceptance, beside_target_alone, generate
from tests.support.hybrid_gguf import write_tiny_qwen35
from tests.support.states import WRONG, feed_wrong, token_embeddings

TEXT = "hello world def code the model is fast"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("mtp")
    return {
        # layers that add enough to the embedding that the target sometimes leaves its cycle
        "mtp": write_tiny_qwen35(d / "mtp.gguf", seed=1, mtp=True, residual=1.2),
        "plain": write_tiny_qwen35(d / "plain.gguf", seed=1),
        # the key without the block's tensors: what a conversion that dropped them writes
        "no_block": write_tiny_qwen35(d / "no-block.gguf", seed=1, mtp=True, mtp_tensors=False),
        "two_heads": write_tiny_qwen35(d / "two-heads.gguf", seed=1, mtp=2, residual=0.2),
    }


@pytest.fixture
def pair(files):
    target = LlamaModel.load(files["mtp"], n_ctx=1024, threads=1, snapshots=4, mtp=True)
    mtp = MtpModel(target)
    yield target, mtp
    mtp.close()
    target.close()


class TestGreedy:
    @pytest.mark.parametrize("k", [1, 3, 6])
    def test_forced_drafting_is_the_target_alone(self, pair, k):
        target, mtp = pair
        expected, got, drafted, accepted = beside_target_alone(
            target, ModelDrafter(mtp, target.n_vocab), k, target.tokenize(TEXT)
        )
        assert got == expected
        assert 0 < accepted < drafted  # some drafts kept, some rejected and rolled back

    def test_accepted_and_rejected_are_counted_against_the_target_alone(self, pair):
        target, mtp = pair
        prompt = target.tokenize(TEXT)
        expected, _ = generate(target, NoDrafter(), 0, prompt, n=80)
        target.truncate(0)
        _, steps = generate(target, ModelDrafter(mtp, target.n_vocab), 4, prompt, n=80)
        at = 0  # reply tokens before this step
        for s in steps:
            if s.finish and not s.emitted:
                break
            kept = expected[at : at + len(s.drafted)]
            # n_accepted is the length of the draft's agreement with what the target says
            agree = next((i for i, (a, b) in enumerate(zip(s.drafted, kept)) if a != b), len(kept))
            assert s.n_accepted == min(agree, len(s.drafted))
            assert s.token == (expected[at + s.n_accepted] if at + s.n_accepted < len(expected) else s.token)
            at += len(s.emitted)

    def test_the_mtp_cache_keeps_only_what_the_target_kept(self, pair):
        """After rejections the MTP block reads the target's context as a block that never
        drafted does: its cache keeps only entries made from the target's states, for the
        target's tokens (a draft's entries, made from the block's own state, are read again,
        and a rejected draft leaves nothing behind)."""
        target, mtp = pair
        prompt = target.tokenize(TEXT)
        _, steps = generate(target, ModelDrafter(mtp, target.n_vocab), 5, prompt)
        assert any(s.n_accepted < len(s.drafted) for s in steps)  # rejections happened
        context = list(target.cached)
        after = np.array(mtp.sync(context, n_logits=1)[0])
        fresh = MtpModel(target)
        try:
            never_drafted = np.array(fresh.sync(context, n_logits=1)[0])
        finally:
            fresh.close()
        assert np.abs(after - never_drafted).max() < 1e-4  # (batched and one at a time: ~1e-7 apart)

    def test_drafts_repeat_from_a_fresh_cache(self, pair):
        """A draft depends only on the context (the target's states and the tokens), not on
        what the MTP cache held before: the parity with llama.cpp rests on this."""
        target, mtp = pair
        prompt = target.tokenize(TEXT)
        _, first = generate(target, ModelDrafter(mtp, target.n_vocab), 3, prompt)
        target.truncate(0)
        mtp.truncate(0)
        _, again = generate(target, ModelDrafter(mtp, target.n_vocab), 3, prompt)
        assert [s.drafted for s in first] == [s.drafted for s in again]


class TestTheTargetsStates:
    """The block drafts from the target's state before each position: from the right ones most
    drafts are kept, from zeros, the state one position earlier or another layer's hardly any
    (this fixture keeps about 0.8 and under 0.05 of them: the bounds leave a wide margin)."""

    def test_from_the_right_states_most_drafts_are_kept(self, pair):
        target, mtp = pair
        drafter = ModelDrafter(mtp, target.n_vocab, p_min=0.0)
        assert acceptance(target, drafter, 3, target.tokenize(TEXT)) >= 0.6

    @pytest.mark.parametrize("how", WRONG)
    def test_from_wrong_states_hardly_any_are(self, files, pair, monkeypatch, how):
        target, mtp = pair
        feed_wrong(monkeypatch, how, target, token_embeddings(files["mtp"]))
        drafter = ModelDrafter(mtp, target.n_vocab, p_min=0.0)
        assert acceptance(target, drafter, 3, target.tokenize(TEXT)) <= 0.2


class TestMissingStates:
    def test_positions_the_target_evaluated_before_the_mtp_layer_draft_from_zeros_and_say_so(self, files, caplog):
        """The target's states are kept from the MTP layer's load on: positions evaluated
        before have none. Their passes read zeros (the drafts are guesses, the reply is still
        the target's), and the count and a warning say so."""
        target = LlamaModel.load(files["mtp"], n_ctx=1024, threads=1, snapshots=4, mtp=True)
        prompt = target.tokenize(TEXT)
        expected, _ = generate(target, NoDrafter(), 0, prompt)
        mtp = MtpModel(target)  # the target's cache holds the prompt and a reply, no states
        try:
            with caplog.at_level(logging.WARNING, logger="localspec.llama.mtp"):
                got, _ = generate(target, ModelDrafter(mtp, target.n_vocab), 3, prompt)
            assert got == expected
            assert mtp.zero_states > 0
            assert [r.getMessage() for r in caplog.records] == [
                "mtp.gguf (MTP): no hidden state of the target at position 0 (evaluated before the "
                "MTP layer was loaded?): drafting from zeros there"
            ]  # once, however many passes
        finally:
            mtp.close()
            target.close()

    def test_a_fresh_pair_never_drafts_from_zeros(self, pair):
        target, mtp = pair
        generate(target, ModelDrafter(mtp, target.n_vocab), 4, target.tokenize(TEXT))
        assert mtp.zero_states == 0


class TestBatchChecks:
    def test_a_token_llama_cpp_refuses_is_an_error_that_says_why(self, pair):
        import llama_cpp as L

        target, mtp = pair
        h, pos = np.zeros(mtp.n_embd, dtype=np.float32), (L.llama_pos * 4)()
        batch = L.llama_batch_ext_init(target.ctx)  # (the block evaluates one of these on its own context)
        says = f"refused token {target.n_vocab} at position 0: the token is invalid"
        try:
            with pytest.raises(BackendError, match=says):
                add_entry(mtp.name, batch, target.n_vocab, 0, h, pos, output=True)
        finally:
            L.llama_batch_ext_free(batch)


class TestSeveralHeads:
    """llama.cpp's qwen35 MTP graph takes one block (GGML_ASSERT: the process aborts on two);
    step35, mimo2 and hy_v3 take any of several, and localspec drafts with the first."""

    def test_a_qwen35_file_with_two_mtp_layers_is_refused_not_aborted(self, files):
        # in a child process: were the check gone, llama.cpp's abort would end this run
        code = textwrap.dedent(f"""
            from localspec.llama.backend import LlamaModel, ModelLoadError
            from localspec.llama.mtp import MtpModel
            target = LlamaModel.load({str(files["two_heads"])!r}, n_ctx=256, threads=1, mtp=True)
            try:
                MtpModel(target)
            except ModelLoadError as e:
                print(e)
        """)
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr[-2000:]
        assert "has 2 MTP layers; llama.cpp's qwen35 MTP drafts with exactly one" in run.stdout

    @pytest.mark.parametrize(
        "arch, heads, says",
        [
            ("qwen35", 1, None),
            ("step35", 1, None),
            ("step35", 3, "m.gguf has 3 MTP layers (heads); localspec drafts every position with the first"),
            ("mimo2", 2, "m.gguf has 2 MTP layers (heads); localspec drafts every position with the first"),
        ],
    )
    def test_several_heads_draft_with_the_first_and_say_so(self, arch, heads, says):
        note = heads_note("m.gguf", arch, heads)
        assert (note if note is None else note.split(", where")[0]) == says

    @pytest.mark.parametrize("arch", ["qwen35", "qwen35moe", "glm4moe", "deepseek2"])
    def test_several_heads_where_llama_cpp_takes_one_are_refused(self, arch):
        with pytest.raises(ModelLoadError, match=f"has 2 MTP layers; llama.cpp's {arch} MTP drafts with exactly one"):
            heads_note("m.gguf", arch, 2)


class TestFilesWithoutTheirMtpTensors:
    """A qwen35 file that declares an MTP layer (``nextn_predict_layers``) without its tensors:
    llama.cpp refuses it, with MTP on or off, naming the first tensor it missed."""

    @pytest.mark.parametrize("mtp", [False, True])
    def test_the_load_names_the_missing_tensor(self, files, mtp):
        with pytest.raises(ModelLoadError) as e:
            LlamaModel.load(files["no_block"], n_ctx=256, threads=1, mtp=mtp)
        message = str(e.value)
        # llama.cpp's own reason, then which MTP tensors the file lacks and what to do
        assert "could not load this file (error loading model: check_tensor_dims: " in message
        assert "tensor 'blk.4.attn_norm.weight' not found)" in message
        assert "declares 1 MTP layer (qwen35.nextn_predict_layers = 1) but lacks its tensors (" in message

    @pytest.mark.parametrize("flags", [["--no-draft"], []])
    def test_the_cli_says_why_with_or_without_drafting(self, files, capsys, flags):
        from localspec.cli import main

        with pytest.raises(SystemExit) as e:
            main(["run", "--target", str(files["no_block"]), *flags, "--threads", "1", "--ctx", "256", "hi"])
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert "tensor 'blk.4.attn_norm.weight' not found" in err
        assert "MTP" in err and "not a GGUF it supports" not in err

    def test_a_load_on_a_worker_thread_keeps_its_reason_to_itself(self, files):
        """llama.cpp logs on the thread that calls it: a load in a worker thread (as the app
        loads) gets its own reason, and another thread's capture gets nothing of it."""
        with llama_errors() as here, ThreadPoolExecutor(1) as pool:
            error = pool.submit(LlamaModel.load, files["no_block"], n_ctx=256, threads=1).exception()
        assert isinstance(error, ModelLoadError) and "blk.4.attn_norm.weight' not found" in str(error)
        assert here == []

    def test_llama_cpps_log_is_printed_only_when_verbose(self, files, capfd):
        for verbose in (False, True):
            with pytest.raises(ModelLoadError):
                LlamaModel.load(files["no_block"], n_ctx=256, threads=1, verbose=verbose)
            err = capfd.readouterr().err
            assert ("llama_model_loader: loaded meta data" in err) == verbose
            assert ("check_tensor_dims: tensor 'blk.4.attn_norm.weight' not found" in err) == verbose
        LlamaModel.load(files["plain"], n_ctx=256, threads=1, verbose=False).close()  # (quiet again)


class TestSampling:
    def test_the_first_token_has_the_targets_distribution(self, pair):
        """Leviathan et al.'s rule on MTP drafts: the first sampled token is distributed as
        p_target (chi-square over 1,500 seeds; p < 0.001 would fail)."""
        target, mtp = pair
        prompt = target.tokenize(TEXT)
        params = SamplingParams(temperature=1.5, top_k=8)
        target.truncate(0)
        row = np.array(target.sync(prompt, n_logits=1)[0])
        p_target = process(row, prompt[-max(params.repeat_last_n, 1) :], params)
        counts = np.zeros(target.n_vocab)
        n = 1500
        for seed in range(n):
            target.truncate(0)
            seeded = params.model_copy(update={"seed": seed})
            got, _ = generate(target, ModelDrafter(mtp, target.n_vocab), 3, prompt, n=1, params=seeded)
            counts[got[0]] += 1
        support = p_target > 0
        assert counts[~support].sum() == 0
        expected = p_target[support] * n
        chi2 = float((((counts[support] - expected) ** 2) / expected).sum())
        # 7 degrees of freedom: chi2 > 24.3 has p < 0.001
        assert chi2 < 24.3, (chi2, counts[support], expected)

    def test_mtp_drafts_carry_their_distribution(self, pair):
        target, mtp = pair
        prompt = target.tokenize(TEXT)
        drafter = ModelDrafter(mtp, target.n_vocab)
        target.sync(prompt[:-1])
        draft = drafter.draft(prompt, 3, SamplingParams(temperature=0.9, seed=1), np.random.default_rng(1))
        assert draft.q_draft is not None and len(draft.q_draft) == len(draft.ids) == 3
        for q, token in zip(draft.q_draft, draft.ids):
            assert abs(float(q.sum()) - 1.0) < 1e-5 and q[token] > 0


class TestSession:
    def test_an_mtp_pair_loads_and_drafts_in_its_own_mode(self, files):
        options = LoadOptions(n_ctx=1024, threads=1, adaptive=False, draft_max=3)
        alone = Session.load(PairSpec(files["mtp"]), options)
        s = Session.load(PairSpec(files["mtp"], mtp=True), options)
        try:
            assert s.mode == "mtp" and isinstance(s.draft, MtpModel)
            assert s.spec.drafter == "MTP layers (built into the model)"
            messages = [{"role": "user", "content": "hello world"}]
            steps = list(s.chat(messages, GREEDY, 40))
            assert sum(len(st.drafted) for st in steps) > 0
            got = [t for st in steps for t in st.emitted]
            assert got == [t for st in alone.chat(messages, GREEDY, 40) for t in st.emitted]
            assert s.costs.t_draft > 0  # the MTP pass was measured at load
        finally:
            s.close()
            alone.close()

    def test_a_target_without_mtp_layers_says_so(self, files):
        with pytest.raises(ModelLoadError, match="no MTP layers.*nextn_predict_layers"):
            Session.load(PairSpec(files["plain"], mtp=True), LoadOptions(n_ctx=512, threads=1))


class TestCli:
    """``localspec run`` and ``bench`` on an MTP target: found in the file, or asked for."""

    def run(self, capsys, *args):
        import json

        from localspec.cli import main

        rc = main(["run", *args, "--threads", "1", "--ctx", "512", "--max-tokens", "12", "--json", "hello"])
        return rc, json.loads(capsys.readouterr().out) if rc == 0 else None

    def test_a_target_with_mtp_layers_drafts_with_them_by_itself(self, files, capsys):
        rc, out = self.run(capsys, "--target", str(files["mtp"]))
        assert rc == 0 and out["mode"] == "mtp" and out["n_tokens"] == 12

    def test_no_draft_and_lookup_still_mean_what_they_say(self, files, capsys):
        assert self.run(capsys, "--target", str(files["mtp"]), "--no-draft")[1]["mode"] == "none"
        assert self.run(capsys, "--target", str(files["mtp"]), "--lookup")[1]["mode"] == "lookup"

    def test_mtp_on_a_target_without_it_is_a_clear_error(self, files, capsys):
        from localspec.cli import main

        with pytest.raises(SystemExit) as e:
            main(["run", "--target", str(files["plain"]), "--mtp", "--threads", "1", "--ctx", "256", "hi"])
        assert e.value.code == 2
        assert "no MTP layers (nextn_predict_layers = 0)" in capsys.readouterr().err

    def test_the_bench_reports_the_mtp_pass_against_t1(self, files, capsys, tmp_path):
        import json

        from localspec.cli import main

        report = tmp_path / "bench.json"
        args = ["bench", "--target", str(files["mtp"]), "--threads", "1", "--ctx", "512", "--quick"]
        assert main([*args, "--max-tokens", "8", "--json", str(report)]) == 0
        out = capsys.readouterr().out
        rep = json.loads(report.read_text())
        assert rep["draft"] == "MTP" and any(r["mode"] == "mtp" for r in rep["rows"])
        assert rep["cost_curve"]["draft_pass_over_t1"] > 0
        assert set(rep["cost_curve"]["predicted_at_acceptance"]) == {"0.6", "0.7", "0.8"}
        assert "MTP pass:" in out and "of T(1)" in out and "at acceptance 0.6:" in out

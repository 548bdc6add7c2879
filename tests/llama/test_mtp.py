"""Drafting with the target's own next-token-prediction layer (MTP), on tiny qwen35 models with an
MTP block that the tests write (F32 weights: exact identity). The block is built to agree with
the target often but not always (``hybrid_gguf``), so steps accept some drafts and reject others."""

from __future__ import annotations

import numpy as np
import pytest

from localspec.chat.session import LoadOptions, PairSpec, Session
from localspec.core.drafters import ModelDrafter, NoDrafter
from localspec.core.sampling import SamplingParams, process
from localspec.llama.backend import LlamaModel, ModelLoadError
from localspec.llama.mtp import MtpModel
from tests.support.forced import GREEDY, beside_target_alone, generate
from tests.support.hybrid_gguf import write_tiny_qwen35

TEXT = "hello world def code the model is fast"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("mtp")
    return {
        "mtp": write_tiny_qwen35(d / "mtp.gguf", seed=1, mtp=True, residual=0.2),
        "plain": write_tiny_qwen35(d / "plain.gguf", seed=1),
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
        """After rejections the MTP block's cache holds only entries made from the target's
        states, for the target's tokens: a rejected draft leaves nothing behind."""
        target, mtp = pair
        prompt = target.tokenize(TEXT)
        generate(target, ModelDrafter(mtp, target.n_vocab), 5, prompt)
        mtp.sync(mtp.cached[: mtp._exact])
        assert mtp.cached == target.cached[: len(mtp.cached)]
        assert mtp._exact == len(mtp.cached)

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

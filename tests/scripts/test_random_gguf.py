"""random_gguf: the tiny shape goes through the same path as the benchmark's 0.5B/1.5B/7B
files (F16 written with gguf, Q4_K_M by llama.cpp's quantizer) and loads in the real backend."""

import dataclasses

import numpy as np
import pytest

from localspec.llama.backend import LlamaModel
from localspec.llama.ggufinfo import read_info, read_metadata
from tests.support import random_gguf as R
from tests.support.checks import check_pair


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """tiny F16 + Q4_K_M in one directory, and a draft of another seed elsewhere."""
    d = tmp_path_factory.mktemp("random")
    files = {m.path.name: m for m in R.make_models(d, [("tiny", "F16"), ("tiny", "q4_k_m")], threads=1)}
    draft = R.write_random_gguf(tmp_path_factory.mktemp("draft") / "draft.gguf", "tiny", seed=1)
    return d, files, draft


def n_params(shape: R.Shape) -> int:
    # np.empty maps the buffer without touching it: counting the 7B costs nothing
    buf = np.empty(R.buffer_len(shape), dtype=np.float16)
    return sum(a.size for _, a in R.tensors(shape, buf))


class TestShapes:
    @pytest.mark.parametrize(
        "name, n_embd, n_layer, n_head, n_head_kv, n_ff, tied",
        [
            # Qwen2.5-{0.5B,1.5B,7B} config.json: hidden, layers, heads, kv heads, intermediate, tie
            ("0.5b", 896, 24, 14, 2, 4864, True),
            ("1.5b", 1536, 28, 12, 2, 8960, True),
            ("7b", 3584, 28, 28, 4, 18944, False),
        ],
    )
    def test_real_qwen25_numbers(self, name, n_embd, n_layer, n_head, n_head_kv, n_ff, tied):
        s = R.SHAPES[name]
        assert (s.n_embd, s.n_layer, s.n_head, s.n_head_kv, s.n_ff, s.tied) == (
            n_embd,
            n_layer,
            n_head,
            n_head_kv,
            n_ff,
            tied,
        )
        assert s.n_vocab == 151936

    @pytest.mark.parametrize(
        "name, expected",
        [
            ("0.5b", 494_032_768),  # Qwen2.5-0.5B's count exactly
            ("1.5b", 1_543_714_304),  # Qwen2.5-1.5B's count exactly
            ("7b", 7_615_616_512 - 2 * 128 * 3584),  # the 7B has 152064 rows in embd and output
        ],
    )
    def test_parameter_counts(self, name, expected):
        assert n_params(R.SHAPES[name]) == expected

    def test_7b_buffer_is_a_small_part_of_the_file(self):
        s = R.SHAPES["7b"]
        assert R.buffer_len(s) * 2 < 1.1e9 < 2 * n_params(s) / 10


class TestFiles:
    def test_loads_with_the_right_vocab_and_layers(self, made):
        d, files, _ = made
        for ftype in ("F16", "Q4_K_M"):
            path = d / R.file_name("tiny", ftype)
            info, (meta, _) = read_info(path), read_metadata(path)
            assert (info.arch, info.quant, info.n_vocab) == ("qwen2", ftype, 512)
            assert meta["qwen2.block_count"] == 2
            model = LlamaModel.load(path, n_ctx=64, threads=1)
            try:
                assert model.n_vocab == 512
                assert np.isfinite(model.evaluate(model.tokenize("hello world"))[0]).all()
            finally:
                model.close()

    def test_q4_is_smaller_than_f16(self, made):
        _, files, _ = made
        assert files["random-tiny-q4_k_m.gguf"].size_bytes < files["random-tiny-f16.gguf"].size_bytes

    def test_another_seed_is_a_compatible_draft(self, made):
        d, _, draft = made
        assert check_pair(d / "random-tiny-f16.gguf", draft).ok
        assert read_metadata(draft)[0]["general.name"] == b"random-tiny-seed1-gain0.3"

    def test_untied_output_loads(self, tmp_path):
        """The 7B path: an output.weight of its own."""
        untied = dataclasses.replace(R.SHAPES["tiny"], tied=False)
        path = R.write_f16(tmp_path / "untied.gguf", "tiny", 0, shape=untied)
        assert read_info(path).n_params == n_params(R.SHAPES["tiny"]) + 512 * 64
        LlamaModel.load(path, n_ctx=64, threads=1).close()


class TestReruns:
    def test_complete_files_are_kept(self, made):
        d, _, _ = made
        before = {p.name: p.stat().st_mtime_ns for p in d.iterdir()}
        again = list(R.make_models(d, [("tiny", "F16"), ("tiny", "Q4_K_M")]))
        assert all(m.kept for m in again)
        assert {p.name: p.stat().st_mtime_ns for p in d.iterdir()} == before

    def test_f16_made_only_to_quantize_is_deleted(self, tmp_path):
        [m] = R.make_models(tmp_path, [("tiny", "Q4_K_M")], threads=1)
        assert not m.kept
        assert [p.name for p in tmp_path.iterdir()] == ["random-tiny-q4_k_m.gguf"]

    def test_an_f16_already_there_is_reused_and_kept(self, tmp_path):
        f16 = R.write_random_gguf(tmp_path / "random-tiny-f16.gguf", "tiny")
        mtime = f16.stat().st_mtime_ns
        R.write_random_gguf(tmp_path / "random-tiny-q4_k_m.gguf", "tiny", "Q4_K_M", threads=1)
        assert f16.stat().st_mtime_ns == mtime
        names = sorted(p.name for p in tmp_path.iterdir())
        assert names == ["random-tiny-f16.gguf", "random-tiny-q4_k_m.gguf"]

    @pytest.mark.parametrize("spoil", ["truncate", "other_seed"])
    def test_a_wrong_file_is_rewritten(self, tmp_path, spoil):
        seed = 7 if spoil == "other_seed" else 0
        path = R.write_random_gguf(tmp_path / "random-tiny-f16.gguf", "tiny", seed=seed)
        if spoil == "truncate":
            path.write_bytes(path.read_bytes()[:-1000])
        [m] = R.make_models(tmp_path, [("tiny", "F16")])
        assert not m.kept
        assert R.is_complete(path, "tiny", "F16", seed=0)


class TestCli:
    def test_one_line_per_file(self, tmp_path, capsys):
        assert R.main([str(tmp_path), "--models", "tiny:f16,tiny:q4_k_m", "--threads", "1"]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert [line.split()[0] for line in lines] == [
            str(tmp_path / "random-tiny-f16.gguf"),
            str(tmp_path / "random-tiny-q4_k_m.gguf"),
        ]
        assert all(" GB " in line and line.endswith(" s") for line in lines)

    @pytest.mark.parametrize("spec", ["3b:f16", "tiny:q3_k"])
    def test_bad_specs_stop_with_usage(self, spec, tmp_path):
        with pytest.raises(SystemExit):
            R.main([str(tmp_path), "--models", spec])

    def test_type_defaults_to_f16(self):
        assert R.parse_specs("tiny:, 0.5b") == [("tiny", "F16"), ("0.5b", "F16")]

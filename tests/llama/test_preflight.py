"""Model-file checks before llama.cpp loads anything, on files the tests write: a tiny real
GGUF, a truncated copy, random bytes, an unknown architecture, and a memory budget the test
chooses."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import pytest

from localspec.llama import preflight
from localspec.llama.preflight import ModelFileError, check_model_files
from tests.support.checks import check_model_file
from tests.support.tiny_gguf import write_no_vocab_gguf, write_tiny_gguf

# the tiny model: 2 layers, 64 dims, 4 heads of 16, n_ctx 512, F32 weights
KV_PER_TOKEN = 2 * 4 * (16 + 16) * 2  # n_layer x n_kv_head x (k + v dims) x 2 bytes = 512


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf", seed=0, n_ctx=512)


@pytest.fixture
def files(tmp_path, good) -> dict[str, Path]:
    """One file per way a model file can be wrong, next to a good one."""
    data = good.read_bytes()
    out = {
        "good": tmp_path / "good.gguf",
        "missing": tmp_path / "missing.gguf",
        "random": tmp_path / "random.gguf",
        "empty": tmp_path / "empty.gguf",
        "truncated": tmp_path / "truncated.gguf",
        "header_cut": tmp_path / "cut.gguf",
        "directory": tmp_path / "folder.gguf",
    }
    out["good"].write_bytes(data)
    out["random"].write_bytes(os.urandom(4096))
    out["empty"].write_bytes(b"")
    out["truncated"].write_bytes(data[: len(data) // 2])  # a download cut in the tensor data
    out["header_cut"].write_bytes(data[:200])  # cut inside the vocabulary
    out["directory"].mkdir()
    out["unsupported"] = write_tiny_gguf(tmp_path / "notanarch.gguf", seed=0, arch="notanarch")
    out["clip"] = write_tiny_gguf(tmp_path / "mmproj.gguf", seed=0, arch="clip")
    out["no_vocab"] = write_no_vocab_gguf(tmp_path / "novocab.gguf")
    out["fifo"] = tmp_path / "pipe.gguf"
    os.mkfifo(out["fifo"])  # opening it to read would wait for a writer forever
    return out


def digests(folder: Path) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


CASES = [
    ("missing", "no such file"),
    ("directory", "is a directory"),
    ("random", "not a GGUF model file"),
    ("empty", "not a GGUF model file"),
    ("truncated", r"truncated: it has [\d,]+ bytes but its header describes [\d,]+ \(50% there\)"),
    ("header_cut", "truncated: it ends inside its header"),
    ("unsupported", "architecture 'notanarch' is not supported"),
    ("clip", "vision projector"),
    ("no_vocab", "has no tokenizer"),
    ("fifo", r"is a named pipe \(FIFO\), not a GGUF model file"),
]


class TestEachProblemHasOneMessage:
    @pytest.mark.parametrize("name, message", CASES)
    def test_message(self, files, name, message):
        with pytest.raises(ModelFileError, match=message) as e:
            check_model_file(files[name], n_ctx=512, available_bytes=10**12)
        assert str(files[name]) in str(e.value)  # names the file
        assert "\n" not in str(e.value) and "Traceback" not in str(e.value)

    @pytest.mark.parametrize(
        "name, advice",
        [
            ("missing", "models list"),
            ("random", "convert_hf_to_gguf"),
            ("truncated", "download it again"),
            ("unsupported", "supported architecture"),
        ],
    )
    def test_message_says_what_to_do(self, files, name, advice):
        with pytest.raises(ModelFileError, match=advice):
            check_model_file(files[name], n_ctx=512, available_bytes=10**12)

    def test_a_good_file(self, files):
        info = check_model_file(files["good"], n_ctx=256, available_bytes=10**12)
        assert info.arch == "llama" and info.file_bytes == files["good"].stat().st_size
        assert info.kv_bytes == KV_PER_TOKEN * 256

    def test_header_length_is_the_file_length(self, files):
        """The layout the header implies (aligned data start + last tensor's end) is exact."""
        _, needed = preflight.read_layout(files["good"])
        assert needed == files["good"].stat().st_size

    def test_one_byte_short_is_truncated(self, tmp_path, files):
        short = tmp_path / "short.gguf"
        short.write_bytes(files["good"].read_bytes()[:-1])
        with pytest.raises(ModelFileError, match="truncated"):
            check_model_file(short, n_ctx=512, available_bytes=10**12)

    def test_a_device_is_named_as_one(self, capsys):
        from localspec.cli import main

        with pytest.raises(ModelFileError, match="^/dev/null: is a character device, not a GGUF model file"):
            check_model_file(Path("/dev/null"), n_ctx=512, available_bytes=10**12)
        with pytest.raises(SystemExit) as e:
            main(["run", "--target", "/dev/null", "hi"])
        assert e.value.code == 2 and capsys.readouterr().err == (
            "error: /dev/null: is a character device, not a GGUF model file.\n"
        )

    def test_context_is_capped_at_the_models_own(self, files):
        assert check_model_file(files["good"], n_ctx=8192, available_bytes=10**12).n_ctx == 512


class TestArchitectures:
    def test_the_list_is_llama_cpps(self):
        archs = preflight.SUPPORTED_ARCHITECTURES
        assert {"llama", "qwen2", "qwen3", "gemma3", "phi3", "mistral3"} <= set(archs)
        assert "clip" not in archs and len(archs) == len(set(archs)) > 100

    def test_llama_cpp_agrees_that_notanarch_does_not_load(self, files):
        from localspec.llama.backend import LlamaModel, ModelLoadError

        with pytest.raises(ModelLoadError):
            LlamaModel.load(files["unsupported"], n_ctx=64, threads=1)


class TestMemory:
    def estimate(self, n_ctx=512) -> int:
        return check_model_file(self.path, n_ctx, available_bytes=10**12).memory_bytes

    @pytest.fixture(autouse=True)
    def _model(self, files):
        self.path = files["good"]

    def test_estimate_is_weights_plus_kv_plus_ten_percent(self):
        size = self.path.stat().st_size
        assert self.estimate(512) == int((size + KV_PER_TOKEN * 512) * 1.1)

    def test_too_large_says_needed_available_and_what_to_try(self):
        with pytest.raises(ModelFileError) as e:
            check_model_file(self.path, 512, available_bytes=self.estimate() - 1)
        text = str(e.value)
        assert "needs about" in text and "GB available" in text
        for advice in ("--gpu-layers", "smaller quantization", "--ctx"):
            assert advice in text

    def test_just_enough_passes(self):
        check_model_file(self.path, 512, available_bytes=self.estimate())

    def test_a_pair_is_summed(self, tmp_path):
        draft = write_tiny_gguf(tmp_path / "draft.gguf", seed=1)
        both = self.estimate() + check_model_file(draft, 512, available_bytes=10**12).memory_bytes
        check_model_files([self.path, draft], 512, available_bytes=both)
        with pytest.raises(ModelFileError, match="good.gguf \\+ draft.gguf: not enough memory"):
            check_model_files([self.path, draft], 512, available_bytes=both - 1)

    @pytest.mark.parametrize("gpu_layers, fraction", [(0, 1.0), (None, 1.0), (1, 0.5), (2, 0.0), (-1, 0.0)])
    def test_offloaded_layers_leave_host_memory(self, gpu_layers, fraction):
        info = check_model_file(self.path, 512, gpu_layers, available_bytes=10**12)
        assert info.host_fraction == fraction

    def test_each_file_its_own_gpu_layers(self, tmp_path):
        # the offload plan gives the target and the draft their own counts
        draft = write_tiny_gguf(tmp_path / "draft.gguf", seed=1)
        target_info, draft_info = check_model_files([self.path, draft], 512, [0, -1], available_bytes=10**12)
        assert (target_info.host_fraction, draft_info.host_fraction) == (1.0, 0.0)
        with pytest.raises(ValueError):
            check_model_files([self.path, draft], 512, [0], available_bytes=10**12)

    def test_unknown_memory_skips_the_check(self, monkeypatch):
        monkeypatch.setattr(preflight, "memory_available", lambda: None)
        check_model_file(self.path, 512)


class TestSessionAndCli:
    """Session.load checks before llama.cpp sees a file; the CLI turns that into exit 2."""

    @pytest.fixture
    def no_llama_load(self, monkeypatch):
        from localspec.llama import backend as llama_backend

        def refuse(*args, **kwargs):
            raise AssertionError("llama.cpp was asked to load a file that failed the preflight")

        monkeypatch.setattr(llama_backend.LlamaModel, "load", refuse)

    @pytest.mark.parametrize("name, message", CASES)
    def test_session_load_refuses_before_llama_cpp(self, files, no_llama_load, name, message):
        from localspec.chat.session import LoadOptions, PairSpec, Session

        with pytest.raises(ModelFileError, match=message):
            Session.load(PairSpec(files["good"], files[name]), LoadOptions(n_ctx=512, threads=1))

    @pytest.mark.parametrize("name, message", CASES)
    def test_cli_exits_2_with_the_message_and_changes_nothing(self, tmp_path, files, capsys, name, message):
        from localspec.cli import main

        before = digests(tmp_path)
        with pytest.raises(SystemExit) as e:
            main(["run", "--target", str(files[name]), "--threads", "1", "--ctx", "512", "hi"])
        err = capsys.readouterr().err
        assert e.value.code == 2 and err.startswith("error: ") and "Traceback" not in err
        assert re.search(message, err)
        assert digests(tmp_path) == before

    def test_cli_too_large_pair(self, tmp_path, files, capsys, monkeypatch):
        from localspec.cli import main

        draft = write_tiny_gguf(tmp_path / "draft.gguf", seed=1, noise_of=0, noise=0.5)
        monkeypatch.setattr(preflight, "memory_available", lambda: 1_000_000)  # 1 MB free
        before = digests(tmp_path)
        with pytest.raises(SystemExit) as e:
            main(["run", "--target", str(files["good"]), "--draft", str(draft), "--ctx", "512", "hi"])
        err = capsys.readouterr().err
        assert e.value.code == 2 and "not enough memory" in err and "0.0 GB available" in err
        assert digests(tmp_path) == before

    def test_cli_incompatible_pair_exits_3(self, tmp_path, files, capsys):
        from localspec.cli import main

        other_eos = write_tiny_gguf(tmp_path / "eos.gguf", seed=5, eos=1)
        before = digests(tmp_path)
        with pytest.raises(SystemExit) as e:
            main(
                [
                    "run",
                    "--target",
                    str(files["good"]),
                    "--draft",
                    str(other_eos),
                    "--threads",
                    "1",
                    "--ctx",
                    "256",
                    "hi",
                ]
            )
        err = capsys.readouterr().err
        assert e.value.code == 3 and "cannot draft for" in err and "EOS differs" in err
        assert digests(tmp_path) == before


REAL = Path(__file__).resolve().parents[2] / "models"


@pytest.mark.slow
class TestRealModels:
    @pytest.mark.parametrize(
        "name, arch",
        [("qwen2.5-coder-1.5b.gguf", "qwen2"), ("qwen2.5-coder-0.5b.gguf", "qwen2"), ("gemma-3-270m.gguf", "gemma3")],
    )
    def test_header_length_is_the_file_length_of_quantized_models(self, name, arch):
        path = REAL / name
        if not path.is_file():
            pytest.skip(f"{path} absent")
        info = check_model_file(path, 4096, available_bytes=10**12)
        assert preflight.read_layout(path)[1] == path.stat().st_size and info.arch == arch

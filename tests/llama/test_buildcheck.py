"""llama.buildcheck: the child's death named (a signal, an exit code, a hang), the real child
on the real tiny model, the answer remembered per build, and a command that loads a model
stopped by a remembered crash. The suite skips the check (conftest sets SKIP_ENV); these tests
turn it back on."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from localspec.cli import main
from localspec.llama import buildcheck
from localspec.llama.backend import ModelLoadError
from localspec.llama.buildcheck import (
    AVX2_CMAKE_ARGS,
    LLAMA_CPP_PIN,
    REINSTALL_AVX2,
    BuildCheck,
    describe_exit,
    recall,
    remember,
    require_runnable,
    run_child,
)

ROOT = Path(__file__).resolve().parents[2]
SEGFAULT = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"]
CRASHED = "llama.cpp crashed (SIGSEGV) on its first batched decode"
posix = pytest.mark.skipif(sys.platform == "win32", reason="a child killed by a signal is POSIX")


@pytest.fixture
def checking(monkeypatch):
    monkeypatch.delenv(buildcheck.SKIP_ENV, raising=False)


@pytest.fixture
def cache(tmp_path) -> Path:
    return tmp_path / "data" / buildcheck.CHECK_FILE


class TestChild:
    def test_the_real_child_decodes_a_batch_of_the_tiny_model(self, checking, cache):
        said: list[str] = []
        require_runnable(cache, said.append)  # no exception: this build runs here
        assert said == ["checking this llama.cpp build (once per build): one batched decode in a child process"]
        assert recall(cache) == BuildCheck(buildcheck.build_key(), None)

    @posix
    def test_a_child_killed_by_a_signal_is_named(self):
        assert run_child(SEGFAULT) == CRASHED

    def test_a_child_that_exits_non_zero_says_its_last_line(self):
        failing = [sys.executable, "-c", "import sys; print('one', file=sys.stderr); sys.exit('ModelLoadError: x')"]
        assert run_child(failing) == "llama.cpp's first batched decode failed (exit 1: ModelLoadError: x)"

    def test_a_child_that_hangs_is_stopped(self, monkeypatch):
        def hang(argv, **kwargs):
            raise subprocess.TimeoutExpired(argv, kwargs["timeout"])

        monkeypatch.setattr(buildcheck.subprocess, "run", hang)
        assert run_child(SEGFAULT, timeout=60) == (
            "llama.cpp did not finish its first batched decode in 60 s (the check was stopped)"
        )

    @pytest.mark.parametrize(
        "returncode, stderr, failure",
        [
            (0, "noise", None),
            (-11, "", CRASHED),
            (-6, "", "llama.cpp crashed (SIGABRT) on its first batched decode"),
            (-200, "", "llama.cpp crashed (signal 200) on its first batched decode"),  # no such signal
            (3, "", "llama.cpp's first batched decode failed (exit 3)"),
            (
                1,
                "Traceback\n  ...\nOSError: gone\n\n",
                "llama.cpp's first batched decode failed (exit 1: OSError: gone)",
            ),
        ],
    )
    def test_describe_exit(self, returncode, stderr, failure):
        assert describe_exit(returncode, stderr) == failure

    def test_the_model_is_q8_0_with_32_aligned_matrices(self, tmp_path):
        import gguf

        reader = gguf.GGUFReader(buildcheck.write_check_model(tmp_path / "m.gguf"))
        matrices = [t for t in reader.tensors if len(t.shape) == 2]
        assert len(matrices) == 9 and {t.tensor_type.name for t in matrices} == {"Q8_0"}
        assert all(int(n) % 32 == 0 for t in matrices for n in t.shape)


class TestRemembered:
    @pytest.fixture
    def runs(self, monkeypatch, checking) -> list[str]:
        """Each check's child, faked: it crashes; the list gets the build key it ran for."""
        ran: list[str] = []
        monkeypatch.setattr(buildcheck, "build_key", lambda: "0.3.36|/lib/libllama.so|100|1")
        monkeypatch.setattr(buildcheck, "run_child", lambda: ran.append(buildcheck.build_key()) or CRASHED)
        return ran

    def test_a_crash_stops_every_load_with_the_fix_and_is_checked_once(self, runs, cache):
        for _ in range(3):
            with pytest.raises(ModelLoadError) as e:
                require_runnable(cache)
            assert str(e.value).startswith(CRASHED) and REINSTALL_AVX2 in str(e.value)
        assert runs == ["0.3.36|/lib/libllama.so|100|1"]

    def test_a_new_build_is_checked_again(self, runs, cache, monkeypatch):
        remember(cache, BuildCheck("0.3.36|/lib/libllama.so|100|1", None))  # this build ran
        require_runnable(cache)
        assert runs == []
        monkeypatch.setattr(buildcheck, "build_key", lambda: "0.3.36|/lib/libllama.so|100|2")  # reinstalled
        with pytest.raises(ModelLoadError):
            require_runnable(cache)
        assert runs == ["0.3.36|/lib/libllama.so|100|2"] and recall(cache) == BuildCheck(runs[0], CRASHED)

    @pytest.mark.parametrize("text", ["not json", '{"other": 1}', "[]"])
    def test_a_file_that_is_not_an_answer_is_checked_again(self, runs, cache, text):
        cache.parent.mkdir(parents=True)
        cache.write_text(text)
        with pytest.raises(ModelLoadError):
            require_runnable(cache)
        assert len(runs) == 1

    def test_the_skip_variable_runs_nothing(self, runs, cache, monkeypatch):
        monkeypatch.setenv(buildcheck.SKIP_ENV, "1")
        require_runnable(cache)
        assert runs == [] and not cache.exists()

    def test_doctors_check_always_runs_and_overwrites(self, runs, cache):
        remember(cache, BuildCheck("0.3.36|/lib/libllama.so|100|1", None))
        assert buildcheck.check_now(cache) == BuildCheck("0.3.36|/lib/libllama.so|100|1", CRASHED)
        assert recall(cache) == BuildCheck("0.3.36|/lib/libllama.so|100|1", CRASHED) and len(runs) == 1


class TestCommands:
    def test_a_remembered_crash_stops_run_before_any_model_loads(self, tiny_pair, checking, capsys):
        from localspec.settings import data_dir

        remember(data_dir() / buildcheck.CHECK_FILE, BuildCheck(buildcheck.build_key(), CRASHED))
        with pytest.raises(SystemExit) as e:
            main(["run", "--target", str(tiny_pair[0]), "--no-draft", "--max-tokens", "2", "hello"])
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert f"error: {CRASHED}: this llama-cpp-python build cannot run on this machine" in err
        assert REINSTALL_AVX2 in err and "`localspec doctor` checks again" in err


class TestOneHome:
    def test_dev_builds_with_the_same_avx2_flags(self):
        dev = (ROOT / "dev").read_text()
        assert re.findall(r'export CMAKE_ARGS="([^"]*)"', dev) == [AVX2_CMAKE_ARGS]

    def test_the_reinstall_line_pins_pyprojects_version(self):
        deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
        assert f"llama-cpp-python=={LLAMA_CPP_PIN}" in deps
        pip = f"pip install --force-reinstall --no-cache-dir llama-cpp-python=={LLAMA_CPP_PIN}"
        assert f'CMAKE_ARGS="{AVX2_CMAKE_ARGS}" {pip}' == REINSTALL_AVX2

    def test_the_answer_is_json_a_person_can_read(self, cache):
        remember(cache, BuildCheck("k", CRASHED))
        assert json.loads(cache.read_text()) == {"build": "k", "failure": CRASHED}

"""`localspec doctor`: each verdict from facts written by hand (localspec.doctor), the report
and exit code through the CLI with those facts injected, one real run on this machine, and the
build check's child: the real one, and one killed by a signal."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest

from localspec.cli import doctor as cli_doctor
from localspec.cli import main
from localspec.doctor import REINSTALL, Facts, PairFacts, diagnose, judge_pair
from localspec.llama import buildcheck, offload
from localspec.llama.buildcheck import REINSTALL_AVX2, BuildCheck
from localspec.llama.offload import Device
from localspec.units import GiB, MiB

CPU = Device("CPU", "Intel(R) Xeon(R)", "cpu", 14 * GiB, 16 * GiB)
RTX = Device("CUDA0", "NVIDIA GeForce RTX 4060 Laptop GPU", "gpu", 7 * GiB, 8 * GiB)
# two pairs: 2 GiB (the default, on disk) and 10 GiB (8 GiB still to download)
SMALL = PairFacts("small", 2 * GiB, 0, default=True)
LARGE = PairFacts("large", 10 * GiB, 8 * GiB)
CRASHED = "llama.cpp crashed (SIGSEGV) on its first batched decode"


@pytest.fixture(autouse=True)
def fixed_margins(monkeypatch):
    """Hand numbers: no percentage margin, 256 MiB reserve per model on the GPU."""
    monkeypatch.setattr(offload, "GPU_MARGIN_FRACTION", 0.0)
    monkeypatch.setattr(offload, "COMPUTE_RESERVE_BYTES", 256 * MiB)


def facts(**changes) -> Facts:
    """A healthy CPU-only laptop: no GPU anywhere, 14 GiB RAM free, 100 GiB free on disk."""
    base = Facts(
        gpu_offload=False,
        devices=(CPU,),
        gpu_hint=None,
        models_dir=Path("/home/u/models"),
        models_dir_writable=True,
        disk_free_bytes=100 * GiB,
        ram_available_bytes=14 * GiB,
        n_ctx=4096,
        pairs=(SMALL, LARGE),
        build={"llama_cpp_python": "0.3.36", "gpu_offload": False},
        python="3.11.7 (/usr/bin/python3)",
        versions={"numpy": "2.0.0", "textual": None},
    )
    return dataclasses.replace(base, **changes)


class TestVerdicts:
    def test_cpu_only_machine_without_a_gpu_is_fine(self):
        d = diagnose(facts())
        assert d.ok and d.problems == ()
        assert d.verdict.startswith("OK: CPU only")
        assert "2 of 2 catalog pairs fit in memory" in d.verdict and "small is on disk" in d.verdict

    @pytest.mark.parametrize("hint, flag", [("cuda", "-DGGML_CUDA=on"), ("metal", "-DGGML_METAL=on")])
    def test_cpu_build_on_a_gpu_machine_gives_the_reinstall_command(self, hint, flag):
        d = diagnose(facts(gpu_hint=hint))
        assert not d.ok and len(d.problems) == 1
        assert "no GPU offload" in d.problems[0].what
        command = f'CMAKE_ARGS="{flag}" pip install --force-reinstall --no-cache-dir llama-cpp-python==0.3.36'
        assert REINSTALL[hint] == command and command in d.problems[0].advice

    def test_gpu_build_with_a_gpu(self):
        d = diagnose(facts(gpu_offload=True, devices=(CPU, RTX), gpu_hint="cuda"))
        assert d.ok and d.verdict.startswith("OK: GPU offload on, 7.0 GiB free on the GPU")
        # small: 2 GiB + 2 x 256 MiB <= 7 GiB; large: 10 GiB does not fit (partial offload)
        assert [(v.id, v.gpu) for v in d.pairs] == [("small", True), ("large", False)]

    def test_no_pair_fits_in_memory(self):
        # 1 GiB free: small needs 2 GiB x 1.1 (compute buffers)
        d = diagnose(facts(ram_available_bytes=1 * GiB))
        assert not d.ok and "no catalog pair fits in memory" in d.problems[0].what
        assert "small" in d.problems[0].what and "n_ctx" in d.problems[0].advice

    def test_a_pair_that_fits_the_gpu_but_not_ram_still_runs(self):
        d = diagnose(facts(ram_available_bytes=1 * GiB, gpu_offload=True, devices=(CPU, RTX)))
        assert d.ok and d.pairs[0].runs

    def test_models_dir_not_writable(self):
        d = diagnose(facts(models_dir_writable=False))
        assert not d.ok and "/home/u/models is not writable" in d.problems[0].what
        assert "models_dir" in d.problems[0].advice

    def test_disk_too_small_for_the_default_pair(self):
        missing = dataclasses.replace(SMALL, missing_bytes=2 * GiB)  # not downloaded yet
        d = diagnose(facts(pairs=(missing, LARGE), disk_free_bytes=1 * GiB))
        assert not d.ok and "no room for the default pair small" in d.problems[0].what
        assert [v.disk for v in d.pairs] == [False, False]

    def test_a_large_pair_without_room_is_not_a_problem(self):
        d = diagnose(facts(disk_free_bytes=3 * GiB))  # the default is on disk; large needs 8
        assert d.ok and [v.disk for v in d.pairs] == [True, False]

    @pytest.mark.parametrize("ram, expected", [(None, None), (3 * GiB, True), (2 * GiB, False)])
    def test_ram_fit_counts_compute_buffers(self, ram, expected):
        # 2 GiB x 1.1 = 2.2 GiB
        assert judge_pair(SMALL, facts(ram_available_bytes=ram)).ram is expected

    def test_a_build_that_crashes_is_the_problem_with_the_avx2_reinstall(self):
        # a CPU build on a GPU machine would be a problem too; the rebuild that runs comes first
        d = diagnose(facts(build_check=BuildCheck("k", CRASHED), gpu_hint="cuda"))
        assert not d.ok and len(d.problems) == 1
        assert d.problems[0].what.startswith(CRASHED) and REINSTALL_AVX2 in d.problems[0].advice

    def test_a_build_that_ran_its_batch_is_fine(self):
        assert diagnose(facts(build_check=BuildCheck("k"))).ok

    def test_several_problems_are_all_listed(self):
        d = diagnose(facts(gpu_hint="cuda", models_dir_writable=False, ram_available_bytes=GiB))
        assert len(d.problems) == 3 and d.verdict == "3 problems to fix (see above)"


class TestCli:
    @pytest.fixture
    def inject(self, monkeypatch):
        def use(f: Facts):
            monkeypatch.setattr(cli_doctor, "gather_facts", lambda settings, catalog: f)

        return use

    def test_report_of_a_healthy_machine(self, inject, capsys):
        inject(facts(build_check=BuildCheck("k")))
        assert main(["doctor"]) == 0
        out = capsys.readouterr().out
        assert "GPU offload: no (CPU-only build)" in out
        assert "batched decode: ok (a tiny model, in a child process)" in out
        assert "CPU      cpu   Intel(R) Xeon(R): 14.0 GiB free of 16.0 GiB" in out
        assert "numpy 2.0.0, textual MISSING" in out
        assert "models dir /home/u/models (writable; 100.0 GiB free on its disk)" in out
        assert "verdict: OK: CPU only" in out and "problems:" not in out

    def test_exit_code_and_advice_when_something_is_wrong(self, inject, capsys):
        inject(facts(gpu_hint="cuda"))
        assert main(["doctor"]) == 1
        out = capsys.readouterr().out
        assert "problems:" in out and REINSTALL["cuda"] in out
        assert "verdict: 1 problem to fix" in out

    def test_json(self, inject, capsys):
        inject(facts(gpu_offload=True, devices=(CPU, RTX)))
        assert main(["doctor", "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["ok"] is True and out["problems"] == []
        assert out["pairs"][0] == {"id": "small", "gpu": True, "ram": True, "disk": True, "on_disk": True}
        assert out["facts"]["devices"][1]["description"] == RTX.description
        assert out["facts"]["models_dir"] == "/home/u/models"

    def test_real_run_on_this_machine(self, capsys):
        rc = main(["doctor", "--json"])
        out = json.loads(capsys.readouterr().out)
        assert rc == (0 if out["ok"] else 1)
        facts_ = out["facts"]
        assert facts_["versions"]["llama-cpp-python"] == facts_["build"]["llama_cpp_python"]
        assert any(d["type"] == "cpu" for d in facts_["devices"])
        if not facts_["gpu_offload"] and facts_["gpu_hint"] is None:  # this CI box: CPU only, fine
            assert rc == 0 and out["verdict"].startswith("OK: CPU only")
        assert main(["doctor"]) == rc
        assert "verdict: " in capsys.readouterr().out

    @pytest.mark.skipif(sys.platform == "win32", reason="a child killed by a signal is POSIX")
    def test_a_child_killed_by_a_signal_is_named_with_the_reinstall_line(self, monkeypatch, capsys):
        monkeypatch.delenv(buildcheck.SKIP_ENV)
        segfault = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"]
        monkeypatch.setattr(buildcheck, "child_command", lambda model: segfault)
        assert main(["doctor"]) == 1
        out = capsys.readouterr().out
        assert f"batched decode: FAILED: {CRASHED}" in out
        assert f"  - {CRASHED}: every command that loads a model would crash the same way" in out
        assert REINSTALL_AVX2 in out and "verdict: 1 problem to fix" in out

    def test_the_real_check_on_this_machine_is_remembered(self, monkeypatch, capsys):
        from localspec.settings import data_dir

        monkeypatch.delenv(buildcheck.SKIP_ENV)
        main(["doctor", "--json"])
        check = json.loads(capsys.readouterr().out)["facts"]["build_check"]
        assert check == {"build": buildcheck.build_key(), "failure": None}  # this box's build runs
        assert buildcheck.recall(data_dir() / buildcheck.CHECK_FILE) == BuildCheck(**check)

    def test_models_dir_that_does_not_exist_yet_counts_as_writable(self, tmp_path):
        assert cli_doctor.writable(tmp_path / "a" / "b")
        assert cli_doctor.disk_free(tmp_path / "a" / "b") > 0
        (tmp_path / "file").write_text("x")
        assert not cli_doctor.writable(tmp_path / "file" / "models")  # a file is in the way


class TestExpectedHere:
    def test_nothing_measured_says_how_to_measure(self, capsys):
        main(["doctor"])
        assert "nothing measured yet: open a pair once" in capsys.readouterr().out

    def test_a_pair_used_here_gets_expected_figures_and_a_recommendation(self, tiny_pair, capsys):
        from localspec.chat.session import LoadOptions, PairSpec, Session
        from localspec.core.sampling import SamplingParams
        from localspec.models.profiles import PROFILES_FILE, ProfileStore
        from localspec.settings import data_dir

        t, d = tiny_pair
        store = ProfileStore(data_dir() / PROFILES_FILE)
        s = Session.load(PairSpec(t, d), LoadOptions(n_ctx=512), profiles=store)
        list(s.chat([{"role": "user", "content": "hello there"}], SamplingParams(temperature=0.0), 40))
        s.close()
        assert main(["doctor", "--json"]) in (0, 1)
        out = json.loads(capsys.readouterr().out)
        hows = {(e["target"], e["how"]) for e in out["expected"]}
        assert (str(t), "none") in hows and (str(t), str(d.resolve())) in hows
        assert out["recommendation"].startswith("fastest here: t.gguf")
        main(["doctor"])
        text = capsys.readouterr().out
        assert "none (target alone)" in text and "draft d.gguf" in text and "recommendation: fastest here" in text

"""The CLI and the scripts that load a model load llama.cpp's libraries before their other native
modules (localspec/llama/native.py says why): whatever imports them, however they are started."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
# Record each module as it is first asked for, before any finder loads it.
PROBE = """
import sys
asked = []
class Recorder:
    def find_spec(self, name, path=None, target=None):
        asked.append(name)
sys.meta_path.insert(0, Recorder())
{start}
print(" ".join(asked))
"""

# `python -m localspec --help`
PYTHON_M = """import runpy, sys
sys.argv = ["localspec", "--help"]
try:
    runpy.run_module("localspec", run_name="__main__")
except SystemExit:
    pass"""

# the scripts that load a model (gpu-check.sh runs the first two on a GPU)
MODEL_SCRIPTS = ("verify_rows", "rollback_cost", "snapshot_cost", "parity_llamacpp")


@pytest.mark.parametrize(
    "start",
    [
        "import localspec.cli",  # the console script `localspec` (localspec.cli:main)
        PYTHON_M,
        *(f"import runpy; runpy.run_path('scripts/{name}.py', run_name='probe')" for name in MODEL_SCRIPTS),
    ],
    ids=["console-script", "python-m", *MODEL_SCRIPTS],
)
def test_llama_cpp_before_the_other_native_modules(start):
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(start=start)], capture_output=True, text=True, cwd=ROOT, check=True
    )
    asked = done.stdout.split()
    first = asked.index("llama_cpp")
    for native in ("numpy", "yaml", "pydantic_core", "gguf"):
        if native in asked:
            assert first < asked.index(native), f"{native} was imported before llama_cpp"


class TestABuildThatCannotLoad:
    """llama_cpp raising on import (ctypes could not load libllama): what needs no model runs,
    what does says so in one line, and doctor says how to reinstall."""

    @pytest.fixture(scope="class")
    @classmethod
    def broken(cls, tmp_path_factory):
        site = tmp_path_factory.mktemp("broken")
        (site / "llama_cpp").mkdir()
        (site / "llama_cpp" / "__init__.py").write_text(
            "raise OSError('libllama.so: cannot open shared object file')\n"
        )
        return site

    def localspec(self, site, *args):
        env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{ROOT}", "LOCALSPEC_DATA_DIR": str(site / "data")}
        return subprocess.run(
            [sys.executable, "-m", "localspec", *args], capture_output=True, text=True, cwd=ROOT, env=env
        )

    def test_commands_without_a_model_run(self, broken):
        assert self.localspec(broken, "--help").returncode == 0
        assert self.localspec(broken, "history").returncode == 0

    def test_a_command_that_loads_a_model_says_what_failed(self, broken):
        done = self.localspec(broken, "run", "--target", "no-such.gguf", "hello")
        assert done.returncode == 1
        assert done.stderr.strip() == (
            "error: llama-cpp-python cannot be loaded (OSError: libllama.so: cannot open shared object file); "
            "`localspec doctor` says how to reinstall it"
        )

    def test_doctor_gives_the_reinstall_command(self, broken):
        done = self.localspec(broken, "doctor")
        assert done.returncode == 1 and "Traceback" not in done.stderr
        assert f"{sys.executable} -m pip install --force-reinstall --no-cache-dir llama-cpp-python==" in done.stderr

"""The CLI loads llama.cpp's libraries before its other native modules (localspec/cli/__init__.py
says why): whatever imports it, however it is started."""

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


@pytest.mark.parametrize(
    "start",
    [
        "import localspec.cli",  # the console script `localspec` (localspec.cli:main)
        PYTHON_M,
    ],
    ids=["console-script", "python-m"],
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

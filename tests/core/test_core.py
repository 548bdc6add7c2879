"""The core (localspec/core/) knows nothing of the outside world.

It imports and decodes while llama_cpp, textual and huggingface_hub cannot be imported, and no
module in it imports a localspec module outside the core (arrows only point inwards).
"""

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

import localspec.core

CORE_DIR = Path(localspec.core.__file__).parent
BLOCKED = ("llama_cpp", "textual", "huggingface_hub", "starlette", "uvicorn", "rich")

SCRIPT = f"""
import importlib, pkgutil, sys
for name in {BLOCKED!r}:
    sys.modules[name] = None  # any import of it raises ImportError
import localspec.core
for m in pkgutil.iter_modules(localspec.core.__path__):
    importlib.import_module("localspec.core." + m.name)
import numpy as np
from tests.support.fakes import FakeModel
from localspec.core.suffix import SuffixDrafter
from localspec.core.engine import SpeculativeEngine
def logits(history):  # a target that continues 1 2 3 1 2 3 ...
    row = np.zeros(16, dtype=np.float32)
    row[history[-1] % 3 + 1] = 1.0
    return row
engine = SpeculativeEngine(FakeModel(logits, n_vocab=16), SuffixDrafter())
steps = list(engine.generate([1, 2, 3, 1, 2], max_tokens=8))
print(sum(len(s.emitted) for s in steps) == 8)
leaked = sorted(n for n in sys.modules if n.startswith("localspec.") and not n.startswith("localspec.core"))
print(leaked)
"""


def test_core_imports_and_decodes_with_the_outside_world_blocked():
    repo_root = Path(__file__).parents[2]  # the child imports tests.support from here
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, cwd=repo_root, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["True", "[]"], out.stdout


def _imports(path: Path) -> list[tuple[int, str]]:
    """(level, module) of every import statement in a file; level > 0 is relative."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            found.append((node.level, node.module or ""))
        elif isinstance(node, ast.Import):
            found.extend((0, a.name) for a in node.names)
    return found


def test_core_modules_import_nothing_outside_the_core():
    modules = [m.name for m in pkgutil.iter_modules([str(CORE_DIR)])]
    assert {"engine", "sampling", "controller", "drafters", "stats", "costs", "protocol"} <= set(modules)
    for name in modules:
        for level, module in _imports(CORE_DIR / f"{name}.py"):
            assert level <= 1, f"core/{name}.py reaches outside the core: {'.' * level}{module}"
            if level == 0:
                assert not module.startswith("localspec") or module.startswith("localspec.core"), (name, module)
                assert module.split(".")[0] not in BLOCKED, (name, module)

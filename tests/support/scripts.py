"""The repository's scripts/ as modules, for their tests."""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).parents[2] / "scripts"


def load_script(name: str) -> ModuleType:
    """scripts/<name>.py loaded as the module ``name`` (registered in sys.modules, where a
    script's dataclasses look their module up)."""
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module

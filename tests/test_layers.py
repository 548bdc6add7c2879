"""The package's shape: which layer may import which, what only the interfaces do, and the
house rules a newcomer relies on (no file over 600 lines, no class name defined twice, no
private name reached from another module, tests that import no other test).

The layers, inner to outer: ``core`` (the engine and its maths) → the adapters ``llama``
(llama.cpp) and ``models`` (catalog, downloads, profiles) → ``chat`` (a session and its
conversation) → ``serve`` and ``bench`` → the interfaces ``tui`` and ``cli``. An arrow only
points inwards; ``tests/core/test_core.py`` also runs the core with the outside world blocked.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import pytest

import localspec

PACKAGE = Path(localspec.__file__).parent
TESTS = Path(__file__).parent
TOP_MODULES = 6  # besides the packages: settings, lockedfile, doctor, units, __init__, __main__
MAX_LINES = 600
# issue 23's bound on the core: a class a newcomer reads in one sitting, a controller of small parts
MAX_CORE_CLASS_LINES, MAX_CONTROLLER_LINES = 150, 400

# what each layer may import from localspec (its own package is always allowed)
ALLOWED = {
    "core": set(),
    "llama": {"core", "units"},
    "models": {"core", "llama", "settings", "lockedfile", "units"},
    "chat": {"core", "llama", "models", "settings", "lockedfile", "units"},
    "serve": {"core", "llama", "models", "chat", "settings", "units"},
    "bench": {"core", "llama", "models", "chat", "settings", "units"},
}
DRAWING = ("textual", "rich")  # only the interfaces draw
QUIET = ("core", "models", "chat")  # ... and these never print either


def modules(root: Path = PACKAGE) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def layer(path: Path) -> str:
    rel = path.relative_to(PACKAGE)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def imported(path: Path) -> list[tuple[str, list[str]]]:
    """(absolute module, names) of each import in ``path``, relative ones resolved."""
    here = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)  # localspec.x.y, tests.x.y
    package = here[:-1]  # a package's __init__ is in the package too
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            found.append((module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            found.extend((a.name, []) for a in node.names)
    return found


def localspec_layers(path: Path) -> set[str]:
    """The localspec layers ``path`` imports (a ``from localspec.x import y`` counts x)."""
    out = set()
    for module, names in imported(path):
        parts = module.split(".")
        if parts[0] != "localspec":
            continue
        if len(parts) > 1:
            out.add(parts[1])
        else:  # from localspec import settings
            out.update(names)
    return out


@pytest.mark.parametrize("name", sorted(ALLOWED))
def test_each_layer_imports_only_inner_layers(name):
    wrong = {
        str(p.relative_to(PACKAGE)): sorted(localspec_layers(p) - ALLOWED[name] - {name})
        for p in modules(PACKAGE / name)
    }
    assert {k: v for k, v in wrong.items() if v} == {}


@pytest.mark.parametrize("name", sorted(ALLOWED))
def test_only_the_interfaces_draw(name):
    drawing = [
        f"{p.relative_to(PACKAGE)}: {m}"
        for p in modules(PACKAGE / name)
        for m, _ in imported(p)
        if m.startswith(DRAWING)
    ]
    assert drawing == []


@pytest.mark.parametrize("name", QUIET)
def test_the_core_models_and_chat_print_nothing(name):
    prints = [
        f"{p.relative_to(PACKAGE)}:{node.lineno}"
        for p in modules(PACKAGE / name)
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("print", "input")
    ]
    assert prints == []


def test_only_the_llama_adapter_imports_llama_cpp():
    outside = [
        f"{p.relative_to(PACKAGE)}: {m}"
        for p in modules()
        if layer(p) != "llama"
        for m, _ in imported(p)
        if m.split(".")[0] == "llama_cpp"
    ]
    assert outside == []


def test_a_few_modules_at_the_top_and_the_rest_in_packages():
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= TOP_MODULES, top


def test_no_file_is_over_600_lines():
    long = {str(p.relative_to(PACKAGE)): n for p in modules() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_the_core_is_small_parts():
    core = PACKAGE / "core"
    big = {
        f"{p.name}:{node.name}": n
        for p in modules(core)
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
        if isinstance(node, ast.ClassDef) and (n := node.end_lineno - node.lineno + 1) > MAX_CORE_CLASS_LINES
    }
    assert big == {}
    assert len((core / "controller.py").read_text().splitlines()) <= MAX_CONTROLLER_LINES


def test_no_class_name_is_defined_twice():
    names = Counter(
        node.name
        for p in modules()
        for node in ast.parse(p.read_text(encoding="utf-8")).body
        if isinstance(node, ast.ClassDef)
    )
    assert sorted(n for n, count in names.items() if count > 1) == []


def test_no_private_name_is_imported_from_another_module():
    reached = [
        f"{p.relative_to(PACKAGE)}: from {m} import {n}"
        for p in modules()
        for m, names in imported(p)
        if m.startswith("localspec")
        for n in names
        if n.startswith("_") and not n.startswith("__")
    ]
    assert reached == []


def test_no_private_attribute_of_an_imported_module_is_read():
    """``costs._x`` where ``costs`` is a localspec module imported by name."""
    reached = []
    for p in modules():
        tree = ast.parse(p.read_text(encoding="utf-8"))
        aliases = {
            a.asname or a.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("localspec"))
            for a in node.names
            if a.name[:1].islower()
        }
        reached += [
            f"{p.relative_to(PACKAGE)}:{node.lineno}: {node.value.id}.{node.attr}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ]
    assert reached == []


def test_tests_import_no_other_test_module_and_touch_no_sys_path():
    offenders = []
    for p in sorted(TESTS.rglob("*.py")):
        for module, names in imported(p):
            if module.split(".")[-1].startswith("test_") or any(n.startswith("test_") for n in names):
                offenders.append(f"{p.relative_to(TESTS)}: {module}")
        offenders += [f"{p.relative_to(TESTS)}:{line}: sys.path" for line in sys_path_changes(p)]
    assert offenders == []


def sys_path_changes(path: Path) -> list[int]:
    """Lines that call ``sys.path.insert`` / ``.append`` / ``.extend``."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("insert", "append", "extend")
        and ast.unparse(node.func.value) == "sys.path"
    ]


def test_the_tests_mirror_the_packages():
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages <= folders, sorted(packages - folders)
    assert not list(TESTS.glob("fake*.py")) and not list(TESTS.glob("tiny*.py"))  # helpers live in tests/support

"""scripts/gpu-check.sh: how to call it, and ``prepare`` packing a trimmed llama-cpp-python source
and the wheels the GPU machine lacks, with a stand-in for ``python -m pip download``.

``run --cpu`` (its rehearsal on tiny shapes) takes half a minute on two cores: the pieces it
runs have tests of their own (tests/bench, test_gpu_check_report.py, test_rollback_cost.py)."""

import json
import re
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).parents[2]
SCRIPT = ROOT / "scripts" / "gpu-check.sh"
SOURCE = "llama_cpp_python-0.3.36"

# a llama.cpp tree with one file in each kind of place prepare keeps or drops
TREE = [
    "pyproject.toml",
    "examples/simple.py",  # dropped: the Python package's examples
    "vendor/llama.cpp/src/llama.cpp",
    "vendor/llama.cpp/ggml/src/ggml-cuda/mmq.cu",
    "vendor/llama.cpp/ggml/src/ggml-cpu/ops.cpp",
    "vendor/llama.cpp/tools/mtmd/mtmd.cpp",
    "vendor/llama.cpp/tools/mtmd/test-1.jpeg",  # dropped: mtmd's test files
    "vendor/llama.cpp/models/ggml-vocab-llama.gguf",  # dropped: TRIM
    "vendor/llama.cpp/docs/build.md",
    "vendor/llama.cpp/ggml/src/ggml-vulkan/vulkan.cpp",
    "vendor/llama.cpp/tools/server/server.cpp",
]
DROPPED = {"examples/simple.py", "vendor/llama.cpp/tools/mtmd/test-1.jpeg"} | set(TREE[7:])

# `python -m pip download ...`: the sdist as a tar.gz of TREE, or an empty file per wheel asked
# for; each call's arguments are kept in calls.jsonl
FAKE_PYTHON = """#!{python}
import io, json, pathlib, sys, tarfile
args = sys.argv[1:]
with open({calls!r}, "a") as f:
    f.write(json.dumps(args) + "\\n")
dest = pathlib.Path(args[args.index("-d") + 1])
if "--no-binary" in args:
    with tarfile.open(dest / "{source}.tar.gz", "w:gz") as tar:
        for name in {tree!r}:
            info = tarfile.TarInfo("{source}/" + name)
            info.size = len(name)
            tar.addfile(info, io.BytesIO(name.encode()))
else:
    for spec in args[args.index("--platform"):]:
        if "==" in spec:
            (dest / (spec.replace("==", "-") + "-py3-none-any.whl")).write_bytes(b"")
"""


def test_without_a_command_it_prints_how_to_call_it():
    done = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 2
    assert done.stdout.startswith("# The prepared GPU check")
    assert "scripts/gpu-check.sh run --cpu" in done.stdout
    assert done.stdout.rstrip().endswith("GPU_CHECK_TOKENS (default 128).")  # the whole header


def test_prepare_packs_the_trimmed_source_and_the_wheels(tmp_path):
    calls = tmp_path / "calls.jsonl"
    python = tmp_path / "python"
    python.write_text(FAKE_PYTHON.format(python=sys.executable, calls=str(calls), source=SOURCE, tree=TREE))
    python.chmod(0o755)
    bundle = tmp_path / "bundle"
    env = {"PATH": "/usr/bin:/bin", "PYTHON": str(python), "GPU_BUNDLE": str(bundle)}
    done = subprocess.run(["bash", str(SCRIPT), "prepare"], capture_output=True, text=True, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stderr
    assert "next: copy the repo with gpu-bundle/" in done.stdout
    with tarfile.open(bundle / f"{SOURCE}-trimmed.tar.gz") as tar:
        kept = {m.name.removeprefix(f"{SOURCE}/") for m in tar.getmembers() if m.isfile()}
    assert kept == set(TREE) - DROPPED
    source, wheels = [json.loads(line) for line in calls.read_text().splitlines()]
    assert source[:3] == ["-m", "pip", "download"] and "llama-cpp-python==0.3.36" in source
    # wheels for the GPU machine's Python (3.12) and platform, not this machine's
    assert wheels[wheels.index("--python-version") + 1] == "3.12" and "--only-binary=:all:" in wheels
    assert "manylinux_2_28_x86_64" in wheels and "pydantic-core==2.50.5" in wheels
    assert (bundle / "wheels" / "pydantic-core-2.50.5-py3-none-any.whl").exists()


def _script_list(name: str) -> set[str]:
    """A name list assigned in gpu-check.sh (``NAME="a==1 b"``), as normalized names."""
    text = re.search(rf'^{name}="([^"]*)"', SCRIPT.read_text(), re.M).group(1)
    return {_normal(spec.split("==")[0]) for spec in text.split()}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_every_dependency_reaches_the_gpu_machine():
    """Each of pyproject's dependencies travels as a wheel, is in the GPU machine's image, is
    built there (llama-cpp-python) or is one the check never imports: a dependency added
    without a wheel would stop the check at its first import, there."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {_normal(re.split(r"[<>=!~ \[;]", d)[0]) for d in deps}
    covered = _script_list("WHEELS") | _script_list("IMAGE_HAS") | _script_list("NOT_NEEDED") | {"llama-cpp-python"}
    assert names - covered == set()


def test_the_check_never_imports_what_it_does_not_bring():
    not_needed = sorted(_script_list("NOT_NEEDED"))
    probe = (
        "import sys, localspec.cli, localspec.cli.bench, localspec.bench.runner;"
        f"print([m for m in {not_needed!r} if m in sys.modules])"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, check=True)
    assert done.stdout.strip() == "[]"


def test_a_rehearsal_packs_its_results_into_three_files(tmp_path):
    """`run --cpu` on one tiny target: the device tool brings back 8 files at most, so $OUT gets
    the summary, the log and one archive of the rest."""
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "OUT": str(tmp_path / "out"),
        "GPU_CHECK_MODELS": str(tmp_path / "models"),
        "GPU_CHECK_TARGETS": "tiny:q4_k_m",
        "GPU_CHECK_HYBRID": "",
        "LOCALSPEC_DATA_DIR": str(tmp_path / "data"),
    }
    done = subprocess.run(["bash", str(SCRIPT), "run", "--cpu"], capture_output=True, text=True, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stdout[-2000:]
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["gpu-check.log", "gpu-check.tgz", "summary.md"]
    with tarfile.open(out / "gpu-check.tgz") as tar:
        packed = {Path(m.name).name for m in tar.getmembers() if m.isfile()}
    assert {"bench-tiny-q4_k_m.json", "verify-rows-tiny-q4_k_m.json", "summary.md"} <= packed
    log = (out / "gpu-check.log").read_text()
    assert "import numpy, then a load: ok" in log and "python3 -m localspec run: ok" in log
    summary = (out / "summary.md").read_text()
    assert "write the target alone's text: met" in summary
    assert "The real pair's acceptance (qwen2.5-coder-1.5b+0.5b) on random-tiny-q4_k_m.gguf" in summary

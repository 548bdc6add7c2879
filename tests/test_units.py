"""Numbers for people (localspec.units): each spelling of bytes and durations by hand, and the
two memory probes on meminfo files the tests write."""

from __future__ import annotations

import pytest

from localspec import units
from localspec.units import (
    GiB,
    MiB,
    gb,
    gib,
    human_bytes,
    human_bytes_si,
    human_seconds,
    memory_available,
    memory_total,
    minutes_seconds,
)

MEMINFO = "MemTotal:  16000000 kB\nMemFree: 100 kB\nMemAvailable:    8000000 kB\n"


class TestBytes:
    @pytest.mark.parametrize(
        "n, shown",
        [
            (None, "?"),
            (0, "0 B"),
            (1023, "1023 B"),
            (1024, "1.0 KB"),  # steps of 1024
            (1_000_000, "976.6 KB"),
            (2_000_000_000, "1.9 GB"),  # 1.86 GiB
            (-2048, "-2.0 KB"),
            (1024**5, "1024.0 TB"),  # TB is the largest unit
        ],
    )
    def test_human_bytes_steps_of_1024(self, n, shown):
        assert human_bytes(n) == shown

    @pytest.mark.parametrize(
        "n, shown",
        [
            (None, "?"),
            (500, "500 B"),
            (1000, "1 KB"),  # steps of 1000, whole KB
            (2048, "2 KB"),
            (12.5e6, "12.5 MB"),
            (1e9, "1.0 GB"),
            (5e15, "5000.0 TB"),
        ],
    )
    def test_human_bytes_si_steps_of_1000(self, n, shown):
        assert human_bytes_si(n) == shown

    @pytest.mark.parametrize("n, shown", [(None, "?"), (8 * GiB, "8.0 GiB"), (512 * MiB, "0.5 GiB"), (0, "0.0 GiB")])
    def test_gib_is_always_gib(self, n, shown):
        assert gib(n) == shown

    @pytest.mark.parametrize("n, shown", [(8.2e9, "8.2 GB"), (0, "0.0 GB"), (GiB, "1.1 GB")])
    def test_gb_is_always_decimal_gb(self, n, shown):
        assert gb(n) == shown


class TestDurations:
    @pytest.mark.parametrize(
        "s, shown",
        [
            (None, "?"),
            (0, "0m00s"),
            (59.6, "1m00s"),  # rounded
            (185, "3m05s"),
            (3599.4, "59m59s"),
            (3600, "1h00m"),  # hours and minutes from an hour on
            (3725, "1h02m"),
        ],
    )
    def test_human_seconds(self, s, shown):
        assert human_seconds(s) == shown

    @pytest.mark.parametrize("s, shown", [(30, "0:30"), (40.9, "0:40"), (4500, "75:00")])  # cut, no hours
    def test_minutes_seconds(self, s, shown):
        assert minutes_seconds(s) == shown


class TestMemory:
    def test_total_and_available_are_their_own_lines(self, tmp_path):
        meminfo = tmp_path / "meminfo"
        meminfo.write_text(MEMINFO)
        assert memory_total(meminfo) == 16_000_000 * 1024
        assert memory_available(meminfo) == 8_000_000 * 1024

    def test_available_unknown_without_meminfo(self, tmp_path):
        assert memory_available(tmp_path / "absent") is None
        (tmp_path / "short").write_text("MemTotal:  16000000 kB\n")
        assert memory_available(tmp_path / "short") is None

    def test_total_falls_back_to_the_os(self, tmp_path, monkeypatch):
        pages = {"SC_PAGE_SIZE": 4096, "SC_PHYS_PAGES": 1000}
        monkeypatch.setattr(units.os, "sysconf", lambda name: pages[name])
        assert memory_total(tmp_path / "absent") == 4096 * 1000

    def test_total_unknown_when_the_os_says_nothing(self, tmp_path, monkeypatch):
        def sysconf(name):
            raise ValueError(name)

        monkeypatch.setattr(units.os, "sysconf", sysconf)
        assert memory_total(tmp_path / "absent") is None

    def test_this_machine(self):
        total, available = memory_total(), memory_available()
        assert total is not None and total > 10**8
        if available is not None:  # Linux
            assert available <= total

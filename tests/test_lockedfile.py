"""localspec/lockedfile.py: the atomic, locked write that profiles.json, settings.json and the
user catalog share, and those three stores under writers in several processes at once."""

from __future__ import annotations

import json
import multiprocessing
import os
import stat
from pathlib import Path

import pytest

from localspec import lockedfile
from localspec.lockedfile import LockTimeout, locked, write_atomic, write_locked
from localspec.models import catalog as cat
from localspec.models.profiles import ProfileStore, Use
from localspec.settings import Settings, load_settings, save_settings

# 4 processes of 20 writes each: on 2 cores the old writers (one shared temp name, no lock) lost
# updates or left a broken file in almost every run, and the locked ones finish in about a second
PROCESSES, WRITES = 4, 20
FORK = multiprocessing.get_context("fork")  # the children start at once, with the test's environment


def run_together(worker, *args) -> None:
    """``worker(start, i, *args)`` in PROCESSES processes that all begin writing at one moment."""
    start = FORK.Barrier(PROCESSES)
    procs = [FORK.Process(target=worker, args=(start, i, *args)) for i in range(PROCESSES)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * PROCESSES  # a worker that raised exits 1


def leftovers(folder: Path) -> list[str]:
    """Temp files and set-aside copies: a clean run leaves neither."""
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp") or ".bad-" in p.name)


def hold_until_told(path: Path, held, done) -> None:
    with locked(path):
        held.set()
        done.wait(30)


def hold_and_die(path: Path, held) -> None:
    lockedfile.locked(path).__enter__()
    held.set()
    os._exit(0)  # never released: the kernel drops the flock with the process


class TestWriteAtomic:
    def test_the_file_is_replaced_whole_and_no_temp_file_is_left(self, tmp_path):
        path = tmp_path / "f.json"
        write_atomic(path, "old")
        write_atomic(path, "new ✓ 😀")
        assert path.read_text(encoding="utf-8") == "new ✓ 😀"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["f.json"]

    def test_bytes_are_written_as_they_are(self, tmp_path):
        path = tmp_path / "f.npz"
        write_atomic(path, b"\x00\xff\r\n")
        assert path.read_bytes() == b"\x00\xff\r\n"

    def test_a_write_that_fails_leaves_the_old_file_and_no_temp_file(self, tmp_path):
        path = tmp_path / "f.json"
        write_atomic(path, "old")
        with pytest.raises(UnicodeEncodeError):
            write_atomic(path, "half a pair \udcff")  # fails inside the write, after the temp file exists
        assert path.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["f.json"]

    def test_a_file_keeps_its_permissions_and_a_new_one_is_private(self, tmp_path):
        kept, new = tmp_path / "kept.json", tmp_path / "new.json"
        kept.write_text("old")
        kept.chmod(0o640)
        write_atomic(kept, "x")
        write_atomic(new, "x")
        assert stat.S_IMODE(kept.stat().st_mode) == 0o640 and stat.S_IMODE(new.stat().st_mode) == 0o600

    def test_a_symlink_is_written_through_and_stays_a_link(self, tmp_path):
        real = tmp_path / "dotfiles" / "catalog.toml"
        real.parent.mkdir()
        real.write_text("old")
        link = tmp_path / "catalog.toml"
        link.symlink_to(real)
        write_atomic(link, "new")
        assert link.is_symlink() and real.read_text() == "new"


class TestLock:
    def test_a_held_lock_times_out_with_a_clear_message_and_nothing_written(self, tmp_path):
        path = tmp_path / "settings.json"
        path.write_text("old")
        held, done = FORK.Event(), FORK.Event()
        holder = FORK.Process(target=hold_until_told, args=(path, held, done))
        holder.start()
        try:
            assert held.wait(30)
            with pytest.raises(LockTimeout, match=r"settings\.json\.lock for more than 0\.2 s; nothing was written"):
                write_locked(path, "new", timeout=0.2)
        finally:
            done.set()
            holder.join(30)
        assert path.read_text() == "old"
        assert issubclass(LockTimeout, OSError)  # what the stores' callers already handle

    def test_a_holder_that_dies_leaves_no_stale_lock(self, tmp_path):
        path = tmp_path / "profiles.json"
        held = FORK.Event()
        holder = FORK.Process(target=hold_and_die, args=(path, held))
        holder.start()
        holder.join(30)
        assert held.is_set() and (tmp_path / "profiles.json.lock").exists()
        write_locked(path, "new", timeout=1)
        assert path.read_text() == "new"


# --- the three stores, written from several processes at once ------------------------------------
def add_use(start, i: int, path: Path) -> None:
    store = ProfileStore(path)
    start.wait()
    for _ in range(WRITES):
        store.update(f"model-{i}", Path(f"/m/{i}.gguf"), use={"none": Use(1, 0.5)})


def save_some_settings(start, i: int, path: Path) -> None:
    start.wait()
    for j in range(WRITES):
        save_settings(Settings(n_ctx=256 * (i + 1), max_tokens=j + 1), path)


def import_models(start, i: int, path: Path) -> None:
    start.wait()
    for j in range(WRITES):
        ref = cat.ModelRef(filename=f"{i}-{j}.gguf", quant="F32", size_bytes=j, params="1M", family="llama")
        cat.add_user_model(f"😀 {i}-{j}", ref, path)


class TestConcurrentWriters:
    """Each process writes its own entries; afterwards the file loads and every write is there."""

    def test_profile_updates_from_every_process_all_count(self, tmp_path):
        path = tmp_path / "profiles.json"
        run_together(add_use, path)
        store = ProfileStore(path)
        profiles = store.load()
        assert store.warning is None and leftovers(tmp_path) == []
        # each process added 20 uses of 1 token to its own key: a lost update shows as fewer
        assert {k: p.use["none"].tokens for k, p in profiles.items()} == {
            f"model-{i}": WRITES for i in range(PROCESSES)
        }
        assert json.loads(path.read_text())["model-0"]["use"]["none"]["seconds"] == pytest.approx(10.0)

    def test_settings_saved_at_once_leave_one_whole_file(self, tmp_path):
        path = tmp_path / "config" / "settings.json"
        run_together(save_some_settings, path)
        settings, warning = load_settings(path)
        assert warning is None and leftovers(path.parent) == []
        assert settings.n_ctx in {256 * (i + 1) for i in range(PROCESSES)} and 1 <= settings.max_tokens <= WRITES

    def test_catalog_imports_from_every_process_all_land(self, tmp_path):
        path = tmp_path / "config" / "catalog.toml"
        path.parent.mkdir()
        path.write_text("# my models\n")
        run_together(import_models, path)
        catalog, warnings = cat.load_catalog(Settings(), path)
        assert warnings == [] and leftovers(path.parent) == []
        mine = {k for k in catalog.models if k.startswith("😀 ")}
        assert mine == {f"😀 {i}-{j}" for i in range(PROCESSES) for j in range(WRITES)}
        assert path.read_text(encoding="utf-8").startswith("# my models\n")

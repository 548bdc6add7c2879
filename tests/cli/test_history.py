"""`localspec history` and `localspec history clear`, run in-process over a history written
under the test's data dir (conftest's LOCALSPEC_DATA_DIR)."""

from __future__ import annotations

import json

import pytest

from localspec.chat.history import HistoryStore
from localspec.cli import main
from localspec.settings import Settings, data_dir, save_settings


@pytest.fixture
def store() -> HistoryStore:
    """Two tokenizers' histories: 2 replies of 7 tokens under aa, 1 of 5 under bb."""
    store = HistoryStore()
    store.add("aa", [1, 2, 3])
    store.add("aa", [4, 5, 6, 7])
    store.add("bb", [1, 2, 3, 4, 5])
    return store


class TestList:
    def test_each_history_with_its_size_and_path(self, capsys, store):
        assert main(["history"]) == 0
        out = capsys.readouterr().out
        rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith(("aa ", "bb "))}
        assert rows["aa"][1:3] == ["2", "7"] and rows["aa"][-1] == str(data_dir() / "history" / "aa")
        assert rows["bb"][1:3] == ["1", "5"]
        assert "3 past replies" in out and "localspec history clear" in out

    def test_says_what_it_is_and_how_to_turn_it_off(self, capsys, store):
        main(["history"])
        out = " ".join(capsys.readouterr().out.split())  # the explanation is wrapped
        assert "token ids of the replies" in out and "chat store" in out
        assert "--no-history" in out and "draft.history" in out and "drafting from history: on" in out

    def test_the_setting_off_is_said(self, capsys, store):
        save_settings(Settings.model_validate({"draft": {"history": False}}))
        main(["history"])
        assert "drafting from history: off (the draft.history setting)" in capsys.readouterr().out

    def test_nothing_kept_says_so_and_where(self, capsys):
        assert main(["history"]) == 0
        assert f"nothing kept yet (it would be kept in {data_dir() / 'history'})" in capsys.readouterr().out

    def test_json(self, capsys, store):
        assert main(["history", "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["root"] == str(data_dir() / "history") and out["enabled"] is True
        assert [(h["key"], h["replies"], h["tokens"]) for h in out["histories"]] == [("aa", 2, 7), ("bb", 1, 5)]
        assert all(h["size_bytes"] > 0 and h["warnings"] == [] for h in out["histories"])

    def test_a_damaged_file_is_a_warning_and_the_rest_is_listed(self, capsys, store):
        path = store.root / "bb" / "recent.npz"
        path.write_bytes(b"not a history")
        assert main(["history"]) == 0
        captured = capsys.readouterr()
        assert f"warning: {path}: " in captured.err and "set aside as recent.npz.bad-" in captured.err
        assert "aa " in captured.out

    def test_a_root_that_cannot_be_read_exit_1(self, capsys):
        data_dir().mkdir(parents=True)
        (data_dir() / "history").write_text("a file where the folder goes")
        assert main(["history"]) == 1
        assert "localspec history: " in capsys.readouterr().err


class TestClear:
    def test_forgets_everything_and_says_how_much(self, capsys, store):
        assert main(["history", "clear"]) == 0
        assert "forgot 3 past replies" in capsys.readouterr().out
        assert store.summary() == []
        main(["history"])
        assert "nothing kept yet" in capsys.readouterr().out

    def test_nothing_to_forget(self, capsys):
        assert main(["history", "clear"]) == 0
        assert "nothing to forget" in capsys.readouterr().out

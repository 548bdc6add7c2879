"""The SQLite chat store: round trips, durability, damage and sharing (issues 4 and 6)."""

from __future__ import annotations

import os
import sqlite3
import stat

import pytest

from localspec.chat.store import ChatStore, summary_line


@pytest.fixture(autouse=True)
def _dirs(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCALSPEC_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("LOCALSPEC_DATA_DIR", str(tmp_path / "data"))


class TestRoundTrip:
    @pytest.mark.parametrize(
        "text",
        [
            "안녕하세요, 세계! 한국어 문장입니다.",
            "emoji 🚀👩‍👩‍👧‍👦🇰🇷 and ZWJ sequences",
            "code:\n```python\nprint('héllo')\n```\n",
            "",
            "x" * 100_000,  # a 100 KB paste
            "control \x01\x07\x1b[31m chars",
        ],
    )
    def test_text_survives_reopen(self, tmp_path, text):
        path = tmp_path / "chats.db"
        store = ChatStore(path)
        chat = store.new_chat("한국어 🚀", system_prompt="시스템 🤖", sampling={"temperature": 0.7})
        store.add_message(chat.id, "user", text)
        store.add_message(
            chat.id, "assistant", text + "!", status="stopped", meta={"stats": {"n_tokens": 3}, "draft_spans": [[0, 2]]}
        )
        store.close()

        again = ChatStore(path)
        assert again.warning is None
        (restored,) = again.list_chats()
        assert restored.title == "한국어 🚀"
        assert restored.system_prompt == "시스템 🤖"
        assert restored.sampling == {"temperature": 0.7}
        user, reply = again.messages(chat.id)
        assert user.content == text
        assert (reply.content, reply.status) == (text + "!", "stopped")
        assert reply.meta == {"stats": {"n_tokens": 3}, "draft_spans": [[0, 2]]}
        again.close()

    def test_update_delete_and_order(self, tmp_path):
        store = ChatStore(tmp_path / "c.db")
        a = store.new_chat("a")
        b = store.new_chat("b")
        store.add_message(a.id, "user", "newer")  # touching a makes it the latest
        assert [c.title for c in store.list_chats()] == ["a", "b"]
        store.update_chat(b.id, title="B", system_prompt="be brief", max_tokens=64)
        assert store.get_chat(b.id).title == "B"
        assert store.latest_chat().id == b.id
        m = store.add_message(b.id, "user", "hi")
        store.delete_message(m.id)
        assert store.messages(b.id) == []
        store.delete_chat(a.id)
        assert [c.id for c in store.list_chats()] == [b.id]
        with pytest.raises(ValueError):
            store.update_chat(b.id, nonsense=1)

    def test_export_markdown(self, tmp_path):
        store = ChatStore(tmp_path / "c.db")
        chat = store.new_chat("Demo", system_prompt="Be terse.")
        store.add_message(chat.id, "user", "Write hello 🌍")
        store.add_message(
            chat.id,
            "assistant",
            "```py\nprint('hi')\n```",
            status="stopped",
            meta={"stats": {"n_tokens": 5, "tokens_per_second": 12.5}},
        )
        md = store.export_markdown(chat.id)
        assert md.startswith("# Demo")
        assert "Be terse." in md and "Write hello 🌍" in md
        assert "## Assistant *(stopped)*" in md
        assert "12.5 tok/s" in md

    def test_summary_line(self):
        line = summary_line(
            {
                "n_tokens": 42,
                "tokens_per_second": 31.0,
                "speedup": 1.62,
                "acceptance_rate": 0.78,
                "tokens_per_pass": 2.4,
            }
        )
        assert line == "42 tokens · 31.0 tok/s · 1.62× · 78% accepted · 2.40 tok/pass"

    def test_summary_line_of_a_reply_that_drafted_nothing(self):
        # 1.13× against the load-time estimate, but nothing was drafted: the same computation
        line = summary_line(
            {
                "n_tokens": 403,
                "n_drafted": 0,
                "tokens_per_second": 20.9,
                "speedup": 1.13,
                "acceptance_rate": None,
                "tokens_per_pass": 1.0,
                "thinking_tokens": 120,
            }
        )
        assert line == "403 tokens (120 thinking) · 20.9 tok/s · 1.00× (not drafting) · 1.00 tok/pass"


class TestThinking:
    def test_thinking_is_kept_apart_from_the_answer(self, tmp_path):
        store = ChatStore(tmp_path / "c.db")
        chat = store.new_chat("Qwen3")
        store.add_message(chat.id, "user", "Say hello")
        store.add_message(chat.id, "assistant", "Hello!", thinking="The user wants a greeting.")
        store.close()
        user, reply = ChatStore(tmp_path / "c.db").messages(chat.id)
        assert (user.content, user.thinking) == ("Say hello", "")
        assert (reply.content, reply.thinking) == ("Hello!", "The user wants a greeting.")

    def test_export_puts_the_thinking_in_a_closed_block_before_the_answer(self, tmp_path):
        store = ChatStore(tmp_path / "c.db")
        chat = store.new_chat("Qwen3")
        store.add_message(chat.id, "user", "Say hello")
        store.add_message(chat.id, "assistant", "Hello!", thinking="The user wants a greeting.")
        md = store.export_markdown(chat.id)
        assert (
            "## Assistant\n\n<details><summary>Thinking</summary>\n\nThe user wants a greeting.\n\n"
            "</details>\n\nHello!\n"
        ) in md
        assert md.count("<details>") == 1  # the user's message has none

    def test_a_database_of_the_old_schema_is_migrated_without_loss(self, tmp_path):
        path = tmp_path / "old.db"
        old = sqlite3.connect(path)  # the schema before the thinking column (user_version 0)
        old.executescript("""
            CREATE TABLE chats (id INTEGER PRIMARY KEY AUTOINCREMENT, title TEXT NOT NULL,
                created REAL NOT NULL, updated REAL NOT NULL, system_prompt TEXT NOT NULL DEFAULT '',
                sampling TEXT NOT NULL DEFAULT '{}', mode TEXT, max_tokens INTEGER);
            CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT,
                chat_id INTEGER NOT NULL REFERENCES chats(id) ON DELETE CASCADE, role TEXT NOT NULL,
                content TEXT NOT NULL, status TEXT NOT NULL DEFAULT 'done', meta TEXT NOT NULL DEFAULT '{}',
                created REAL NOT NULL);
            INSERT INTO chats VALUES (1, '옛 대화', 1.0, 2.0, 'be brief', '{}', 'draft', 64);
            INSERT INTO messages VALUES (1, 1, 'user', 'hi 🚀', 'done', '{}', 1.0);
            INSERT INTO messages VALUES (2, 1, 'assistant', 'hello', 'stopped', '{"stats": {"n_tokens": 2}}', 2.0);
        """)
        old.close()
        store = ChatStore(path)
        assert store.warning is None
        assert store.conn.execute("PRAGMA user_version").fetchone()[0] == 1
        (chat,) = store.list_chats()
        assert (chat.title, chat.system_prompt, chat.mode, chat.max_tokens) == ("옛 대화", "be brief", "draft", 64)
        msgs = store.messages(1)
        assert [(m.role, m.content, m.status, m.meta, m.thinking) for m in msgs] == [
            ("user", "hi 🚀", "done", {}, ""),
            ("assistant", "hello", "stopped", {"stats": {"n_tokens": 2}}, ""),
        ]
        store.add_message(1, "assistant", "answer", thinking="thought")
        store.close()
        again = ChatStore(path)  # opening a migrated file again changes nothing
        assert [m.thinking for m in again.messages(1)] == ["", "", "thought"]
        # an older localspec reads the file as before: its columns are all still there
        rows = (
            sqlite3.connect(path)
            .execute("SELECT id, chat_id, role, content, status, meta, created FROM messages ORDER BY id")
            .fetchall()
        )
        assert [r[3] for r in rows] == ["hi 🚀", "hello", "answer"]


class TestDurability:
    def test_file_is_private_and_wal(self, tmp_path):
        path = tmp_path / "chats.db"
        store = ChatStore(path)
        store.add_message(store.new_chat().id, "user", "x")
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"

    def test_each_message_visible_to_another_connection_at_once(self, tmp_path):
        """Committed as it completes: a second reader sees it without any close/flush."""
        path = tmp_path / "chats.db"
        store = ChatStore(path)
        chat = store.new_chat()
        store.add_message(chat.id, "user", "first")
        other = sqlite3.connect(path)
        assert other.execute("SELECT content FROM messages").fetchall() == [("first",)]
        other.close()

    def test_two_stores_on_one_file(self, tmp_path):
        path = tmp_path / "chats.db"
        one, two = ChatStore(path), ChatStore(path)
        c1, c2 = one.new_chat("one"), two.new_chat("two")
        for i in range(50):  # interleaved writers
            one.add_message(c1.id, "user", f"one {i}")
            two.add_message(c2.id, "user", f"two {i}")
        assert len(two.messages(c1.id)) == 50 and len(one.messages(c2.id)) == 50
        assert one.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


class TestDamage:
    def test_garbage_file_is_kept_and_replaced(self, tmp_path):
        path = tmp_path / "chats.db"
        path.write_bytes(b"this is not a database" * 100)
        store = ChatStore(path)
        assert store.warning and "damaged" in store.warning
        backups = list(tmp_path.glob("chats.db.corrupt-*"))
        assert len(backups) == 1
        assert backups[0].read_bytes() == b"this is not a database" * 100
        chat = store.new_chat("fresh")  # and the new store works
        store.add_message(chat.id, "user", "ok")
        assert store.messages(chat.id)[0].content == "ok"

    def test_truncated_database(self, tmp_path):
        path = tmp_path / "chats.db"
        store = ChatStore(path)
        chat = store.new_chat()
        for _ in range(200):
            store.add_message(chat.id, "user", "padding " * 50)
        store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        store.close()
        data = path.read_bytes()
        path.write_bytes(data[:4096] + b"\xff" * 5000 + data[9096:])  # clobber pages
        again = ChatStore(path)
        assert again.warning is not None
        assert list(tmp_path.glob("chats.db.corrupt-*"))
        again.new_chat("works")

    def test_locked_database_falls_back_to_memory(self, tmp_path, monkeypatch):
        import localspec.chat.store as store_mod

        path = tmp_path / "chats.db"
        ChatStore(path).close()
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("PRAGMA locking_mode=EXCLUSIVE")
        holder.execute("BEGIN EXCLUSIVE")
        monkeypatch.setattr(store_mod, "BUSY_TIMEOUT_MS", 50)
        store = ChatStore(path)
        assert store.warning and "locked" in store.warning
        assert store.path and not list(tmp_path.glob("chats.db.corrupt-*"))
        store.add_message(store.new_chat().id, "user", "kept in memory")
        holder.execute("ROLLBACK")
        holder.close()


class TestKill:
    def test_sigkill_mid_reply_loses_at_most_that_reply(self, tmp_path):
        """A real process adds messages as a chat would, then is SIGKILLed while 'generating'."""
        import signal
        import subprocess
        import sys
        import textwrap

        path = tmp_path / "chats.db"
        script = textwrap.dedent(f"""
            import sys, time
            from localspec.chat.store import ChatStore
            store = ChatStore({str(path)!r})
            chat = store.new_chat("killed")
            for i in range(3):
                store.add_message(chat.id, "user", f"question {{i}} 안녕 😀")
                store.add_message(chat.id, "assistant", f"answer {{i}}")
            store.add_message(chat.id, "user", "the last question")
            print("ready", flush=True)
            time.sleep(60)  # generating the reply when the kill comes
        """)
        proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        store = ChatStore(path)
        (chat,) = store.list_chats()
        contents = [m.content for m in store.messages(chat.id)]
        assert contents[-1] == "the last question" and len(contents) == 7
        assert contents[0] == "question 0 안녕 😀"
        assert store.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"

"""The chat store: conversations, their settings and messages in SQLite (user data dir).

Durability rules (docs/reliability.md lists each case and its test): WAL journal, every write
is its own committed transaction, so a message is on disk the moment it completes and a SIGKILL
loses at most the reply being generated. The file is created readable by the user only (0600;
SQLite gives the -wal/-shm files the same mode). A database that cannot be opened or fails
``quick_check`` is copied aside (``chats.db.corrupt-YYYYmmdd-HHMMSS``) and a fresh one is
started; a locked one falls back to an in-memory store. Either way the caller gets
``store.warning`` to show, and the app keeps running.
Several connections (two app instances) may share one file: WAL plus a busy timeout.

Schema changes are migrations (``MIGRATIONS``), numbered by SQLite's ``user_version``: each
only adds (a column with a default), so an existing database keeps every row and an older
localspec can still read a newer file.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS chats (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    title TEXT NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    system_prompt TEXT NOT NULL DEFAULT '',
    sampling TEXT NOT NULL DEFAULT '{}',
    mode TEXT,
    max_tokens INTEGER
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    chat_id INTEGER NOT NULL REFERENCES chats(id) ON DELETE CASCADE,
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'done',
    meta TEXT NOT NULL DEFAULT '{}',
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_chat ON messages(chat_id, id);
"""

# (user_version it brings the database to, table, column, its definition). Applied in order to
# a database whose user_version is lower; a column already there (another instance migrated
# meanwhile) is skipped.
MIGRATIONS = [
    # a reasoning model's thinking, kept apart from its answer (localspec.chat.thinking)
    (1, "messages", "thinking", "TEXT NOT NULL DEFAULT ''"),
]

# Tuning choice: long enough to ride out another instance's commit, short enough that a
# stuck lock is reported instead of freezing the UI.
BUSY_TIMEOUT_MS = 3000


@dataclass(frozen=True)
class Chat:
    id: int
    title: str
    created: float
    updated: float
    system_prompt: str = ""
    sampling: dict = field(default_factory=dict)
    mode: str | None = None
    max_tokens: int | None = None


@dataclass(frozen=True)
class Message:
    id: int
    chat_id: int
    role: str  # "system" | "user" | "assistant"
    content: str
    status: str = "done"  # "done" | "stopped" (Esc, partial kept) | "error"
    meta: dict = field(default_factory=dict)  # stats, draft spans, mode
    created: float = 0.0
    thinking: str = ""  # a reasoning model's <think> text; ``content`` is the answer alone


class ChatStore:
    def __init__(self, path: Path | str | None) -> None:
        """``path=None`` or ``":memory:"`` keeps everything in memory (tests, fallback)."""
        self.path = None if path in (None, ":memory:") else Path(path)
        self.warning: str | None = None
        self._lock = threading.Lock()
        self.conn = self._open()

    # --- opening, with the corrupt / locked fallbacks ----------------------------------
    def _open(self) -> sqlite3.Connection:
        if self.path is None:
            return self._connect(":memory:")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not self.path.exists():
            # create it 0600 before SQLite does (SQLite would use the umask)
            os.close(os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600))
        try:
            conn = self._connect(str(self.path))
            row = conn.execute("PRAGMA quick_check").fetchone()
            if row is None or row[0] != "ok":
                conn.close()
                raise sqlite3.DatabaseError(f"integrity check failed: {row[0] if row else 'no answer'}")
            return conn
        except sqlite3.OperationalError as e:
            if "locked" in str(e) or "busy" in str(e):
                self.warning = (
                    f"The chat store {self.path} is locked by another program ({e}). "
                    "Chats of this run are kept in memory only."
                )
                return self._connect(":memory:")
            return self._recover(e)
        except sqlite3.DatabaseError as e:
            return self._recover(e)

    def _recover(self, error: Exception) -> sqlite3.Connection:
        assert self.path is not None
        backup = self.path.with_name(f"{self.path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}")
        n = 1
        while backup.exists():
            backup = backup.with_name(f"{self.path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}-{n}")
            n += 1
        shutil.copy2(self.path, backup)
        for suffix in ("", "-wal", "-shm", "-journal"):
            p = Path(str(self.path) + suffix)
            if p.exists():
                p.unlink()
        os.close(os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600))
        self.warning = (
            f"The chat store {self.path} was damaged ({error}). A copy was kept as "
            f"{backup}; starting with an empty store."
        )
        return self._connect(str(self.path))

    def _connect(self, target: str) -> sqlite3.Connection:
        # isolation_level=None: autocommit, each statement commits at once; multi-statement
        # changes use explicit BEGIN/COMMIT in _tx
        conn = sqlite3.connect(target, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        if target != ":memory:":
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable at each commit point
        conn.execute("PRAGMA foreign_keys=ON")
        conn.executescript(SCHEMA)
        _migrate(conn)
        return conn

    def _execute(self, sql: str, args: tuple = ()) -> sqlite3.Cursor:
        with self._lock:
            return self.conn.execute(sql, args)

    def close(self) -> None:
        with self._lock:
            self.conn.close()

    # --- chats -------------------------------------------------------------------------
    def new_chat(
        self,
        title: str = "New chat",
        system_prompt: str = "",
        sampling: dict | None = None,
        mode: str | None = None,
        max_tokens: int | None = None,
    ) -> Chat:
        now = time.time()
        cur = self._execute(
            "INSERT INTO chats (title, created, updated, system_prompt, sampling, mode, max_tokens) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (title, now, now, system_prompt, json.dumps(sampling or {}), mode, max_tokens),
        )
        chat = self.get_chat(_row_id(cur))
        assert chat is not None, "the row was inserted in this call"
        return chat

    def get_chat(self, chat_id: int) -> Chat | None:
        row = self._execute(
            "SELECT id, title, created, updated, system_prompt, sampling, mode, max_tokens FROM chats WHERE id = ?",
            (chat_id,),
        ).fetchone()
        return _chat(row) if row else None

    def list_chats(self) -> list[Chat]:
        rows = self._execute(
            "SELECT id, title, created, updated, system_prompt, sampling, mode, max_tokens "
            "FROM chats ORDER BY updated DESC, id DESC"
        ).fetchall()
        return [_chat(r) for r in rows]

    def latest_chat(self) -> Chat | None:
        chats = self.list_chats()
        return chats[0] if chats else None

    def update_chat(self, chat_id: int, **changes) -> Chat | None:
        allowed = {"title", "system_prompt", "sampling", "mode", "max_tokens"}
        bad = set(changes) - allowed
        if bad:
            raise ValueError(f"unknown chat fields: {sorted(bad)}")
        if "sampling" in changes:
            changes["sampling"] = json.dumps(changes["sampling"] or {})
        cols = ", ".join(f"{k} = ?" for k in changes)
        self._execute(f"UPDATE chats SET {cols}, updated = ? WHERE id = ?", (*changes.values(), time.time(), chat_id))
        return self.get_chat(chat_id)

    def delete_chat(self, chat_id: int) -> None:
        self._execute("DELETE FROM chats WHERE id = ?", (chat_id,))

    # --- messages ----------------------------------------------------------------------
    def add_message(
        self, chat_id: int, role: str, content: str, status: str = "done", meta: dict | None = None, thinking: str = ""
    ) -> Message:
        now = time.time()
        with self._lock:
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                cur = self.conn.execute(
                    "INSERT INTO messages (chat_id, role, content, status, meta, created, thinking) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (chat_id, role, content, status, json.dumps(meta or {}, ensure_ascii=False), now, thinking),
                )
                self.conn.execute("UPDATE chats SET updated = ? WHERE id = ?", (now, chat_id))
                self.conn.execute("COMMIT")
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise
        return Message(_row_id(cur), chat_id, role, content, status, meta or {}, now, thinking)

    def messages(self, chat_id: int) -> list[Message]:
        rows = self._execute(
            "SELECT id, chat_id, role, content, status, meta, created, thinking FROM messages "
            "WHERE chat_id = ? ORDER BY id",
            (chat_id,),
        ).fetchall()
        return [Message(r[0], r[1], r[2], r[3], r[4], _loads(r[5]), r[6], r[7] or "") for r in rows]

    def delete_message(self, message_id: int) -> None:
        self._execute("DELETE FROM messages WHERE id = ?", (message_id,))

    # --- export ------------------------------------------------------------------------
    def export_markdown(self, chat_id: int) -> str:
        chat = self.get_chat(chat_id)
        if chat is None:
            raise KeyError(chat_id)
        lines = [f"# {chat.title}", ""]
        if chat.system_prompt:
            lines += ["**System:**", "", chat.system_prompt, ""]
        for m in self.messages(chat_id):
            who = {"user": "You", "assistant": "Assistant", "system": "System"}.get(m.role, m.role)
            note = " *(stopped)*" if m.status == "stopped" else " *(error)*" if m.status == "error" else ""
            lines += [f"## {who}{note}", ""]
            if m.thinking:  # collapsed where Markdown renders HTML (GitHub), apart from the answer
                lines += ["<details><summary>Thinking</summary>", "", m.thinking, "", "</details>", ""]
            lines += [m.content, ""]
            stats = m.meta.get("stats") if m.meta else None
            if stats and stats.get("tokens_per_second"):
                lines += [f"<sub>{summary_line(stats)}</sub>", ""]
        return "\n".join(lines)


def summary_line(stats: dict) -> str:
    """One line under a reply: '42 tokens · 31.0 tok/s · 1.62× · 78% accepted · 2.4 tok/pass'.
    A reply that drafted nothing reads '1.00× (not drafting)' whatever its ratio to the
    target-only estimate: the same computation cannot be faster, the rest is noise."""
    parts = [f"{stats.get('n_tokens', 0)} tokens"]
    if stats.get("thinking_tokens"):
        parts[0] += f" ({stats['thinking_tokens']} thinking)"
    if stats.get("tokens_per_second"):
        parts.append(f"{stats['tokens_per_second']:.1f} tok/s")
    if stats.get("n_drafted") == 0 and stats.get("n_tokens"):
        parts.append("1.00× (not drafting)")
    elif stats.get("speedup"):
        parts.append(f"{stats['speedup']:.2f}×")
    if stats.get("acceptance_rate") is not None:
        parts.append(f"{stats['acceptance_rate'] * 100:.0f}% accepted")
    if stats.get("tokens_per_pass"):
        parts.append(f"{stats['tokens_per_pass']:.2f} tok/pass")
    if stats.get("mode"):
        parts.append(str(stats["mode"]))
    return " · ".join(parts)


def _migrate(conn: sqlite3.Connection) -> None:
    """Bring the schema up to the last of ``MIGRATIONS`` in one transaction (never drops data)."""
    if conn.execute("PRAGMA user_version").fetchone()[0] >= MIGRATIONS[-1][0]:
        return
    conn.execute("BEGIN IMMEDIATE")  # two instances opening one old file migrate one at a time
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        for to, table, column, definition in MIGRATIONS:
            if version >= to:
                continue
            columns = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
            if column not in columns:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {definition}")
            conn.execute(f"PRAGMA user_version = {to}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _loads(text: str) -> dict:
    try:
        value = json.loads(text or "{}")
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _chat(r) -> Chat:
    return Chat(r[0], r[1], r[2], r[3], r[4] or "", _loads(r[5]), r[6], r[7])


def _row_id(cur: sqlite3.Cursor) -> int:
    """The id of the row an INSERT just wrote (sqlite always sets it after one)."""
    if cur.lastrowid is None:
        raise sqlite3.DatabaseError("INSERT reported no row id")
    return cur.lastrowid

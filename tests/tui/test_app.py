"""The app (localspec.tui.app): its entry point, the real catalog and the real llama.cpp
session behind it, and what survives a restart (chats, settings, the theme)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from localspec.chat.session import LoadOptions, PairSpec
from localspec.chat.store import ChatStore
from localspec.core.options import DraftOptions, ModelOptions
from localspec.settings import Settings, load_settings, settings_path
from localspec.tui.app import LocalspecApp
from localspec.tui.screens.pair import PairScreen, compatible_drafts
from localspec.tui.widgets import (
    ReplyView,
    StatsPanel,
)
from tests.support.fake_session import (
    HELLO,
    HELLO_TEXT,
    FakeSession,
)
from tests.support.tui import (
    SIZE,
    Files,
    chat_app,
    make_app,
    mid_reply,
    notified,
    rendered,
    send,
    send_and_wait,
    settled,
    wait_for,
)


class TestEntryPoint:
    def test_app_spec_from_arguments(self, tmp_path):
        from localspec.cli import build_parser
        from localspec.cli.app_args import app_spec

        t, d = tmp_path / "t.gguf", tmp_path / "d.gguf"
        t.write_bytes(b"GGUF")
        d.write_bytes(b"GGUF")
        parse = build_parser().parse_args
        assert app_spec(parse([])) is None
        assert app_spec(parse(["--target", str(t), "--draft", str(d)])) == PairSpec(t, d, False)
        assert app_spec(parse(["--target", str(t), "--lookup"])).mode == "lookup"
        with pytest.raises(SystemExit, match="no such file"):
            app_spec(parse(["--target", str(tmp_path / "missing.gguf")]))
        with pytest.raises(SystemExit, match="needs --target"):
            app_spec(parse(["--draft", str(d)]))

    def test_replaced_session_is_closed_only_when_idle(self):
        from localspec.tui.app import close_when_idle

        session = FakeSession(list(HELLO))
        session.lock = threading.Lock()
        session.lock.acquire()  # a generation is running
        close_when_idle(session, timeout=0.05)
        assert not session.closed
        session.lock.release()
        close_when_idle(session, timeout=0.05)
        assert session.closed


class TestLoading:
    async def test_a_longest_draft_of_0_in_the_settings_loads_the_target_alone(self):
        """Issue 66: the settings' draft_max 0 never drafts; no draft is loaded for it."""
        async with chat_app(settings=Settings(draft=DraftOptions(draft_max=0))) as (app, _):
            ((spec, options),) = app.session_factory.loaded
            assert spec == PairSpec(Path("t.gguf")) and options.draft_max == 0 and app.session.mode == "none"

    async def test_the_load_options_carry_every_setting_copy_included(self):
        from tests.support.options import NOT_DEFAULT  # every load option, none at its default

        model = {k: v for k, v in NOT_DEFAULT.items() if k in ModelOptions.model_fields}
        draft = DraftOptions(**{k: v for k, v in NOT_DEFAULT.items() if k in DraftOptions.model_fields})
        async with chat_app(settings=Settings(**model, overflow="refuse", draft=draft)) as (app, _):
            ((_, options),) = app.session_factory.loaded
        assert options == LoadOptions(**NOT_DEFAULT, overflow="refuse")
        assert options.copy is False


class TestRealCatalogAndBackend:
    async def test_pair_menu_with_the_built_in_catalog(self, tmp_path):
        from localspec.models.catalog import load_catalog

        catalog, warnings = load_catalog(Settings())
        assert warnings == []
        app = make_app(spec=None, catalog=catalog, files=Files(tmp_path))
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: isinstance(app.screen, PairScreen))
            menu = app.screen
            assert menu.pair.id == catalog.default_pair_id
            assert menu.query_one("#pair-list").option_count == len(catalog.pairs)
            for pair in catalog.pairs:  # every offered draft shares the target's family
                assert all(d.family == pair.target.family for d in compatible_drafts(pair))

    async def test_chat_on_tiny_real_models(self, tmp_path):
        """The real Session (llama.cpp) behind the app: load in a worker, chat, stats from real Steps."""
        pytest.importorskip("llama_cpp")
        from tests.support.tiny_gguf import write_tiny_gguf

        target = write_tiny_gguf(tmp_path / "target.gguf", seed=0, n_ctx=512)
        draft = write_tiny_gguf(tmp_path / "draft.gguf", seed=1, noise_of=0, noise=0.6, n_ctx=512)
        app = LocalspecApp(Settings(n_ctx=512, max_tokens=24, threads=1), spec=PairSpec(Path(target), Path(draft)))
        async with chat_app(app=app) as (app, pilot):
            await send_and_wait(app, pilot, "hello world")
            reply = app.conversation.history[-1]
            assert reply.role == "assistant" and reply.status == "done"
            stats = reply.meta["stats"]
            assert stats["n_tokens"] > 0 and stats["n_steps"] > 0
            app.chat_screen.refresh_panels(force=True)
            values = app.query_one(StatsPanel).values
            assert values["target alone"] != "–"
            assert values["measured by"] == app.session.baseline_note
            assert values["drafting"].startswith(("on: ", "off: "))  # the real controller's account
            assert stats["drafting"]["line"] == values["drafting"]

    async def test_smallest_context_chats_on_tiny_real_models(self, tmp_path):
        """Issue 12: at the smallest allowed context the app chats turn after turn (oldest turns
        dropped), and a message the context cannot hold is an error for that reply only."""
        pytest.importorskip("llama_cpp")
        from localspec.core import options
        from tests.support.tiny_gguf import write_tiny_gguf

        target = write_tiny_gguf(tmp_path / "target.gguf", seed=0, n_ctx=512)
        draft = write_tiny_gguf(tmp_path / "draft.gguf", seed=1, noise_of=0, noise=0.6, n_ctx=512)
        app = LocalspecApp(
            Settings(n_ctx=options.MIN_CTX, max_tokens=24, threads=1), spec=PairSpec(Path(target), Path(draft))
        )
        notes = notified(app)
        async with chat_app(app=app) as (app, pilot):
            assert app.session.target.n_ctx == options.MIN_CTX
            for turn in range(4):  # ~50 tokens a message on the tiny vocabulary: turns get dropped
                await send_and_wait(app, pilot, f"hello world {turn}")
                assert app.conversation.history[-1].status == "done"
            await send(app, pilot, "the model is fast " * 40)  # ~770 tokens: more than the context
            await wait_for(pilot, lambda: app.chat_screen.generating is None and len(app.conversation.history) == 9)
            await wait_for(pilot, lambda: any("the context holds 256" in n for n in notes))
            await send_and_wait(app, pilot, "hi")
            assert app.conversation.history[-1].role == "assistant" and app.conversation.history[-1].status == "done"


# --- persistence: chats, settings files, the store, the theme --------------------------------


class TestPersistence:
    async def test_quit_start_chat_restored(self):
        async with chat_app(settings=Settings(show_draft_tokens=True)) as (app, pilot):
            await send_and_wait(app, pilot, "안녕 🚀")
            spans = app.query(ReplyView).last().draft_spans
            chat_id = app.conversation.chat.id
            await pilot.press("ctrl+q")
        async with chat_app(settings=Settings(show_draft_tokens=True)) as (app2, pilot):
            assert app2.conversation.chat.id == chat_id and app2.conversation.chat.title == "안녕 🚀"
            assert [m.content for m in app2.conversation.history] == ["안녕 🚀", HELLO_TEXT]
            reply = app2.query(ReplyView).last()
            assert reply.text == HELLO_TEXT and reply.draft_spans == [tuple(s) for s in spans]
            assert "200.0 tok/s" in str(reply.query_one(".reply-summary").render())

    async def test_quit_mid_reply_keeps_partial(self):
        async with mid_reply() as (app, pilot, session):
            chat_id = app.conversation.chat.id
            await pilot.press("ctrl+q")
        session.gate.set()
        stored = ChatStore(Path(app.store.path)).messages(chat_id)
        assert [(m.role, m.content, m.status) for m in stored][-1] == ("assistant", "Hello,", "stopped")

    async def test_new_chat_list_and_switch(self):
        async with chat_app() as (app, pilot):
            await send_and_wait(app, pilot, "one [bold]not markup[/x]")
            first = app.conversation.chat.id
            await pilot.press("ctrl+n")
            assert app.conversation.history == [] and app.conversation.chat.id != first
            await pilot.press("ctrl+l")
            await pilot.pause()
            assert type(app.screen).__name__ == "ChatListScreen"
            options = app.screen.query_one("#chat-list")
            ids = [int(options.get_option_at_index(i).id) for i in range(options.option_count)]
            options.highlighted = ids.index(first)
            await pilot.press("enter")
            await pilot.pause()
            assert app.conversation.chat.id == first
            assert [m.content for m in app.conversation.history] == ["one [bold]not markup[/x]", HELLO_TEXT]

    async def test_new_chat_mid_reply_keeps_partial_in_its_chat(self):
        async with mid_reply() as (app, pilot, session):
            first = app.conversation.chat.id
            await pilot.press("ctrl+n")
            session.gate.set()
            await wait_for(pilot, lambda: session.generator_closed == 1)
            await settled(app, pilot)  # the stopped reply is kept
            assert app.conversation.chat.id != first and app.conversation.history == [] and not app.query(ReplyView)
            kept = app.store.messages(first)
            assert [(m.role, m.content, m.status) for m in kept] == [
                ("user", "hi", "done"),
                ("assistant", "Hello,", "stopped"),
            ]

    async def test_another_pair_mid_reply_keeps_partial_in_the_chat(self):
        async with mid_reply() as (app, pilot, session):
            view = app.chat_screen.reply_view
            app.load_pair(PairSpec(Path("t.gguf"), None, True))  # F6 and another pair, mid-reply
            session.gate.set()
            await wait_for(pilot, lambda: type(app.screen).__name__ == "ChatScreen" and view.status == "stopped")
            kept = app.conversation.history
            assert [(m.role, m.content, m.status) for m in kept] == [
                ("user", "hi", "done"),
                ("assistant", "Hello,", "stopped"),
            ]
            assert view.message_id == kept[-1].id and "stopped" in rendered(view.query_one(".reply-summary"))
            await pilot.press("ctrl+r")  # the kept reply is the last one: regenerated in its place
            await wait_for(pilot, lambda: app.chat_screen.generating is None and kept[-1].status == "done")
            assert [m.content for m in app.conversation.history] == ["hi", HELLO_TEXT]
            assert [v.text for v in app.query(ReplyView)] == [HELLO_TEXT]

    async def test_corrupted_settings_warns_and_backs_up(self):
        path = settings_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text('{"n_ctx": 12, "theme": ', encoding="utf-8")
        settings, warning = load_settings()
        assert warning and str(path) in warning
        backups = list(path.parent.glob("settings.json.bad-*"))
        assert len(backups) == 1 and backups[0].read_text() == '{"n_ctx": 12, "theme": '
        assert path.read_text() == '{"n_ctx": 12, "theme": '  # never silently overwritten
        async with chat_app(settings=settings, warning=warning) as (app, pilot):
            assert any("Using defaults" in n for n in notified(app))

    async def test_corrupted_store_warns_and_starts(self, tmp_path):
        db = tmp_path / "data" / "chats.db"
        db.parent.mkdir(parents=True)
        db.write_bytes(b"garbage" * 1000)
        async with chat_app() as (app, pilot):
            assert any("damaged" in n for n in notified(app))
            await send_and_wait(app, pilot, "still works")
        assert list(db.parent.glob("chats.db.corrupt-*"))

    async def test_palette_lists_every_action(self):
        from localspec.tui.app import KEYS

        async with chat_app() as (app, pilot):
            titles = [c.title for c in app.get_system_commands(app.screen)]
            for _key, action, desc, _label in KEYS:
                if action and action != "interrupt":
                    assert desc[0].upper() + desc[1:] in titles

    async def test_theme_toggle_is_saved(self):
        async with chat_app() as (app, pilot):
            await pilot.press("ctrl+t")
            assert app.theme == "textual-light"
        assert load_settings()[0].theme == "textual-light"

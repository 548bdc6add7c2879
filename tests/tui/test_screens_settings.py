"""The settings screens (localspec.tui.screens.app_settings, .chat_settings, .form): each
option field refused beside it as it is typed, then saved; export and copy next to a chat's
settings."""

from __future__ import annotations

from localspec.settings import Settings, load_settings
from tests.support.fake_session import (
    FakeSession,
)
from tests.support.tui import (
    chat_app,
    open_settings,
    send_and_wait,
    wait_for,
)


class TestSettings:
    async def test_settings_screen_validates_and_saves(self):
        async with chat_app() as (app, pilot):
            screen = await open_settings(app, pilot)
            screen.query_one("#k-n_ctx").value = "12"  # below the allowed 256
            screen.action_save()
            await pilot.pause()
            assert "n_ctx" in str(screen.query_one("#settings-error").render())
            screen.query_one("#k-n_ctx").value = "8192"
            screen.query_one("#k-draft-draft_max").value = "8"
            screen.action_save()
            await pilot.pause()
            assert type(app.screen).__name__ == "ChatScreen"
        saved, warning = load_settings()
        assert warning is None and (saved.n_ctx, saved.draft.draft_max) == (8192, 8)

    async def test_the_save_button_saves(self):
        """The Save button's handler is the form's (OptionForm.action_save), inherited."""
        async with chat_app() as (app, pilot):
            screen = await open_settings(app, pilot)
            screen.query_one("#k-draft-draft_max").value = "6"
            screen.query_one("#save").press()
            await wait_for(pilot, lambda: type(app.screen).__name__ == "ChatScreen")
        assert load_settings()[0].draft.draft_max == 6

    async def test_settings_fields_refuse_out_of_range_values_beside_the_field(self, monkeypatch):
        """Issue 12: each option field is checked as it is typed, in localspec.core.options' words."""
        from localspec.core import options
        from localspec.tui.screens.app_settings import SettingsScreen

        monkeypatch.setattr(options, "usable_cpus", lambda: 2)
        async with chat_app() as (app, pilot):
            screen = await open_settings(app, pilot)
            beside = lambda key: str(screen.query_one(f"#e-k-{key}").render())
            screen.query_one("#k-n_ctx").value = "200"
            screen.query_one("#k-threads").value = "999"
            screen.query_one("#k-draft-p_min").value = "nan"
            await pilot.pause()
            assert beside("n_ctx").startswith("n_ctx must be ≥ 256 (got 200)")  # before any save
            assert beside("threads") == "threads must be ≤ 512 (got 999)"
            assert beside("draft-p_min") == "draft.p_min must be a number from 0 to 1 (got nan)"
            screen.action_save()
            await pilot.pause()
            assert isinstance(app.screen, SettingsScreen)  # refused: nothing saved
            assert "threads, n_ctx, draft.p_min" in str(screen.query_one("#settings-error").render())
            screen.query_one("#k-n_ctx").value = str(options.MIN_CTX)
            screen.query_one("#k-threads").value = "8"  # allowed, but this machine has 2 CPUs
            screen.query_one("#k-draft-p_min").value = "0.5"
            await pilot.pause()
            assert not screen.query_one("#e-k-n_ctx").has_class("-shown")
            assert beside("threads") == "more than the 2 CPUs localspec can use here: 2 will be used"
            screen.action_save()
            await pilot.pause()
            assert type(app.screen).__name__ == "ChatScreen"
        saved, _ = load_settings()
        assert (saved.n_ctx, saved.threads, saved.draft.p_min) == (options.MIN_CTX, 8, 0.5)

    async def test_chat_settings_refuse_beside_the_field(self):
        async with chat_app() as (app, pilot):
            await pilot.press("f7")
            await pilot.pause()
            screen = app.screen
            screen.query_one("#s-top_p").value = "0"
            screen.query_one("#s-seed").value = "-3"
            screen.query_one("#s-max_tokens").value = "0"
            await pilot.pause()
            said = {f: str(screen.query_one(f"#e-s-{f}").render()) for f in ("top_p", "seed", "max_tokens")}
            assert said == {
                "top_p": "top_p must be > 0 (got 0); 1 turns it off",
                "seed": "seed must be ≥ 0 (got -3)",
                "max_tokens": "max_tokens must be ≥ 1 (got 0)",
            }
            screen.action_save()
            await pilot.pause()
            assert app.screen is screen
            for field, value in (("top_p", "0.9"), ("seed", ""), ("max_tokens", "64")):
                screen.query_one(f"#s-{field}").value = value
            screen.action_save()
            await pilot.pause()
            assert app.conversation.chat.sampling["top_p"] == 0.9 and app.conversation.chat.sampling["seed"] is None
            assert app.conversation.chat.max_tokens == 64

    async def test_export_copy_and_chat_settings(self, tmp_path):
        session = FakeSession([(["```py\n", "print(1)\n", "```"], 1, 2)])
        async with chat_app(session, settings=Settings(export_dir=tmp_path / "out")) as (app, pilot):
            await send_and_wait(app, pilot, "code please")
            await pilot.press("alt+k")
            assert app.clipboard == "print(1)"
            await pilot.press("alt+c")
            assert app.clipboard == "```py\nprint(1)\n```"
            path = app.chat_screen.action_export()
            assert path.parent == tmp_path / "out" and "code please" in path.read_text()
            await pilot.press("f7")
            await pilot.pause()
            screen = app.screen
            screen.query_one("#system-prompt").text = "Answer in Korean."
            screen.query_one("#s-temperature").value = "9"  # out of range: refused
            screen.action_save()
            await pilot.pause()
            assert "temperature" in str(screen.query_one("#settings-error").render())
            screen.query_one("#s-temperature").value = "0.7"
            screen.action_save()
            await pilot.pause()
            assert app.conversation.chat.system_prompt == "Answer in Korean."
            assert app.conversation.chat.sampling["temperature"] == 0.7
            await pilot.press("ctrl+r")
            await wait_for(pilot, lambda: app.chat_screen.generating is None and len(session.calls) == 2)
            call = session.calls[-1]
            assert call["messages"][0] == {"role": "system", "content": "Answer in Korean."}
            assert call["params"].temperature == 0.7


class TestHistorySettings:
    """The draft.history switch, and beside it what the history of past replies holds
    (localspec.chat.history) with a button that forgets it."""

    async def test_the_switch_saves_draft_history(self):
        async with chat_app() as (app, pilot):
            screen = await open_settings(app, pilot)
            switch = screen.query_one("#k-draft-history")
            assert switch.value is True
            switch.value = False
            screen.action_save()
            await wait_for(pilot, lambda: type(app.screen).__name__ == "ChatScreen")
        assert load_settings()[0].draft.history is False

    async def test_what_is_kept_is_shown_and_forgotten(self):
        from localspec.chat.history import HistoryStore

        store = HistoryStore()
        store.add("aa", [1, 2, 3])
        store.add("bb", [4, 5, 6, 7])
        async with chat_app() as (app, pilot):
            screen = await open_settings(app, pilot)
            summary = lambda: str(screen.query_one("#history-summary").render())
            assert "kept: 2 past replies, 7 tokens, " in summary() and str(store.root) in summary()
            screen.query_one("#history-clear").press()
            await wait_for(pilot, lambda: "nothing yet" in summary())
            assert f"it would be kept in {store.root}" in summary()
        assert store.summary() == []

    async def test_a_damaged_history_is_said_on_the_screen(self):
        from localspec.chat.history import HistoryStore

        store = HistoryStore()
        (store.root / "aa").mkdir(parents=True)
        (store.root / "aa" / "base.npz").write_bytes(b"junk")
        async with chat_app() as (app, pilot):
            screen = await open_settings(app, pilot)
            assert "set aside as base.npz.bad-" in str(screen.query_one("#history-summary").render())

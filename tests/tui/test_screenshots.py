"""Each main screen as Textual draws it (its own screenshot, read back as text by
tests.support.tui.screen_text): the labels and values a user must see."""

from __future__ import annotations

from localspec.tui.screens.pair import PairScreen
from tests.support.fake_session import (
    HELLO,
    FakeSession,
)
from tests.support.tui import (
    SIZE,
    Files,
    assert_shows,
    chat_app,
    make_app,
    make_catalog,
    run_race,
    send_and_wait,
    wait_for,
)


class TestScreenshots:
    """Each main screen as drawn; the test checks the labels and values a user must see."""

    async def test_chat_screen_svg(self):
        async with chat_app() as (app, pilot):
            await pilot.press("f3")
            await send_and_wait(app, pilot, "Say hello")
            app.chat_screen.refresh_panels(force=True)
            await pilot.pause()
            assert_shows(
                app,
                "Statistics",
                "tokens/s",
                "speed-up",
                "acceptance",
                "tokens/pass",
                "Step inspector",
                "Hello",
                "Say",
                "Regenerate",
                "Race",
            )

    async def test_race_and_light_theme_svg(self):
        async with chat_app(FakeSession(list(HELLO), none_step_seconds=0.02)) as (app, pilot):
            await send_and_wait(app, pilot, "hi")
            await run_race(app, pilot)
            await pilot.pause()
            dark = app.export_screenshot()
            assert_shows(
                app,
                "speculative (draft): 200.0 tok/s",
                "target alone: 50.0 tok/s",
                "measured speed-up 4.00×",
                "identical replies",
            )
            await pilot.press("escape")
            await pilot.press("ctrl+t")
            await pilot.pause()
            light = app.export_screenshot()
            assert app.current_theme.dark is False
            assert_shows(app, "Statistics")
            assert light != dark

    async def test_pair_menu_and_help_svg(self, tmp_path):
        files = Files(tmp_path, present={"qwen-1.5b.gguf", "qwen-0.5b.gguf"})
        app = make_app(spec=None, catalog=make_catalog(), files=files)
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: isinstance(app.screen, PairScreen))
            await pilot.pause()
            assert_shows(
                app, "Choose a model pair", "Qwen2.5 1.5B + 0.5B", "files present", "download needed", "memory", "p_min"
            )
            await pilot.press("escape")
            await pilot.press("f1")
            await pilot.pause()
            assert_shows(app, "localspec keys", "escape", "stop generating", "f5", "race")

"""The pilot's drain (tests/tui/conftest.py): a widget that never answers it costs a bounded
wait, not the test."""

from __future__ import annotations

import asyncio

from textual.app import App, ComposeResult
from textual.widgets import Static

from tests.tui import conftest


class Two(App):
    def compose(self) -> ComposeResult:
        yield Static("a", id="a")
        yield Static("b", id="b")


async def test_a_widget_that_never_runs_the_drain_callback_does_not_fail_the_press(monkeypatch):
    monkeypatch.setattr(conftest, "DRAIN_TIMEOUT", 0.2)
    app = Two()
    async with app.run_test() as pilot:
        # as a widget removed after it accepted the callback: accepted, never run
        monkeypatch.setattr(app.query_one("#b"), "call_later", lambda *args, **kwargs: True)
        loop = asyncio.get_running_loop()
        start = loop.time()
        await pilot.press("x")
        await pilot.pause()
        assert loop.time() - start < 5.0  # two bounded drains, not Textual's 30 s each
        assert app.query_one("#a").is_mounted  # the app runs on

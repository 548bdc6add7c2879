"""The race screen (localspec.tui.screens.race): the target alone run beside the speculative
reply, the measured speed-up and the noise between runs (issue 14)."""

from __future__ import annotations

import contextlib
import threading

import pytest

from localspec.tui.screens.race import RaceScreen
from localspec.tui.widgets import (
    StatsPanel,
)
from tests.support.fake_session import (
    HELLO,
    HELLO_TEXT,
    NOT_DRAFTING,
    OFF_CPU,
    FakeSession,
)
from tests.support.tui import (
    STUCK_S,
    chat_app,
    rendered,
    run_race,
    send_and_wait,
    wait_for,
)


class TestRace:
    async def test_race_replaces_estimate_with_measurement(self):
        # target alone: 8 steps of 0.02 s = 50 tok/s; speculative 200 tok/s → measured 4.00×
        session = FakeSession(list(HELLO), none_step_seconds=0.02)
        async with chat_app(session) as (app, pilot):
            await send_and_wait(app, pilot, "hi")
            await run_race(app, pilot)
            race = app.screen
            assert isinstance(race, RaceScreen)
            assert session.calls[-1]["mode"] == "none"
            assert session.calls[-1]["messages"] == [{"role": "user", "content": "hi"}]
            assert race.target_text == HELLO_TEXT
            assert "4.00×" in str(race.query_one("#race-verdict").render())
            assert "identical replies" in str(race.query_one("#race-verdict").render())
            assert app.conversation.measured_baseline_tps == pytest.approx(50.0)
            await pilot.press("escape")
            assert type(app.screen).__name__ == "ChatScreen"
            values = app.query_one(StatsPanel).values
            assert values["measured by"].startswith("race")
            assert values["speed-up"] == "4.00× measured"
            assert len(app.conversation.history) == 2  # the race reply is not part of the chat

    async def test_race_when_neither_side_drafted_reports_the_noise(self):
        # the chat's reply: 8 steps of 0.0100 s = 100.0 tok/s; the target alone, twice:
        # 0.0104 s and 0.0102 s a step = 96.2 and 98.0 tok/s; largest / smallest = 1.04
        session = FakeSession(
            list(NOT_DRAFTING), step_seconds=0.0100, none_step_seconds=[0.0104, 0.0102], drafting=[OFF_CPU]
        )
        async with chat_app(session) as (app, pilot):
            await send_and_wait(app, pilot, "hi")
            await run_race(app, pilot)
            race = app.screen
            assert [c["mode"] for c in session.calls] == ["draft", "none", "none"]
            verdict = rendered(race.query_one("#race-verdict"))
            assert verdict == (
                "neither side drafted: the three runs differ by 4% (noise, not a speed-up): "
                "100.0 tok/s in the chat, 96.2 and 98.0 tok/s for the target alone · "
                "identical replies · Esc closes"
            )
            assert "speed-up 1.0" not in verdict
            assert rendered(race.query_one("#race-right-speed")) == "target alone: 97.1 tok/s (runs: 96.2, 98.0)"
            assert race.target_text == HELLO_TEXT  # streamed once, not twice
            assert app.conversation.measured_baseline_tps == pytest.approx((8 / 0.0832 + 8 / 0.0816) / 2)
            await pilot.press("escape")
            values = app.query_one(StatsPanel).values
            assert values["measured by"].startswith("race") and values["speed-up"] == "1.00× (not drafting)"

    async def test_race_when_the_reply_drafted_shows_the_spread(self):
        # speculative 200 tok/s; the target alone 50 and 40 tok/s (mean 45): 4.44×, 4.00–5.00×
        session = FakeSession(list(HELLO), none_step_seconds=[0.02, 0.025])
        async with chat_app(session) as (app, pilot):
            await send_and_wait(app, pilot, "hi")
            await run_race(app, pilot)
            verdict = rendered(app.screen.query_one("#race-verdict"))
            assert verdict == (
                "measured speed-up 4.44×  (200.0 vs 45.0 tok/s; the target alone ran twice, "
                "50.0 and 40.0 tok/s: 4.00–5.00×) · identical replies · Esc closes"
            )
            assert app.conversation.measured_baseline_tps == pytest.approx(45.0)

    async def test_closing_the_race_between_runs_keeps_the_first(self, monkeypatch):
        session = FakeSession(list(HELLO), none_step_seconds=0.02)
        async with chat_app(session) as (app, pilot):
            await send_and_wait(app, pilot, "hi")
            second_run = threading.Event()  # the race's second run waits after its first step, so Esc lands in it
            chat = session.chat

            def held_chat(*args, **kwargs):
                steps = chat(*args, **kwargs)
                return steps if len(session.calls) < 3 else held(steps)  # the reply, the first run, then this

            def held(steps):
                with contextlib.closing(steps):
                    for i, step in enumerate(steps):
                        if i:
                            second_run.wait(STUCK_S)
                        yield step

            monkeypatch.setattr(session, "chat", held_chat)
            await pilot.press("f5")
            race = app.screen
            assert isinstance(race, RaceScreen)
            await wait_for(pilot, lambda: len(race.runs) == 1)
            assert app.chat_screen.generating == "race"
            await pilot.press("escape")
            second_run.set()
            await wait_for(pilot, lambda: app.chat_screen.generating is None)
            assert type(app.screen).__name__ == "ChatScreen"
            assert app.conversation.measured_baseline_tps == pytest.approx(50.0)  # the finished run only

"""The chat screen (localspec.tui.chat), driven by Textual's pilot with the scripted fake
session: messages stream, stop, regenerate and edit; what speculation shows (draft colours, the
statistics panel, the step inspector, the drafting line); a reasoning model's thinking."""

from __future__ import annotations

import threading

import pytest

from localspec.llama.offload import CPU_BUILD, OffloadPlan, cpu_plan
from localspec.settings import Settings
from localspec.tui.widgets import (
    DRAFT_STYLE,
    ReplyView,
    StatsPanel,
    StepInspector,
    draft_marks,
)
from localspec.units import GiB
from tests.support.fake_session import (
    HELLO,
    HELLO_TEXT,
    NOT_DRAFTING,
    OFF_CPU,
    OFF_TRY,
    ON_K4,
    QWEN3,
    QWEN3_ANSWER,
    QWEN3_THINKING,
    FakeSession,
)
from tests.support.tui import (
    SIZE,
    Files,
    assert_shows,
    chat_app,
    make_app,
    make_catalog,
    mid_reply,
    notified,
    rendered,
    run_race,
    send,
    send_and_wait,
    send_until_mid_stream,
    wait_for,
)


class TestChat:
    async def test_message_streams_and_is_stored(self):
        async with mid_reply("Say hello") as (app, pilot, session):
            assert app.chat_screen.generating == "chat"
            session.gate.set()
            await wait_for(pilot, lambda: app.chat_screen.generating is None)
            reply = app.query(ReplyView).last()
            assert reply.text == HELLO_TEXT
            assert reply.markdown.source == HELLO_TEXT  # the Markdown view got the whole stream
            assert app.query_one("#chat-input").text == ""
            roles = [(m.role, m.content, m.status) for m in app.store.messages(app.conversation.chat.id)]
            assert roles == [("user", "Say hello", "done"), ("assistant", HELLO_TEXT, "done")]
            assert session.calls[0]["messages"] == [{"role": "user", "content": "Say hello"}]
            assert app.conversation.chat.title == "Say hello"

    async def test_ctrl_c_when_idle_still_copies_in_the_input(self):
        async with chat_app() as (app, pilot):
            box = app.query_one("#chat-input")
            box.text = "copy me"
            box.focus()
            box.select_all()
            await pilot.press("ctrl+c")
            assert app.clipboard == "copy me"

    async def test_shift_enter_and_ctrl_j_insert_newlines(self):
        async with chat_app() as (app, pilot):
            box = app.query_one("#chat-input")
            box.focus()
            await pilot.press("a", "ctrl+j", "b", "shift+enter", "c")
            assert box.text == "a\nb\nc"
            assert app.store.messages(app.conversation.chat.id) == []  # nothing sent

    @pytest.mark.parametrize("key", ["escape", "ctrl+c"])
    async def test_stop_mid_stream_keeps_partial(self, key):
        async with mid_reply("Say hello") as (app, pilot, session):
            await pilot.press(key)
            session.gate.set()  # the worker leaves its wait, sees the stop, closes the generator
            await wait_for(pilot, lambda: app.chat_screen.generating is None)
            reply = app.query(ReplyView).last()
            assert reply.status == "stopped"
            assert reply.text.startswith("Hello,") and reply.text != HELLO_TEXT
            assert "stopped" in str(reply.query_one(".reply-summary").render())
            stored = app.store.messages(app.conversation.chat.id)[-1]
            assert (stored.role, stored.status) == ("assistant", "stopped")
            assert stored.content == reply.text
            assert session.generator_closed == 1
            # the app keeps working: the next message streams normally
            session.gate = None
            await send_and_wait(app, pilot, "again")
            assert app.conversation.history[-1].content == HELLO_TEXT

    async def test_regenerate_and_edit_last(self):
        async with chat_app() as (app, pilot):
            await send_and_wait(app, pilot, "first")
            first_reply_id = app.conversation.history[-1].id
            await pilot.press("ctrl+r")
            await wait_for(
                pilot, lambda: len(app.conversation.history) == 2 and app.conversation.history[-1].id != first_reply_id
            )
            assert [m.role for m in app.store.messages(app.conversation.chat.id)] == ["user", "assistant"]
            await pilot.press("ctrl+e")
            assert app.query_one("#chat-input").text == "first"
            assert app.conversation.history == [] and len(app.query(ReplyView)) == 0
            await send_and_wait(app, pilot, "first, edited")
            assert app.conversation.history[0].content == "first, edited"

    async def test_generation_error_is_reported_and_the_app_goes_on(self):
        from localspec.chat.session import ContextOverflow

        session = FakeSession(list(HELLO))
        calls = {"n": 0}
        real_chat = session.chat

        def chat(*args, **kwargs):
            calls["n"] += 1
            if calls["n"] == 1:

                def failing():
                    raise ContextOverflow("the conversation is 5000 tokens [ctx 4096]")
                    yield

                return failing()
            return real_chat(*args, **kwargs)

        session.chat = chat
        async with chat_app(session) as (app, pilot):
            await send(app, pilot, "too long")
            await wait_for(pilot, lambda: app.chat_screen.generating is None and calls["n"] == 1)
            await wait_for(pilot, lambda: any("5000 tokens [ctx 4096]" in n for n in notified(app)))
            assert not app.query(ReplyView)  # nothing to keep
            await pilot.press("ctrl+r")  # the user message is still there: regenerate works
            await wait_for(pilot, lambda: len(app.conversation.history) == 2 and app.chat_screen.generating is None)
            assert app.conversation.history[-1].content == HELLO_TEXT

    async def test_no_session_yet_keeps_the_text(self, tmp_path):
        app = make_app(spec=None, catalog=make_catalog(), files=Files(tmp_path))
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            await pilot.press("escape")  # close the pair menu
            await send(app, pilot, "hello?")
            assert app.query_one("#chat-input").text == "hello?"


# --- what speculation shows ------------------------------------------------------------------


class TestSpeculationView:
    async def test_draft_colouring_follows_steps(self):
        async with chat_app(settings=Settings(show_draft_tokens=True)) as (app, pilot):
            await send_and_wait(app, pilot, "hi")
            reply = app.query(ReplyView).last()
            # HELLO: step 1 accepts "Hello"; step 2 none; step 3 "!"+" How"; step 4 " you"
            drafted = [reply.text[a:b] for a, b in reply.draft_spans]
            assert drafted == ["Hello", "! How", " you"]
            text = reply.coloured_text()
            painted = "".join(text.plain[s.start : s.end] for s in text.spans if s.style == DRAFT_STYLE)
            assert painted == "Hello! How you"
            assert reply.has_class("-tokens")
            await pilot.pause()
            assert reply.painted_text() == HELLO_TEXT
            # toggled off: the Markdown view is shown again
            await pilot.press("f2")
            assert not reply.has_class("-tokens")
            assert reply.query_one(".reply-md").display and not reply.query_one(".reply-tokens").display
            # spans are stored: a restart paints the same characters
            assert (
                app.conversation.history[-1].meta["draft_spans"] == [list(s) for s in reply.draft_spans]
                or app.conversation.history[-1].meta["draft_spans"] == reply.draft_spans
            )

    async def test_stats_panel_follows_steps(self):
        session = FakeSession(list(HELLO), step_seconds=0.01, baseline_tokens_per_second=50.0)
        async with chat_app(session) as (app, pilot):
            await send_and_wait(app, pilot, "hi")
            values = app.query_one(StatsPanel).values
            # 8 tokens in 4 passes of 0.01 s: 200 tok/s; 50 tok/s target-only: 4.00×
            assert values["tokens/s"] == "200.0"
            assert values["target alone"] == "50.0 tok/s"
            assert values["speed-up"] == "4.00× est."
            # drafted 3 + 2 + 2 + 4 = 11, accepted 1 + 0 + 2 + 1 = 4
            assert values["acceptance"] == "36%"
            assert values["tokens/pass"] == "2.00"
            assert values["k now (mean)"] == "4 (2.8)"
            assert values["draft/verify"] == "30% / 60% (+10%)"
            assert values["measured by"] == session.baseline_note
            assert values["total tokens"] == "8 / 4 passes"
            assert app.conversation.reply_stats.tokens_per_pass_history == [2.0, 1.0, 3.0, 2.0]
            spark = app.query_one("#stats-spark")
            assert list(spark.data) == [2.0, 1.0, 3.0, 2.0]
            summary = str(app.query(ReplyView).last().query_one(".reply-summary").render())
            assert "8 tokens" in summary and "200.0 tok/s" in summary and "4.00×" in summary

    @pytest.mark.parametrize(
        "plan, shown",
        [
            # 25 draft layers of 25 and 20 target layers of 29 on the GPU
            (
                OffloadPlan(20, 29, 25, 25, "NVIDIA GeForce RTX 4060", 8 * GiB, has_draft=True),
                "GPU  draft 25/25 · target 20/29",
            ),
            (cpu_plan(None, None, CPU_BUILD, has_draft=True), "CPU only"),
        ],
    )
    @pytest.mark.parametrize("size", [SIZE, (80, 30)])  # the wide and the narrow side panel
    async def test_stats_panel_shows_the_gpu_split(self, plan, shown, size):
        session = FakeSession(list(HELLO), offload=plan)
        async with chat_app(session, size=size) as (app, pilot):
            await send_and_wait(app, pilot, "hi")
            panel = app.query_one(StatsPanel)
            line = panel.query_one("#stats-offload")
            assert panel.offload == shown and line.display
            assert str(line.render()) == shown
            assert line.region.height == 1  # one line, also in the narrow layout's panel

    async def test_panel_keeps_updating_under_a_dialog(self):
        async with mid_reply() as (app, pilot, session):
            await pilot.press("f1")  # help on top while the reply streams on
            session.gate.set()
            await wait_for(pilot, lambda: app.chat_screen.generating is None)
            panel = app.chat_screen.query_one(StatsPanel)
            await wait_for(pilot, lambda: panel.values["tokens/passes"] == "8 / 4")
            assert type(app.screen).__name__ == "HelpScreen"

    async def test_inspector_marks_steps(self):
        async with chat_app() as (app, pilot):
            inspector = app.query_one(StepInspector)
            assert not inspector.display
            await pilot.press("f3")
            assert inspector.display
            await send_and_wait(app, pilot, "hi")
            app.chat_screen.refresh_panels(force=True)
            steps = inspector.steps
            assert [s.n_accepted for s in steps] == [1, 0, 2, 1]
            assert [m for _, m in draft_marks(steps[0])] == ["accepted", "rejected", "discarded"]
            assert steps[0].drafted[0] == "Hello" and steps[0].token == ","
            assert steps[2].bonus and steps[2].token == " are"
            body = str(inspector.query_one("#inspector-body").render())
            assert "✓Hello" in body and "✗✗0" in body and "+ ·are" in body


# --- honest numbers: the drafting line, "not drafting" (issue 14) -------------------------------


class TestHonestNumbers:
    async def test_drafting_line_follows_the_stream(self):
        # after step 1 the controller says on (k=4); from step 3 on it says off, trying again
        session = FakeSession(list(HELLO), gate=threading.Event(), drafting=[ON_K4, ON_K4, OFF_TRY])
        async with chat_app(session) as (app, pilot):
            panel = app.query_one(StatsPanel)
            await wait_for(pilot, lambda: panel.values.get("drafting") == ON_K4.line)  # asked at load
            await send_until_mid_stream(app, pilot, "hi")
            await wait_for(pilot, lambda: panel.values["tokens/passes"] == "2 / 1")
            assert panel.values["drafting"] == "on: " + ON_K4.why
            session.gate.set()
            await wait_for(pilot, lambda: app.chat_screen.generating is None)
            app.chat_screen.refresh_panels(force=True)
            assert panel.values["drafting"] == OFF_TRY.line
            assert OFF_TRY.line.endswith("; tries again in 12 steps")
            line = panel.query_one("#stats-drafting")
            assert rendered(line) == "drafting " + OFF_TRY.line  # the whole sentence, not cut...
            assert line.region.height >= len(rendered(line)) // line.region.width + 1  # ...but wrapped
            # cheap: asked when k changed (3 → 2 → 4) or 0.25 s passed, plus once at the end
            assert session.drafting_asked <= 1 + 4 + 1
            stored = app.conversation.history[-1].meta["stats"]["drafting"]
            assert stored["on"] is False and stored["next_try_in"] == 12

    @pytest.mark.parametrize("size", [SIZE, (80, 30)])  # the wide and the narrow side panel
    async def test_cpu_reply_that_drafts_nothing_claims_no_speed_up(self, size):
        # 8 target-alone steps of 0.01 s: 100 tok/s against a 50 tok/s estimate would read "2.00× est."
        session = FakeSession(
            list(NOT_DRAFTING), step_seconds=0.01, baseline_tokens_per_second=50.0, drafting=[OFF_CPU]
        )
        async with chat_app(session, size=size) as (app, pilot):
            await send_and_wait(app, pilot, "hi")
            app.chat_screen.refresh_panels(force=True)
            await pilot.pause()
            values = app.query_one(StatsPanel).values
            assert values["tokens/s"] == "100.0"
            assert values["speed-up"] == "1.00× (not drafting)"
            assert values["total speed-up"] == "1.00× (not drafting)"
            assert values["acceptance"] == "–" and values["k now (mean)"] == "0 (0.0)"
            assert values["drafting"] == (
                "off: a draft token costs 0.62 of a target pass and checking 2 tokens "
                "costs 1.90 passes; drafting would run at about 0.80× even at 95% "
                "acceptance; not tried again on this hardware"
            )
            summary = rendered(app.query(ReplyView).last().query_one(".reply-summary"))
            assert "1.00× (not drafting)" in summary and "2.00×" not in summary
            assert app.conversation.history[-1].meta["stats"]["speedup"] == 1.0
            assert_shows(app, "drafting", "off", "0.62", "0.80×", "hardware", "1.00×")  # (wrapped lines)
            # a later reply that drafts gets its ratio back; the session's total too
            session.script, session.drafting = list(HELLO), [ON_K4]
            await send_and_wait(app, pilot, "again")
            app.chat_screen.refresh_panels(force=True)
            values = app.query_one(StatsPanel).values
            assert values["speed-up"] == "4.00× est."  # 8 tokens in 4 passes of 0.01 s: 200 tok/s
            assert values["total speed-up"] == "2.67×"  # 16 tokens in 0.12 s: 133.3 tok/s
            assert values["drafting"] == ON_K4.line


# --- reasoning models: Qwen3's <think> block (issue 14) ---------------------------------------


class TestThinking:
    async def test_thinking_streams_into_a_closed_block_and_the_answer_below(self):
        session = FakeSession(list(QWEN3), gate=threading.Event())
        async with chat_app(session, settings=Settings(show_draft_tokens=True)) as (app, pilot):
            await send(app, pilot, "Say hello")
            await wait_for(
                pilot, lambda: app.chat_screen.reply_view is not None and app.chat_screen.reply_view.thinking == "The"
            )
            reply = app.chat_screen.reply_view
            block = reply.query_one(".reply-thinking")
            await wait_for(pilot, lambda: block.display and block.title == "Thinking… (3 tokens)")
            assert block.collapsed and reply.text == ""
            session.gate.set()
            await wait_for(pilot, lambda: app.chat_screen.generating is None and len(app.conversation.history) == 2)
            assert (reply.thinking, reply.text) == (QWEN3_THINKING, QWEN3_ANSWER)
            assert block.collapsed and block.title == "Thought for 10 tokens"
            assert rendered(reply.query_one(".thinking-body")) == QWEN3_THINKING
            # draft colours in the answer: step 5 accepts "Hello", step 6 " How are you"
            assert [reply.text[a:b] for a, b in reply.draft_spans] == ["Hello", " How are you"]
            await pilot.pause()
            assert reply.painted_text() == QWEN3_ANSWER  # no tags, no thinking in the answer
            await pilot.press("f2")
            assert reply.markdown.source == QWEN3_ANSWER  # the Markdown view too
            await pilot.click(".reply-thinking CollapsibleTitle")
            await pilot.pause()
            assert not block.collapsed and reply.query_one(".thinking-body").region.height >= 1
            # statistics cover both: 16 tokens in 6 passes, 10 of them thinking (steps 1–4)
            app.chat_screen.refresh_panels(force=True)
            values = app.query_one(StatsPanel).values
            assert values["tokens/passes"] == "16 / 6" and values["thinking"] == "10 of 16 tokens"
            assert "16 tokens (10 thinking)" in rendered(reply.query_one(".reply-summary"))
            stored = app.store.messages(app.conversation.chat.id)[-1]
            assert (stored.content, stored.thinking) == (QWEN3_ANSWER, QWEN3_THINKING)
            assert stored.meta["stats"]["thinking_tokens"] == 10
            # the history sent back holds the answer only (Qwen3's template drops old thinking)
            await send_and_wait(app, pilot, "And again")
            assert session.calls[-1]["messages"] == [
                {"role": "user", "content": "Say hello"},
                {"role": "assistant", "content": QWEN3_ANSWER},
                {"role": "user", "content": "And again"},
            ]
            export = app.chat_screen.action_export().read_text()
            assert "<details><summary>Thinking</summary>\n\nThe user wants a greeting.\n\n</details>" in export
            # the race compares answers: the target alone thinks the same and answers the same
            await run_race(app, pilot)
            assert app.screen.target_text == QWEN3_ANSWER
            assert "identical replies" in rendered(app.screen.query_one("#race-verdict"))

    async def test_restart_shows_the_stored_thinking_closed(self):
        # the Markdown view, a reply faster than the mount
        async with chat_app(FakeSession(list(QWEN3))) as (app, pilot):
            await send_and_wait(app, pilot, "Say hello")
            await pilot.pause()
            block = app.query(ReplyView).last().query_one(".reply-thinking")
            assert block.display and block.region.height == 1 and block.title == "Thought for 10 tokens"
            await pilot.press("ctrl+q")
        async with chat_app(FakeSession(list(HELLO))) as (app2, pilot):
            reply = app2.query(ReplyView).last()
            block = reply.query_one(".reply-thinking")
            assert block.display and block.collapsed and block.title == "Thought for 10 tokens"
            assert (reply.thinking, reply.text) == (QWEN3_THINKING, QWEN3_ANSWER)
            text = assert_shows(app2, "Thought for 10 tokens", "Hello! How are you?")
            assert "The user wants" not in text  # closed

    async def test_stopped_while_thinking_keeps_the_thinking(self):
        session = FakeSession(list(QWEN3), gate=threading.Event())
        async with chat_app(session) as (app, pilot):
            await send(app, pilot, "Say hello")
            await wait_for(
                pilot, lambda: app.chat_screen.reply_view is not None and app.chat_screen.reply_view.thinking == "The"
            )
            await pilot.press("escape")
            session.gate.set()
            await wait_for(pilot, lambda: app.chat_screen.generating is None)
            stored = app.store.messages(app.conversation.chat.id)[-1]
            assert (stored.role, stored.status, stored.content) == ("assistant", "stopped", "")
            assert stored.thinking.startswith("The")

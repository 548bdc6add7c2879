"""The widgets' helpers (localspec.tui.widgets): control characters drawn, never sent; code
blocks; the inspector's marks."""

from __future__ import annotations

import pytest

from localspec.chat.conversation import InspectedStep
from localspec.settings import Settings
from localspec.tui.widgets import (
    ReplyView,
    code_blocks,
    draft_marks,
    visible,
)
from tests.support.fake_session import (
    HELLO,
    FakeSession,
)
from tests.support.tui import (
    assert_shows,
    chat_app,
    send_and_wait,
)


class TestHelpers:
    def test_control_characters_never_reach_the_terminal(self):
        assert visible("a\x1b[31mb\x07\x7f\tc\n") == "a␛[31mb␇␡\tc\n"

    @pytest.mark.parametrize(
        "token, shown",
        [(" the", "·the"), ("\n\n", "⏎⏎"), ("", "∅"), ("\x1b", "␛"), ("\t", "\t")],
    )
    def test_an_inspected_token_shows_its_blanks(self, token, shown):
        assert visible(token, token=True) == shown

    async def test_escape_sequences_in_a_reply_are_drawn_not_sent(self):
        session = FakeSession([(["ok ", "\x1b[2J"], 1, 1), (["\x07done"], 0, 0)])
        async with chat_app(session, settings=Settings(show_draft_tokens=True)) as (app, pilot):
            await send_and_wait(app, pilot, "paste \x1b]0;title\x07")
            assert app.conversation.history[-1].content == "ok \x1b[2J\x07done"  # stored unchanged
            reply = app.query(ReplyView).last()
            assert reply.coloured_text().plain == "ok ␛[2J␇done"
            assert "\x1b" not in app.export_screenshot()  # nowhere in what is drawn, markup included
            assert_shows(app, "␛[2J")

    def test_code_blocks(self):
        md = "x\n```py\nprint(1)\n```\ntext\n```\nunclosed"
        assert code_blocks(md) == ["print(1)", "unclosed"]

    def test_draft_marks_all_accepted_is_bonus(self):
        s = InspectedStep(1, 2, ("a", "b"), 2, "c")
        assert s.bonus and [m for _, m in draft_marks(s)] == ["accepted", "accepted"]
        assert not InspectedStep(2, 0, (), 0, "d").bonus  # no draft: a plain target step


class TestStreamEnd:
    async def test_a_reply_ended_before_its_stream_ran_is_drawn_and_the_chat_runs_on(self):
        """The reply's end can come between its Markdown stream's start and the stream task's
        first run (its steps all came before the view was mounted). Stopping that stream cancels
        a task that never started, and awaiting it raises CancelledError: let out of the screen's
        handler, it ended the screen's message loop and the chat hung. Played here without the
        timing: a stream started and stopped at once."""
        session = FakeSession(list(HELLO))
        async with chat_app(session) as (app, pilot):
            view = ReplyView(status="streaming", classes="reply")
            await app.chat_screen.chat_log.mount(view)
            await view.finish("done", "")  # the stream on_mount started, done with
            view.status = "streaming"
            # on_mount again: a stream started, its task not run yet (no text came before the
            # mount, so nothing was written to it)
            await view.on_mount()
            view.text = "**bold** reply"
            await view.finish("done", "2 tokens")  # raised CancelledError before the fix
            assert view.markdown.source == "**bold** reply"  # drawn, though the stream never ran
            await send_and_wait(app, pilot, "hi")  # the app runs on

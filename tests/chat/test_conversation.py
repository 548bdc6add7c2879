"""The conversation without any screen: a real ChatStore in tmp_path and the scripted FakeSession
(tests/fake_session.py). A reply is run the way the app's worker runs it, on this thread."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from localspec.chat.conversation import (
    ChatSession,
    Conversation,
    Generation,
    ReplyFinished,
    add_draft_span,
    answer_draft_chars,
    split_draft_chars,
)
from localspec.chat.session import ContextOverflow, LoadOptions, PairSpec
from localspec.chat.store import ChatStore
from localspec.core.sampling import SamplingParams
from localspec.settings import Settings
from tests.support.fake_session import (
    HELLO,
    HELLO_TEXT,
    NOT_DRAFTING,
    OFF_TRY,
    ON_K4,
    QWEN3,
    QWEN3_ANSWER,
    QWEN3_THINKING,
    FakeSession,
    ScriptStep,
)

# the seam, checked by mypy: the scripted session is a ChatSession (localspec.tui.app's
# _load_session checks the real Session the same way)
_: ChatSession = FakeSession([])

# HELLO's reply, step by step (fake_session.py): 8 tokens in 4 passes of 0.01 s = 200 tok/s,
# against the fake's 50 tok/s target-alone estimate: 4.00×; drafted 3 + 2 + 2 + 4 = 11,
# accepted 1 + 0 + 2 + 1 = 4 (36%)
HELLO_SUMMARY = "8 tokens · 200.0 tok/s · 4.00× · 36% accepted · 2.00 tok/pass · draft"
# the draft's characters: "Hello" (step 1), "! How" (step 3), " you" (step 4)
HELLO_SPANS = [(0, 5), (12, 17), (21, 25)]


@pytest.fixture
def store(tmp_path) -> ChatStore:
    return ChatStore(tmp_path / "chats.db")


def conversation(
    store: ChatStore, session: FakeSession | None = None, warned: list[str] | None = None, **settings
) -> Conversation:
    """A conversation over ``store`` with ``session`` loaded; what it warns of goes to ``warned``."""
    c = Conversation(store, Settings(**settings), warn=(warned if warned is not None else []).append)
    if session is not None:
        c.use_session(session)
    return c


def reply(c: Conversation, stop_after: int | None = None, leave=None) -> ReplyFinished | None:
    """Answer the last message as the app's worker does. ``stop_after``: Esc after that many
    steps; ``leave(c)``: called after the first step, as when the user leaves mid-reply."""
    generation = c.begin_reply()
    seen = []

    def emit(step) -> None:
        seen.append(c.add_step(generation, step))
        if len(seen) == stop_after:
            c.stop()
        if leave is not None and len(seen) == 1:
            leave(c)

    return c.finish(generation, generation.run(emit))


def said(store: ChatStore, chat_id: int) -> list[tuple[str, str, str]]:
    return [(m.role, m.content, m.status) for m in store.messages(chat_id)]


class TestSeam:
    def test_the_scripted_session_is_a_chat_session(self):
        assert isinstance(FakeSession(list(HELLO)), ChatSession)

    def test_the_real_session_is_a_chat_session(self, tmp_path):
        pytest.importorskip("llama_cpp")
        from localspec.chat.session import LoadOptions, PairSpec, Session
        from tests.support.tiny_gguf import write_tiny_gguf

        target = write_tiny_gguf(tmp_path / "t.gguf", seed=0, n_ctx=256)
        session = Session.load(PairSpec(Path(target)), LoadOptions(n_ctx=256, threads=1))
        try:
            assert isinstance(session, ChatSession)
        finally:
            session.close()


class TestSending:
    def test_a_message_is_stored_answered_and_titles_the_chat(self, store):
        session = FakeSession(list(HELLO))
        c = conversation(store, session)
        c.send("Say   hello\nplease")
        end = reply(c)
        assert end == ReplyFinished("done", None, ("", ""), HELLO_SUMMARY, c.history[-1])
        assert c.chat.title == "Say hello please"  # blanks folded
        assert said(store, c.chat.id) == [("user", "Say   hello\nplease", "done"), ("assistant", HELLO_TEXT, "done")]
        assert session.calls[0]["messages"] == [{"role": "user", "content": "Say   hello\nplease"}]
        assert session.calls[0]["mode"] == "draft"  # the chat has no mode: the pair's own
        stored = store.messages(c.chat.id)[-1]
        assert [tuple(s) for s in stored.meta["draft_spans"]] == HELLO_SPANS
        stats = stored.meta["stats"]
        assert (stats["n_tokens"], stats["n_steps"], stats["n_drafted"], stats["n_accepted"]) == (8, 4, 11, 4)
        assert stats["speedup"] == pytest.approx(4.0) and stats["mode"] == "draft"
        assert stats["drafting"] == ON_K4.as_dict()
        assert c.reply is None and c.reply_stats.n_tokens == 8 and c.totals.n_tokens == 8

    def test_the_history_goes_back_with_the_system_prompt_and_the_chat_settings(self, store):
        session = FakeSession(list(HELLO))
        c = conversation(store, session)
        c.update_chat(system_prompt="Answer in Korean.", sampling={"temperature": 0.7}, max_tokens=64)
        c.send("first")
        reply(c)
        c.send("second")
        reply(c)
        assert session.calls[1]["messages"] == [
            {"role": "system", "content": "Answer in Korean."},
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": HELLO_TEXT},
            {"role": "user", "content": "second"},
        ]
        assert session.calls[1]["params"].temperature == 0.7 and session.calls[1]["max_tokens"] == 64
        assert c.chat.title == "first"  # only the first message titles the chat
        assert c.totals.n_tokens == 16

    def test_the_chats_mode_is_asked_for(self, store):
        session = FakeSession(list(HELLO))
        c = conversation(store, session)
        c.update_chat(mode="lookup")
        c.send("hi")
        reply(c)
        assert session.calls[0]["mode"] == "lookup" and c.history[-1].meta["stats"]["mode"] == "lookup"

    def test_a_pair_loaded_never_to_draft_runs_the_chats_mode_as_the_target_alone(self, store):
        session = FakeSession(list(HELLO), spec=PairSpec(Path("t.gguf")), options=LoadOptions(draft_max=0))
        c = conversation(store, session)
        c.update_chat(mode="lookup")  # chosen before, on a pair that drafted
        c.send("hi")
        reply(c)
        assert session.calls[0]["mode"] == "none" and c.history[-1].status == "done"
        assert c.mode_shown == "none" and c.history[-1].meta["stats"]["mode"] == "none"

    def test_invalid_chat_sampling_warns_and_uses_the_settings(self, store):
        session = FakeSession(list(HELLO))
        warned: list[str] = []
        c = conversation(store, session, warned, max_tokens=100)
        c.update_chat(sampling={"temperature": 99.0})  # out of range: written by hand, or an old version
        c.send("hi")
        reply(c)
        assert warned == ["this chat's sampling settings are invalid; using the defaults"]
        assert session.calls[0]["params"] == SamplingParams() and session.calls[0]["max_tokens"] == 100

    def test_one_reply_at_a_time_and_only_with_a_pair(self, store):
        c = conversation(store)
        c.send("hi")
        with pytest.raises(RuntimeError, match="no model pair"):
            c.begin_reply()
        c.use_session(FakeSession(list(HELLO)))
        c.begin_reply()
        with pytest.raises(RuntimeError, match="still being generated"):
            c.send("again")
        with pytest.raises(RuntimeError, match="still being generated"):
            c.begin_reply()


class TestThinking:
    def test_thinking_is_kept_apart_and_not_sent_back(self, store):
        session = FakeSession(list(QWEN3))
        c = conversation(store, session)
        c.send("Say hello")
        end = reply(c)
        stored = c.history[-1]
        assert (stored.content, stored.thinking) == (QWEN3_ANSWER, QWEN3_THINKING)
        # steps 1-4 (3 + 2 + 3 + 2 tokens) are thinking; steps 5-6 answer
        assert stored.meta["stats"]["thinking_tokens"] == 10
        assert end is not None and end.summary.startswith("16 tokens (10 thinking)")
        # the draft's characters of the answer: "Hello" (step 5), " How are you" (step 6)
        assert [stored.content[a:b] for a, b in stored.meta["draft_spans"]] == ["Hello", " How are you"]
        c.send("And again")
        assert c.messages_for_model()[1] == {"role": "assistant", "content": QWEN3_ANSWER}

    def test_a_template_that_opens_the_block_starts_inside_it(self, store):
        script: list[ScriptStep] = [(["Let me", " think"], 1, 1), (["</think>", "\n\n"], 0, 0), (["Hi"], 0, 0)]
        c = conversation(store, FakeSession(script, opens_thinking=True))
        c.send("hi")
        reply(c)
        stored = c.history[-1]
        # steps 1 and 2 (2 + 2 tokens) are thinking; "Hi" is the answer
        assert (stored.thinking, stored.content, stored.meta["stats"]["thinking_tokens"]) == ("Let me think", "Hi", 4)


class TestStopping:
    def test_stop_keeps_the_partial_reply(self, store):
        session = FakeSession(list(HELLO))
        c = conversation(store, session)
        c.send("Say hello")
        end = reply(c, stop_after=1)
        # step 1 only: 2 tokens in 0.01 s, drafted 3, accepted 1
        assert end == ReplyFinished(
            "stopped",
            None,
            ("", ""),
            "2 tokens · 200.0 tok/s · 4.00× · 33% accepted · 2.00 tok/pass · draft",
            c.history[-1],
        )
        assert said(store, c.chat.id)[-1] == ("assistant", "Hello,", "stopped")
        assert session.generator_closed == 1  # the engine was closed between steps

    def test_a_stop_at_the_last_step_is_a_finished_reply(self, store):
        c = conversation(store, FakeSession(list(HELLO)))
        c.send("hi")
        end = reply(c, stop_after=4)
        assert end is not None and end.status == "done" and c.history[-1].content == HELLO_TEXT

    def test_leaving_the_chat_mid_reply_keeps_it_stopped_in_its_own_chat(self, store):
        session = FakeSession(list(HELLO))
        c = conversation(store, session)
        c.send("hi")
        first = c.chat.id
        end = reply(c, leave=Conversation.new_chat)
        assert end is None  # the reply was left: its end is not this chat's
        assert said(store, first) == [("user", "hi", "done"), ("assistant", "Hello,", "stopped")]
        assert c.chat.id != first and c.history == [] and said(store, c.chat.id) == []
        assert session.steps_yielded == 1 and session.generator_closed == 1  # stopped before step 2

    def test_a_partial_reply_left_in_the_open_chat_joins_its_history(self, store):
        c = conversation(store, FakeSession(list(HELLO)))
        c.send("hi")
        kept = []
        reply(c, leave=lambda c: kept.append(c.keep_partial()))
        assert c.history[-1] == kept[0] and (kept[0].content, kept[0].status) == ("Hello,", "stopped")

    def test_a_reply_left_before_any_text_stores_nothing(self, store):
        c = conversation(store, FakeSession(list(HELLO)))
        c.send("hi")
        generation = c.begin_reply()
        assert c.keep_partial() is None and generation.stopped
        assert said(store, c.chat.id) == [("user", "hi", "done")] and c.reply is None

    def test_a_partial_reply_the_store_refuses_is_said(self, store, monkeypatch):
        warned: list[str] = []
        c = conversation(store, FakeSession(list(HELLO)), warned)
        c.send("hi")

        def locked(*args, **kwargs):
            raise sqlite3.OperationalError("database is locked")

        def leave(c: Conversation) -> None:
            monkeypatch.setattr(store, "add_message", locked)
            c.keep_partial()

        reply(c, leave=leave)
        assert warned == ["partial reply not kept: database is locked"]
        assert [m.role for m in c.history] == ["user"]


class TestErrors:
    def test_a_context_overflow_ends_the_reply_with_its_message(self, store):
        session = FakeSession(list(HELLO))

        def too_long(*args, **kwargs):
            raise ContextOverflow("the conversation is 5000 tokens; the context holds 4096")
            yield

        session.chat = lambda *args, **kwargs: too_long()  # type: ignore[method-assign]
        c = conversation(store, session)
        c.send("too long")
        end = reply(c)
        assert end == ReplyFinished(
            "error", "the conversation is 5000 tokens; the context holds 4096", ("", ""), "0 tokens · draft", None
        )
        assert said(store, c.chat.id) == [("user", "too long", "done")]  # nothing to keep
        assert c.unanswered and c.regenerate() == []  # the message waits for another try

    def test_a_failure_mid_reply_keeps_what_came(self, store):
        session = FakeSession(list(HELLO))

        def failing(*args, **kwargs):
            yield session.make_step(["Hello", ","], 1, 3, 0.01, None)
            raise RuntimeError("GPU lost")

        session.chat = failing  # type: ignore[method-assign]
        c = conversation(store, session)
        c.send("hi")
        end = reply(c)
        assert end is not None and (end.status, end.error) == ("error", "RuntimeError: GPU lost")
        assert said(store, c.chat.id)[-1] == ("assistant", "Hello,", "error")

    def test_steps_of_another_generation_are_ignored(self, store):
        session = FakeSession(list(HELLO))
        c = conversation(store, session)
        c.send("hi")
        c.begin_reply()
        stranger = Generation(session, c.request([], None))
        steps: list = []
        ending = stranger.run(steps.append)
        assert not c.add_step(stranger, steps[0]) and c.finish(stranger, ending) is None
        assert c.reply is not None and c.reply.text == "" and c.reply_stats.n_steps == 0


class TestTakingBack:
    def test_regenerate_replaces_the_last_reply(self, store):
        session = FakeSession(list(HELLO))
        c = conversation(store, session)
        c.send("first")
        reply(c)
        old = c.history[-1].id
        assert c.regenerate() == [old] and c.unanswered
        reply(c)
        assert [m.role for m in store.messages(c.chat.id)] == ["user", "assistant"]
        assert c.history[-1].id != old and len(session.calls) == 2

    def test_edit_last_takes_back_the_message_and_what_followed(self, store):
        c = conversation(store, FakeSession(list(HELLO)))
        assert c.edit_last() is None  # nothing said yet
        c.send("first")
        reply(c)
        c.send("second")
        reply(c)
        ids = [m.id for m in c.history]
        assert c.edit_last() == ("second", ids[2:])
        assert said(store, c.chat.id) == [("user", "first", "done"), ("assistant", HELLO_TEXT, "done")]
        assert [m.id for m in c.history] == ids[:2]


class TestChats:
    def test_history_follows_the_open_chat(self, store):
        c = conversation(store, FakeSession(list(HELLO)), max_tokens=77)
        c.send("one")
        reply(c)
        first = c.chat.id
        c.new_chat()
        assert c.history == [] and c.chat.id != first and c.chat.max_tokens == 77
        assert c.reply_stats.n_steps == 0  # the panel's "this reply" starts empty
        assert not c.open_chat(9999) and c.history == []  # no such chat: nothing changes
        assert c.open_chat(first)
        assert [m.content for m in c.history] == ["one", HELLO_TEXT]

    def test_a_restart_opens_the_latest_chat(self, store):
        c = conversation(store, FakeSession(list(HELLO)))
        c.send("kept")
        reply(c)
        again = conversation(store)
        assert again.chat.id == c.chat.id
        assert [(m.role, m.content) for m in again.history] == [("user", "kept"), ("assistant", HELLO_TEXT)]

    def test_deleting_chats(self, store):
        c = conversation(store)
        first = c.chat.id
        c.send("first chat")
        c.new_chat()
        second = c.chat.id
        assert not c.delete_chat(first) and c.chat.id == second  # another chat: this one stays open
        assert c.delete_chat(second)  # the open one, and the last: a new chat opens
        assert c.chat.id not in (first, second) and [ch.id for ch in store.list_chats()] == [c.chat.id]

    def test_export_writes_the_chat_as_markdown(self, store, tmp_path):
        c = conversation(store, FakeSession(list(HELLO)), export_dir=tmp_path / "out")
        c.send("Say hello!")
        reply(c)
        path = c.export()
        assert path == tmp_path / "out" / f"say-hello-{c.chat.id}.md"
        assert "## You\n\nSay hello!\n\n## Assistant\n\nHello, world! How are you?" in path.read_text()


class TestFigures:
    def test_a_reply_that_drafted_nothing_claims_no_speed_up(self, store):
        # 8 target-alone steps of 0.01 s: 100 tok/s, which against 50 tok/s would read 2.00×
        c = conversation(store, FakeSession(list(NOT_DRAFTING)))
        c.send("hi")
        end = reply(c)
        assert c.history[-1].meta["stats"]["speedup"] == 1.0
        assert end is not None and "1.00× (not drafting)" in end.summary and "2.00×" not in end.summary

    def test_the_races_measurement_replaces_the_estimate(self, store):
        c = conversation(store, FakeSession(list(HELLO)))
        c.measured_baseline_tps = 100.0  # 200 tok/s against 100: 2.00×
        c.send("hi")
        reply(c)
        assert c.history[-1].meta["stats"]["speedup"] == pytest.approx(2.0)
        c.use_session(FakeSession(list(HELLO)))
        assert c.measured_baseline_tps is None  # another pair: its own estimate again

    def test_the_drafting_line_is_asked_only_beside_no_running_step(self, store):
        session = FakeSession(list(HELLO), drafting=[OFF_TRY])
        c = conversation(store)
        with session.lock:  # a generation of the pair is running on another thread
            c.use_session(session)
        assert c.drafting is None and session.drafting_asked == 0
        c.ask_drafting()
        assert c.drafting == OFF_TRY

    def test_the_drafting_line_follows_the_reply(self, store):
        # after step 1 the controller says on; from step 3 on, off (trying again later)
        session = FakeSession(list(HELLO), drafting=[ON_K4, ON_K4, OFF_TRY])
        c = conversation(store, session)
        c.send("hi")
        reply(c)
        assert c.drafting == OFF_TRY and c.history[-1].meta["stats"]["drafting"] == OFF_TRY.as_dict()

    def test_the_rematch_is_the_last_exchange_for_the_target_alone(self, store):
        session = FakeSession(list(HELLO))
        c = conversation(store, session)
        assert c.rematch() is None  # nothing to race yet
        c.update_chat(system_prompt="Be brief.")
        c.send("hi")
        reply(c)
        rematch = c.rematch()
        assert rematch is not None
        assert rematch.request.messages == [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hi"},
        ]
        assert (rematch.request.mode, rematch.reply, rematch.mode, rematch.drafted) == (
            "none",
            HELLO_TEXT,
            "draft",
            True,
        )
        assert rematch.tokens_per_second == pytest.approx(200.0)
        asked = session.drafting_asked
        Generation(session, rematch.request, explain=False).run(lambda step: None)
        assert session.drafting_asked == asked  # the race never asks the controller


class TestDraftShare:
    @pytest.mark.parametrize(
        "pieces, text, n_draft, expected",
        [
            (["Hel", "lo"], "Hello", 1, 3),  # exact pieces
            (["\ufffd", "\ufffd", "!"], "한!", 2, 1),  # a Korean character split over 2 tokens
            (["a", "b"], "ab", 0, 0),
        ],
    )
    def test_split_draft_chars(self, pieces, text, n_draft, expected):
        assert split_draft_chars(pieces, text, n_draft) == expected

    @pytest.mark.parametrize(
        "text, n_draft, answer, expected",
        [
            ("Hello", 3, "Hello", 3),  # mid-answer: the same
            ("</think>\n\nHi there", 12, "Hi there", 2),  # 10 characters of tag and blank came first
            ("</think>\n\nHi", 5, "Hi", 0),  # the draft's share was all tag
            ("ink>Hi", 6, "<thHi", 0),  # released from an earlier step: unknown, drawn as the target's
            ("x", 1, "", 0),
        ],
    )
    def test_answer_draft_chars(self, text, n_draft, answer, expected):
        assert answer_draft_chars(text, n_draft, answer) == expected

    @pytest.mark.parametrize(
        "spans, start, end, expected",
        [
            ([], 0, 5, [(0, 5)]),
            ([(0, 5)], 5, 8, [(0, 8)]),  # touching: one span
            ([(0, 5)], 6, 8, [(0, 5), (6, 8)]),  # a target character between
        ],
    )
    def test_add_draft_span(self, spans, start, end, expected):
        add_draft_span(spans, start, end)
        assert spans == expected

"""The chat screen: the conversation's log, the message input, the statistics panel and the step
inspector. It drives a ``localspec.chat.conversation.Conversation`` with plain calls and draws what
they hand back. A reply's generation runs in a thread worker that posts each step to the
screen (``StepArrived``) and stops between steps when asked.
"""

from __future__ import annotations

import time
from pathlib import Path

from textual import on, work
from textual.actions import SkipAction
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Header
from textual.worker import get_current_worker

from ..chat.conversation import Conversation, Ending, Generation, ReplyStep
from ..chat.store import Message as StoredMessage
from ..chat.store import summary_line
from .screens.chats import ChatListScreen
from .screens.help import HelpScreen
from .screens.race import RaceScreen
from .widgets import ChatInput, ChatLog, ReplyView, StatsPanel, StepInspector, UserMessage, code_blocks, stats_values

# Tuning choice: 8 panel refreshes a second is twice the required 4 and costs little CPU;
# the Markdown stream itself is not throttled (get_stream batches what arrives meanwhile).
REFRESH_INTERVAL = 0.125
# Tuning choice: the token view repaints its last paragraph at most 50 times a second: every
# repaint also re-lays-out the chat log, and 50 Hz is as fast as a terminal shows anyway.
TOKEN_VIEW_INTERVAL = 0.02

KEYS = [  # (key, action, what it does, footer label or None); "app." actions are the app's
    ("enter", None, "send the message", None),
    ("shift+enter / ctrl+j", None, "new line in the message", None),
    ("escape", "stop", "stop generating (partial reply kept)", "Stop"),
    ("ctrl+c", "interrupt", "stop generating; when idle: copy the selection", None),
    ("ctrl+r", "regenerate", "regenerate the last reply", "Regenerate"),
    ("ctrl+e", "edit_last", "edit and resend the last message", None),
    ("ctrl+n", "new_chat", "new chat", "New"),
    ("ctrl+l", "chat_list", "chat list", "Chats"),
    ("f1", "help", "help: keys", "Help"),
    ("f2", "toggle_colours", "draft-token colours on/off", "Colours"),
    ("f3", "toggle_inspector", "step inspector on/off", "Inspector"),
    ("f4", "toggle_stats", "statistics panel on/off", None),
    ("f5", "race", "race: last prompt with the target alone", "Race"),
    ("f6", "app.pairs", "choose the model pair", "Pair"),
    ("f7", "app.chat_settings", "system prompt and sampling of this chat", None),
    ("f8", "export", "export this chat to Markdown", None),
    ("f9", "app.settings", "settings", None),
    ("alt+c", "copy_reply", "copy the last reply", None),
    ("alt+k", "copy_code", "copy the last code block", None),
    ("ctrl+t", "app.toggle_theme", "light / dark theme", None),
    ("ctrl+p", None, "command palette (every action)", None),
    ("ctrl+q", None, "quit", None),
]


class StepArrived(Message):
    """One step of a reply, read on the worker thread."""

    def __init__(self, generation: Generation, step: ReplyStep) -> None:
        super().__init__()
        self.generation, self.step = generation, step


class ReplyEnded(Message):
    """The end of a reply's generation, on the worker thread."""

    def __init__(self, generation: Generation, ending: Ending) -> None:
        super().__init__()
        self.generation, self.ending = generation, ending


class ChatScreen(Screen):
    """The chat: the log, the input and the side panels, the chat's keys (priority where the
    input would eat them) and actions. The app's own actions are bound here too ("app.…")."""

    BINDINGS = [
        # priority: the focused input would otherwise take escape, ctrl+e (line end), f7 (select all)
        Binding(key, action, label or desc, show=label is not None, priority=True)
        for key, action, desc, label in KEYS
        if action
    ]

    class Ready(Message):
        """The chat is drawn: the app may open a pair now."""

    def __init__(self, conversation: Conversation, show_colours: bool) -> None:
        super().__init__()
        self.conversation = conversation
        self.show_colours = show_colours
        self.chat_log = ChatLog(id="chat-log")
        self.chat_input = ChatInput(
            id="chat-input",
            soft_wrap=True,
            show_line_numbers=False,
            placeholder="Message  (Enter sends · Shift+Enter / Ctrl+J new line · Ctrl+P commands)",
        )
        self.side = Vertical(id="side")
        self.stats_panel = StatsPanel(id="stats")
        self.inspector = StepInspector(id="inspector")
        self.reply_view: ReplyView | None = None  # the reply streaming, until it is drawn whole
        self.race: RaceScreen | None = None
        self._panels_dirty = False
        self._last_token_paint = 0.0

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="main"):
            with Vertical(id="chat-column"):
                yield self.chat_log
                yield self.chat_input
            with self.side:
                yield self.stats_panel
                yield self.inspector
        yield Footer()

    def on_mount(self) -> None:
        self.show_chat()
        self.set_interval(REFRESH_INTERVAL, self.refresh_panels)
        self.inspector.display = False
        self._apply_side_classes()
        self.chat_input.focus()
        self.refresh_panels(force=True)
        self.post_message(self.Ready())

    def tell(self, message: str, **kwargs) -> None:
        """A notification as plain text: ours carry file names and error text, never markup."""
        self.notify(message, markup=False, **kwargs)

    @property
    def generating(self) -> str | None:
        """What is generating: "chat" while a reply streams (until it is drawn whole), "race"
        while the race runs, else None."""
        if self.reply_view is not None:
            return "chat"
        return "race" if self.race is not None and self.race.running else None

    # --- drawing the chat ---------------------------------------------------------------------
    def show_chat(self) -> None:
        """Draw the conversation's chat (the first, or the one it has just switched to)."""
        self.reply_view = None
        self.inspector.clear()
        log = self.chat_log
        log.anchor(False)
        log.remove_children()
        widgets = [self._message_widget(m) for m in self.conversation.history]
        if widgets:
            log.mount_all(widgets)
        log.call_after_refresh(log.scroll_end, animate=False)
        self._panels_dirty = True

    def _message_widget(self, m: StoredMessage) -> UserMessage | ReplyView:
        if m.role == "user":
            return UserMessage(m.content, message_id=m.id, classes="user-msg")
        stats = m.meta.get("stats") or {}
        view = ReplyView(
            m.content,
            m.meta.get("draft_spans", ()),
            summary_line(stats) if stats else "",
            m.status,
            thinking=m.thinking,
            thinking_tokens=stats.get("thinking_tokens"),
            classes="reply",
        )
        view.message_id = m.id
        if self.show_colours:
            view.add_class("-tokens")
        return view

    def _remove_messages(self, message_ids: list[int]) -> None:
        gone = set(message_ids)
        for w in list(self.chat_log.children):
            if isinstance(w, UserMessage | ReplyView) and w.message_id in gone:
                w.remove()

    def refresh_panels(self, force: bool = False) -> None:
        """Redraw the statistics, the inspector and the streaming reply's slow parts: the panel
        timer's job, when something changed (``force``: now)."""
        if not (self._panels_dirty or force) or not self.stats_panel.is_mounted:
            return
        if self.generating == "chat":
            self._keep_anchored()
        self._panels_dirty = False
        c, s = self.conversation, self.conversation.session
        values = stats_values(
            c.reply_stats,
            c.totals,
            s.baseline_tokens_per_second if s else None,
            s.baseline_note if s else "no pair loaded",
            c.measured_baseline_tps,
            c.mode_shown,
            c.drafting.line if c.drafting is not None else None,
            c.reply_thinking_tokens,
        )
        offload = s.offload.short if s is not None and s.offload is not None else ""
        self.stats_panel.show(values, c.reply_stats.tokens_per_pass_history, offload)
        self.inspector.draw()
        if self.reply_view is not None:
            self.reply_view.refresh_thinking()
            if self.show_colours:
                self.reply_view.refresh_token_view()

    def _keep_anchored(self) -> None:
        """Follow the stream at the bottom. Anchoring only once the log overflows: Textual's
        anchor bottom-aligns shorter content, which would leave a short chat hanging low."""
        log = self.chat_log
        if log.max_scroll_y > 0 and not log.is_anchored:
            log.anchor()

    # --- sending and streaming -------------------------------------------------------------
    @on(ChatInput.Submitted)
    def _submitted(self, event: ChatInput.Submitted) -> None:
        self.send(event.text)

    def send(self, text: str) -> None:
        if not text.strip():
            return
        if self.generating:
            self.tell("still generating: Esc stops it", severity="warning", timeout=3)
            return
        if self.conversation.session is None:
            self.tell("no model pair loaded yet: F6 chooses one", severity="warning", timeout=5)
            return
        self.chat_input.text = ""
        message = self.conversation.send(text)
        self.chat_log.mount(UserMessage(text, message_id=message.id, classes="user-msg"))
        self._start_reply()

    def _start_reply(self) -> None:
        generation = self.conversation.begin_reply()
        self.reply_view = ReplyView(status="streaming", classes="reply")
        if self.show_colours:
            self.reply_view.add_class("-tokens")
        log = self.chat_log
        log.mount(self.reply_view)
        if log.is_anchored:  # the user may have scrolled up: a new reply follows the bottom again
            log.call_after_refresh(log.anchor)
        self.inspector.clear()
        self._generate(generation)

    @work(thread=True, exclusive=True, group="gen")
    def _generate(self, generation: Generation) -> None:
        worker = get_current_worker()
        emit = lambda step: self.post_message(StepArrived(generation, step))
        self.post_message(ReplyEnded(generation, generation.run(emit, lambda: worker.is_cancelled)))

    async def on_step_arrived(self, m: StepArrived) -> None:
        if not self.conversation.add_step(m.generation, m.step):
            return  # a reply that was left
        step, view = m.step, self.reply_view
        self.inspector.add(step.inspected)
        if view is not None:
            view.append_thinking(step.thinking, step.thinking_tokens)
            await view.append(step.answer, step.n_draft_chars)
            now = time.perf_counter()
            if self.show_colours and now - self._last_token_paint >= TOKEN_VIEW_INTERVAL:
                self._last_token_paint = now
                view.refresh_token_view()
        self._panels_dirty = True

    async def on_reply_ended(self, m: ReplyEnded) -> None:
        end = self.conversation.finish(m.generation, m.ending)
        if end is None:
            return  # a reply that was left
        if end.error:
            self.tell(end.error, title="Generation failed", severity="error", timeout=10)
        view = self.reply_view
        if view is not None:
            view.append_thinking(end.rest[0])
            await view.append(end.rest[1], 0)
            self.refresh_panels(force=True)
            await view.finish(end.status, end.summary)
            if end.message is not None:
                view.message_id = end.message.id
            else:
                await view.remove()  # nothing to keep; the notification says what went wrong
        self.reply_view = None  # drawn whole: the next reply may start

    def abandon_reply(self, draw: bool = True) -> None:
        """Leave the reply mid-way (another pair, quitting): the conversation keeps it, stopped,
        and its worker stops at its next step; a race on the same models stops too. ``draw``:
        the reply's view says so (the chat stays on screen)."""
        if self.race is not None:
            self.race.abandon()
        kept = self.conversation.keep_partial()
        self.workers.cancel_group(self, "gen")
        view, self.reply_view = self.reply_view, None
        if view is None or not draw:
            return
        if kept is None:
            view.remove()  # nothing came yet: nothing to show
        else:
            view.message_id = kept.id
            self.call_later(view.finish, "stopped", summary_line(kept.meta["stats"]))

    def _show_switched(self) -> None:
        """The conversation switched chats (its reply, if any, kept): stop what ran, draw it."""
        if self.race is not None:
            self.race.abandon()
        self.workers.cancel_group(self, "gen")
        self.show_chat()

    # --- actions ---------------------------------------------------------------------------
    def action_stop(self) -> None:
        if self.generating == "chat":
            self.conversation.stop()
            self.workers.cancel_group(self, "gen")
        elif self.race is not None:
            self.race.stop()

    def action_interrupt(self) -> None:
        """Ctrl+C stops a reply like Esc; otherwise the key goes on (copy in the input)."""
        if not self.generating:
            raise SkipAction()
        self.action_stop()

    def action_regenerate(self) -> None:
        if self.generating or self.conversation.session is None:
            return
        self._remove_messages(self.conversation.regenerate())
        if self.conversation.unanswered:
            self._start_reply()

    def action_edit_last(self) -> None:
        if self.generating:
            return
        taken = self.conversation.edit_last()
        if taken is None:
            return
        text, dropped = taken
        self._remove_messages(dropped)
        self.chat_input.text = text
        self.chat_input.focus()

    def action_new_chat(self) -> None:
        self.conversation.new_chat()
        self._show_switched()

    def action_chat_list(self) -> None:
        def picked(result: tuple[str, int] | None) -> None:
            if not result:
                return
            what, chat_id = result
            if what == "delete":
                if self.conversation.delete_chat(chat_id):
                    self._show_switched()
                self.tell("chat deleted", timeout=2)
            elif self.conversation.open_chat(chat_id):
                self._show_switched()

        self.app.push_screen(ChatListScreen(self.conversation.store.list_chats(), self.conversation.chat.id), picked)

    def action_help(self) -> None:
        self.app.push_screen(HelpScreen([(k, d) for k, _a, d, _label in KEYS]))

    async def action_toggle_colours(self) -> None:
        self.show_colours = not self.show_colours
        for view in self.query(ReplyView):
            if self.show_colours:
                view.add_class("-tokens")
                view.refresh_token_view(force=True)
            else:
                await view.show_markdown()
        self.tell("draft tokens painted green" if self.show_colours else "Markdown view", timeout=2)

    def action_toggle_inspector(self) -> None:
        self.inspector.display = not self.inspector.display
        self.inspector.draw()
        self._apply_side_classes()

    def action_toggle_stats(self) -> None:
        self.stats_panel.display = not self.stats_panel.display
        self._apply_side_classes()

    def _apply_side_classes(self) -> None:
        self.side.display = any(w.display for w in self.side.children)

    def action_copy_reply(self) -> None:
        reply = self.conversation.last("assistant")
        if reply is None:
            self.tell("no reply to copy", severity="warning", timeout=2)
            return
        self.app.copy_to_clipboard(reply.content)
        self.tell("last reply copied", timeout=2)

    def code_blocks(self) -> list[str]:
        """The last reply's fenced code blocks."""
        reply = self.conversation.last("assistant")
        return code_blocks(reply.content) if reply is not None else []

    def action_copy_code(self, n: int = -1) -> None:
        blocks = self.code_blocks()
        if not blocks:
            self.tell("no code block in the last reply", severity="warning", timeout=2)
            return
        self.app.copy_to_clipboard(blocks[n])
        self.tell(f"code block {len(blocks) if n == -1 else n + 1} copied", timeout=2)

    def action_export(self) -> Path:
        path = self.conversation.export()
        self.tell(f"exported to {path}", timeout=5)
        return path

    # --- race -------------------------------------------------------------------------------
    def action_race(self) -> None:
        session = self.conversation.session
        if self.generating or session is None:
            return
        rematch = self.conversation.rematch()
        if rematch is None:
            self.tell("nothing to race yet: send a message first", severity="warning", timeout=3)
            return
        self.race = RaceScreen(rematch, session, self._race_measured)
        self.app.push_screen(self.race, self._race_closed)

    def _race_measured(self, tokens_per_second: float) -> None:
        self.conversation.measured_baseline_tps = tokens_per_second  # replaces the estimate
        self._panels_dirty = True

    def _race_closed(self, _result: None) -> None:
        self.race = None
        self.refresh_panels(force=True)

"""The conversation, apart from any screen (nothing here imports Textual): the open chat and its
messages in the chat store, what is sent to the model, and one reply at a time from its first
step to the stored message. The TUI drives it with plain calls and draws what they hand back;
the tests drive it with a scripted session.

A reply runs in two halves. The thread that runs the model reads each engine step
(``Generation.run``: the tokens' texts, the thinking split, the draft's share of the answer, the
controller's account) and hands each ``ReplyStep`` to the UI's thread, where
``Conversation.add_step`` adds it to the reply and its statistics and ``Conversation.finish``
stores the reply with the status it ended with. A reply left mid-way (another chat, another
pair, quitting) is stored as it stands, marked "stopped" (``Conversation.keep_partial``).
"""

from __future__ import annotations

import math
import sqlite3
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from pydantic import ValidationError

from ..core.engine import Step
from ..core.explain import DraftingState
from ..core.options import drafting_mode
from ..core.sampling import SamplingParams
from ..core.stats import RunStats
from ..llama.offload import OffloadPlan
from ..settings import Settings, data_dir
from .replies import PastReplies
from .session import ContextOverflow, LoadOptions
from .store import Chat, ChatStore, Message, summary_line
from .thinking import ThinkSplitter, history_content

# Tuning choice: a generation asks why drafting is on or off at most 4 times a second (and
# whenever k changes): explaining builds the mode's engine, cheap but not free at the few
# hundred steps a second of a fast GPU, and the panel repaints at 8 Hz anyway.
DRAFTING_INTERVAL = 0.25


@runtime_checkable
class ChatSession(Protocol):
    """What a conversation and the app need of a loaded pair: ``localspec.chat.session.Session``, and
    the tests' scripted ``FakeSession``."""

    @property
    def mode(self) -> str:
        """The pair's own way of drafting: "draft", "lookup" or "none"."""
        ...

    @property
    def lock(self) -> threading.Lock:
        """Held for the whole of a generation: nothing else may use the models meanwhile."""
        ...

    @property
    def options(self) -> LoadOptions:
        """What the pair was loaded with: a longest draft of 0 never drafts, whatever the chat's mode."""
        ...

    @property
    def offload(self) -> OffloadPlan | None: ...

    @property
    def baseline_tokens_per_second(self) -> float:
        """The target alone's decode speed, as estimated at load."""
        ...

    @property
    def baseline_note(self) -> str:
        """How that estimate was had, in words."""
        ...

    @property
    def opens_thinking(self) -> bool:
        """Whether the chat template opens the <think> block in the prompt."""
        ...

    @property
    def replies(self) -> PastReplies | None:
        """The past replies it drafts from (None: history off); their ``warnings`` are the user's."""
        ...

    def token_text(self, token: int) -> str: ...

    def drafting_state(self, mode: str | None = None, *, params: SamplingParams | None = None) -> DraftingState: ...

    def chat(
        self,
        messages: Sequence[dict],
        params: SamplingParams = ...,
        max_tokens: int = ...,
        mode: str | None = None,
    ) -> Iterator[Step]: ...

    def close(self) -> None: ...


# --- the draft's share of the text ----------------------------------------------------------


def split_draft_chars(pieces: list[str], text: str, n_draft: int) -> int:
    """How many leading characters of a step's ``text`` came from accepted draft tokens.

    Exact when the token pieces add up to the text. When a token splits a UTF-8 character (its
    piece reads U+FFFD and the streamer holds bytes back) the target's share is what its own
    pieces spell out, and the draft gets the rest.
    """
    if "".join(pieces) == text:
        return len("".join(pieces[:n_draft]))
    target_part = "".join(pieces[n_draft:]).replace("\ufffd", "")
    return max(0, min(len(text) - len(target_part), len(text)))


def answer_draft_chars(text: str, n_draft_chars: int, answer: str) -> int:
    """How many leading characters of ``answer`` came from the draft, where ``answer`` is what
    the thinking splitter released of a step's ``text`` whose first ``n_draft_chars`` came from
    the draft. Mid-answer the two are equal; when the answer is the text's tail (after
    ``</think>``) the draft's share shifts with it; text released from an earlier step (a
    held-back partial tag) has no known source and is drawn as the target's."""
    if not answer or not text.endswith(answer):
        return 0
    return max(0, min(n_draft_chars - (len(text) - len(answer)), len(answer)))


def add_draft_span(spans: list[tuple[int, int]], start: int, end: int) -> None:
    """Mark characters ``start:end`` of a reply as the draft's, merged with a span they touch."""
    if spans and spans[-1][1] == start:
        spans[-1] = (spans[-1][0], end)
    else:
        spans.append((start, end))


# --- one generation, on the thread that runs the model ---------------------------------------


@dataclass(frozen=True)
class Request:
    """What one generation asks of the model."""

    messages: list[dict]
    params: SamplingParams
    max_tokens: int
    mode: str | None  # a drafting mode's name ("draft", "lookup", "none"); None: the pair's own


@dataclass(frozen=True)
class InspectedStep:
    """What the step inspector draws of one step (token texts looked up on the model's thread)."""

    index: int
    k: int
    drafted: tuple[str, ...]
    n_accepted: int
    token: str  # the target's own token: correction, or bonus when all drafts were kept
    source: str = ""  # where the drafts came from (Step.source)

    @property
    def bonus(self) -> bool:
        """All drafts kept, so the target's token is a bonus (k = 0 is a plain target step)."""
        return bool(self.drafted) and self.n_accepted == len(self.drafted)


@dataclass(frozen=True)
class ReplyStep:
    """One engine step as a reply takes it. ``answer`` is the step's text less its thinking
    (``thinking``); the first ``n_draft_chars`` characters of the answer came from the draft;
    ``thinking_tokens`` counts the step's tokens when the step was thinking; ``drafting`` is
    the controller's account when it was asked (else None)."""

    step: Step
    answer: str
    thinking: str
    n_draft_chars: int
    thinking_tokens: int
    inspected: InspectedStep
    drafting: DraftingState | None


@dataclass(frozen=True)
class Ending:
    """How a generation ended: ``status`` "done", "stopped" or "error" (``error`` says what);
    ``rest`` is the (thinking, answer) text the splitter held back to the end (a tag that never
    completed), ``drafting`` the controller's account after the generation."""

    status: str
    error: str | None = None
    rest: tuple[str, str] = ("", "")
    drafting: DraftingState | None = None


class Generation:
    """One run of the model: a reply, or the race's target alone. ``run`` belongs on a worker
    thread; ``stop`` may be called from any thread and takes effect between steps. With
    ``explain`` it asks the controller why drafting is on or off (between steps, where nothing
    else uses the models) at most every DRAFTING_INTERVAL seconds or when k changes."""

    def __init__(self, session: ChatSession, request: Request, explain: bool = True) -> None:
        self.session, self.request, self.explain = session, request, explain
        self.splitter = ThinkSplitter()
        self._stop = threading.Event()
        self._index = 0
        self._asked_at, self._asked_k = -math.inf, -1

    def stop(self) -> None:
        self._stop.set()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def run(self, emit: Callable[[ReplyStep], object], cancelled: Callable[[], bool] = lambda: False) -> Ending:
        """Generate, handing each step read to ``emit``; stop when ``stop`` was called or
        ``cancelled()`` says so. A failure ends the generation, never the caller."""
        # the template is read here, on the model's thread, not beside a step of another thread
        self.splitter = ThinkSplitter(opened=self.session.opens_thinking)
        status, error, steps = "done", None, None
        r = self.request
        try:
            steps = self.session.chat(r.messages, r.params, r.max_tokens, r.mode)
            for step in steps:
                emit(self.read(step))
                if self._stop.is_set() or cancelled():  # checked between steps
                    status = "stopped" if not step.finish else "done"
                    break
        except ContextOverflow as e:  # its message says what to do
            status, error = "error", str(e)
        except Exception as e:  # a backend failure ends this reply, never the app
            status, error = "error", f"{type(e).__name__}: {e}"
        finally:
            if isinstance(steps, Generator):
                steps.close()  # the engine leaves both caches consistent between steps
        return Ending(status, error, self.splitter.flush(), self.drafting(force=True))

    def read(self, step: Step) -> ReplyStep:
        """A step's token texts, its thinking split and the draft's share of its answer."""
        self._index += 1
        text_of = self.session.token_text
        drafted = tuple(text_of(t) for t in step.drafted)
        source = step.source + (f"+{step.extended[0]}" if step.extended else "")  # a copy the draft model extended
        inspected = InspectedStep(self._index, step.k, drafted, step.n_accepted, text_of(step.token), source)
        n_draft = min(step.n_accepted, len(step.emitted))
        n_draft_chars = split_draft_chars([text_of(t) for t in step.emitted], step.text, n_draft)
        thinking, answer = self.splitter.feed(step.text)
        # a step is counted whole: thinking if it added nothing to the answer (the <think> and
        # </think> tokens and the blank after them included)
        thinks = not answer and (thinking or self.splitter.state in ("thinking", "after"))
        return ReplyStep(
            step,
            answer,
            thinking,
            answer_draft_chars(step.text, n_draft_chars, answer),
            len(step.emitted) if thinks else 0,
            inspected,
            self.drafting(step.model_k),
        )

    def drafting(self, k: int = -1, force: bool = False) -> DraftingState | None:
        """The controller's account, when it is time to ask (``force``: now)."""
        if not self.explain:
            return None
        now = time.perf_counter()
        if not force and k == self._asked_k and now - self._asked_at < DRAFTING_INTERVAL:
            return None
        self._asked_at, self._asked_k = now, k
        try:
            return self.session.drafting_state(self.request.mode, params=self.request.params)
        except Exception:  # an explanation: it must never end a reply
            return None


# --- the conversation, on the UI's thread ---------------------------------------------------


@dataclass
class Reply:
    """The reply being generated, as it stands: the answer, the thinking apart from it, and
    the character spans of the answer that came from accepted draft tokens."""

    chat_id: int
    generation: Generation
    text: str = ""
    thinking: str = ""
    draft_spans: list[tuple[int, int]] = field(default_factory=list)

    def add(self, thinking: str, answer: str, n_draft_chars: int) -> None:
        self.thinking += thinking
        start = len(self.text)
        self.text += answer
        if answer and n_draft_chars > 0:
            add_draft_span(self.draft_spans, start, start + min(n_draft_chars, len(answer)))


@dataclass(frozen=True)
class ReplyFinished:
    """A reply's end, for the screen to draw: ``rest`` is the (thinking, answer) text held back
    to the end; ``message`` the stored reply, None when there was nothing to keep (an error
    before any text)."""

    status: str
    error: str | None
    rest: tuple[str, str]
    summary: str
    message: Message | None


@dataclass(frozen=True)
class Rematch:
    """The last exchange, to be answered again by the target alone (the race): the prompt as it
    was before the last reply, and what that reply was and how fast it came."""

    request: Request
    reply: str
    tokens_per_second: float
    mode: str
    drafted: bool  # whether the reply drafted anything (a reply stored without the count: maybe)


class Conversation:
    """The open chat and its history over the chat store, and the reply being generated on
    ``session`` (one at a time). ``warn`` is told what the user should know that is no error of
    theirs to fix now (a chat's invalid sampling settings, a partial reply the store refused)."""

    def __init__(
        self, store: ChatStore, settings: Settings, warn: Callable[[str], object] = lambda _text: None
    ) -> None:
        self.store, self.settings, self.warn = store, settings, warn
        self.session: ChatSession | None = None
        self.chat: Chat = store.latest_chat() or self._new_chat()
        self.history: list[Message] = store.messages(self.chat.id)
        self.reply: Reply | None = None
        self.reply_stats = RunStats()  # the reply being generated, else the last one in this chat
        self.reply_thinking_tokens = 0
        self.totals = RunStats()  # every reply since the app started
        self.drafting: DraftingState | None = None  # why drafting is on or off
        self.measured_baseline_tps: float | None = None  # the race's target alone, this pair

    # --- the pair and the chats ---------------------------------------------------------------
    def use_session(self, session: ChatSession) -> None:
        """A pair was loaded: the race's measurement was of the last one."""
        self.session = session
        self.measured_baseline_tps = None
        self.ask_drafting()

    def _new_chat(self) -> Chat:
        return self.store.new_chat("New chat", sampling={}, max_tokens=self.settings.max_tokens)

    def new_chat(self) -> None:
        """An empty chat (a reply still running is kept, stopped, in its own chat)."""
        self.keep_partial()
        self.chat, self.history = self._new_chat(), []
        self._reset_reply_figures()

    def open_chat(self, chat_id: int) -> bool:
        """Open a stored chat; False when there is no such chat (nothing changes then)."""
        chat = self.store.get_chat(chat_id)
        if chat is None:
            return False
        self.keep_partial()
        self.chat, self.history = chat, self.store.messages(chat_id)
        self._reset_reply_figures()
        return True

    def delete_chat(self, chat_id: int) -> bool:
        """Delete a chat. True when it was the open one: the latest other chat (or a new one)
        is open now."""
        current = chat_id == self.chat.id
        if current:
            self.keep_partial()  # kept with it until the delete: nothing is left running
        self.store.delete_chat(chat_id)
        if current:
            latest = self.store.latest_chat()
            if latest is None or not self.open_chat(latest.id):
                self.new_chat()
        return current

    def update_chat(self, **changes) -> None:
        """Change the chat's own settings (``ChatStore.update_chat``'s fields)."""
        self.chat = self.store.update_chat(self.chat.id, **changes) or self.chat
        self.ask_drafting()  # the mode may have changed

    def _reset_reply_figures(self) -> None:
        self.reply_stats, self.reply_thinking_tokens = RunStats(), 0
        self.ask_drafting()  # the chat's own drafting mode

    def ask_drafting(self) -> None:
        """Why drafting is on or off for this chat, asked while no reply runs (a reply's
        generation asks between its steps)."""
        s = self.session
        # never beside a step still running on a worker (a left reply's stops at its next step)
        if s is None or self.reply is not None or s.lock.locked():
            return
        try:
            self.drafting = s.drafting_state(self.chat_mode)
        except Exception:  # e.g. a chat's "draft" mode on a pair without a draft model
            self.drafting = None

    @property
    def mode_shown(self) -> str:
        """The chat's drafting mode, else the pair's."""
        return self.chat_mode or (self.session.mode if self.session else "–")

    @property
    def chat_mode(self) -> str | None:
        """The chat's own drafting mode as the loaded pair runs it (None: the pair's own): the
        target alone on a pair loaded with a longest draft of 0 (``options.drafting_mode``)."""
        mode = self.chat.mode or None
        return drafting_mode(mode, self.session.options.draft_max) if self.session is not None else mode

    def export(self) -> Path:
        """Write the chat as Markdown into the settings' export folder; the file written."""
        folder = Path(self.settings.export_dir or data_dir() / "exports")
        folder.mkdir(parents=True, exist_ok=True)
        slug = "".join(c if c.isalnum() else "-" for c in self.chat.title.lower())[:40].strip("-") or "chat"
        path = folder / f"{slug}-{self.chat.id}.md"
        path.write_text(self.store.export_markdown(self.chat.id), encoding="utf-8")
        return path

    # --- the history and what goes to the model ------------------------------------------------
    def last(self, role: str) -> Message | None:
        return next((m for m in reversed(self.history) if m.role == role), None)

    @property
    def unanswered(self) -> bool:
        """The last message is the user's: a reply may answer it."""
        return bool(self.history) and self.history[-1].role == "user"

    def messages_for_model(self) -> list[dict]:
        """The system prompt and the history, earlier replies without their thinking."""
        out = [{"role": "system", "content": self.chat.system_prompt}] if self.chat.system_prompt else []
        for m in self.history:
            if m.role == "user":
                out.append({"role": "user", "content": m.content})
            elif m.role == "assistant":
                out.append({"role": "assistant", "content": history_content(m.content, m.thinking)})
        return out

    def request(self, messages: list[dict], mode: str | None) -> Request:
        """The chat's sampling over the settings' (the settings' alone when the chat's are
        invalid, with a warning) and its longest reply."""
        try:
            params = SamplingParams.model_validate({**self.settings.sampling.model_dump(), **self.chat.sampling})
        except ValidationError:
            self.warn("this chat's sampling settings are invalid; using the defaults")
            params = self.settings.sampling
        return Request(messages, params, self.chat.max_tokens or self.settings.max_tokens, mode)

    def rematch(self) -> Rematch | None:
        """The last exchange for the target alone; None when there is none yet."""
        reply = self.last("assistant")
        if reply is None or self.last("user") is None or self.session is None:
            return None
        stats = reply.meta.get("stats") or {}
        messages = self.messages_for_model()
        last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
        return Rematch(
            self.request(messages[: last_user + 1], "none"),
            reply.content,
            stats.get("tokens_per_second") or 0.0,
            stats.get("mode") or self.session.mode,
            stats.get("n_drafted") != 0,
        )

    # --- sending and taking back ---------------------------------------------------------------
    def send(self, text: str) -> Message:
        """Store the user's message (committed before anything is generated); the chat's first
        message titles it. ``begin_reply`` answers it."""
        if self.reply is not None:
            raise RuntimeError("a reply is still being generated")
        if not any(m.role == "user" for m in self.history):
            title = " ".join(text.split())[:48] or "New chat"
            self.chat = self.store.update_chat(self.chat.id, title=title) or self.chat
        message = self.store.add_message(self.chat.id, "user", text)
        self.history.append(message)
        return message

    def _drop_from(self, index: int) -> list[int]:
        """Delete history[index:] from the store; the ids deleted."""
        dropped = [m.id for m in self.history[index:]]
        for message_id in dropped:
            self.store.delete_message(message_id)
        del self.history[index:]
        return dropped

    def regenerate(self) -> list[int]:
        """Drop the last reply, so that ``begin_reply`` answers its message again; the ids
        dropped (none when the last message is unanswered already)."""
        if self.history and self.history[-1].role == "assistant":
            return self._drop_from(len(self.history) - 1)
        return []

    def edit_last(self) -> tuple[str, list[int]] | None:
        """Take back the user's last message and all after it: its text (to edit and send
        again) and the ids dropped; None when the user has said nothing yet."""
        index = next((i for i in range(len(self.history) - 1, -1, -1) if self.history[i].role == "user"), None)
        if index is None:
            return None
        text = self.history[index].content
        return text, self._drop_from(index)

    # --- a reply ---------------------------------------------------------------------------
    def begin_reply(self) -> Generation:
        """The generation that answers the last message. Run it on a worker thread, hand its
        steps to ``add_step`` and its end to ``finish``, with it."""
        if self.session is None:
            raise RuntimeError("no model pair is loaded")
        if self.reply is not None:
            raise RuntimeError("a reply is still being generated")
        request = self.request(self.messages_for_model(), self.chat_mode)
        generation = Generation(self.session, request, explain=True)
        self.reply = Reply(self.chat.id, generation)
        self.reply_stats, self.reply_thinking_tokens = RunStats(), 0
        return generation

    def _current(self, generation: Generation) -> Reply | None:
        """The reply ``generation`` runs for, unless it was left (its steps are ignored then)."""
        return self.reply if self.reply is not None and self.reply.generation is generation else None

    def add_step(self, generation: Generation, step: ReplyStep) -> bool:
        """Add a step to its reply and the statistics; False (nothing to draw) for a step of a
        reply that was left."""
        reply = self._current(generation)
        if reply is None:
            return False
        self.reply_stats.add(step.step)
        self.totals.add(step.step)
        self.reply_thinking_tokens += step.thinking_tokens
        if step.drafting is not None:
            self.drafting = step.drafting
        reply.add(step.thinking, step.answer, step.n_draft_chars)
        return True

    def finish(self, generation: Generation, ending: Ending) -> ReplyFinished | None:
        """Store the reply with the status it ended with; None for a reply that was left."""
        reply = self._current(generation)
        if reply is None:
            return None
        self.reply = None
        if ending.drafting is not None:
            self.drafting = ending.drafting
        reply.add(*ending.rest, 0)
        stats = self.reply_stats_dict()
        message = None
        if reply.text or reply.thinking or ending.status != "error":
            message = self._store(reply, ending.status, stats)
            self.history.append(message)
        return ReplyFinished(ending.status, ending.error, ending.rest, summary_line(stats), message)

    def stop(self) -> None:
        """Stop the reply at its next step; its end (``finish``) stores it as "stopped"."""
        if self.reply is not None:
            self.reply.generation.stop()

    def keep_partial(self) -> Message | None:
        """Leave the reply mid-way: its generation stops at its next step (the steps still to
        come are ignored) and what came so far is stored, marked "stopped". The message stored,
        else None: no reply running, nothing came yet, or the store refused (``warn`` says)."""
        reply, self.reply = self.reply, None
        if reply is None:
            return None
        reply.generation.stop()
        if not (reply.text or reply.thinking):
            return None
        try:
            message = self._store(reply, "stopped", self.reply_stats_dict())
        except sqlite3.Error as e:  # e.g. its chat was just deleted: nothing to keep it in
            self.warn(f"partial reply not kept: {e}")
            return None
        if reply.chat_id == self.chat.id:
            self.history.append(message)
        return message

    def _store(self, reply: Reply, status: str, stats: dict) -> Message:
        meta = {"stats": stats, "draft_spans": reply.draft_spans}
        return self.store.add_message(reply.chat_id, "assistant", reply.text, status, meta, thinking=reply.thinking)

    def reply_stats_dict(self) -> dict:
        """This reply's statistics as stored with it (``store.summary_line`` reads them)."""
        run, s = self.reply_stats, self.session
        stats = run.as_dict()
        baseline = self.measured_baseline_tps or (s.baseline_tokens_per_second if s else None)
        speedup = run.speedup(baseline)
        if speedup is not None:
            stats["speedup"] = speedup
        if self.reply_thinking_tokens:
            stats["thinking_tokens"] = self.reply_thinking_tokens
        if self.drafting is not None:
            stats["drafting"] = self.drafting.as_dict()
        stats["mode"] = self.chat_mode or (s.mode if s else None)
        return stats

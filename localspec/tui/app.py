"""The Textual chat app. The app object holds the session (the models), the chat store and
the statistics; widgets only draw. Model loading and generation run in thread workers that
talk to the UI with ``post_message`` and check for cancellation between steps.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from rich.text import Text
from textual import on, work
from textual.actions import SkipAction
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Header, Static
from textual.worker import get_current_worker

from ..core.stats import RunStats
from ..session import ContextOverflow, IncompatiblePair, LoadOptions, PairSpec
from ..settings import Settings, data_dir, load_settings, save_settings, settings_path
from ..store import Chat, ChatStore, summary_line
from ..store import Message as StoredMessage
from ..thinking import ThinkSplitter, history_content
from .screens import (
    ChatListScreen,
    ChatSettingsScreen,
    DownloadScreen,
    ErrorDialog,
    HelpScreen,
    LoadingScreen,
    PairChoice,
    PairScreen,
    RaceScreen,
    SettingsScreen,
)
from .widgets import (
    ChatInput,
    ChatLog,
    InspectedStep,
    ReplyView,
    StatsPanel,
    StepInspector,
    UserMessage,
    code_blocks,
    race_speed_line,
    race_verdict,
    stats_values,
)

# Tuning choice: 8 panel refreshes a second is twice the required 4 and costs little CPU;
# the Markdown stream itself is not throttled (get_stream batches what arrives meanwhile).
REFRESH_INTERVAL = 0.125
# Tuning choice: the token view repaints its last paragraph at most 50 times a second: every
# repaint also re-lays-out the chat log, and 50 Hz is as fast as a terminal shows anyway.
TOKEN_VIEW_INTERVAL = 0.02
INSPECTOR_STEPS = 12
# Tuning choice: the worker asks why drafting is on or off at most 4 times a second (and
# whenever k changes): explaining builds the mode's engine, cheap but not free at the few
# hundred steps a second of a fast GPU, and the panel repaints at 8 Hz anyway.
DRAFTING_INTERVAL = 0.25
# Tuning choice: the race runs the target alone twice, so that what two runs of one
# computation differ by on this machine (the noise) is measured beside any gain.
RACE_RUNS = 2


# --- messages from the workers --------------------------------------------------------------


class StepArrived(Message):
    """One engine step, read in the worker. ``answer`` is the step's text less any thinking
    (``thinking``), and ``n_draft_chars`` counts the answer's leading characters that came from
    the draft; ``drafting`` is the controller's account when it was asked (else None)."""

    def __init__(
        self,
        gen_id: int,
        kind: str,
        step,
        n_draft_chars: int,
        inspected: InspectedStep,
        t_yield: float,
        thinking: str = "",
        answer: str | None = None,
        thinking_tokens: int = 0,
        drafting=None,
    ) -> None:
        super().__init__()
        self.gen_id, self.kind, self.step = gen_id, kind, step
        self.n_draft_chars, self.inspected, self.t_yield = n_draft_chars, inspected, t_yield
        self.thinking, self.answer = thinking, step.text if answer is None else answer
        self.thinking_tokens, self.drafting = thinking_tokens, drafting


class GenerationDone(Message):
    """The end of a worker's run; ``rest`` is the (thinking, answer) text the splitter held back
    to the end (a tag that never completed), ``drafting`` the controller's account after it."""

    def __init__(
        self, gen_id: int, kind: str, status: str, error: str | None, rest: tuple[str, str] = ("", ""), drafting=None
    ) -> None:
        super().__init__()
        self.gen_id, self.kind, self.status, self.error = gen_id, kind, status, error
        self.rest, self.drafting = rest, drafting


class LoadProgress(Message):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text


class SessionLoaded(Message):
    def __init__(self, load_id: int, session, label: str) -> None:
        super().__init__()
        self.load_id, self.session, self.label = load_id, session, label


class SessionFailed(Message):
    def __init__(self, load_id: int, title: str, error: str) -> None:
        super().__init__()
        self.load_id, self.title, self.error = load_id, title, error


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


class StepReader:
    """The worker thread's side of each step: token texts for the inspector, the thinking
    split, and the drafting line (``Session.drafting_state``, asked for at most every
    DRAFTING_INTERVAL seconds or when k changes; ``explain=False`` never asks)."""

    def __init__(self, session, mode: str | None, explain: bool) -> None:
        self.session, self.mode = session, mode
        self._ask = getattr(session, "drafting_state", None) if explain else None
        # a session whose chat template opens the <think> block in the prompt may say so
        self.splitter = ThinkSplitter(opened=bool(getattr(session, "opens_thinking", False)))
        self.index = 0
        self._asked_at, self._asked_k = float("-inf"), None

    def read(self, gen_id: int, kind: str, step) -> StepArrived:
        self.index += 1
        text_of = self.session.token_text
        n_draft = min(step.n_accepted, len(step.emitted))
        inspected = InspectedStep(
            self.index, step.k, tuple(text_of(t) for t in step.drafted), step.n_accepted, text_of(step.token)
        )
        n_draft_chars = split_draft_chars([text_of(t) for t in step.emitted], step.text, n_draft)
        thinking, answer = self.splitter.feed(step.text)
        # a step is counted whole: thinking if it added nothing to the answer (the <think> and
        # </think> tokens and the blank after them included)
        thinks = not answer and (thinking or self.splitter.state in ("thinking", "after"))
        return StepArrived(
            gen_id,
            kind,
            step,
            answer_draft_chars(step.text, n_draft_chars, answer),
            inspected,
            time.perf_counter(),
            thinking,
            answer,
            len(step.emitted) if thinks else 0,
            self.drafting(step.k),
        )

    def drafting(self, k: int | None = None, force: bool = False):
        if self._ask is None:
            return None
        now = time.perf_counter()
        if not force and k == self._asked_k and now - self._asked_at < DRAFTING_INTERVAL:
            return None
        self._asked_at, self._asked_k = now, k
        try:
            return self._ask(self.mode)
        except Exception:  # an explanation: it must never end a reply
            return None


# --- the chat screen ------------------------------------------------------------------------

KEYS = [  # (key, action, what it does, footer label or None)
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
    ("f6", "pairs", "choose the model pair", "Pair"),
    ("f7", "chat_settings", "system prompt and sampling of this chat", None),
    ("f8", "export", "export this chat to Markdown", None),
    ("f9", "settings", "settings", None),
    ("alt+c", "copy_reply", "copy the last reply", None),
    ("alt+k", "copy_code", "copy the last code block", None),
    ("ctrl+t", "toggle_theme", "light / dark theme", None),
    ("ctrl+p", None, "command palette (every action)", None),
    ("ctrl+q", None, "quit", None),
]


class ChatScreen(Screen):
    """The main layout. Its keys call the app's actions (priority where the input would eat them)."""

    BINDINGS = [
        # priority: the focused input would otherwise take escape, ctrl+e (line end), f7 (select all)
        Binding(key, f"app.{action}", label or desc, show=label is not None, priority=True)
        for key, action, desc, label in KEYS
        if action
    ]

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="main"):
            with Vertical(id="chat-column"):
                yield ChatLog(id="chat-log")
                yield ChatInput(
                    id="chat-input",
                    soft_wrap=True,
                    show_line_numbers=False,
                    placeholder="Message  (Enter sends · Shift+Enter / Ctrl+J new line · Ctrl+P commands)",
                )
            with Vertical(id="side"):
                yield StatsPanel(id="stats")
                yield StepInspector(id="inspector")
        yield Footer()

    def on_mount(self) -> None:
        self.app.setup_chat()


class LocalspecApp(App):
    CSS_PATH = "app.tcss"
    TITLE = "localspec"
    # below 100 columns the side panel narrows so the chat keeps most of the width
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (100, "-wide")]

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        settings_warning: str | None = None,
        session_factory: Callable[..., Any] | None = None,
        catalog: Any | None = None,
        store: ChatStore | None = None,
        spec: PairSpec | None = None,
        locate: Callable[[Any, Settings], Path | None] | None = None,
        pull: Callable[..., Path] | None = None,
    ) -> None:
        super().__init__()
        if settings is None:
            settings, settings_warning = load_settings()
        self.settings = settings
        self.settings_warning = settings_warning
        self.session_factory = session_factory or _load_session
        self._catalog = catalog
        self._store = store
        self.spec = spec
        self._locate = locate
        self._pull = pull
        self.session = None
        self.session_label = ""
        self.chat: Chat | None = None
        self.history: list[StoredMessage] = []
        self.gen_id = 0
        self.load_id = 0
        self.generating: str | None = None  # "chat" | "race" while a worker runs
        self._stop_event = threading.Event()
        self.reply: ReplyView | None = None
        self.reply_stats = RunStats()
        self.reply_thinking_tokens = 0
        self.totals = RunStats()
        self.drafting = None  # the controller's DraftingState: why drafting is on or off
        self.inspected: deque[InspectedStep] = deque(maxlen=INSPECTOR_STEPS)
        self.measured_baseline_tps: float | None = None
        self.race_run = RunStats()
        self.race_runs: list[tuple[RunStats, str]] = []  # the target alone's runs and their status
        self.race_screen: RaceScreen | None = None
        self._race_prompt: list[dict] = []
        self._race_drafted = True
        self.show_colours = bool(getattr(settings, "show_draft_tokens", False))
        self._panels_dirty = False
        self._last_token_paint = 0.0
        self._reply_chat_id: int | None = None
        self._loading: LoadingScreen | None = None

    # --- set-up -------------------------------------------------------------------------
    def tell(self, message: str, **kwargs) -> None:
        """A notification as plain text: ours carry file names and error text, never markup."""
        self.notify(message, markup=False, **kwargs)

    def get_default_screen(self) -> Screen:
        self.chat_screen = ChatScreen()  # queried directly: a modal on top must not stop the panels
        return self.chat_screen

    @property
    def store(self) -> ChatStore:
        if self._store is None:
            self._store = ChatStore(data_dir() / "chats.db")
        return self._store

    def on_mount(self) -> None:
        try:
            self.theme = self.settings.theme
        except Exception:  # an unknown theme name in the settings file: keep the default
            self.tell(f"unknown theme {self.settings.theme!r}", severity="warning")
        if self.settings_warning:
            self.tell(self.settings_warning, title="Settings", severity="warning", timeout=15)
        if self.store.warning:
            self.tell(self.store.warning, title="Chat store", severity="error", timeout=20)

    def setup_chat(self) -> None:
        """Called by the ChatScreen once its widgets exist: restore the last chat, then start."""
        chat = self.store.latest_chat()
        if chat is not None:
            self.open_chat(chat.id)
        else:
            self.new_chat()
        self.set_interval(REFRESH_INTERVAL, self._refresh_panels)
        self._apply_side_classes()
        self.chat_screen.query_one("#inspector").display = False
        self.chat_screen.query_one(ChatInput).focus()
        self._refresh_panels(force=True)
        self.call_after_refresh(self.start)

    def start(self) -> None:
        """Open the given pair, else the default pair when its files are here, else the menu."""
        if self.spec is not None:
            self.load_pair(self.spec)
            return
        choice = self._default_choice()
        if choice is not None and all(self._present(r) for r in self._refs(choice)):
            self._open_choice(choice)
        else:
            self.action_pairs()

    # --- catalog and files ----------------------------------------------------------------
    @property
    def catalog(self):
        if self._catalog is None:
            from ..catalog import load_catalog

            self._catalog, warnings = load_catalog(self.settings)
            for w in warnings:
                self.tell(w, title="Catalog", severity="warning", timeout=10)
        return self._catalog

    def _expected_line(self) -> Callable[[Any], str | None] | None:
        """pair -> what this machine's profiles expect of it (``profiles.menu_line``), read once
        per menu; None when nothing was measured here or the build cannot be asked."""
        from .. import profiles

        found = profiles.ProfileStore(data_dir() / profiles.PROFILES_FILE).load()
        if not found:
            return None
        try:
            from ..llama_backend import build_info

            b = build_info()
        except Exception:
            return None
        machine = profiles.machine_id(f"{b.get('llama_cpp_python')}|{b.get('system_info')}")

        def line(pair) -> str | None:
            target = self._path(pair.target)
            draft = self._path(pair.drafts[0]) if pair.drafts else None
            return profiles.menu_line(found, machine, target, draft) if target else None

        return line

    def _present(self, ref) -> bool:
        return self._path(ref) is not None

    def _path(self, ref) -> Path | None:
        locate = self._locate
        if locate is None:
            from ..downloads import locate
        return locate(ref, self.settings)

    def _refs(self, choice: PairChoice) -> list:
        pair = self.catalog.get(choice.pair_id)
        return [pair.target] + ([choice.draft] if choice.draft is not None else [])

    def _default_choice(self) -> PairChoice | None:
        s = self.settings
        if not s.default_pair:
            return None
        try:
            pair = self.catalog.get(s.default_pair)
        except Exception:
            pair = None
        if pair is None:
            return None
        wanted = getattr(s, "default_draft", None)
        from .screens import compatible_drafts

        drafts = compatible_drafts(pair)
        if wanted in ("lookup", "none"):
            draft, mode = None, wanted
        else:
            draft = next((d for d in drafts if d.filename == wanted), drafts[0] if drafts else None)
            mode = "draft" if draft else "lookup"
        return PairChoice(pair.id, draft, mode, s.draft.max_k, s.draft.adaptive, s.draft.p_min)

    # --- pair menu, downloads, loading ------------------------------------------------------
    def action_pairs(self) -> None:
        try:
            catalog = self.catalog
        except Exception as e:
            self.push_screen(ErrorDialog("No model catalog", f"{type(e).__name__}: {e}"))
            return
        s = self.settings
        draft = getattr(s, "default_draft", None)
        draft_value = draft if draft in ("lookup", "none") else f"draft:{draft}" if draft else None
        self.push_screen(
            PairScreen(
                catalog,
                self._present,
                s.default_pair or catalog.default_pair_id,
                draft_value,
                s.draft.max_k,
                s.draft.adaptive,
                s.draft.p_min,
                self._expected_line(),
            ),
            self._pair_chosen,
        )

    def _pair_chosen(self, choice: PairChoice | None) -> None:
        if choice is None:
            return
        draft = self.settings.draft.model_copy(
            update={"max_k": choice.max_k, "adaptive": choice.adaptive, "p_min": choice.p_min}
        )
        update: dict[str, Any] = {"default_pair": choice.pair_id, "draft": draft}
        if "default_draft" in Settings.model_fields:
            update["default_draft"] = choice.draft.filename if choice.draft else choice.mode
        self._save_settings(self.settings.model_copy(update=update))
        missing = [r for r in self._refs(choice) if not self._present(r)]
        if missing:
            pull = self._pull
            if pull is None:
                from ..downloads import pull
            self.push_screen(
                DownloadScreen(missing, self.settings, pull),
                lambda paths: self._open_choice(choice) if paths is not None else None,
            )
        else:
            self._open_choice(choice)

    def _open_choice(self, choice: PairChoice) -> None:
        pair = self.catalog.get(choice.pair_id)
        target = self._path(pair.target)
        draft = self._path(choice.draft) if choice.draft is not None else None
        if target is None or (choice.draft is not None and draft is None):
            self.push_screen(ErrorDialog("Files missing", f"the files of {pair.name} are not on disk"))
            return
        self.load_pair(PairSpec(target, draft, choice.mode == "lookup"), pair.name)

    def load_pair(self, spec: PairSpec, label: str | None = None) -> None:
        self._abandon_reply()
        label = label or f"{spec.target.name} + {spec.draft.name if spec.draft else spec.mode}"
        if self._loading is not None and self._loading in self.screen_stack:
            self._loading.say(f"switching to {label}")  # one loading screen, the newest load wins
        else:
            self._loading = LoadingScreen(label)
            self.push_screen(self._loading)
        self.load_id += 1
        self._load_worker(self.load_id, spec, self._load_options(), label)

    def _load_options(self) -> LoadOptions:
        s = self.settings
        return LoadOptions(
            n_ctx=s.n_ctx,
            threads=s.threads,
            gpu_layers=s.gpu_layers,
            draft_gpu_layers=s.draft_gpu_layers,
            max_k=s.draft.max_k,
            adaptive=s.draft.adaptive,
            p_min=s.draft.p_min,
            overflow=s.overflow,
        )

    @work(thread=True, exclusive=True, group="load")
    def _load_worker(self, load_id: int, spec: PairSpec, options: LoadOptions, label: str) -> None:
        try:
            session = self.session_factory(spec, options, lambda text: self.post_message(LoadProgress(text)))
        except IncompatiblePair as e:
            self.post_message(SessionFailed(load_id, "Incompatible pair", str(e)))
            return
        except Exception as e:  # missing/bad GGUF, out of memory: a dialog, the app keeps running
            if type(e).__name__ == "ModelFileError":  # preflight's message already says what to do
                self.post_message(SessionFailed(load_id, "Model file problem", str(e)))
            else:
                self.post_message(SessionFailed(load_id, "Could not load the pair", f"{type(e).__name__}: {e}"))
            return
        self.post_message(SessionLoaded(load_id, session, label))

    def on_load_progress(self, m: LoadProgress) -> None:
        if self._loading is not None:
            self._loading.say(m.text)

    def _close_loading(self) -> None:
        if self._loading is not None and self._loading in self.screen_stack:
            if self.screen is self._loading:
                self.pop_screen()
        self._loading = None

    def on_session_loaded(self, m: SessionLoaded) -> None:
        if m.load_id != self.load_id:  # a load that was superseded by a newer choice
            self._close_session(m.session)
            return
        self._close_loading()
        old, self.session = self.session, m.session
        if old is not None and old is not m.session:
            self._close_session(old)
        self.session_label = m.label
        self.measured_baseline_tps = None
        self.sub_title = f"{m.label} · {m.session.mode}"
        self.tell(f"{m.label} ready ({m.session.mode})", timeout=3)
        self._ask_drafting()
        self._refresh_panels(force=True)

    def _ask_drafting(self) -> None:
        """The drafting line while idle (while a reply streams, its worker sends it)."""
        ask = getattr(self.session, "drafting_state", None)
        lock = getattr(self.session, "lock", None)
        # never beside a step still running in a worker (a left chat's stops at its next step)
        if ask is None or self.generating or (lock is not None and lock.locked()):
            return
        try:
            self.drafting = ask(self.chat.mode if self.chat and self.chat.mode else None)
        except Exception:  # e.g. a chat's "draft" mode on a pair without a draft model
            self.drafting = None
        self._panels_dirty = True

    @work(thread=True, group="close")
    def _close_session(self, session, timeout: float = 30.0) -> None:
        """Close a replaced session once its last step is done (a generation holds its lock)."""
        close_when_idle(session, timeout)

    def on_session_failed(self, m: SessionFailed) -> None:
        if m.load_id != self.load_id:
            return
        self._close_loading()
        self.push_screen(ErrorDialog(m.title, m.error))

    # --- chats ------------------------------------------------------------------------------
    @property
    def log_widget(self) -> ChatLog:
        return self.chat_screen.query_one("#chat-log", ChatLog)

    def _reset_reply_view(self) -> None:
        """Another chat: the panel's 'this reply' figures and the inspector start empty."""
        self.reply_stats = RunStats()
        self.reply_thinking_tokens = 0
        self.inspected.clear()
        self._ask_drafting()  # the chat's own drafting mode
        self._panels_dirty = True

    def _abandon_reply(self) -> None:
        """Leaving a chat (or a pair) mid-reply: keep the partial reply in its own chat and
        ignore the worker's remaining messages (it stops at its next step)."""
        if self.generating:
            self._persist_partial()
            self._stop_event.set()
            self.workers.cancel_group(self, "gen")
            self.gen_id += 1
            self.generating = None
            self.reply = None

    def new_chat(self) -> None:
        self._abandon_reply()
        s = self.settings
        self.chat = self.store.new_chat("New chat", sampling={}, max_tokens=s.max_tokens)
        self.history = []
        self._reset_reply_view()
        self.log_widget.anchor(False)
        self.log_widget.remove_children()
        self.reply = None

    def open_chat(self, chat_id: int) -> None:
        chat = self.store.get_chat(chat_id)
        if chat is None:
            return
        self._abandon_reply()
        self.chat = chat
        self.history = self.store.messages(chat_id)
        self._reset_reply_view()
        log = self.log_widget
        log.anchor(False)
        log.remove_children()
        widgets = [self._message_widget(m) for m in self.history]
        if widgets:
            log.mount_all(widgets)
        log.call_after_refresh(log.scroll_end, animate=False)
        self.reply = None

    def _message_widget(self, m: StoredMessage):
        if m.role == "user":
            return UserMessage(m.content, message_id=m.id, classes="user-msg")
        stats = (m.meta or {}).get("stats") or {}
        view = ReplyView(
            m.content,
            (m.meta or {}).get("draft_spans", ()),
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

    def _messages_for_model(self) -> list[dict]:
        out = []
        if self.chat and self.chat.system_prompt:
            out.append({"role": "system", "content": self.chat.system_prompt})
        out += [
            {"role": m.role, "content": history_content(m.content, m.thinking) if m.role == "assistant" else m.content}
            for m in self.history
            if m.role in ("user", "assistant")
        ]
        return out

    def _params(self):
        from pydantic import ValidationError

        from ..core.sampling import SamplingParams

        try:
            return SamplingParams.model_validate({**self.settings.sampling.model_dump(), **(self.chat.sampling or {})})
        except ValidationError:
            self.tell("this chat's sampling settings are invalid; using the defaults", severity="warning")
            return self.settings.sampling

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
        if self.session is None:
            self.tell("no model pair loaded yet: F6 chooses one", severity="warning", timeout=5)
            return
        self.chat_screen.query_one(ChatInput).text = ""
        if not any(m.role == "user" for m in self.history):
            title = " ".join(text.split())[:48] or "New chat"
            self.chat = self.store.update_chat(self.chat.id, title=title)
        msg = self.store.add_message(self.chat.id, "user", text)  # committed before we generate
        self.history.append(msg)
        self.log_widget.mount(UserMessage(text, message_id=msg.id, classes="user-msg"))
        self._start_reply()

    def _start_reply(self) -> None:
        self.reply = ReplyView(status="streaming", classes="reply")
        if self.show_colours:
            self.reply.add_class("-tokens")
        log = self.log_widget
        log.mount(self.reply)
        if log.is_anchored:  # the user may have scrolled up: a new reply follows the bottom again
            log.call_after_refresh(log.anchor)
        self.reply_stats = RunStats()
        self.reply_thinking_tokens = 0
        self._reply_chat_id = self.chat.id
        self.inspected.clear()
        mode = self.chat.mode if self.chat and self.chat.mode else None
        self._generate_start("chat", self._messages_for_model(), mode)

    def _generate_start(self, kind: str, messages: list[dict], mode: str | None) -> None:
        self.gen_id += 1
        self._stop_event = threading.Event()
        self.generating = kind
        max_tokens = self.chat.max_tokens if self.chat and self.chat.max_tokens else self.settings.max_tokens
        self._generate(self.gen_id, kind, messages, self._params(), max_tokens, mode, self._stop_event)

    @work(thread=True, exclusive=True, group="gen")
    def _generate(
        self,
        gen_id: int,
        kind: str,
        messages: list[dict],
        params,
        max_tokens: int,
        mode: str | None,
        stop: threading.Event,
    ) -> None:
        worker = get_current_worker()
        session = self.session
        status, error = "done", None
        steps = None
        reader = StepReader(session, mode, explain=kind == "chat")
        try:
            steps = session.chat(messages, params, max_tokens, mode)
            for step in steps:
                self.post_message(reader.read(gen_id, kind, step))
                if stop.is_set() or worker.is_cancelled:  # checked between steps
                    status = "stopped" if not step.finish else "done"
                    break
        except ContextOverflow as e:
            status, error = "error", str(e)
        except Exception as e:  # a backend failure ends this reply, never the app
            status, error = "error", f"{type(e).__name__}: {e}"
        finally:
            if steps is not None:
                steps.close()  # the engine leaves both caches consistent between steps
        self.post_message(
            GenerationDone(gen_id, kind, status, error, reader.splitter.flush(), reader.drafting(force=True))
        )

    async def on_step_arrived(self, m: StepArrived) -> None:
        if m.gen_id != self.gen_id:
            return
        if m.kind == "race":
            self.race_run.add(m.step)
            await self._race_step(m.answer)
            return
        self.reply_stats.add(m.step)
        self.totals.add(m.step)
        self.inspected.append(m.inspected)
        self.reply_thinking_tokens += m.thinking_tokens
        if m.drafting is not None:
            self.drafting = m.drafting
        if self.reply is not None:
            self.reply.append_thinking(m.thinking, m.thinking_tokens)
            await self.reply.append(m.answer, m.n_draft_chars)
            now = time.perf_counter()
            if self.show_colours and now - self._last_token_paint >= TOKEN_VIEW_INTERVAL:
                self._last_token_paint = now
                self.reply.refresh_token_view()
        self._panels_dirty = True

    async def on_generation_done(self, m: GenerationDone) -> None:
        if m.gen_id != self.gen_id:
            return
        if m.kind == "race":
            self.generating = None
            await self._race_done(m)  # may start the target alone's next run
            return
        reply, self.reply = self.reply, None
        if m.error:
            self.tell(m.error, title="Generation failed", severity="error", timeout=10)
        if m.drafting is not None:
            self.drafting = m.drafting
        if reply is None:
            self.generating = None
            return
        reply.append_thinking(m.rest[0])
        await reply.append(m.rest[1], 0)
        self._panels_dirty = True
        self._refresh_panels(force=True)
        stats = self._reply_stats_dict()
        await reply.finish(m.status, summary_line(stats))
        if reply.text or reply.thinking or m.status != "error":
            msg = self.store.add_message(
                self._reply_chat_id,
                "assistant",
                reply.text,
                m.status,
                {"stats": stats, "draft_spans": reply.draft_spans},
                thinking=reply.thinking,
            )
            reply.message_id = msg.id
            self.history.append(msg)
        else:
            await reply.remove()  # nothing to keep; the notification says what went wrong
        self.generating = None

    def _reply_stats_dict(self) -> dict:
        stats = self.reply_stats.as_dict()
        baseline = self.measured_baseline_tps or (self.session.baseline_tokens_per_second if self.session else None)
        if self.reply_stats.n_steps and self.reply_stats.n_drafted == 0:
            stats["speedup"] = 1.0  # the target's own computation: any other ratio is noise
        elif baseline and self.reply_stats.tokens_per_second:
            stats["speedup"] = self.reply_stats.tokens_per_second / baseline
        if self.reply_thinking_tokens:
            stats["thinking_tokens"] = self.reply_thinking_tokens
        if self.drafting is not None:
            stats["drafting"] = self.drafting.as_dict()
        stats["mode"] = (self.chat.mode if self.chat and self.chat.mode else None) or (
            self.session.mode if self.session else None
        )
        return stats

    def _refresh_panels(self, force: bool = False) -> None:
        if not (self._panels_dirty or force):
            return
        if self.generating == "chat" and self.screen.is_attached:
            self._keep_anchored()
        self._panels_dirty = False
        try:
            panel = self.chat_screen.query_one("#stats", StatsPanel)
        except Exception:  # the chat screen is not composed yet
            return
        s = self.session
        values = stats_values(
            self.reply_stats,
            self.totals,
            s.baseline_tokens_per_second if s else None,
            s.baseline_note if s else "no pair loaded",
            self.measured_baseline_tps,
            (self.chat.mode if self.chat and self.chat.mode else None) or (s.mode if s else "–"),
            self.drafting.line if self.drafting is not None else None,
            self.reply_thinking_tokens,
        )
        offload = getattr(s, "offload", None) if s else None
        panel.show(values, self.reply_stats.tokens_per_pass_history, offload.short if offload else "")
        inspector = self.chat_screen.query_one("#inspector", StepInspector)
        if inspector.display:
            inspector.show(list(self.inspected))
        if self.reply is not None:
            self.reply.refresh_thinking()
            if self.show_colours:
                self.reply.refresh_token_view()

    def _keep_anchored(self) -> None:
        """Follow the stream at the bottom. Anchoring only once the log overflows: Textual's
        anchor bottom-aligns shorter content, which would leave a short chat hanging low."""
        try:
            log = self.log_widget
        except Exception:
            return
        if log.max_scroll_y > 0 and not log.is_anchored:
            log.anchor()

    # --- actions ---------------------------------------------------------------------------
    def action_stop(self) -> None:
        if self.generating:
            self._stop_event.set()
            self.workers.cancel_group(self, "gen")

    def action_interrupt(self) -> None:
        """Ctrl+C stops a reply like Esc; otherwise the key goes on (copy in the input)."""
        if not self.generating:
            raise SkipAction()
        self.action_stop()

    def _last(self, role: str) -> int | None:
        for i in range(len(self.history) - 1, -1, -1):
            if self.history[i].role == role:
                return i
        return None

    def _drop_from(self, index: int) -> None:
        """Delete history[index:] from the store and the screen."""
        dropped = {m.id for m in self.history[index:]}
        for m in self.history[index:]:
            self.store.delete_message(m.id)
        for w in list(self.log_widget.children):
            if getattr(w, "message_id", None) in dropped:
                w.remove()
        del self.history[index:]

    def action_regenerate(self) -> None:
        if self.generating or self.session is None:
            return
        i = self._last("assistant")
        if i is not None and i == len(self.history) - 1:
            self._drop_from(i)
        if self.history and self.history[-1].role == "user":
            self._start_reply()

    def action_edit_last(self) -> None:
        if self.generating:
            return
        i = self._last("user")
        if i is None:
            return
        text = self.history[i].content
        self._drop_from(i)
        box = self.chat_screen.query_one(ChatInput)
        box.text = text
        box.focus()

    def action_new_chat(self) -> None:
        self.new_chat()

    def action_chat_list(self) -> None:
        def picked(result) -> None:
            if not result:
                return
            what, chat_id = result
            if what == "delete":
                if self.chat and chat_id == self.chat.id:
                    self._abandon_reply()
                self.store.delete_chat(chat_id)
                if self.chat and chat_id == self.chat.id:
                    latest = self.store.latest_chat()
                    self.open_chat(latest.id) if latest else self.new_chat()
                self.tell("chat deleted", timeout=2)
            else:
                self.open_chat(chat_id)

        self.push_screen(ChatListScreen(self.store.list_chats(), self.chat.id if self.chat else None), picked)

    def action_help(self) -> None:
        self.push_screen(HelpScreen([(k, d) for k, _a, d, _label in KEYS]))

    async def action_toggle_colours(self) -> None:
        self.show_colours = not self.show_colours
        for view in self.chat_screen.query(ReplyView):
            if self.show_colours:
                view.add_class("-tokens")
                view.refresh_token_view(force=True)
            else:
                await view.show_markdown()
        self.tell("draft tokens painted green" if self.show_colours else "Markdown view", timeout=2)

    def action_toggle_inspector(self) -> None:
        inspector = self.chat_screen.query_one("#inspector", StepInspector)
        inspector.display = not inspector.display
        if inspector.display:
            inspector.show(list(self.inspected))
        self._apply_side_classes()

    def action_toggle_stats(self) -> None:
        panel = self.chat_screen.query_one("#stats", StatsPanel)
        panel.display = not panel.display
        self._apply_side_classes()

    def _apply_side_classes(self) -> None:
        side = self.chat_screen.query_one("#side")
        side.display = any(w.display for w in side.children)

    def action_toggle_theme(self) -> None:
        self.theme = "textual-light" if self.current_theme.dark else "textual-dark"
        self._save_settings(self.settings.model_copy(update={"theme": self.theme}))

    def action_copy_reply(self) -> None:
        i = self._last("assistant")
        if i is None:
            self.tell("no reply to copy", severity="warning", timeout=2)
            return
        self.copy_to_clipboard(self.history[i].content)
        self.tell("last reply copied", timeout=2)

    def action_copy_code(self, n: int = -1) -> None:
        i = self._last("assistant")
        blocks = code_blocks(self.history[i].content) if i is not None else []
        if not blocks:
            self.tell("no code block in the last reply", severity="warning", timeout=2)
            return
        self.copy_to_clipboard(blocks[n])
        self.tell(f"code block {len(blocks) if n == -1 else n + 1} copied", timeout=2)

    def action_export(self) -> Path | None:
        if self.chat is None:
            return None
        folder = getattr(self.settings, "export_dir", None) or data_dir() / "exports"
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        slug = "".join(c if c.isalnum() else "-" for c in self.chat.title.lower())[:40].strip("-") or "chat"
        path = folder / f"{slug}-{self.chat.id}.md"
        path.write_text(self.store.export_markdown(self.chat.id), encoding="utf-8")
        self.tell(f"exported to {path}", timeout=5)
        return path

    def action_chat_settings(self) -> None:
        if self.chat is None:
            return
        modes = ["draft", "lookup", "none"] if (self.session and self.session.mode == "draft") else ["lookup", "none"]
        current = self.chat.mode or (self.session.mode if self.session else "none")
        if current not in modes:
            modes.insert(0, current)
        sampling = {**self.settings.sampling.model_dump(), **(self.chat.sampling or {})}

        def saved(result) -> None:
            if result:
                self.chat = self.store.update_chat(self.chat.id, **result)
                self.tell("chat settings saved", timeout=2)
                self._ask_drafting()  # the mode may have changed

        self.push_screen(
            ChatSettingsScreen(
                self.chat.system_prompt, sampling, self.chat.max_tokens or self.settings.max_tokens, current, modes
            ),
            saved,
        )

    def action_settings(self) -> None:
        def saved(settings) -> None:
            if settings is not None:
                self._save_settings(settings)
                self.tell("settings saved; model options apply at the next load (F6)", timeout=4)

        self.push_screen(SettingsScreen(self.settings, settings_path(), self.settings_warning), saved)

    def _save_settings(self, settings: Settings) -> None:
        self.settings = settings
        try:
            save_settings(settings)
        except OSError as e:
            self.tell(f"could not save settings: {e}", severity="error")

    # --- race -------------------------------------------------------------------------------
    def action_race(self) -> None:
        if self.generating or self.session is None:
            return
        i = self._last("assistant")
        if i is None or self._last("user") is None:
            self.tell("nothing to race yet: send a message first", severity="warning", timeout=3)
            return
        reply = self.history[i]
        stats = (reply.meta or {}).get("stats") or {}
        spec_tps = stats.get("tokens_per_second") or 0.0
        messages = self._messages_for_model()
        # the prompt as it was before the last reply
        j = max(k for k, m in enumerate(messages) if m["role"] == "user")
        self._race_prompt = messages[: j + 1]
        self._race_drafted = stats.get("n_drafted") != 0  # a reply stored without the count: maybe
        self.race_runs = []
        mode = stats.get("mode") or self.session.mode
        self.race_screen = RaceScreen(reply.content, spec_tps, mode)
        self.push_screen(self.race_screen)
        self._race_next()

    def _race_next(self) -> None:
        """One more run of the target alone on the same prompt (the race runs it RACE_RUNS times)."""
        self.race_run = RunStats()
        self._generate_start("race", self._race_prompt, "none")

    async def _race_step(self, answer: str) -> None:
        """The first run streams into the race screen; later ones only update the speeds."""
        if self.race_screen is None:
            return
        if not self.race_runs and answer:
            await self.race_screen.append(answer, self.race_run.tokens_per_second)
        speeds = [r.tokens_per_second for r, _ in self.race_runs] + [self.race_run.tokens_per_second]
        self.race_screen.query_one("#race-right-speed", Static).update(race_speed_line(speeds, running=True))

    async def _race_done(self, m: GenerationDone) -> None:
        if m.error:
            self.tell(m.error, title="Race failed", severity="error")
        if self.race_screen is not None and not self.race_runs and m.rest[1]:
            await self.race_screen.append(m.rest[1], self.race_run.tokens_per_second)
        self.race_runs.append((self.race_run, m.status))
        if m.status == "done" and len(self.race_runs) < RACE_RUNS and self.race_screen is not None:
            self._race_next()
            return
        done = [r.tokens_per_second for r, status in self.race_runs if status == "done" and r.tokens_per_second]
        if done:
            self.measured_baseline_tps = sum(done) / len(done)  # the measured ratio replaces the estimate
        self._panels_dirty = True
        if self.race_screen is None:
            return
        screen, speeds = self.race_screen, [r.tokens_per_second for r, _ in self.race_runs]
        runs = [t for t in speeds if t]
        await screen.finish(sum(runs) / len(runs) if runs else 0.0, m.status)
        # the screen's own verdict knows one run and no drafting; ours says both
        note = "" if m.status == "done" else f" ({m.status})"
        screen.query_one("#race-right-speed", Static).update(race_speed_line(speeds, running=False, note=note))
        verdict = race_verdict(screen.spec_tps, self._race_drafted, speeds, screen.spec_text == screen.target_text)
        screen.query_one("#race-verdict", Static).update(Text(verdict, style="bold"))

    def action_close_race(self) -> None:
        self.action_stop()
        if self.race_screen is not None and self.screen is self.race_screen:
            self.pop_screen()
        self.race_screen = None
        self._refresh_panels(force=True)

    # --- palette and quitting -----------------------------------------------------------------
    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for key, action, desc, _label in KEYS:
            if action and action != "interrupt":  # Esc's "stop" is the palette's entry
                yield SystemCommand(desc[0].upper() + desc[1:], f"key: {key}", getattr(self, f"action_{action}"))
        i = self._last("assistant")
        blocks = code_blocks(self.history[i].content) if i is not None else []
        for n, block in enumerate(blocks):
            first = block.strip().splitlines()[0][:40] if block.strip() else ""
            yield SystemCommand(f"Copy code block {n + 1}", first, lambda n=n: self.action_copy_code(n))

    def _persist_partial(self) -> None:
        """On quit (or leaving the chat) mid-reply the partial reply is kept, marked stopped."""
        if self.generating == "chat" and self.reply is not None and (self.reply.text or self.reply.thinking):
            self._stop_event.set()
            try:
                self.store.add_message(
                    self._reply_chat_id,
                    "assistant",
                    self.reply.text,
                    "stopped",
                    {"stats": self._reply_stats_dict(), "draft_spans": self.reply.draft_spans},
                    thinking=self.reply.thinking,
                )
            except sqlite3.Error as e:  # e.g. its chat was just deleted: nothing to keep it in
                self.log.warning(f"partial reply not kept: {e}")
            self.generating = None
            self.reply = None

    async def action_quit(self) -> None:
        self._persist_partial()
        self.exit()

    def on_unmount(self) -> None:
        self._persist_partial()
        self._stop_event.set()
        if self.session is not None:
            close_when_idle(self.session, timeout=5.0)


def close_when_idle(session, timeout: float) -> None:
    """Free the models, but never under a step still running in a worker thread: a session
    holds its lock for the whole of a generation, and the worker stops at its next step."""
    lock = getattr(session, "lock", None)
    if lock is not None and not lock.acquire(timeout=timeout):
        return  # still busy: leave it to the process exit rather than free memory in use
    try:
        session.close()
    except Exception:
        pass
    finally:
        if lock is not None:
            lock.release()


def _load_session(spec: PairSpec, options: LoadOptions, progress: Callable[[str], None]):
    from ..profiles import PROFILES_FILE, ProfileStore
    from ..session import Session

    # what the pair costs here is kept for the pair menu and `localspec doctor`
    return Session.load(spec, options, progress, profiles=ProfileStore(data_dir() / PROFILES_FILE))

"""The Textual chat app. The app holds the settings, the chat store, the session (the models)
and the pair menu, downloads and loading; the chat screen (``chat.ChatScreen``) draws the
conversation (``localspec.chat.conversation``) and drives it. Model loading runs in a thread worker
that talks to the UI with ``post_message``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import Any

from textual import work
from textual.app import App, SystemCommand
from textual.message import Message
from textual.screen import Screen

from ..chat.conversation import ChatSession, Conversation
from ..chat.history import HistoryStore
from ..chat.session import IncompatiblePair, LoadOptions, PairSpec, load_options
from ..chat.store import ChatStore
from ..core.modes import MODEL_MODES
from ..core.options import drafting_mode
from ..settings import Settings, data_dir, load_settings, save_settings, settings_path
from .chat import KEYS, ChatScreen
from .screens.app_settings import SettingsScreen
from .screens.chat_settings import ChatSettingsScreen
from .screens.download import DownloadScreen
from .screens.error import ErrorDialog
from .screens.loading import LoadingScreen
from .screens.pair import PairChoice, PairScreen, compatible_drafts, draft_options

# loads a pair: (pair, options, progress callback) -> the session
SessionFactory = Callable[[PairSpec, LoadOptions, Callable[[str], None]], ChatSession]


# --- messages from the loading worker ----------------------------------------------------------


class LoadProgress(Message):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text


class SessionLoaded(Message):
    def __init__(self, load_id: int, session: ChatSession, label: str) -> None:
        super().__init__()
        self.load_id, self.session, self.label = load_id, session, label


class SessionFailed(Message):
    def __init__(self, load_id: int, title: str, error: str) -> None:
        super().__init__()
        self.load_id, self.title, self.error = load_id, title, error


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
        session_factory: SessionFactory | None = None,
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
        self.session: ChatSession | None = None
        self.session_label = ""
        self.load_id = 0
        self._loading: LoadingScreen | None = None

    # --- set-up -------------------------------------------------------------------------
    def tell(self, message: str, **kwargs) -> None:
        """A notification as plain text: ours carry file names and error text, never markup."""
        self.notify(message, markup=False, **kwargs)

    def get_default_screen(self) -> ChatScreen:
        # the conversation opens the last chat (or a new one); the chat screen draws it
        self.conversation = Conversation(
            self.store, self.settings, warn=lambda text: self.tell(text, severity="warning")
        )
        self.chat_screen = ChatScreen(self.conversation, self.settings.show_draft_tokens)
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

    def on_chat_screen_ready(self, _message: ChatScreen.Ready) -> None:
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
            from ..models.catalog import load_catalog

            self._catalog, warnings = load_catalog(self.settings)
            for w in warnings:
                self.tell(w, title="Catalog", severity="warning", timeout=10)
        return self._catalog

    def _expected_line(self) -> Callable[[Any], str | None] | None:
        """pair -> what this machine's profiles expect of it (``profiles.menu_line``), read once
        per menu; None when nothing was measured here or the build cannot be asked."""
        from ..models import profiles

        found = profiles.ProfileStore(data_dir() / profiles.PROFILES_FILE).load()
        if not found:
            return None
        try:
            from ..llama.backend import build_info

            b = build_info()
        except Exception:
            return None
        machine = profiles.machine_id(f"{b.get('llama_cpp_python')}|{b.get('system_info')}")

        def line(pair) -> str | None:
            target = self._path(pair.target)
            draft = self._path(pair.default_draft) if pair.default_draft else None
            mtp = "mtp" in [v for _, v in draft_options(pair, self._path)]
            return profiles.menu_line(found, machine, target, draft, mtp) if target else None

        return line

    def _present(self, ref) -> bool:
        return self._path(ref) is not None

    def _path(self, ref) -> Path | None:
        if self._locate is not None:
            return self._locate(ref, self.settings)
        from ..models.downloads import locate

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
        wanted = s.default_draft
        offered = [v for _, v in draft_options(pair, self._path)]
        if wanted in ("lookup", "none") or (wanted == "mtp" and "mtp" in offered):
            draft, mode = None, wanted
        else:
            files = [d for d in compatible_drafts(pair) if f"draft:{d.filename}" in offered]
            draft = next((d for d in files if d.filename == wanted), None)
            if draft is None and offered[0] != "mtp":
                draft = files[0] if files else None
            mode = "draft" if draft else "mtp" if offered[0] == "mtp" else "lookup"
        return PairChoice(pair.id, draft, mode, s.draft.draft_max, s.draft.adaptive, s.draft.p_min)

    # --- pair menu, downloads, loading ------------------------------------------------------
    def action_pairs(self) -> None:
        try:
            catalog = self.catalog
        except Exception as e:
            self.push_screen(ErrorDialog("No model catalog", f"{type(e).__name__}: {e}"))
            return
        s = self.settings
        draft = s.default_draft
        draft_value = draft if draft in ("lookup", "none", "mtp") else f"draft:{draft}" if draft else None
        self.push_screen(
            PairScreen(
                catalog,
                self._present,
                s.default_pair or catalog.default_pair_id,
                draft_value,
                s.draft.draft_max,
                s.draft.adaptive,
                s.draft.p_min,
                self._expected_line(),
                self._path,
            ),
            self._pair_chosen,
        )

    def _pair_chosen(self, choice: PairChoice | None) -> None:
        if choice is None:
            return
        draft = self.settings.draft.model_copy(
            update={"draft_max": choice.draft_max, "adaptive": choice.adaptive, "p_min": choice.p_min}
        )
        default_draft = choice.draft.filename if choice.draft else choice.mode
        update = {"default_pair": choice.pair_id, "draft": draft, "default_draft": default_draft}
        self._save_settings(self.settings.model_copy(update=update))
        missing = [r for r in self._refs(choice) if not self._present(r)]
        if missing:
            from ..models.downloads import pull

            self.push_screen(
                DownloadScreen(missing, self.settings, self._pull or pull),
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
        self.load_pair(PairSpec(target, draft, choice.mode == "lookup", mtp=choice.mode == "mtp"), pair.name)

    def load_pair(self, spec: PairSpec, label: str | None = None) -> None:
        """Load ``spec`` with the settings' options: with a longest draft of 0, the target alone
        (``options.drafting_mode``), so no draft is loaded that would never draft."""
        self.chat_screen.abandon_reply()
        load = self._load_options()
        if drafting_mode(spec.mode, load.draft_max) == "none":
            spec = PairSpec(spec.target)
        label = label or f"{spec.target.name} + {spec.drafter}"
        if self._loading is not None and self._loading in self.screen_stack:
            self._loading.say(f"switching to {label}")  # one loading screen, the newest load wins
        else:
            self._loading = LoadingScreen(label)
            self.push_screen(self._loading)
        self.load_id += 1
        self._load_worker(self.load_id, spec, load, label)

    def _load_options(self) -> LoadOptions:
        return load_options(self.settings, self.settings.draft)  # the settings are a ModelOptions

    @work(thread=True, exclusive=True, group="load")
    def _load_worker(self, load_id: int, spec: PairSpec, options: LoadOptions, label: str) -> None:
        from ..llama.preflight import ModelFileError

        def progress(text: str) -> None:
            self.post_message(LoadProgress(text))

        try:
            session = self.session_factory(spec, options, progress)
        except IncompatiblePair as e:
            self.post_message(SessionFailed(load_id, "Incompatible pair", str(e)))
            return
        except ModelFileError as e:  # preflight's message already says what to do
            self.post_message(SessionFailed(load_id, "Model file problem", str(e)))
            return
        except Exception as e:  # missing/bad GGUF, out of memory: a dialog, the app keeps running
            self.post_message(SessionFailed(load_id, "Could not load the pair", f"{type(e).__name__}: {e}"))
            return
        self.post_message(SessionLoaded(load_id, session, label))

    def on_load_progress(self, m: LoadProgress) -> None:
        if self._loading is not None:
            self._loading.say(m.text)

    def _close_loading(self) -> None:
        if self._loading is not None and self.screen is self._loading:
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
        self.sub_title = f"{m.label} · {m.session.mode}"
        self.tell(f"{m.label} ready ({m.session.mode})", timeout=3)
        for warning in m.session.replies.warnings if m.session.replies else ():
            self.tell(warning, severity="warning", timeout=10)
        self.conversation.use_session(m.session)
        self.chat_screen.refresh_panels(force=True)

    @work(thread=True, group="close")
    def _close_session(self, session: ChatSession, timeout: float = 30.0) -> None:
        """Close a replaced session once its last step is done (a generation holds its lock)."""
        close_when_idle(session, timeout)

    def on_session_failed(self, m: SessionFailed) -> None:
        if m.load_id != self.load_id:
            return
        self._close_loading()
        self.push_screen(ErrorDialog(m.title, m.error))

    # --- actions of the app (the chat's are the chat screen's) --------------------------------
    def action_toggle_theme(self) -> None:
        self.theme = "textual-light" if self.current_theme.dark else "textual-dark"
        self._save_settings(self.settings.model_copy(update={"theme": self.theme}))

    def action_chat_settings(self) -> None:
        chat = self.conversation.chat
        own = self.session.mode if self.session and self.session.mode in MODEL_MODES else None
        modes = ([own] if own else []) + ["lookup", "none"]
        current = chat.mode or (self.session.mode if self.session else "none")
        if current not in modes:
            modes.insert(0, current)
        sampling = {**self.settings.sampling.model_dump(), **chat.sampling}

        def saved(result) -> None:
            if result:
                self.conversation.update_chat(**result)
                self.tell("chat settings saved", timeout=2)
                self.chat_screen.refresh_panels(force=True)  # the drafting mode may have changed

        self.push_screen(
            ChatSettingsScreen(
                chat.system_prompt, sampling, chat.max_tokens or self.settings.max_tokens, current, modes
            ),
            saved,
        )

    def action_settings(self) -> None:
        def saved(settings) -> None:
            if settings is not None:
                self._save_settings(settings)
                self.tell("settings saved; model options apply at the next load (F6)", timeout=4)

        self.push_screen(SettingsScreen(self.settings, settings_path(), self.settings_warning, HistoryStore()), saved)

    def _save_settings(self, settings: Settings) -> None:
        self.settings = self.conversation.settings = settings
        try:
            save_settings(settings)
        except OSError as e:
            self.tell(f"could not save settings: {e}", severity="error")

    # --- palette and quitting -----------------------------------------------------------------
    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for key, action, desc, _label in KEYS:
            if action and action != "interrupt":  # Esc's "stop" is the palette's entry
                # run as its key runs it: the chat screen's action, or the app's ("app.…")
                run = partial(self.run_action, action, self.chat_screen)
                yield SystemCommand(desc[0].upper() + desc[1:], f"key: {key}", run)
        for n, block in enumerate(self.chat_screen.code_blocks()):
            first = block.strip().splitlines()[0][:40] if block.strip() else ""
            yield SystemCommand(f"Copy code block {n + 1}", first, partial(self.chat_screen.action_copy_code, n))

    async def action_quit(self) -> None:
        self.chat_screen.abandon_reply(draw=False)  # a partial reply is kept, marked stopped
        self.exit()

    def on_unmount(self) -> None:
        self.chat_screen.abandon_reply(draw=False)
        if self.session is not None:
            close_when_idle(self.session, timeout=5.0)


def close_when_idle(session: ChatSession, timeout: float) -> None:
    """Free the models, but never under a step still running in a worker thread: a session
    holds its lock for the whole of a generation, and the worker stops at its next step."""
    if not session.lock.acquire(timeout=timeout):
        return  # still busy: leave it to the process exit rather than free memory in use
    try:
        session.close()
    except Exception:
        pass
    finally:
        session.lock.release()


def _load_session(spec: PairSpec, options: LoadOptions, progress: Callable[[str], None]) -> ChatSession:
    from ..chat.session import Session
    from ..models.profiles import PROFILES_FILE, ProfileStore

    # what the pair costs here is kept for the pair menu and `localspec doctor`
    profiles = ProfileStore(data_dir() / PROFILES_FILE)
    return Session.load(spec, options, progress, profiles=profiles, history=HistoryStore())  # (options.history: used)

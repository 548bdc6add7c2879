"""Screens of the chat app: pair menu, downloads, loading, chat list, per-chat settings,
app settings, race, help and error dialogs. Each returns its result with ``dismiss`` and holds
no model state; the app loads and the chat screen generates. The download and race screens run
thread workers of their own (``pull`` with a progress callback; the target alone's runs), since
each lives exactly as long as its work.
"""

from __future__ import annotations

import inspect
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, get_args, get_origin

from pydantic.fields import FieldInfo
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import ModalScreen, Screen
from textual.widgets import (
    Button,
    Footer,
    Input,
    Label,
    LoadingIndicator,
    Markdown,
    OptionList,
    ProgressBar,
    Select,
    Static,
    Switch,
    TextArea,
)
from textual.widgets.markdown import MarkdownStream
from textual.widgets.option_list import Option
from textual.worker import get_current_worker

from ..chat.conversation import ChatSession, Ending, Generation, Rematch, ReplyStep
from ..core import options
from ..core.stats import RunStats
from .widgets import race_speed_line, race_verdict, visible

ResultType = TypeVar("ResultType")


def human_bytes(n: float | None) -> str:
    if n is None:
        return "?"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


def machine_memory() -> int | None:
    """Physical memory of this machine in bytes, where the OS says."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def human_seconds(s: float | None) -> str:
    if s is None:
        return "?"
    s = int(round(s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


# --- dialogs -------------------------------------------------------------------------------


class ErrorDialog(ModalScreen[None]):
    BINDINGS = [Binding("escape,enter", "dismiss", "Close")]

    def __init__(self, title: str, message: str) -> None:
        super().__init__(classes="dialog-screen")
        self.title_text = title
        self.message = message

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog error-dialog"):
            yield Static(Text(self.title_text), classes="dialog-title")
            yield Static(Text(self.message), id="error-message")
            yield Button("OK", variant="primary", id="ok")

    @on(Button.Pressed, "#ok")
    def _ok(self) -> None:
        self.dismiss(None)


class LoadingScreen(ModalScreen[None]):
    """Shown while a pair loads (a thread worker in the app does the loading)."""

    def __init__(self, what: str) -> None:
        super().__init__(classes="dialog-screen")
        self.what = what
        self.status = "starting"

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(Text(f"Loading {self.what}"), classes="dialog-title")
            yield LoadingIndicator()
            yield Static(Text(self.status), id="loading-status")

    def say(self, text: str) -> None:
        """Show ``text``; before the screen is composed it is kept and shown when it is."""
        self.status = text
        for status in self.query("#loading-status").results(Static):
            status.update(Text(text))


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,f1,q", "dismiss", "Close")]

    def __init__(self, keys: Sequence[tuple[str, str]]) -> None:
        super().__init__(classes="dialog-screen")
        self.keys = keys

    def compose(self) -> ComposeResult:
        rows = "\n".join(f"| `{k}` | {d} |" for k, d in self.keys)
        with VerticalScroll(classes="dialog help-dialog"):
            yield Markdown(
                "# localspec keys\n\n| key | action |\n|---|---|\n" + rows + "\n\n"
                "Every action is also in the command palette (**Ctrl+P**). Draft tokens the target "
                "accepted are painted green in the token view (**F2**); the step inspector (**F3**) "
                "marks each drafted token ✓ accepted, ✗ rejected (first mismatch) or ~ discarded."
            )


# --- chat list -----------------------------------------------------------------------------


class ChatListScreen(ModalScreen[tuple[str, int] | None]):
    """Pick a chat: Enter opens, Delete removes; the result is ("open"|"delete", chat_id)."""

    BINDINGS = [Binding("escape", "dismiss", "Close"), Binding("delete,d", "delete", "Delete chat")]

    def __init__(self, chats: Sequence[Any], current_id: int | None) -> None:
        super().__init__(classes="dialog-screen")
        self.chats = list(chats)
        self.current_id = current_id

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static("Chats  (Enter open · Delete remove · Esc close)", classes="dialog-title")
            options = [Option(self._label(c), id=str(c.id)) for c in self.chats]
            yield OptionList(*options, id="chat-list")
        yield Footer()

    def _label(self, chat) -> Text:
        # a Text, not markup: a title is user text and may contain "[" or control characters
        text = Text("▶ " if chat.id == self.current_id else "  ")
        text.append(visible(chat.title))
        text.append("  " + time.strftime("%Y-%m-%d %H:%M", time.localtime(chat.updated)), style="dim")
        return text

    @on(OptionList.OptionSelected)
    def _open(self, event: OptionList.OptionSelected) -> None:
        if event.option.id is not None:  # every option is made with its chat's id
            self.dismiss(("open", int(event.option.id)))

    def action_delete(self) -> None:
        ol = self.query_one(OptionList)
        chat_id = ol.get_option_at_index(ol.highlighted).id if ol.highlighted is not None else None
        if chat_id is not None:
            self.dismiss(("delete", int(chat_id)))


# --- per-chat settings ---------------------------------------------------------------------

# the chat's own numbers, each with its field in localspec.core.options (label, help, range):
# every numeric sampling option, then the reply length
CHAT_FIELDS = {
    name: field
    for group in (options.SamplingParams, options.ReplyOptions)
    for name, field in group.model_fields.items()
    if name in options.OPTIONS
}
SAMPLING_FIELDS = tuple(name for name in CHAT_FIELDS if name in options.SamplingParams.model_fields)


class FieldError(Static):
    """The message beside a form field whose value is refused (or, as a warning, changed);
    hidden while there is none."""

    DEFAULT_CSS = """
    FieldError { margin-left: 18; color: $error; display: none; }
    FieldError.-shown { display: block; }
    FieldError.-warning { color: $warning; }
    """

    def say(self, message: str | None, warning: bool = False) -> None:
        self.update(Text(message or ""))
        self.set_class(bool(message), "-shown")
        self.set_class(warning, "-warning")


def threads_note(value) -> str | None:
    """Said beside a threads field: more than this machine's CPUs are lowered at load."""
    cpus = options.usable_cpus()
    if isinstance(value, int) and value > cpus:
        return f"more than the {cpus} CPUs localspec can use here: {cpus} will be used"
    return None


class OptionForm(ModalScreen[ResultType]):
    """A dialog whose fields are options (localspec.core.options): each is parsed and
    range-checked as it is typed and again on save, with the refusal shown beside the field.
    ``fields``: input id -> (option name, label used in messages)."""

    fields: dict[str, tuple[str, str]] = {}

    def _check_field(self, input_id: str) -> tuple[bool, Any]:
        """(ok, value) for one field; shows or clears the message beside it."""
        name, label = self.fields[input_id]
        note = self.query_one(f"#e-{input_id}", FieldError)
        try:
            value = options.parse(name, self.query_one(f"#{input_id}", Input).value, label)
        except options.OptionError as e:
            note.say(str(e))
            return False, None
        warning = threads_note(value) if name == "threads" else None
        note.say(warning, warning=True)
        return True, value

    def _read_fields(self) -> tuple[dict[str, Any], list[str]]:
        """(each field's value by input id, the labels of the refused ones, each marked)."""
        checked = {i: self._check_field(i) for i in self.fields}
        refused = [self.fields[i][1] for i, (ok, _) in checked.items() if not ok]
        return {i: value for i, (_, value) in checked.items()}, refused

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id in self.fields:
            self._check_field(event.input.id)

    def refused_message(self, refused: list[str]) -> Text:
        return Text(f"not saved: {', '.join(refused)} out of range (see beside each)", style="red")


class ChatSettingsScreen(OptionForm[dict | None]):
    """System prompt, sampling, reply length and drafting mode of one chat."""

    BINDINGS = [Binding("escape", "dismiss", "Cancel"), Binding("ctrl+s", "save", "Save")]
    fields = {f"s-{name}": (name, name) for name in CHAT_FIELDS}

    def __init__(self, system_prompt: str, sampling: dict, max_tokens: int, mode: str, modes: Sequence[str]) -> None:
        super().__init__(classes="dialog-screen")
        self.system_prompt, self.sampling, self.max_tokens = system_prompt, sampling, max_tokens
        self.mode, self.modes = mode, modes

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog"):
            yield Static("Chat settings  (Ctrl+S save · Esc cancel)", classes="dialog-title")
            yield Label("System prompt")
            yield TextArea(self.system_prompt, id="system-prompt", classes="short-area")
            values = {**self.sampling, "max_tokens": self.max_tokens}
            for name, field in CHAT_FIELDS.items():
                value = values.get(name)
                with Horizontal(classes="field-row"):
                    yield Label(name, classes="field-label")
                    yield Input("" if value is None else str(value), id=f"s-{name}")
                yield FieldError(id=f"e-s-{name}")
                yield Static(Text(field.description or ""), classes="field-help")
            with Horizontal(classes="field-row"):
                yield Label("drafting", classes="field-label")
                yield Select([(m, m) for m in self.modes], value=self.mode, allow_blank=False, id="s-mode")
            yield Static("", id="settings-error")
            yield Button("Save", variant="primary", id="save")

    @on(Button.Pressed, "#save")
    def action_save(self) -> None:
        from pydantic import ValidationError

        from ..settings import describe_validation_error

        error = self.query_one("#settings-error", Static)
        values, refused = self._read_fields()
        if refused:
            error.update(self.refused_message(refused))
            return
        raw = {name: values[f"s-{name}"] for name in SAMPLING_FIELDS}
        try:  # the fields above are valid; this checks what the chat stored besides them
            params = options.SamplingParams.model_validate({**self.sampling, **raw})
        except ValidationError as e:
            error.update(Text(describe_validation_error(e), style="red"))
            return
        self.dismiss(
            {
                "system_prompt": self.query_one("#system-prompt", TextArea).text,
                "sampling": params.model_dump(),
                "max_tokens": values["s-max_tokens"],
                "mode": self.query_one("#s-mode", Select).value,
            }
        )


# --- app settings --------------------------------------------------------------------------

# what the settings screen edits, in order: where models live, every model option and the reply
# length (top-level keys of the settings), every drafting option (draft.*), then the app's own
APP_SETTING_KEYS = (
    "models_dir",
    *options.ModelOptions.model_fields,
    *options.ReplyOptions.model_fields,
    *(f"draft.{name}" for name in options.DraftOptions.model_fields),
    "export_dir",
    "show_draft_tokens",
)

# the keys whose values are numeric options, with the option's name (its field's)
SETTING_OPTIONS = {key: name for key in APP_SETTING_KEYS if (name := key.rpartition(".")[2]) in options.OPTIONS}


def _input_id(key: str) -> str:
    return f"k-{key.replace('.', '-')}"


class SettingsScreen(OptionForm[Any]):
    """Edit the stored settings: option fields are range-checked as typed (localspec.core.options),
    then the whole is validated with the pydantic model before saving."""

    BINDINGS = [Binding("escape", "dismiss", "Cancel"), Binding("ctrl+s", "save", "Save")]
    fields = {_input_id(key): (SETTING_OPTIONS[key], key) for key in APP_SETTING_KEYS if key in SETTING_OPTIONS}

    def __init__(self, settings, path, warning: str | None = None) -> None:
        super().__init__(classes="dialog-screen")
        self.settings, self.path, self.warning = settings, path, warning

    def _value(self, key: str) -> Any:
        """The stored value of ``key`` ('draft.p_min': a field of a nested group)."""
        value: Any = self.settings.model_dump()
        for part in key.split("."):
            value = value[part]
        return value

    def _field(self, key: str) -> FieldInfo | None:
        """The settings field behind ``key`` ('draft.p_min': DraftOptions.p_min)."""
        model: Any = type(self.settings)
        *parents, last = key.split(".")
        for p in parents:
            model = model.model_fields[p].annotation
        return model.model_fields.get(last)

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog"):
            yield Static(Text(f"Settings  ({self.path})  Ctrl+S save · Esc cancel"), classes="dialog-title")
            if self.warning:
                yield Static(Text(self.warning, style="#d78700"), id="settings-warning")
            for key in APP_SETTING_KEYS:
                value = self._value(key)
                with Horizontal(classes="field-row"):
                    yield Label(key, classes="field-label")
                    field = self._field(key)
                    choices = get_args(field.annotation) if field and get_origin(field.annotation) is Literal else ()
                    if isinstance(value, bool):
                        yield Switch(value, id=_input_id(key))
                    elif choices:
                        yield Select([(c, c) for c in choices], value=value, allow_blank=False, id=_input_id(key))
                    else:
                        yield Input("" if value is None else str(value), id=_input_id(key))
                if key in SETTING_OPTIONS:
                    yield FieldError(id=f"e-{_input_id(key)}")
                yield Static(Text(field.description or "" if field else ""), classes="field-help")
            yield Static("", id="settings-error")
            yield Button("Save", variant="primary", id="save")

    @on(Button.Pressed, "#save")
    def action_save(self) -> None:
        from pydantic import ValidationError

        from ..settings import describe_validation_error

        error = self.query_one("#settings-error", Static)
        checked, refused = self._read_fields()
        if refused:
            error.update(self.refused_message(refused))
            return
        data = self.settings.model_dump(mode="json")
        for key in APP_SETTING_KEYS:
            widget: Any = self.query_one(f"#{_input_id(key)}")  # an Input, a Switch or a Select
            value = widget.value
            if _input_id(key) in checked:
                value = checked[_input_id(key)]
            elif isinstance(value, str):
                value = value.strip() or None
            *parents, last = key.split(".")
            target = data
            for p in parents:
                target = target[p]
            target[last] = value
        try:
            settings = type(self.settings).model_validate(data)
        except ValidationError as e:
            error.update(Text(describe_validation_error(e), style="red"))
            return
        self.dismiss(settings)


# --- pair menu -----------------------------------------------------------------------------


@dataclass(frozen=True)
class PairChoice:
    pair_id: str
    draft: Any | None  # a catalog ModelRef, or None for prompt lookup / no draft
    mode: str  # "draft" | "lookup" | "none"
    draft_max: int
    adaptive: bool
    p_min: float


def compatible_drafts(pair) -> list:
    """The pair's drafts that can verify against its target: same tokenizer family.

    The catalog lists drafts per pair; a draft of another family (another vocabulary) would
    fail llama.cpp's compatibility check at load, so the menu never offers it.
    """
    return [d for d in pair.drafts if d.family == pair.target.family]


def draft_options(pair) -> list[tuple[str, str]]:
    """(label, value) for the draft selector: compatible drafts, then lookup and none."""
    out = [(f"{d.filename}  ({human_bytes(d.size_bytes)})", f"draft:{d.filename}") for d in compatible_drafts(pair)]
    out += [("prompt lookup (no draft model)", "lookup"), ("none (target alone)", "none")]
    return out


class PairScreen(ModalScreen[PairChoice | None]):
    """Pairs from the catalog with size, memory and presence; compatible drafts only."""

    BINDINGS = [Binding("escape", "dismiss", "Cancel"), Binding("ctrl+o", "open", "Open pair")]

    def __init__(
        self,
        catalog,
        present: Callable[[Any], bool],
        selected: str | None,
        draft_choice: str | None,
        draft_max: int,
        adaptive: bool,
        p_min: float,
        expected: Callable[[Any], str | None] | None = None,
    ) -> None:
        super().__init__(classes="dialog-screen")
        self.catalog = catalog
        self.present = present
        self.expected = expected  # pair -> "expected here: ..." from this machine's profiles
        self.selected = selected or catalog.default_pair_id
        self.draft_choice = draft_choice
        self.draft_max, self.adaptive, self.p_min = draft_max, adaptive, p_min
        self.ram = machine_memory()

    def _pair_label(self, pair) -> Text:
        refs = [pair.target] + list(pair.drafts[:1])
        size = sum(r.size_bytes or 0 for r in refs)
        have = all(self.present(r) for r in refs)
        text = Text()
        text.append(f"{pair.name}", style="bold")
        if pair.id == self.catalog.default_pair_id:
            text.append("  (default)", style="#00af5f")
        text.append(
            f"\n  {human_bytes(size)} {'on disk' if have else 'download'} · "
            f"needs ~{human_bytes(pair.memory_bytes)} memory · ",
            style="dim",
        )
        if self.ram and pair.memory_bytes > self.ram:
            text.append(f"more than this machine's {human_bytes(self.ram)} · ", style="bold #d70000")
        text.append("✓ files present" if have else "⬇ download needed", style="#00af5f" if have else "#d78700")
        line = self.expected(pair) if self.expected and have else None
        if line:
            text.append(f"\n  {line}", style="#5f87af")
        if pair.good_for:
            text.append(f"\n  good for: {pair.good_for}", style="dim")
        return text

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog pair-dialog"):
            yield Static("Choose a model pair  (Enter/Ctrl+O open · Esc cancel)", classes="dialog-title")
            yield OptionList(*[Option(self._pair_label(p), id=p.id) for p in self.catalog.pairs], id="pair-list")
            with Horizontal(classes="field-row"):
                yield Label("draft", classes="field-label")
                yield Select([("none (target alone)", "none")], allow_blank=False, id="draft-select")
            with Horizontal(classes="field-row"):
                yield Label("max draft k", classes="field-label")
                yield Input(
                    "auto" if self.adaptive else str(self.draft_max),
                    id="max-k",
                    placeholder=f"auto or 0..{options.MAX_DRAFT}",
                )
                yield Label("p_min", classes="field-label")
                yield Input(str(self.p_min), id="p-min")
            yield Static("", id="pair-error")
            yield Button("Open", variant="primary", id="open")
        yield Footer()

    def on_mount(self) -> None:
        ol = self.query_one("#pair-list", OptionList)
        ids = [p.id for p in self.catalog.pairs]
        if self.selected in ids:
            ol.highlighted = ids.index(self.selected)
        elif ids:
            ol.highlighted = 0
        self._fill_drafts()
        ol.focus()

    @property
    def pair(self):
        ol = self.query_one("#pair-list", OptionList)
        if ol.highlighted is None:
            return None
        return self.catalog.get(ol.get_option_at_index(ol.highlighted).id)

    def _fill_drafts(self) -> None:
        pair = self.pair
        if pair is None:
            return
        options = draft_options(pair)
        select = self.query_one("#draft-select", Select)
        select.set_options(options)
        values = [v for _, v in options]
        wanted = self.draft_choice if self.draft_choice in values else values[0]
        select.value = wanted

    @on(OptionList.OptionHighlighted, "#pair-list")
    def _highlighted(self) -> None:
        self._fill_drafts()

    @on(OptionList.OptionSelected, "#pair-list")
    def _selected(self) -> None:
        self.action_open()

    @on(Button.Pressed, "#open")
    def action_open(self) -> None:
        pair = self.pair
        if pair is None:
            return
        raw_k = self.query_one("#max-k", Input).value.strip().lower()
        try:
            adaptive = raw_k in ("", "auto")
            draft_max = self.draft_max if adaptive else options.parse("draft_max", raw_k, "max draft k")
            p_min = options.parse("p_min", self.query_one("#p-min", Input).value, "p_min")
        except options.OptionError as e:
            self.query_one("#pair-error", Static).update(Text(f"{e} ('auto' picks k itself)", style="red"))
            return
        value = self.query_one("#draft-select", Select).value
        if isinstance(value, str) and value.startswith("draft:"):
            name = value.split(":", 1)[1]
            draft = next(d for d in compatible_drafts(pair) if d.filename == name)
            mode = "draft"
        else:
            draft, mode = None, str(value)
        self.dismiss(PairChoice(pair.id, draft, mode, draft_max, adaptive, p_min))


# --- downloads -----------------------------------------------------------------------------


class DownloadScreen(ModalScreen[dict | None]):
    """Downloads the missing files one after the other; Esc cancels (partial kept for resume).

    ``pull(ref, settings, progress=..., cancel=...)`` runs in a thread worker; its progress
    callback posts messages, throttled, so the UI stays responsive.
    """

    BINDINGS = [Binding("escape", "cancel", "Cancel download")]
    # Tuning choice: 10 progress updates a second is smooth and costs nothing next to a download.
    PROGRESS_INTERVAL = 0.1

    class Progressed(Message):
        def __init__(self, index: int, progress) -> None:
            super().__init__()
            self.index, self.progress = index, progress

    class Noted(Message):
        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text

    class Finished(Message):
        def __init__(self, paths: dict | None, error: str | None) -> None:
            super().__init__()
            self.paths, self.error = paths, error

    def __init__(self, refs: Sequence[Any], settings, pull: Callable) -> None:
        super().__init__(classes="dialog-screen")
        self.refs, self.settings, self.pull = list(refs), settings, pull
        self.cancel_event = threading.Event()
        self.last_progress = None
        self.error: str | None = None  # what ended the download, shown until the screen closes

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static("Downloading model files  (Esc cancels; a partial file resumes later)", classes="dialog-title")
            for i, ref in enumerate(self.refs):
                yield Label(Text(f"{ref.filename}  ({human_bytes(ref.size_bytes)})"))
                yield ProgressBar(total=ref.size_bytes or None, show_eta=False, id=f"bar-{i}")
                yield Static("waiting", id=f"rate-{i}", classes="download-rate")
            yield Static("", id="download-error")
            yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self._download()

    @work(thread=True, exclusive=True, group="download")
    def _download(self) -> None:
        paths = {}
        for i, ref in enumerate(self.refs):
            last = [0.0]

            def progress(p, i=i, last=last) -> None:
                now = time.monotonic()
                done = p.total_bytes is not None and p.done_bytes >= p.total_bytes
                if now - last[0] >= self.PROGRESS_INTERVAL or done:
                    last[0] = now
                    self.post_message(self.Progressed(i, p))

            kwargs = {"progress": progress, "cancel": self.cancel_event}
            if "note" in inspect.signature(self.pull).parameters:  # detours: quarantine, fallback source
                kwargs["note"] = lambda text: self.post_message(self.Noted(text))
            try:
                paths[ref.filename] = self.pull(ref, self.settings, **kwargs)
            except Exception as e:  # DownloadCancelled, DownloadError, OSError: all end the screen
                from ..models.downloads import DownloadCancelled

                cancelled = self.cancel_event.is_set() or isinstance(e, DownloadCancelled)
                self.post_message(self.Finished(None, None if cancelled else f"{ref.filename}: {e}"))
                return
        self.post_message(self.Finished(paths, None))

    def on_download_screen_progressed(self, m: Progressed) -> None:
        p = m.progress
        self.last_progress = p
        bar = self.query_one(f"#bar-{m.index}", ProgressBar)
        bar.update(total=p.total_bytes, progress=p.done_bytes)
        eta = human_seconds(p.eta_seconds)
        total = human_bytes(p.total_bytes)
        self.query_one(f"#rate-{m.index}", Static).update(
            Text(
                f"{human_bytes(p.done_bytes)} / {total} · {human_bytes(p.bytes_per_second)}/s · ETA {eta}"
                f" · from {p.source}"
            )
        )

    def on_download_screen_noted(self, m: Noted) -> None:
        self.query_one("#download-error", Static).update(Text(m.text, style="#d78700"))

    def on_download_screen_finished(self, m: Finished) -> None:
        if m.error:
            self.query_one("#download-error", Static).update(Text(m.error, style="red"))
            self.query_one("#cancel", Button).label = "Close"
            self.error = m.error
            return
        self.dismiss(m.paths)

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.cancel_event.set()
        if self.error:
            self.dismiss(None)


# --- race ----------------------------------------------------------------------------------

# Tuning choice: the race runs the target alone twice, so that what two runs of one
# computation differ by on this machine (the noise) is measured beside any gain.
RACE_RUNS = 2


class RaceScreen(Screen[None]):
    """The last prompt answered twice: with speculation (the reply already in the chat) and by
    the target alone, RACE_RUNS times (the first run streams; later ones add their speed).
    ``measured(tokens_per_second)`` gets the target alone's mean over the runs that finished:
    the measured ratio replaces the estimate in the panel. The runs are thread workers of this
    screen's own, since it lives exactly as long as the race."""

    BINDINGS = [Binding("escape", "close", "Close")]

    class Stepped(Message):
        def __init__(self, step: ReplyStep) -> None:
            super().__init__()
            self.step = step

    class Ended(Message):
        def __init__(self, ending: Ending) -> None:
            super().__init__()
            self.ending = ending

    def __init__(self, rematch: Rematch, session: ChatSession, measured: Callable[[float], None]) -> None:
        super().__init__()
        self.rematch, self.session, self.measured = rematch, session, measured
        self.spec_text, self.spec_tps, self.mode = rematch.reply, rematch.tokens_per_second, rematch.mode
        self.target_text = ""
        self.target_tps: float | None = None  # the mean, once the race is over
        self.runs: list[tuple[RunStats, str]] = []  # the target alone's ended runs and their status
        self.current = RunStats()  # the run going on
        self.generation: Generation | None = None
        self._over = False
        self._stream: MarkdownStream | None = None

    def compose(self) -> ComposeResult:
        yield Static("Race: the same prompt, with speculation and with the target alone", classes="dialog-title")
        with Horizontal(id="race-columns"):
            with VerticalScroll(classes="race-col"):
                yield Static(
                    Text(f"speculative ({self.mode}): {self.spec_tps:.1f} tok/s"),
                    id="race-left-speed",
                    classes="race-speed",
                )
                yield Markdown(visible(self.spec_text), id="race-left")
            with VerticalScroll(classes="race-col"):
                yield Static("target alone: running…", id="race-right-speed", classes="race-speed")
                yield Markdown("", id="race-right")
        yield Static("", id="race-verdict")
        yield Footer()

    def on_mount(self) -> None:
        self._stream = Markdown.get_stream(self.query_one("#race-right", Markdown))
        self._next_run()

    @property
    def running(self) -> bool:
        return self.generation is not None

    def _next_run(self) -> None:
        self.current = RunStats()
        self.generation = Generation(self.session, self.rematch.request, explain=False)
        self._run(self.generation)

    @work(thread=True, exclusive=True, group="race")
    def _run(self, generation: Generation) -> None:
        worker = get_current_worker()
        ending = generation.run(lambda step: self.post_message(self.Stepped(step)), lambda: worker.is_cancelled)
        self.post_message(self.Ended(ending))

    async def _append(self, text: str) -> None:
        """The first run's text, streamed beside the speculative reply."""
        self.target_text += text
        if self._stream is not None:
            await self._stream.write(visible(text))

    async def on_race_screen_stepped(self, m: Stepped) -> None:
        if self._over:
            return
        self.current.add(m.step.step)
        if not self.runs and m.step.answer:
            await self._append(m.step.answer)
        speeds = [r.tokens_per_second for r, _ in self.runs] + [self.current.tokens_per_second]
        self.query_one("#race-right-speed", Static).update(race_speed_line(speeds, running=True))

    async def on_race_screen_ended(self, m: Ended) -> None:
        if self._over:
            return
        ending = m.ending
        if ending.error:
            self.notify(ending.error, title="Race failed", severity="error", markup=False)
        if not self.runs and ending.rest[1]:
            await self._append(ending.rest[1])
        self.runs.append((self.current, ending.status))
        if ending.status == "done" and len(self.runs) < RACE_RUNS:
            self._next_run()
            return
        self._end()
        if self._stream is not None:
            await self._stream.stop()
            self._stream = None
        speeds = [r.tokens_per_second for r, _ in self.runs]
        runs = [t for t in speeds if t]
        self.target_tps = sum(runs) / len(runs) if runs else 0.0
        note = "" if ending.status == "done" else f" ({ending.status})"
        self.query_one("#race-right-speed", Static).update(race_speed_line(speeds, running=False, note=note))
        same = self.spec_text == self.target_text
        verdict = race_verdict(self.spec_tps, self.rematch.drafted, speeds, same)
        self.query_one("#race-verdict", Static).update(Text(verdict, style="bold"))

    def _end(self, report: bool = True) -> None:
        """The race is over: stop a run still going and hand on what the finished runs measured."""
        if self._over:
            return
        self._over = True
        if self.generation is not None:
            self.generation.stop()  # it stops at its next step
            self.generation = None
        done = [r.tokens_per_second for r, status in self.runs if status == "done" and r.tokens_per_second]
        if report and done:
            self.measured(sum(done) / len(done))

    def stop(self) -> None:
        """Stop the run going on; the race ends with what the finished runs measured."""
        if self.generation is not None:
            self.generation.stop()

    def abandon(self) -> None:
        """Stop the race and report nothing: the session it measures is being left."""
        self._end(report=False)

    def action_close(self) -> None:
        self._end()
        self.dismiss(None)

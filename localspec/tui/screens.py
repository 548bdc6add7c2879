"""Screens of the chat app: pair menu, downloads, loading, chat list, per-chat settings,
app settings, race, help and error dialogs. Each returns its result with ``dismiss`` and holds
no model state; the app loads and generates. The download screen runs its own thread worker
(``pull`` with a progress callback) since it lives exactly as long as the download.
"""

from __future__ import annotations

import inspect
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

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
from textual.widgets.option_list import Option

from ..core import options
from .widgets import visible


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

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(Text(f"Loading {self.what}"), classes="dialog-title")
            yield LoadingIndicator()
            yield Static("starting", id="loading-status")

    def say(self, text: str) -> None:
        self.query_one("#loading-status", Static).update(Text(text))


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
        self.dismiss(("open", int(event.option.id)))

    def action_delete(self) -> None:
        ol = self.query_one(OptionList)
        if ol.highlighted is not None:
            self.dismiss(("delete", int(ol.get_option_at_index(ol.highlighted).id)))


# --- per-chat settings ---------------------------------------------------------------------

SAMPLING_FIELDS = ("temperature", "top_k", "top_p", "min_p", "repeat_penalty", "seed")


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


class OptionForm:
    """Fields whose values are options (localspec.core.options): each is parsed and range-checked
    as it is typed and again on save, with the refusal shown beside the field.
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

    def on_input_changed(self, event: Input.Changed) -> None:  # by name: this is a mixin
        if event.input.id in self.fields:
            self._check_field(event.input.id)

    def refused_message(self, refused: list[str]) -> Text:
        return Text(f"not saved: {', '.join(refused)} out of range (see beside each)", style="red")


class ChatSettingsScreen(OptionForm, ModalScreen[dict | None]):
    """System prompt, sampling, reply length and drafting mode of one chat."""

    BINDINGS = [Binding("escape", "dismiss", "Cancel"), Binding("ctrl+s", "save", "Save")]
    fields = {f"s-{name}": (name, name) for name in (*SAMPLING_FIELDS, "max_tokens")}

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
            for name in (*SAMPLING_FIELDS, "max_tokens"):
                value = values.get(name)
                with Horizontal(classes="field-row"):
                    yield Label(name, classes="field-label")
                    yield Input("" if value is None else str(value), id=f"s-{name}")
                yield FieldError(id=f"e-s-{name}")
            with Horizontal(classes="field-row"):
                yield Label("drafting", classes="field-label")
                yield Select([(m, m) for m in self.modes], value=self.mode, allow_blank=False, id="s-mode")
            yield Static("", id="settings-error")
            yield Button("Save", variant="primary", id="save")

    @on(Button.Pressed, "#save")
    def action_save(self) -> None:
        from pydantic import ValidationError

        from ..core.sampling import SamplingParams
        from ..settings import describe_validation_error

        error = self.query_one("#settings-error", Static)
        values, refused = self._read_fields()
        if refused:
            error.update(self.refused_message(refused))
            return
        raw = {name: values[f"s-{name}"] for name in SAMPLING_FIELDS}
        try:  # the fields above are valid; this checks what the chat stored besides them
            params = SamplingParams.model_validate({**self.sampling, **raw})
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

APP_SETTING_KEYS = (
    "models_dir",
    "gpu_layers",
    "draft_gpu_layers",
    "threads",
    "n_ctx",
    "max_tokens",
    "overflow",
    "draft.max_k",
    "draft.adaptive",
    "draft.p_min",
    "export_dir",
    "show_draft_tokens",
)


# settings keys whose values are options (localspec.core.options), with their option's name
SETTING_OPTIONS = {
    "gpu_layers": "gpu_layers",
    "draft_gpu_layers": "draft_gpu_layers",
    "threads": "threads",
    "n_ctx": "n_ctx",
    "max_tokens": "max_tokens",
    "draft.max_k": "max_k",
    "draft.p_min": "p_min",
}


def _input_id(key: str) -> str:
    return f"k-{key.replace('.', '-')}"


class SettingsScreen(OptionForm, ModalScreen[Any]):
    """Edit the stored settings: option fields are range-checked as typed (localspec.core.options),
    then the whole is validated with the pydantic model before saving."""

    BINDINGS = [Binding("escape", "dismiss", "Cancel"), Binding("ctrl+s", "save", "Save")]
    fields = {_input_id(key): (SETTING_OPTIONS[key], key) for key in APP_SETTING_KEYS if key in SETTING_OPTIONS}

    def __init__(self, settings, path, warning: str | None = None) -> None:
        super().__init__(classes="dialog-screen")
        self.settings, self.path, self.warning = settings, path, warning

    def _value(self, key: str):
        obj = self.settings
        for part in key.split("."):
            obj = getattr(obj, part, None)
        return obj

    def _description(self, key: str) -> str:
        model = type(self.settings)
        *parents, last = key.split(".")
        for p in parents:
            model = model.model_fields[p].annotation
        field = model.model_fields.get(last)
        return field.description or "" if field else ""

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog"):
            yield Static(Text(f"Settings  ({self.path})  Ctrl+S save · Esc cancel"), classes="dialog-title")
            if self.warning:
                yield Static(Text(self.warning, style="#d78700"), id="settings-warning")
            for key in APP_SETTING_KEYS:
                value = self._value(key)
                with Horizontal(classes="field-row"):
                    yield Label(key, classes="field-label")
                    if isinstance(value, bool):
                        yield Switch(value, id=_input_id(key))
                    else:
                        yield Input("" if value is None else str(value), id=_input_id(key))
                if key in SETTING_OPTIONS:
                    yield FieldError(id=f"e-{_input_id(key)}")
                yield Static(Text(self._description(key)), classes="field-help")
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
            value = self.query_one(f"#{_input_id(key)}").value
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
    max_k: int
    adaptive: bool
    p_min: float


def compatible_drafts(pair) -> list:
    """The pair's drafts that can verify against its target: same tokenizer family.

    The catalog lists drafts per pair; a draft of another family (another vocabulary) would
    fail llama.cpp's compatibility check at load, so the menu never offers it.
    """
    family = getattr(pair.target, "family", None) or getattr(pair, "family", None)
    return [d for d in pair.drafts if family is None or getattr(d, "family", family) == family]


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
        max_k: int,
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
        self.max_k, self.adaptive, self.p_min = max_k, adaptive, p_min
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
        if getattr(pair, "good_for", None):
            good = pair.good_for if isinstance(pair.good_for, str) else ", ".join(pair.good_for)
            text.append(f"\n  good for: {good}", style="dim")
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
                    "auto" if self.adaptive else str(self.max_k),
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
            max_k = self.max_k if adaptive else options.parse("max_k", raw_k, "max draft k")
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
        self.dismiss(PairChoice(pair.id, draft, mode, max_k, adaptive, p_min))


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
                cancelled = self.cancel_event.is_set() or type(e).__name__ == "DownloadCancelled"
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
        if getattr(self, "error", None):
            self.dismiss(None)


# --- race ----------------------------------------------------------------------------------


class RaceScreen(Screen[None]):
    """The last prompt answered twice: with speculation (the reply already in the chat) and by
    the target alone (streaming now). The measured ratio replaces the estimate in the panel."""

    BINDINGS = [Binding("escape", "app.close_race", "Close")]

    def __init__(self, spec_text: str, spec_tps: float, mode: str) -> None:
        super().__init__()
        self.spec_text, self.spec_tps, self.mode = spec_text, spec_tps, mode
        self.target_text = ""
        self.target_tps: float | None = None
        self._stream = None

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

    async def append(self, text: str, tps: float) -> None:
        self.target_text += text
        if self._stream is not None:
            await self._stream.write(visible(text))
        self.query_one("#race-right-speed", Static).update(f"target alone: {tps:.1f} tok/s (running)")

    async def finish(self, tps: float, status: str) -> None:
        if self._stream is not None:
            await self._stream.stop()
            self._stream = None
        self.target_tps = tps
        note = "" if status == "done" else f" ({status})"
        self.query_one("#race-right-speed", Static).update(f"target alone: {tps:.1f} tok/s{note}")
        ratio = self.spec_tps / tps if tps else float("nan")
        same = "identical replies" if self.spec_text == self.target_text else "replies differ"
        self.query_one("#race-verdict", Static).update(
            Text(
                f"measured speed-up {ratio:.2f}×  ({self.spec_tps:.1f} vs {tps:.1f} tok/s) · {same} · Esc closes",
                style="bold",
            )
        )

"""The app's stored settings: where models live, every model, reply and drafting option, and
the app's own; saved only when the whole validates. Beside the ``draft.history`` switch, what
the history of past replies holds (``localspec.chat.history``) and a button that forgets it."""

from __future__ import annotations

from typing import Any, Literal, get_args, get_origin

from pydantic.fields import FieldInfo
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Button, Input, Label, Select, Static, Switch

from ...chat.history import HistoryStore
from ...core import options
from ...units import human_bytes_si
from .form import FieldError, OptionForm

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

    def __init__(self, settings, path, warning: str | None = None, history: HistoryStore | None = None) -> None:
        super().__init__(classes="dialog-screen")
        self.settings, self.path, self.warning = settings, path, warning
        self.history = history or HistoryStore()

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
                if key == "draft.history":
                    yield from self.history_rows()
            yield from self.save_row()

    def history_rows(self) -> ComposeResult:
        yield Static(self.history_summary(), id="history-summary", classes="field-help")
        yield Button("Forget past replies", id="history-clear")

    def history_summary(self) -> Text:
        """One line on what the history holds, for every tokenizer, and where."""
        try:
            kept = self.history.summary()
        except OSError as e:
            return Text(f"kept: {self.history.root} cannot be read ({e})", style="#d78700")
        if not kept:
            return Text(f"kept: nothing yet (it would be kept in {self.history.root})")
        replies, tokens = sum(s.replies for s in kept), sum(s.tokens for s in kept)
        size = human_bytes_si(sum(s.size_bytes for s in kept))
        line = Text(f"kept: {replies:,} past replies, {tokens:,} tokens, {size} in {self.history.root}")
        for warning in (w for s in kept for w in s.warnings):
            line.append(f"\n{warning}", style="#d78700")
        return line

    @on(Button.Pressed, "#history-clear")
    def forget_history(self) -> None:
        try:
            forgotten = self.history.clear()
        except OSError as e:
            self.notify(f"past replies not all forgotten: {e}", severity="error", markup=False)
        else:
            self.notify(f"forgot {forgotten:,} past replies; the chats stay", timeout=3, markup=False)
        self.query_one("#history-summary", Static).update(self.history_summary())

    def save(self, checked: dict[str, Any]) -> None:
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
        settings = self.validated(type(self.settings), data)
        if settings is not None:
            self.dismiss(settings)

"""One chat's settings: system prompt, sampling, reply length and drafting mode."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Input, Label, Select, Static, TextArea

from ...core import options
from .form import FieldError, OptionForm

# the chat's own numbers, each with its field in localspec.core.options (label, help, range):
# every numeric sampling option, then the reply length
CHAT_FIELDS = {
    name: field
    for group in (options.SamplingParams, options.ReplyOptions)
    for name, field in group.model_fields.items()
    if name in options.OPTIONS
}
SAMPLING_FIELDS = tuple(name for name in CHAT_FIELDS if name in options.SamplingParams.model_fields)


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
            yield from self.save_row()

    def save(self, values: dict[str, Any]) -> None:
        raw = {name: values[f"s-{name}"] for name in SAMPLING_FIELDS}
        # the fields above are valid; this checks what the chat stored besides them
        params = self.validated(options.SamplingParams, {**self.sampling, **raw})
        if params is None:
            return
        self.dismiss(
            {
                "system_prompt": self.query_one("#system-prompt", TextArea).text,
                "sampling": params.model_dump(),
                "max_tokens": values["s-max_tokens"],
                "mode": self.query_one("#s-mode", Select).value,
            }
        )

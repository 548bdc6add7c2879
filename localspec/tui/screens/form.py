"""What the two settings dialogs share: option fields checked as they are typed, with the
refusal (or a warning) beside the field."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Static

from ...core import options

ResultType = TypeVar("ResultType")
ModelType = TypeVar("ModelType", bound=BaseModel)


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

    def save_row(self) -> ComposeResult:
        """Where a refusal is shown, and the Save button (``action_save``)."""
        yield Static("", id="settings-error")
        yield Button("Save", variant="primary", id="save")

    @on(Button.Pressed, "#save")
    def action_save(self) -> None:
        values = self.checked_fields()
        if values is not None:
            self.save(values)

    def save(self, values: dict[str, Any]) -> None:
        """Dismiss with what the form holds: ``values`` are its checked fields, by input id."""
        raise NotImplementedError

    def checked_fields(self) -> dict[str, Any] | None:
        """Each field's value by input id, or None once the form says what it refused."""
        values, refused = self._read_fields()
        if refused:
            self.query_one("#settings-error", Static).update(self.refused_message(refused))
            return None
        return values

    def validated(self, model: type[ModelType], data: dict) -> ModelType | None:
        """``model`` from ``data``, or None once the form shows pydantic's refusal."""
        from pydantic import ValidationError

        from ...settings import describe_validation_error

        try:
            return model.model_validate(data)
        except ValidationError as e:
            self.query_one("#settings-error", Static).update(Text(describe_validation_error(e), style="red"))
            return None

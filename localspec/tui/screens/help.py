"""The keys, as a table, with what the colours and marks of the token views mean."""

from __future__ import annotations

from collections.abc import Sequence

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown


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

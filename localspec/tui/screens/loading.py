"""The dialog shown while a pair loads, with the loader's latest word."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import LoadingIndicator, Static


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

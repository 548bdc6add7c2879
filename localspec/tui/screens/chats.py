"""The chat list: open a stored chat or delete one."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Footer, OptionList, Static
from textual.widgets.option_list import Option

from ..widgets import visible


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

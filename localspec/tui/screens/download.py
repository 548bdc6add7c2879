"""Downloads of a pair's missing files, one after the other, with a bar and a rate line each."""

from __future__ import annotations

import inspect
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Button, Label, ProgressBar, Static

from ...units import human_bytes, human_seconds


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
                from ...models.downloads import DownloadCancelled

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

"""Widgets of the chat app. They draw what the app hands them and hold no model state.

Nouns: ``ChatInput``, ``ChatLog``, ``UserMessage``, ``ReplyView``, ``StatsPanel``,
``StepInspector``. Colours of draft tokens: a reply keeps the character spans that came from
accepted draft tokens (``Step.emitted[:n_accepted]``); the token view paints them.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Sequence

from rich.text import Text
from textual import events
from textual.containers import Vertical, VerticalScroll
from textual.message import Message
from textual.widgets import Markdown, Sparkline, Static, TextArea

from ..stats import RunStats

DRAFT_STYLE = "bold #00af5f"  # readable on both the dark and the light theme
TARGET_STYLE = ""
ACCEPTED_STYLE = "bold #00af5f"
REJECTED_STYLE = "bold #d70000 strike"
DISCARDED_STYLE = "dim strike"
TARGET_TOKEN_STYLE = "bold #5f87ff"

CODE_BLOCK = re.compile(r"```[^\n]*\n(.*?)(?:```|\Z)", re.S)


def code_blocks(markdown: str) -> list[str]:
    """Fenced code blocks of a reply, in order (an unclosed last fence counts)."""
    return [m.group(1).rstrip("\n") for m in CODE_BLOCK.finditer(markdown)]


class ChatInput(TextArea):
    """Multi-line input: Enter sends, Shift+Enter or Ctrl+J inserts a newline."""

    class Submitted(Message):
        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text

    async def _on_key(self, event: events.Key) -> None:
        if event.key == "enter":
            event.stop()
            event.prevent_default()
            self.post_message(self.Submitted(self.text))
            return
        if event.key in ("shift+enter", "ctrl+j"):
            event.stop()
            event.prevent_default()
            start, end = self.selection
            self._replace_via_keyboard("\n", start, end)
            return
        await super()._on_key(event)


class ChatLog(VerticalScroll):
    """The conversation; anchored to the bottom while a reply streams."""


class UserMessage(Static):
    def __init__(self, text: str, **kwargs) -> None:
        super().__init__(Text(text), **kwargs)
        self.text = text


class ReplyView(Vertical):
    """One assistant reply: Markdown view (streamed) and the token view (draft colours)."""

    def __init__(self, text: str = "", draft_spans: Sequence[Sequence[int]] = (),
                 summary: str = "", status: str = "done", **kwargs) -> None:
        super().__init__(**kwargs)
        self.text = text
        self.draft_spans: list[tuple[int, int]] = [tuple(s) for s in draft_spans]  # type: ignore[misc]
        self.status = status
        self._summary = summary
        self._stream = None
        self._token_view_dirty = True

    def compose(self):
        yield Markdown(self.text, classes="reply-md")
        yield Static("", classes="reply-tokens")
        yield Static(self._summary_text(), classes="reply-summary")

    @property
    def markdown(self) -> Markdown:
        return self.query_one(".reply-md", Markdown)

    def start_stream(self) -> None:
        self.status = "streaming"
        self._stream = Markdown.get_stream(self.markdown)

    async def append(self, text: str, n_draft_chars: int) -> None:
        """Add a step's text; its first ``n_draft_chars`` characters came from the draft."""
        if not text:
            return
        start = len(self.text)
        self.text += text
        if n_draft_chars > 0:
            end = start + min(n_draft_chars, len(text))
            if self.draft_spans and self.draft_spans[-1][1] == start:
                self.draft_spans[-1] = (self.draft_spans[-1][0], end)  # merge touching spans
            else:
                self.draft_spans.append((start, end))
        self._token_view_dirty = True
        if self._stream is not None:
            await self._stream.write(text)

    async def finish(self, status: str, summary: str) -> None:
        if self._stream is not None:
            await self._stream.stop()
            self._stream = None
        self.status = status
        self._summary = summary
        self.query_one(".reply-summary", Static).update(self._summary_text())
        self.refresh_token_view(force=True)

    def _summary_text(self) -> Text:
        text = Text()
        if self.status == "stopped":
            text.append("⏹ stopped — partial reply kept", style="bold #d78700")
            if self._summary:
                text.append("  ·  ")
        elif self.status == "error":
            text.append("✖ error", style="bold #d70000")
            if self._summary:
                text.append("  ·  ")
        text.append(self._summary, style="dim")
        return text

    def token_text(self) -> Text:
        """The reply as plain text with the draft's characters painted (the colour view)."""
        out = Text()
        pos = 0
        for start, end in self.draft_spans:
            if start > pos:
                out.append(self.text[pos:start], style=TARGET_STYLE)
            out.append(self.text[start:end], style=DRAFT_STYLE)
            pos = end
        out.append(self.text[pos:], style=TARGET_STYLE)
        return out

    def refresh_token_view(self, force: bool = False) -> None:
        """Repaint the token view if it is on screen (the app's timer calls this ≤ 8×/s)."""
        if not (force or self._token_view_dirty):
            return
        if not self.has_class("-tokens") and not force:
            return
        self._token_view_dirty = False
        self.query_one(".reply-tokens", Static).update(self.token_text())


# --- statistics --------------------------------------------------------------------------

def _fmt(x: float | None, spec: str, suffix: str = "") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:{spec}}{suffix}"


def stats_values(run: RunStats, totals: RunStats, baseline_tps: float | None, baseline_note: str,
                 measured_baseline_tps: float | None = None, mode: str = "draft") -> dict[str, str]:
    """The panel's rows, label → value, from this reply's and the session's statistics.

    The speed-up is this reply's decode tokens/s over the target-only tokens/s: the race's
    measured figure when there is one, else the estimate measured at load.
    """
    baseline = measured_baseline_tps or baseline_tps
    speedup = run.tokens_per_second / baseline if baseline and run.tokens_per_second else None
    total_time = run.draft_seconds + run.verify_seconds + run.overhead_seconds
    split = (f"{run.draft_seconds / total_time * 100:.0f}% / {run.verify_seconds / total_time * 100:.0f}%"
             f" / {run.overhead_seconds / total_time * 100:.0f}%") if total_time > 0 else "–"
    t_speed = totals.tokens_per_second / baseline if baseline and totals.tokens_per_second else None
    return {
        "mode": mode,
        "tokens/s": _fmt(run.tokens_per_second or None, ".1f"),
        "target-only tokens/s": _fmt(baseline, ".1f"),
        "measured by": "race (target alone, same prompt)" if measured_baseline_tps else baseline_note,
        "speed-up": _fmt(speedup, ".2f", "×") + (" measured" if measured_baseline_tps and speedup else
                                                 " est." if speedup else ""),
        "predicted": _fmt(run.predicted_speedup, ".2f", "×"),
        "acceptance": _fmt(None if run.acceptance_rate is None else run.acceptance_rate * 100, ".0f", "%"),
        "tokens/pass": _fmt(run.tokens_per_pass or None, ".2f"),
        "draft length k": f"{run.last_k} (mean {run.mean_draft_length:.1f})" if run.n_steps else "–",
        "draft / verify / other": split,
        "first token": _fmt(run.first_token_seconds, ".2f", " s"),
        "tokens · passes": f"{run.n_tokens} · {run.n_steps}",
        "session tokens": f"{totals.n_tokens} in {totals.n_steps} passes",
        "session tokens/s": _fmt(totals.tokens_per_second or None, ".1f"),
        "session speed-up": _fmt(t_speed, ".2f", "×"),
        "session acceptance": _fmt(None if totals.acceptance_rate is None else totals.acceptance_rate * 100,
                                   ".0f", "%"),
    }


class StatsPanel(Vertical):
    """Live statistics of the reply being generated and of the session."""

    # Tuning choice: the sparkline shows the last 60 steps: wide enough for a panel of ~36 cells.
    SPARK_STEPS = 60

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.values: dict[str, str] = {}
        self.refresh_count = 0

    def compose(self):
        yield Static("Statistics", classes="panel-title")
        yield Static("", id="stats-table")
        yield Static("tokens per target pass", classes="spark-label")
        yield Sparkline([], id="stats-spark", summary_function=max)

    def show(self, values: dict[str, str], history: Sequence[float]) -> None:
        self.values = values
        self.refresh_count += 1
        text = Text()
        for i, (label, value) in enumerate(values.items()):
            if label == "session tokens":
                text.append("─ session ─\n", style="dim")
            text.append(f"{label:<22}", style="dim")
            text.append(value + ("\n" if i < len(values) - 1 else ""), style="bold")
        self.query_one("#stats-table", Static).update(text)
        self.query_one("#stats-spark", Sparkline).data = list(history[-self.SPARK_STEPS:])


# --- step inspector ----------------------------------------------------------------------

@dataclass(frozen=True)
class InspectedStep:
    """What the inspector draws for one step (texts looked up in the worker thread)."""

    index: int
    k: int
    drafted: tuple[str, ...]
    n_accepted: int
    token: str  # the target's own token: correction, or bonus when all drafts were kept

    @property
    def bonus(self) -> bool:
        return self.n_accepted == len(self.drafted)


def draft_marks(step: InspectedStep) -> list[tuple[str, str]]:
    """(token text, mark) for each drafted token: accepted, rejected (first mismatch), discarded."""
    marks = []
    for i, t in enumerate(step.drafted):
        mark = "accepted" if i < step.n_accepted else "rejected" if i == step.n_accepted else "discarded"
        marks.append((t, mark))
    return marks


def _visible(token: str) -> str:
    return token.replace("\n", "⏎").replace(" ", "·") or "∅"


class StepInspector(Vertical):
    """The last N steps: drafted tokens marked ✓ accepted, ✗ rejected, ~ discarded; → target."""

    N = 12  # Tuning choice: 12 rows fit beside the stats panel on a 40-line terminal

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.steps: list[InspectedStep] = []

    def compose(self):
        yield Static("Step inspector  ✓ accepted  ✗ rejected  ~ discarded  → target", classes="panel-title")
        yield Static("", id="inspector-body")

    def show(self, steps: Sequence[InspectedStep]) -> None:
        self.steps = list(steps)[-self.N:]
        styles = {"accepted": ACCEPTED_STYLE, "rejected": REJECTED_STYLE, "discarded": DISCARDED_STYLE}
        signs = {"accepted": "✓", "rejected": "✗", "discarded": "~"}
        text = Text()
        for j, s in enumerate(self.steps):
            text.append(f"#{s.index:<4} k={s.k:<2} ", style="dim")
            for token, mark in draft_marks(s):
                text.append(f"{signs[mark]}{_visible(token)} ", style=styles[mark])
            text.append(("+ " if s.bonus else "→ ") + _visible(s.token), style=TARGET_TOKEN_STYLE)
            if j < len(self.steps) - 1:
                text.append("\n")
        if not self.steps:
            text.append("no steps yet", style="dim")
        self.query_one("#inspector-body", Static).update(text)

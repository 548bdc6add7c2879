"""Widgets of the chat app. They draw what the app hands them and hold no model state.

Nouns: ``ChatInput``, ``ChatLog``, ``UserMessage``, ``ReplyView``, ``StatsPanel``,
``StepInspector``. Colours of draft tokens: a reply keeps the character spans that came from
accepted draft tokens (``Step.emitted[:n_accepted]``); the token view paints them. A reasoning
model's thinking (``localspec.chat.thinking``) goes to a collapsed block above its answer.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections import deque
from collections.abc import Sequence

from rich.table import Table
from rich.text import Text
from textual import events
from textual.containers import Vertical, VerticalScroll
from textual.css.query import NoMatches
from textual.message import Message
from textual.widgets import Collapsible, Markdown, Sparkline, Static, TextArea
from textual.widgets.markdown import MarkdownStream

from ..chat.conversation import InspectedStep, add_draft_span
from ..core.stats import RunStats

DRAFT_STYLE = "bold #00af5f"  # readable on both the dark and the light theme
TARGET_STYLE = ""
ACCEPTED_STYLE = "bold #00af5f"
REJECTED_STYLE = "bold #d70000 strike"
DISCARDED_STYLE = "dim strike"
TARGET_TOKEN_STYLE = "bold #5f87ff"

CODE_BLOCK = re.compile(r"```[^\n]*\n(.*?)(?:```|\Z)", re.S)


# C0 controls (but tab and newline) and DEL drawn as their Unicode "control pictures": a model
# or a paste can contain ESC sequences, which must never reach the terminal. One character
# for one, so draft spans (character offsets) still line up.
_CONTROL_PICTURES = {c: 0x2400 + c for c in range(0x20) if c not in (0x09, 0x0A)} | {0x7F: 0x2421}


def visible(text: str, token: bool = False) -> str:
    """``text`` safe to draw: control characters shown as ␛, ␀, … (stored text is unchanged).
    A ``token`` (the inspector's) also shows its blanks, ⏎ for a newline and · for a space, and
    ∅ when it is empty, so that tokens read apart."""
    if token:
        return text.replace("\n", "⏎").replace(" ", "·").translate(_CONTROL_PICTURES) or "∅"
    return text.translate(_CONTROL_PICTURES)


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
    def __init__(self, text: str, message_id: int | None = None, **kwargs) -> None:
        super().__init__(Text(visible(text)), **kwargs)
        self.text = text
        self.message_id = message_id  # the stored message this shows


async def stop_stream(stream: MarkdownStream) -> None:
    """Stop a Markdown stream. Stopped before its task first ran (the reply's end came between
    the view's mount and that run), Textual's ``stop`` raises the task's CancelledError; let out
    of a message handler, it ends the screen's message loop and the chat hangs. So it is kept
    in, unless this task itself is being cancelled."""
    try:
        await stream.stop()
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise


class ReplyView(Vertical):
    """One assistant reply: Markdown view (streamed) and the token view (draft colours)."""

    def __init__(
        self,
        text: str = "",
        draft_spans: Sequence[Sequence[int]] = (),
        summary: str = "",
        status: str = "done",
        thinking: str = "",
        thinking_tokens: int | None = None,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        self.text = text  # the answer; a reasoning model's thinking is apart in ``thinking``
        self.thinking = thinking
        self.thinking_tokens = thinking_tokens
        self._thinking_dirty = False
        self.draft_spans: list[tuple[int, int]] = [tuple(s) for s in draft_spans]  # type: ignore[misc]
        self.status = status
        self.message_id: int | None = None  # set once the reply is stored
        self._summary = summary
        self._stream: MarkdownStream | None = None
        self._unsent = ""
        self._token_view_dirty = True
        self._chunk: Static | None = None  # the token view's last (growing) paragraph
        self._chunk_start = 0

    def compose(self):
        block = Collapsible(
            Static(self._thinking_body(), classes="thinking-body"),
            title=self._thinking_title(),
            collapsed=True,
            classes="reply-thinking",
        )
        block.display = bool(self.thinking)
        yield block
        yield Markdown(visible(self.text), classes="reply-md")
        yield Vertical(classes="reply-tokens")
        yield Static(self._summary_text(), classes="reply-summary")

    @property
    def markdown(self) -> Markdown:
        return self.query_one(".reply-md", Markdown)

    # --- thinking: a collapsed, dimmed block; opened with a click or Enter on its title ----
    def append_thinking(self, text: str, n_tokens: int = 0) -> None:
        """Add thinking text; drawn by ``refresh_thinking`` (the app's panel timer), since
        re-wrapping a long thinking at every step would cost O(thinking) per token."""
        if n_tokens:
            self.thinking_tokens = (self.thinking_tokens or 0) + n_tokens
        if text or n_tokens:
            self.thinking += text
            self._thinking_dirty = True

    def refresh_thinking(self, force: bool = False) -> None:
        if not (force or self._thinking_dirty):
            return
        try:
            block = self.query_one(".reply-thinking", Collapsible)
        except NoMatches:  # not composed yet: compose draws what has come by then
            return
        self._thinking_dirty = False
        block.display = bool(self.thinking or (self.status == "streaming" and self.thinking_tokens))
        block.title = self._thinking_title()
        if not block.collapsed or force:  # a closed block's text is drawn when it opens
            self.query_one(".thinking-body", Static).update(self._thinking_body())

    def on_collapsible_expanded(self, event: Collapsible.Expanded) -> None:
        self.refresh_thinking(force=True)

    def _thinking_title(self) -> str:
        count, unit = (self.thinking_tokens, "token") if self.thinking_tokens else (len(self.thinking), "character")
        n = f"{count} {unit}{'' if count == 1 else 's'}"
        return f"Thinking… ({n})" if self.status == "streaming" else f"Thought for {n}"

    def _thinking_body(self) -> Text:
        return Text(visible(self.thinking), style="italic")

    async def on_mount(self) -> None:
        if self.status == "streaming":
            self._stream = Markdown.get_stream(self.markdown)
            if self._unsent and not self.has_class("-tokens"):  # steps that came before the mount
                unsent, self._unsent = self._unsent, ""
                await self._stream.write(visible(unsent))

    async def append(self, text: str, n_draft_chars: int) -> None:
        """Add a step's text; its first ``n_draft_chars`` characters came from the draft."""
        if not text:
            return
        start = len(self.text)
        self.text += text
        if n_draft_chars > 0:
            add_draft_span(self.draft_spans, start, start + min(n_draft_chars, len(text)))
        self._token_view_dirty = True
        if self._stream is None or self.has_class("-tokens"):
            # not mounted yet, or the Markdown view is hidden: catch up when it is shown
            self._unsent += text
        else:
            unsent, self._unsent = self._unsent, ""
            await self._stream.write(visible(unsent + text))

    async def show_markdown(self) -> None:
        """Back to the Markdown view: hand it the text it skipped while hidden."""
        self.remove_class("-tokens")
        if not self._unsent:
            return
        if self._stream is not None:
            unsent, self._unsent = self._unsent, ""
            await self._stream.write(visible(unsent))
        elif self.is_mounted:
            self._unsent = ""
            await self.markdown.update(visible(self.text))

    async def finish(self, status: str, summary: str) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            await stop_stream(stream)
        if not self.has_class("-tokens") and (self._unsent or self.markdown.source != visible(self.text)):
            self._unsent = ""  # sent to no stream, or to one whose task never ran
            await self.markdown.update(visible(self.text))
        self.status = status
        self._summary = summary
        self.query_one(".reply-summary", Static).update(self._summary_text())
        self.refresh_token_view(force=True)
        self.refresh_thinking(force=True)

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

    def coloured_text(self, start: int = 0, end: int | None = None) -> Text:
        """``text[start:end]`` with the draft's characters painted (the colour view)."""
        end = len(self.text) if end is None else end
        shown = visible(self.text[start:end])
        out = Text()
        pos = start
        for a, b in self.draft_spans:
            a, b = max(a, start), min(b, end)
            if a >= b:
                continue
            if a > pos:
                out.append(shown[pos - start : a - start], style=TARGET_STYLE)
            out.append(shown[a - start : b - start], style=DRAFT_STYLE)
            pos = b
        if pos < end:
            out.append(shown[pos - start : end - start], style=TARGET_STYLE)
        return out

    def refresh_token_view(self, force: bool = False) -> None:
        """Repaint the token view if it is on screen.

        The view is one Static per paragraph: finished paragraphs are painted once and only
        the last one is repainted as tokens arrive, so a repaint costs O(paragraph), not
        O(reply) (a single Static re-wrapping a long reply fell behind the stream).
        """
        if not (force or self._token_view_dirty):
            return
        if not self.has_class("-tokens") and not force:
            return
        self._token_view_dirty = False
        box = self.query_one(".reply-tokens", Vertical)
        if force or self._chunk is None:
            box.remove_children()
            self._chunk_start, self._chunk = 0, None
        while True:
            cut = self.text.find("\n\n", self._chunk_start)
            end = len(self.text) if cut < 0 else cut
            if self._chunk is None:
                self._chunk = Static(classes="token-chunk")
                box.mount(self._chunk)
            self._chunk.update(self.coloured_text(self._chunk_start, end))
            if cut < 0:
                return
            # paragraph complete: it stays as painted; skip the blank line(s) after it
            self._chunk_start = cut + 2
            while self.text.startswith("\n", self._chunk_start):
                self._chunk_start += 1
            self._chunk = None

    def painted_text(self) -> str:
        """What the token view shows (paragraphs joined), for tests and the bench."""
        return "\n\n".join(str(c.render()) for c in self.query(".token-chunk"))


# --- statistics --------------------------------------------------------------------------


def _fmt(x: float | None, spec: str, suffix: str = "") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:{spec}}{suffix}"


NOT_DRAFTING = "1.00× (not drafting)"


def speedup_text(run: RunStats, baseline: float | None, how: str = "") -> str:
    """``run``'s tokens/s over the target alone's, then ``how`` the baseline was had. A run
    that drafted nothing did the target's own computation, so it reads 1.00× whatever its
    ratio to the estimate (that ratio is noise)."""
    if run.n_steps and run.n_drafted == 0:
        return NOT_DRAFTING
    speedup = run.speedup(baseline)
    return _fmt(speedup, ".2f", "×") + (how if speedup else "")


def stats_values(
    run: RunStats,
    totals: RunStats,
    baseline_tps: float | None,
    baseline_note: str,
    measured_baseline_tps: float | None = None,
    mode: str = "draft",
    drafting: str | None = None,
    thinking_tokens: int = 0,
) -> dict[str, str]:
    """The panel's rows, label → value, from this reply's and the session's statistics.

    The speed-up is this reply's decode tokens/s over the target-only tokens/s: the race's
    measured figure when there is one, else the estimate measured at load. ``drafting`` is
    the controller's own account (``DraftingState.line``); the panel draws it full width.
    """
    baseline = measured_baseline_tps or baseline_tps
    total_time = run.draft_seconds + run.verify_seconds + run.overhead_seconds
    split = (
        (
            f"{run.draft_seconds / total_time * 100:.0f}% / {run.verify_seconds / total_time * 100:.0f}%"
            f" (+{run.overhead_seconds / total_time * 100:.0f}%)"
        )
        if total_time > 0
        else "–"
    )
    # labels fit 14 cells so the panel reads on an 80-column terminal
    reply = {
        "mode": mode,
        "drafting": drafting or "–",
        "tokens/s": _fmt(run.tokens_per_second or None, ".1f"),
        "target alone": _fmt(baseline, ".1f", " tok/s"),
        "measured by": "race (target alone, same prompt)" if measured_baseline_tps else baseline_note,
        "speed-up": speedup_text(run, baseline, " measured" if measured_baseline_tps else " est."),
        "predicted": _fmt(run.predicted_speedup, ".2f", "×"),
        "acceptance": _fmt(None if run.acceptance_rate is None else run.acceptance_rate * 100, ".0f", "%"),
        "accepted from": run.sources_line() or "–",
        "tokens/pass": _fmt(run.tokens_per_pass or None, ".2f"),
        "k now (mean)": f"{run.last_k} ({run.mean_draft_length:.1f})" if run.n_steps else "–",
        "draft/verify": split,
        "first token": _fmt(run.first_token_seconds, ".2f", " s"),
        "tokens/passes": f"{run.n_tokens} / {run.n_steps}",
    }
    if thinking_tokens:  # a reasoning model: how much of this reply was thinking
        reply["thinking"] = f"{thinking_tokens} of {run.n_tokens} tokens"
    return reply | {
        "total tokens": f"{totals.n_tokens} / {totals.n_steps} passes",
        "total tok/s": _fmt(totals.tokens_per_second or None, ".1f"),
        "total speed-up": speedup_text(totals, baseline),
        "total accepted": _fmt(None if totals.acceptance_rate is None else totals.acceptance_rate * 100, ".0f", "%"),
    }


def drafting_text(line: str) -> Text:
    """The drafting row: 'on' green, 'off' amber, then the controller's reason in words."""
    text = Text("drafting ", style="dim")
    state, sep, why = line.partition(": ")
    if sep and state in ("on", "off"):
        text.append(state, style="bold #00af5f" if state == "on" else "bold #d78700")
        text.append(sep + why)
    else:
        text.append(line)
    return text


class StatsPanel(Vertical):
    """Live statistics of the reply being generated and of the session."""

    # Tuning choice: the sparkline shows the last 60 steps: wide enough for a panel of ~36 cells.
    SPARK_STEPS = 60

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.values: dict[str, str] = {}
        self.offload = ""
        self.refresh_count = 0

    def compose(self):
        yield Static("Statistics", classes="panel-title")
        offload = Static("", id="stats-offload")
        offload.display = False  # shown once a pair is loaded
        yield offload
        yield Static("", id="stats-drafting")
        yield Static("", id="stats-table")
        yield Static("tokens per target pass", classes="spark-label")
        yield Sparkline([], id="stats-spark", summary_function=max)

    def show(self, values: dict[str, str], history: Sequence[float], offload: str = "") -> None:
        """``offload``: where the layers are, one line ('GPU  draft 25/25 · target 20/29',
        'CPU only'); empty hides the line."""
        self.values = values
        self.refresh_count += 1
        if offload != self.offload:
            self.offload = offload
            line = self.query_one("#stats-offload", Static)
            line.display = bool(offload)
            line.update(Text(offload, style="bold" if offload.startswith("GPU") else "dim"))
        self.query_one("#stats-drafting", Static).update(drafting_text(values.get("drafting", "–")))
        table = Table.grid(padding=(0, 1))
        table.add_column(style="dim", no_wrap=True)
        table.add_column(style="bold", overflow="fold")
        for label, value in values.items():
            if label == "drafting":  # a sentence: drawn full width above the table, wrapped
                continue
            if label == "total tokens":
                table.add_row(Text("─ session ─", style="dim"), "")
            table.add_row(label, Text(value))
        self.query_one("#stats-table", Static).update(table)
        self.query_one("#stats-spark", Sparkline).data = list(history[-self.SPARK_STEPS :])


# --- race ------------------------------------------------------------------------------

_COUNT = {1: "one", 2: "two", 3: "three", 4: "four"}
_TIMES = {1: "once", 2: "twice", 3: "three times"}


def _tps_list(values: Sequence[float]) -> str:
    shown = [f"{v:.1f}" for v in values]
    return " and ".join([", ".join(shown[:-1]), shown[-1]] if len(shown) > 1 else shown)


def race_verdict(spec_tps: float, spec_drafted: bool, target_tps: Sequence[float], same: bool) -> str:
    """The race's last line. The target alone runs more than once, so the line can say how
    much two runs of one computation differ here (the noise) beside any gain: a reply that
    drafted nothing is the target's own computation, and its ratio *is* that noise."""
    runs = [t for t in target_tps if t > 0]
    replies = "identical replies" if same else "replies differ"
    if not runs or spec_tps <= 0:
        return f"no complete run to compare · {replies} · Esc closes"
    if not spec_drafted:
        every = [spec_tps, *runs]
        noise = (max(every) / min(every) - 1) * 100
        return (
            f"neither side drafted: the {_COUNT.get(len(every), len(every))} runs differ by {noise:.0f}% "
            f"(noise, not a speed-up): {spec_tps:.1f} tok/s in the chat, {_tps_list(runs)} tok/s for the "
            f"target alone · {replies} · Esc closes"
        )
    mean = sum(runs) / len(runs)
    spread = (
        f"the target alone ran {_TIMES.get(len(runs), f'{len(runs)} times')}, {_tps_list(runs)} tok/s: "
        f"{spec_tps / max(runs):.2f}–{spec_tps / min(runs):.2f}×"
        if len(runs) > 1
        else "one run of the target alone, so no spread"
    )
    return (
        f"measured speed-up {spec_tps / mean:.2f}×  ({spec_tps:.1f} vs {mean:.1f} tok/s; {spread}) · "
        f"{replies} · Esc closes"
    )


def race_speed_line(target_tps: Sequence[float], running: bool, note: str = "") -> str:
    """The target-alone column's heading: the mean and each run's tokens/s."""
    runs = [t for t in target_tps if t > 0]
    if not runs:
        return "target alone: running…"
    mean = sum(runs) / len(runs)
    each = f" (runs: {', '.join(f'{t:.1f}' for t in runs)})" if len(runs) > 1 else ""
    return f"target alone: {mean:.1f} tok/s{each}{' (running)' if running else note}"


# --- step inspector ----------------------------------------------------------------------


def draft_marks(step: InspectedStep) -> list[tuple[str, str]]:
    """(token text, mark) for each drafted token: accepted, rejected (first mismatch), discarded."""
    marks = []
    for i, t in enumerate(step.drafted):
        mark = "accepted" if i < step.n_accepted else "rejected" if i == step.n_accepted else "discarded"
        marks.append((t, mark))
    return marks


class StepInspector(Vertical):
    """The last N steps: drafted tokens marked ✓ accepted, ✗ rejected, ~ discarded; → target."""

    N = 12  # Tuning choice: 12 rows fit beside the stats panel on a 40-line terminal

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.steps: deque[InspectedStep] = deque(maxlen=self.N)  # the last N, drawn by ``draw``

    def add(self, step: InspectedStep) -> None:
        self.steps.append(step)

    def clear(self) -> None:
        self.steps.clear()

    def compose(self):
        yield Static("Step inspector  ✓ accepted  ✗ rejected  ~ discarded  → target", classes="panel-title")
        yield Static("", id="inspector-body")

    def draw(self) -> None:
        """Draw the steps, when the inspector is shown (hidden, it only keeps them)."""
        if not self.display:
            return
        styles = {"accepted": ACCEPTED_STYLE, "rejected": REJECTED_STYLE, "discarded": DISCARDED_STYLE}
        signs = {"accepted": "✓", "rejected": "✗", "discarded": "~"}
        text = Text()
        for j, s in enumerate(self.steps):
            text.append(f"#{s.index:<4} k={s.k:<2} " + (f"{s.source}: " if s.source else ""), style="dim")
            for token, mark in draft_marks(s):
                text.append(f"{signs[mark]}{visible(token, token=True)} ", style=styles[mark])
            text.append(("+ " if s.bonus else "→ ") + visible(s.token, token=True), style=TARGET_TOKEN_STYLE)
            if j < len(self.steps) - 1:
                text.append("\n")
        if not self.steps:
            text.append("no steps yet", style="dim")
        self.query_one("#inspector-body", Static).update(text)

"""The race: the last prompt answered by the target alone beside the speculative reply, and the
measured speed-up."""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Markdown, Static
from textual.widgets.markdown import MarkdownStream
from textual.worker import get_current_worker

from ...chat.conversation import ChatSession, Ending, Generation, Rematch, ReplyStep
from ...core.stats import RunStats
from ..widgets import race_speed_line, race_verdict, visible

# Tuning choice: the race runs the target alone twice, so that what two runs of one
# computation differ by on this machine (the noise) is measured beside any gain.
RACE_RUNS = 2


class RaceScreen(Screen[None]):
    """The last prompt answered twice: with speculation (the reply already in the chat) and by
    the target alone, RACE_RUNS times (the first run streams; later ones add their speed).
    ``measured(tokens_per_second)`` gets the target alone's mean over the runs that finished:
    the measured ratio replaces the estimate in the panel. The runs are thread workers of this
    screen's own, since it lives exactly as long as the race."""

    BINDINGS = [Binding("escape", "close", "Close")]

    class Stepped(Message):
        def __init__(self, step: ReplyStep) -> None:
            super().__init__()
            self.step = step

    class Ended(Message):
        def __init__(self, ending: Ending) -> None:
            super().__init__()
            self.ending = ending

    def __init__(self, rematch: Rematch, session: ChatSession, measured: Callable[[float], None]) -> None:
        super().__init__()
        self.rematch, self.session, self.measured = rematch, session, measured
        self.spec_text, self.spec_tps, self.mode = rematch.reply, rematch.tokens_per_second, rematch.mode
        self.target_text = ""
        self.target_tps: float | None = None  # the mean, once the race is over
        self.runs: list[tuple[RunStats, str]] = []  # the target alone's ended runs and their status
        self.current = RunStats()  # the run going on
        self.generation: Generation | None = None
        self._over = False
        self._stream: MarkdownStream | None = None

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
        self._next_run()

    @property
    def running(self) -> bool:
        return self.generation is not None

    def _next_run(self) -> None:
        self.current = RunStats()
        self.generation = Generation(self.session, self.rematch.request, explain=False)
        self._run(self.generation)

    @work(thread=True, exclusive=True, group="race")
    def _run(self, generation: Generation) -> None:
        worker = get_current_worker()
        ending = generation.run(lambda step: self.post_message(self.Stepped(step)), lambda: worker.is_cancelled)
        self.post_message(self.Ended(ending))

    async def _append(self, text: str) -> None:
        """The first run's text, streamed beside the speculative reply."""
        self.target_text += text
        if self._stream is not None:
            await self._stream.write(visible(text))

    async def on_race_screen_stepped(self, m: Stepped) -> None:
        if self._over:
            return
        self.current.add(m.step.step)
        if not self.runs and m.step.answer:
            await self._append(m.step.answer)
        speeds = [r.tokens_per_second for r, _ in self.runs] + [self.current.tokens_per_second]
        self.query_one("#race-right-speed", Static).update(race_speed_line(speeds, running=True))

    async def on_race_screen_ended(self, m: Ended) -> None:
        if self._over:
            return
        ending = m.ending
        if ending.error:
            self.notify(ending.error, title="Race failed", severity="error", markup=False)
        if not self.runs and ending.rest[1]:
            await self._append(ending.rest[1])
        self.runs.append((self.current, ending.status))
        if ending.status == "done" and len(self.runs) < RACE_RUNS:
            self._next_run()
            return
        self._end()
        if self._stream is not None:
            await self._stream.stop()
            self._stream = None
        speeds = [r.tokens_per_second for r, _ in self.runs]
        runs = [t for t in speeds if t]
        self.target_tps = sum(runs) / len(runs) if runs else 0.0
        note = "" if ending.status == "done" else f" ({ending.status})"
        self.query_one("#race-right-speed", Static).update(race_speed_line(speeds, running=False, note=note))
        same = self.spec_text == self.target_text
        verdict = race_verdict(self.spec_tps, self.rematch.drafted, speeds, same)
        self.query_one("#race-verdict", Static).update(Text(verdict, style="bold"))

    def _end(self, report: bool = True) -> None:
        """The race is over: stop a run still going and hand on what the finished runs measured."""
        if self._over:
            return
        self._over = True
        if self.generation is not None:
            self.generation.stop()  # it stops at its next step
            self.generation = None
        done = [r.tokens_per_second for r, status in self.runs if status == "done" and r.tokens_per_second]
        if report and done:
            self.measured(sum(done) / len(done))

    def stop(self) -> None:
        """Stop the run going on; the race ends with what the finished runs measured."""
        if self.generation is not None:
            self.generation.stop()

    def abandon(self) -> None:
        """Stop the race and report nothing: the session it measures is being left."""
        self._end(report=False)

    def action_close(self) -> None:
        self._end()
        self.dismiss(None)

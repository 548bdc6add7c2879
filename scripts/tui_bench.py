"""How well the chat app keeps up with a fast engine (issue 4). Not a test: prints figures.

A fake session yields Steps at a fixed token rate (default 300 tokens/s) in bursts of 1..9
tokens per step (a draft of up to 8 accepted plus the target's token), paced against the wall
clock so it never drifts. The app runs headless (``App.run_test``) and we measure:

* lag: for every step, from the moment the worker yields it to the moment the Markdown widget
  has taken its text in (``Markdown.append`` completed; the next screen refresh paints it), or
  with ``--colours`` the token view has been repainted with it;
* stats refresh rate: StatsPanel repaints per second while streaming;
* CPU: process CPU time (all threads: UI, worker, fake engine) over wall time.

    .venv/bin/python scripts/tui_bench.py [--rate 300] [--tokens 3000] [--colours]

``--real TARGET --draft DRAFT --screenshot chat.svg`` instead runs one prompt through the app on
a real pair and saves Textual's SVG screenshot (the README's picture) with the panel's figures.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import resource
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from localspec.chat.session import LoadOptions, PairSpec
from localspec.chat.store import ChatStore
from localspec.core.engine import Step
from localspec.core.explain import DraftingState
from localspec.settings import Settings

WORDS = [
    "speculative",
    "decoding",
    "lets",
    "a",
    "small",
    "draft",
    "model",
    "propose",
    "tokens",
    "that",
    "the",
    "large",
    "target",
    "verifies",
    "in",
    "one",
    "pass",
    "so",
    "the",
    "reply",
    "arrives",
    "faster",
    "without",
    "changing",
    "what",
    "is",
    "sampled",
]
CODE = [
    "```python\n",
    "def",
    " verify",
    "(p_target",
    ",",
    " q_draft",
    "):\n",
    "    return",
    " min",
    "(1",
    ",",
    " p_target",
    " /",
    " q_draft",
    ")\n",
    "```\n",
]


def pieces(n: int, rng: random.Random) -> list[str]:
    """Markdown-ish token pieces: paragraphs, a heading now and then, code blocks."""
    out: list[str] = []
    while len(out) < n:
        r = rng.random()
        if r < 0.08:
            out += CODE
        elif r < 0.12:
            out += ["\n## ", "Section", " ", str(len(out)), "\n\n"]
        else:
            out += [" " + rng.choice(WORDS) for _ in range(rng.randint(8, 30))] + [".\n\n"]
    return out[:n]


class PacedSession:
    """Yields Steps at ``rate`` tokens/s, ``burst`` tokens at most per step."""

    baseline_note = "bench: fixed"
    spec = PairSpec(Path("bench-target.gguf"), Path("bench-draft.gguf"))
    mode = "draft"
    options = LoadOptions()
    opens_thinking = False
    offload = None
    replies = None  # no history of past replies

    def __init__(self, n_tokens: int, rate: float, burst: int, seed: int = 0) -> None:
        self.rng = random.Random(seed)
        self.pieces = pieces(n_tokens, self.rng)
        self.rate, self.burst = rate, burst
        self.baseline_tokens_per_second = rate / 2.5
        self._text: dict[int, str] = {}
        self.yield_times: list[tuple[float, int]] = []  # (t, cumulative chars)
        self.lock = threading.Lock()

    def drafting_state(self, mode=None, *, params=None) -> DraftingState:
        return DraftingState(True, self.burst - 1, "bench: a paced fake")

    def token_text(self, t: int) -> str:
        return self._text.get(t, "?")

    def chat(self, messages, params=None, max_tokens=0, mode=None):
        return self._run()

    def _run(self):
        i, chars, t0 = 0, 0, time.perf_counter()
        while i < len(self.pieces):
            n = min(self.rng.randint(1, self.burst), len(self.pieces) - i)
            emitted = list(range(i, i + n))
            for t in emitted:
                self._text[t] = self.pieces[t]
            # due time of this burst at the nominal rate: pacing never drifts
            due = t0 + (i + n) / self.rate
            time.sleep(max(0.0, due - time.perf_counter()))
            k = min(self.burst - 1, n - 1 + self.rng.randint(0, 2))
            drafted = tuple(emitted[:-1]) + tuple(10_000_000 + j for j in range(k - (n - 1)))
            text = "".join(self.pieces[i : i + n])
            chars += len(text)
            self.yield_times.append((time.perf_counter(), chars))
            i += n
            yield Step(
                drafted=drafted,
                n_accepted=n - 1,
                token=emitted[-1],
                emitted=tuple(emitted),
                text=text,
                model_k=k,
                predicted_speedup=2.5,
                prefill_seconds=0.0,
                draft_seconds=n / self.rate * 0.3,
                verify_seconds=n / self.rate * 0.6,
                step_seconds=n / self.rate,
                finish="eos" if i >= len(self.pieces) else None,
            )

    def close(self) -> None:
        pass


async def bench(args) -> dict:
    from textual.widgets import Markdown

    from localspec.tui.app import LocalspecApp
    from localspec.tui.widgets import ReplyView, StatsPanel

    session = PacedSession(args.tokens, args.rate, args.burst)
    store = ChatStore(None)
    if args.history:  # a long conversation already on screen: every layout has more to arrange
        chat = store.new_chat("history")
        rng = random.Random(1)
        for i in range(args.history):
            store.add_message(chat.id, "user", f"question {i}")
            store.add_message(chat.id, "assistant", "".join(pieces(400, rng)))
    app = LocalspecApp(
        Settings(show_draft_tokens=args.colours),
        session_factory=lambda s, o, p: session,
        store=store,
        spec=session.spec,
    )
    shown: list[tuple[float, int]] = []  # Markdown view: (time, chars taken in)
    painted: list[tuple[float, int]] = []  # token colour view: (time, chars painted)
    async with app.run_test(size=(args.width, args.height)) as pilot:
        while app.session is None or type(app.screen).__name__ != "ChatScreen":
            await pilot.pause(0.05)
        panel = app.query_one(StatsPanel)
        original = Markdown.append

        def recording_append(md, text):
            awaitable = original(md, text)
            if not md.has_class("reply-md"):
                return awaitable

            async def done():
                await awaitable
                shown.append((time.perf_counter(), len(md.source)))

            return done()

        Markdown.append = recording_append  # type: ignore[method-assign]  # MarkdownStream calls widget.append(...)
        original_paint = ReplyView.refresh_token_view

        def recording_paint(view, force=False):
            was_dirty = view._token_view_dirty
            original_paint(view, force)
            if was_dirty and not view._token_view_dirty:
                painted.append((time.perf_counter(), len(view.text)))

        ReplyView.refresh_token_view = recording_paint  # type: ignore[method-assign]
        app.chat_screen.send("go")  # not pilot.press: the pilot waits for an idle screen, which a stream never is
        refresh0 = panel.refresh_count
        cpu0, wall0 = time.process_time(), time.perf_counter()
        ru0 = resource.getrusage(resource.RUSAGE_SELF)
        while app.chat_screen.generating or app.chat_screen.reply_view is not None:
            await asyncio.sleep(0.01)
        wall = time.perf_counter() - wall0
        cpu = time.process_time() - cpu0
        ru1 = resource.getrusage(resource.RUSAGE_SELF)
        refreshes = panel.refresh_count - refresh0
        text = app.conversation.history[-1].content
        Markdown.append = original  # type: ignore[method-assign]
        ReplyView.refresh_token_view = original_paint  # type: ignore[method-assign]
    on_screen = painted if args.colours else shown
    lags = []
    j = 0
    for t_yield, chars in session.yield_times:
        while j < len(on_screen) and on_screen[j][1] < chars:
            j += 1
        if j < len(on_screen):
            lags.append(max(0.0, on_screen[j][0] - t_yield))
    lags.sort()
    if not lags:  # a reply short enough to end before the stream's first update: its text came in one piece
        lags = [float("nan")]
    return {
        "view": "token colours" if args.colours else "markdown",
        "tokens": args.tokens,
        "rate": args.rate,
        "steps": len(session.yield_times),
        "wall_s": wall,
        "achieved_tok_s": args.tokens / wall,
        "lag_median_ms": statistics.median(lags) * 1000,
        "lag_p95_ms": lags[int(len(lags) * 0.95)] * 1000,
        "lag_max_ms": lags[-1] * 1000,
        "markdown_appends": len(on_screen),
        "stats_refresh_per_s": refreshes / wall,
        "cpu_percent": cpu / wall * 100,
        "user_s": ru1.ru_utime - ru0.ru_utime,
        "sys_s": ru1.ru_stime - ru0.ru_stime,
        "text_intact": text == "".join(session.pieces),
    }


async def real_chat(args) -> None:
    """One prompt on a real pair through the app (the README screenshot): stats and an SVG."""
    from localspec.chat.session import PairSpec
    from localspec.tui.app import LocalspecApp
    from localspec.tui.widgets import StatsPanel

    spec = PairSpec(Path(args.real), Path(args.draft) if args.draft else None, args.lookup)
    settings = Settings(n_ctx=2048, max_tokens=args.max_tokens, threads=args.threads, show_draft_tokens=args.colours)
    app = LocalspecApp(settings, store=ChatStore(None), spec=spec)
    async with app.run_test(size=(args.width, args.height)) as pilot:
        while app.session is None:
            await pilot.pause(0.2)
        await pilot.pause(0.5)
        if args.inspector:
            await pilot.press("f3")
        app.chat_screen.send(args.prompt)
        while app.chat_screen.generating or app.chat_screen.reply_view is not None:
            await asyncio.sleep(0.1)
        app.chat_screen.refresh_panels(force=True)
        await pilot.pause(0.5)
        values = app.query_one(StatsPanel).values
        if args.screenshot:
            path = Path(args.screenshot)
            app.save_screenshot(path.name, str(path.parent))
            print(f"screenshot: {path}")
    for k, v in values.items():
        print(f"  {k:<24}{v}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rate", type=float, default=300.0, help="tokens per second the fake engine yields")
    p.add_argument("--burst", type=int, default=9, help="most tokens per step")
    p.add_argument("--tokens", type=int, default=3000, help="reply length in tokens")
    p.add_argument("--colours", action="store_true", help="stream with the draft-token colour view on")
    p.add_argument("--history", type=int, default=0, help="earlier exchanges (400 tokens each) in the chat")
    p.add_argument("--width", type=int, default=120)
    p.add_argument("--height", type=int, default=40)
    real = p.add_argument_group("real pair (no pacing: one prompt through the app on real models)")
    real.add_argument("--real", metavar="TARGET", help="target GGUF; runs one prompt instead of the fake engine")
    real.add_argument("--draft", help="draft GGUF for --real")
    real.add_argument("--lookup", action="store_true", help="prompt lookup for --real")
    real.add_argument("--prompt", default="Write a Python function that checks whether a string is a palindrome.")
    real.add_argument("--max-tokens", type=int, default=120)
    real.add_argument("--threads", type=int, default=None)
    real.add_argument("--inspector", action="store_true", help="show the step inspector")
    real.add_argument("--screenshot", help="save an SVG of the screen here")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("LOCALSPEC_CONFIG_DIR", tmp)
        os.environ.setdefault("LOCALSPEC_DATA_DIR", tmp)
        if args.real:
            asyncio.run(real_chat(args))
            return 0
        r = asyncio.run(bench(args))
    print(
        f"view: {r['view']}; {r['tokens']} tokens at {r['rate']:.0f} tok/s in {r['steps']} steps "
        f"(bursts of 1..{args.burst}); headless {args.width}x{args.height}; {args.history} earlier exchanges"
    )
    print(
        f"  stream took {r['wall_s']:.2f} s ({r['achieved_tok_s']:.0f} tok/s achieved); text intact: {r['text_intact']}"
    )
    print(
        f"  on-screen lag behind the stream: median {r['lag_median_ms']:.1f} ms, p95 {r['lag_p95_ms']:.1f} ms, "
        f"max {r['lag_max_ms']:.1f} ms  (target < 100 ms; {r['markdown_appends']} screen updates)"
    )
    print(f"  stats panel refreshes: {r['stats_refresh_per_s']:.1f} per second (target >= 4)")
    print(f"  CPU: {r['cpu_percent']:.0f}% of one core (user {r['user_s']:.2f} s, sys {r['sys_s']:.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

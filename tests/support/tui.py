"""What the TUI tests share: a tiny fake catalog and fake downloads, the app built on the
scripted fake session (tests/support/fake_session.py), pilot helpers that wait for the worker
threads, and the text the screen shows (``screen_text``, ``assert_shows``)."""

from __future__ import annotations

import asyncio
import html
import re
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from rich.cells import cell_len

from localspec.chat.session import PairSpec
from localspec.settings import Settings
from localspec.tui.app import LocalspecApp
from tests.support.fake_session import HELLO, FakeSession, factory_for

SIZE = (110, 40)

# --- a tiny fake catalog (the real one is localspec.models.catalog) --------------------------------


@dataclass(frozen=True)
class Ref:
    repo: str
    filename: str
    quant: str = "Q4_K_M"
    size_bytes: int = 1_000_000
    sha256: str = ""
    params: str = "1B"
    family: str = "qwen2.5"
    mtp: bool = False  # the file carries MTP layers


@dataclass
class FakePair:
    id: str
    name: str
    family: str
    target: Ref
    drafts: list
    good_for: str = "chat"
    license: str = "apache-2.0"
    memory_bytes: int = 2_000_000_000
    default_is_mtp: bool = False

    @property
    def default_draft(self):
        return self.drafts[0] if self.drafts else None


@dataclass
class FakeCatalog:
    pairs: list
    default_pair_id: str

    def get(self, pair_id):
        return next((p for p in self.pairs if p.id == pair_id), None)


def make_catalog() -> FakeCatalog:
    qwen = FakePair(
        "qwen",
        "Qwen2.5 1.5B + 0.5B",
        "qwen2.5",
        Ref("q/t", "qwen-1.5b.gguf"),
        [Ref("q/d", "qwen-0.5b.gguf"), Ref("l/d", "llama-1b.gguf", family="llama3")],
    )
    llama = FakePair(
        "llama",
        "Llama 3 8B + 1B",
        "llama3",
        Ref("l/t", "llama-8b.gguf", family="llama3"),
        [Ref("l/d", "llama-1b.gguf", family="llama3")],
    )
    return FakeCatalog([qwen, llama], "qwen")


class Files:
    """Fake locate/pull: a set of present files; pull reports progress and may wait or fail."""

    def __init__(self, tmp_path: Path, present=()):
        self.dir = tmp_path / "models"
        self.dir.mkdir(exist_ok=True)
        self.present = set(present)
        self.pulled: list[str] = []
        self.release = threading.Event()
        self.release.set()

    def locate(self, ref, settings):
        return self.dir / ref.filename if ref.filename in self.present else None

    def pull(self, ref, settings, progress=None, cancel=None):
        from types import SimpleNamespace

        total = ref.size_bytes
        for done in range(0, total + 1, total // 4):
            if cancel is not None and cancel.is_set():
                raise RuntimeError("cancelled")
            progress(
                SimpleNamespace(
                    filename=ref.filename,
                    done_bytes=done,
                    total_bytes=total,
                    bytes_per_second=2_000_000.0,
                    eta_seconds=(total - done) / 2e6,
                    source="hub",
                )
            )
            self.release.wait(5)
        self.present.add(ref.filename)
        self.pulled.append(ref.filename)
        return self.dir / ref.filename


def make_app(
    session: FakeSession | None = None,
    *,
    spec="default",
    settings=None,
    catalog=None,
    files: Files | None = None,
    store=None,
    warning=None,
) -> LocalspecApp:
    """The app on a scripted fake session (default: HELLO), its notifications recorded
    (``notified``); ``spec=None`` opens on the pair menu of ``catalog`` and ``files``."""
    session = session or FakeSession(list(HELLO))
    spec = PairSpec(Path("t.gguf"), Path("d.gguf")) if spec == "default" else spec
    app = LocalspecApp(
        settings or Settings(),
        settings_warning=warning,
        session_factory=factory_for(session),
        catalog=catalog,
        store=store,
        spec=spec,
        locate=files.locate if files else None,
        pull=files.pull if files else None,
    )
    notified(app)  # from the start: a warning at start-up is one
    return app


def notified(app) -> list[str]:
    """The messages ``app`` has notified (its toasts), in order, since this was first called
    for it (``make_app`` calls it for every app it makes)."""
    notes = getattr(app.notify, "notes", None)
    if notes is None:
        notify, notes = app.notify, []

        def recording(message, **kwargs):
            notes.append(str(message))
            return notify(message, **kwargs)

        recording.notes = notes  # type: ignore[attr-defined]
        app.notify = recording
    return notes


# Not a timing: only an app that is stuck reaches it. A working app is waited for as long as
# its work takes (a screen switch and a load took over 5 s once on a busy 2-core machine).
STUCK_S = 120.0

# Between looks the app runs this long: its workers' messages are handled, and what a worker
# thread changes after its last message is seen at the next look.
LOOK_AGAIN_S = 0.02


async def wait_for(pilot, predicate, bound: float = STUCK_S):
    """Let the app run until predicate() holds, looking again every LOOK_AGAIN_S, however long
    the work takes; only an app that is stuck reaches ``bound``."""
    loop = asyncio.get_running_loop()
    end = loop.time() + bound
    while not predicate():
        if loop.time() > end:
            raise AssertionError(f"condition not reached within {bound:g} s: the app is stuck")
        # the widgets drain their messages (a drain that never ends is no failure: tests/tui/conftest.py)
        await pilot.pause(LOOK_AGAIN_S)


async def settled(app, pilot):
    """Every worker of the app done, and the messages they posted handled."""
    await asyncio.wait_for(app.workers.wait_for_complete(), STUCK_S)
    await pilot.pause(0)


async def ready(app, pilot):
    await wait_for(pilot, lambda: app.session is not None)
    await wait_for(
        pilot,
        lambda: (
            not isinstance(app.screen, type(None))
            and app.screen.id != "loading"
            and type(app.screen).__name__ == "ChatScreen"
        ),
    )


@asynccontextmanager
async def chat_app(session: FakeSession | None = None, *, app=None, size=SIZE, **kwargs) -> AsyncIterator:
    """(app, pilot): ``app`` (else ``make_app(session, **kwargs)``) run by Textual's pilot at
    ``size``, its pair loaded and the chat screen up."""
    app = app or make_app(session, **kwargs)
    async with app.run_test(size=size) as pilot:
        await ready(app, pilot)
        yield app, pilot


async def send(app, pilot, text: str):
    """``text`` in the chat input and Enter pressed once the input has the focus (``focus()``
    only asks for it: an Enter that comes first goes to whatever had it)."""
    chat_input = app.query_one("#chat-input")
    chat_input.text = text
    chat_input.focus()
    await wait_for(pilot, lambda: app.focused is chat_input)
    await pilot.press("enter")


async def send_and_wait(app, pilot, text: str):
    """Send ``text`` and wait for its reply to end: the message and the reply in the chat's
    history, nothing generating."""
    n = len(app.conversation.history) + 2
    await send(app, pilot, text)
    await wait_for(pilot, lambda: app.chat_screen.generating is None and len(app.conversation.history) == n)


async def run_race(app, pilot):
    """Open the race (F5) on the last reply and wait until the target alone has run."""
    await pilot.press("f5")
    await wait_for(pilot, lambda: app.chat_screen.generating is None and app.screen.target_tps is not None)


async def send_until_mid_stream(app, pilot, text: str):
    """Send; with a gated FakeSession the first step arrives and the rest wait for the gate."""
    await send(app, pilot, text)
    await wait_for(
        pilot, lambda: app.chat_screen.reply_view is not None and app.chat_screen.reply_view.text == "Hello,"
    )


@asynccontextmanager
async def mid_reply(text: str = "hi", **kwargs) -> AsyncIterator:
    """(app, pilot, session): the chat app (``chat_app``'s keywords) on a gated HELLO session,
    ``text`` sent and its reply's first step shown; the rest waits for ``session.gate.set()``."""
    session = FakeSession(list(HELLO), gate=threading.Event())
    async with chat_app(session, **kwargs) as (app, pilot):
        await send_until_mid_stream(app, pilot, text)
        yield app, pilot, session


async def open_settings(app, pilot):
    """F9 pressed on the chat screen: the settings screen (asserted) it opens."""
    from localspec.tui.screens.app_settings import SettingsScreen

    await pilot.press("f9")
    await pilot.pause()
    assert isinstance(app.screen, SettingsScreen)
    return app.screen


def rendered(widget) -> str:
    return str(widget.render())


# --- what the screen shows -------------------------------------------------------------------

# one run of text in Rich's SVG export: its x (column x the cell width), its width
# (characters x the cell width) and its screen line (the clip path's number)
_SVG_TEXT = re.compile(
    r'<text class="[^"]*" x="([^"]+)" y="[^"]+" textLength="([^"]+)" clip-path="url\(#[^"]*-line-(\d+)\)">(.*?)</text>'
)


def screen_text(app) -> str:
    """The text of the app's current screen, one line per screen row, as a user reads it.

    Made from Textual's own screenshot (``export_screenshot``, the SVG a user can save): each
    run of text is put back at its column, so text drawn in several styles reads as one, and
    neither the SVG's markup nor its title can match a needle."""
    lines: dict[int, list[tuple[int, str]]] = {}
    cell = None
    for x, length, line, escaped in _SVG_TEXT.findall(app.export_screenshot()):
        text = html.unescape(escaped).replace("\xa0", " ")
        cell = cell or float(length) / len(text)  # every run has the same cell width
        lines.setdefault(int(line), []).append((round(float(x) / cell), text))
    out = []
    for n in range(max(lines, default=-1) + 1):
        row = ""
        for column, text in sorted(lines.get(n, [])):
            row += " " * (column - cell_len(row)) + text
        out.append(row.rstrip())
    return "\n".join(out)


def assert_shows(app, *needles: str) -> str:
    """Assert that each needle is on the app's current screen; the screen's text, for more."""
    text = screen_text(app)
    missing = [n for n in needles if n not in text]
    assert not missing, f"not on the screen: {missing}\n{text}"
    return text

"""What every TUI test's pilot shares: a drain that never ends is not a failure.

Textual's pilot, after a key press, a click or a pause, waits until every widget of the screen
has run a callback it queued on each (``Pilot._wait_for_screen``). A widget removed meanwhile
never runs it, so the wait gives up after 30 s with ``WaitForScreenTimeout``: clean-clone CI
runs failed there, in a different test each time, none of them failing alone. The key was
posted and the app runs on; what a test asserts it waits for with a bound of its own
(``tests.support.tui.wait_for``), so an app really stuck still fails.
"""

from __future__ import annotations

import pytest
from textual.pilot import Pilot, WaitForScreenTimeout

DRAIN_TIMEOUT = 10.0  # a drain takes milliseconds; past this a widget that went away holds it


@pytest.fixture(autouse=True)
def _tolerant_drain(monkeypatch):
    wait_for_screen = Pilot._wait_for_screen

    async def tolerant(self, timeout: float = DRAIN_TIMEOUT) -> bool:
        try:
            return await wait_for_screen(self, timeout=min(timeout, DRAIN_TIMEOUT))
        except WaitForScreenTimeout:
            return False  # as the pilot answers when the screen itself is gone

    monkeypatch.setattr(Pilot, "_wait_for_screen", tolerant)

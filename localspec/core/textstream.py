"""Token bytes -> text, emitting only whole UTF-8 characters and honouring stop strings.

Byte-level BPE tokens can end in the middle of a character (a Korean syllable is 3 bytes, an
emoji 4), so bytes go through an incremental decoder that holds an incomplete tail back. Text
that could still turn into a stop string is held back too, until it can't.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence


class TextStream:
    def __init__(self, stop: Sequence[str] = ()) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stop = [s for s in stop if s]
        self._pending = ""  # decoded text not yet emitted (a possible stop-string start)
        self.text = ""  # everything emitted so far
        self.stopped = False

    def feed(self, data: bytes) -> str:
        """Add bytes; return the newly safe text ('' while a character or stop is incomplete)."""
        if self.stopped:
            return ""
        self._pending += self._decoder.decode(data)
        return self._release(final=False)

    def flush(self) -> str:
        """End of stream: emit what is held back (an incomplete character becomes U+FFFD)."""
        if self.stopped:
            return ""
        self._pending += self._decoder.decode(b"", final=True)
        return self._release(final=True)

    def _release(self, final: bool) -> str:
        cut = self._find_stop()
        if cut is not None:
            out, self._pending, self.stopped = self._pending[:cut], "", True
        else:
            hold = 0 if final else self._held_back()
            out = self._pending[: len(self._pending) - hold]
            self._pending = self._pending[len(out) :]
        self.text += out
        return out

    def _find_stop(self) -> int | None:
        hits = [i for i in (self._pending.find(s) for s in self._stop) if i >= 0]
        return min(hits) if hits else None

    def _held_back(self) -> int:
        """Length of the longest tail of pending text that is a proper prefix of a stop string."""
        best = 0
        for s in self._stop:
            for n in range(min(len(s) - 1, len(self._pending)), best, -1):
                if self._pending.endswith(s[:n]):
                    best = n
                    break
        return best

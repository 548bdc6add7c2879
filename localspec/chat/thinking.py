"""Reasoning models' thinking, split from their answer as the text streams.

Qwen3 (and DeepSeek-R1, QwQ) write ``<think>…</think>`` before the answer:

    <think>\\nThe user wants a greeting.\\n</think>\\n\\nHello!

``ThinkSplitter.feed`` takes the reply's text in the pieces it arrives in and returns
``(thinking_delta, answer_delta)``. A tag may be split over pieces (``"</th"`` + ``"ink>"``),
so a tail that could still become a tag is held back until it cannot; the whitespace the
model writes around the tags is not part of either text. Only a block at the very start of
the reply counts: a ``<think>`` later in an answer (a reply explaining the format) is answer.

**What goes back into the history** (the one place this rule is written down): an earlier
assistant turn is sent back to the model as its answer only, without its thinking. That is
what Qwen3's chat template does itself (it keeps only the text after ``</think>`` of earlier
assistant turns), and DeepSeek-R1's does the same; sending the thinking back would also spend
context on text the model was trained never to see again. See :func:`history_content`.
"""

from __future__ import annotations

OPEN, CLOSE = "<think>", "</think>"


def _partial_tag(text: str, tag: str) -> int:
    """Length of the longest tail of ``text`` that is a proper prefix of ``tag``."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0


class ThinkSplitter:
    """Incremental ``<think>`` parser. States: ``start`` (nothing but whitespace yet),
    ``thinking``, ``after`` (between ``</think>`` and the answer's first non-blank
    character) and ``answer`` (everything else is answer, unparsed)."""

    def __init__(self, opened: bool = False) -> None:
        """``opened``: the prompt already ends in ``<think>`` (templates that open the block
        for the model), so the reply starts inside the thinking."""
        self.state = "thinking" if opened else "start"
        self._held = ""  # text that may still be (part of) a tag or blank around one
        self._lead = opened  # drop the blank start of the thinking
        self.thinking = ""  # everything returned so far, for callers that want the whole
        self.answer = ""

    def feed(self, text: str) -> tuple[str, str]:
        """Add a piece of the reply; return the (thinking, answer) text it releases."""
        buf, self._held = self._held + text, ""
        think, answer = "", ""
        while buf:
            if self.state == "start":
                stripped = buf.lstrip()
                if stripped.startswith(OPEN):
                    self.state, self._lead = "thinking", True
                    buf = stripped[len(OPEN) :]
                elif OPEN.startswith(stripped):  # blank, or a tag still arriving
                    self._held, buf = buf, ""
                else:
                    self.state = "answer"
            elif self.state == "thinking":
                if self._lead:
                    buf = buf.lstrip()
                    self._lead = not buf
                    continue
                end = buf.find(CLOSE)
                if end >= 0:
                    think += buf[:end].rstrip()
                    self.state, buf = "after", buf[end + len(CLOSE) :]
                    continue
                keep = len(buf) - _partial_tag(buf, CLOSE)
                keep = len(buf[:keep].rstrip())  # blank before a possible tag waits too
                think, self._held, buf = think + buf[:keep], buf[keep:], ""
            elif self.state == "after":
                buf = buf.lstrip()
                if buf:
                    self.state = "answer"
            else:
                answer, buf = answer + buf, ""
        self.thinking += think
        self.answer += answer
        return think, answer

    def flush(self) -> tuple[str, str]:
        """The reply ended: release what was held back (a tag that never completed is text)."""
        held, self._held = self._held, ""
        think, answer = "", ""
        if self.state == "start" and held.strip():
            answer = held
        elif self.state == "thinking":
            think = held.rstrip()
        self.thinking += think
        self.answer += answer
        return think, answer


def split(text: str, opened: bool = False) -> tuple[str, str]:
    """(thinking, answer) of a whole reply."""
    s = ThinkSplitter(opened)
    s.feed(text)
    s.flush()
    return s.thinking, s.answer


def history_content(answer: str, thinking: str = "") -> str:
    """What an earlier assistant turn sends back to the model: the answer only (see the
    module's docstring for why)."""
    return answer

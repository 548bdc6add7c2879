"""The <think> splitter (localspec/thinking.py): Qwen3's format fed in every kind of piece."""

from __future__ import annotations

import sys

import pytest

from localspec.chat.thinking import ThinkSplitter, history_content, split

QWEN3 = "<think>\nThe user wants a greeting.\nKeep it short.\n</think>\n\nHello! How are you?"
THINKING = "The user wants a greeting.\nKeep it short."
ANSWER = "Hello! How are you?"


def feed_all(pieces, opened=False):
    """Feed pieces one by one; return the joined deltas and the per-piece deltas."""
    s = ThinkSplitter(opened)
    deltas = [s.feed(p) for p in pieces] + [s.flush()]
    return "".join(t for t, _ in deltas), "".join(a for _, a in deltas), deltas


class TestSplit:
    def test_the_core_imports_no_textual(self, monkeypatch):
        monkeypatch.setitem(sys.modules, "textual", None)
        monkeypatch.delitem(sys.modules, "localspec.chat.thinking", raising=False)
        import localspec.chat.thinking  # noqa: F401

    def test_whole_reply(self):
        assert split(QWEN3) == (THINKING, ANSWER)

    @pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 8, 9, 13])
    def test_any_piece_size_gives_the_same_split(self, size):
        # every tag is split at every position for some size (1: one character at a time)
        pieces = [QWEN3[i : i + size] for i in range(0, len(QWEN3), size)]
        thinking, answer, _ = feed_all(pieces)
        assert (thinking, answer) == (THINKING, ANSWER)

    def test_tokens_as_qwen3_writes_them(self):
        # Qwen3's tokens: <think> and </think> are whole tokens, "\n\n" after the close
        pieces = [
            "<think>",
            "\n",
            "The",
            " user",
            " wants",
            " a",
            " greeting",
            ".\n",
            "Keep",
            " it",
            " short",
            ".\n",
            "</think>",
            "\n\n",
            "Hello",
            "!",
            " How",
            " are",
            " you",
            "?",
        ]
        thinking, answer, deltas = feed_all(pieces)
        assert (thinking, answer) == (THINKING, ANSWER)
        assert deltas[0] == ("", "")  # the tag itself is nobody's text
        assert deltas[2] == ("The", "")
        assert deltas[7] == (".", "")  # ".\n": the newline waits (it may come before </think>)
        assert deltas[8] == ("\nKeep", "")  # ... and is released with the next word
        assert deltas[12] == ("", "")  # "\n</think>": the close, and the newline before it dropped
        assert deltas[13] == ("", "")  # the blank after </think> is dropped
        assert deltas[14] == ("", "Hello")

    def test_close_tag_split_over_three_pieces(self):
        thinking, answer, deltas = feed_all(["<think>plan", "</", "thi", "nk>", "answer"])
        assert (thinking, answer) == ("plan", "answer")
        assert deltas[1] == deltas[2] == ("", "")  # held: it could still be the tag

    def test_a_false_tag_start_is_released_as_thinking(self):
        thinking, _, deltas = feed_all(["<think>a </", "b> c</think>x"])
        assert deltas[0] == ("a", "")  # " </" waits
        assert thinking == "a </b> c"

    def test_no_thinking_is_all_answer(self):
        thinking, answer, deltas = feed_all(["Hello", ", world"])
        assert (thinking, answer) == ("", "Hello, world")
        assert deltas[0] == ("", "Hello")  # not a tag start: released at once

    def test_an_answer_starting_like_the_tag(self):
        assert feed_all(["<t", "able>"])[:2] == ("", "<table>")
        assert feed_all(["<thi"])[:2] == ("", "<thi")  # ended there: it is text

    def test_later_tags_are_answer(self):
        text = "Use <think> tags </think> like this."
        assert split(text) == ("", text)
        assert split("<think>x</think>y <think>z</think>") == ("x", "y <think>z</think>")

    def test_empty_thinking_block(self):
        # Qwen3 with thinking switched off in the template still writes an empty block
        assert split("<think>\n\n</think>\n\nHi") == ("", "Hi")

    def test_stopped_while_thinking(self):
        thinking, answer, _ = feed_all(["<think>\n", "half a thou", "ght\n</th"])
        assert (thinking, answer) == ("half a thought\n</th", "")

    def test_prompt_opened_the_block(self):
        # templates that end the prompt with "<think>\n": the reply starts inside it
        assert split("\nreasoning\n</think>\n\nanswer", opened=True) == ("reasoning", "answer")

    def test_korean_and_emoji_pass_through(self):
        assert split("<think>생각 🤔</think>\n답 🚀") == ("생각 🤔", "답 🚀")

    def test_totals_follow_the_deltas(self):
        s = ThinkSplitter()
        for p in QWEN3:
            s.feed(p)
        s.flush()
        assert (s.thinking, s.answer) == (THINKING, ANSWER)


class TestHistory:
    def test_history_gets_the_answer_only(self):
        # Qwen3's template drops earlier turns' thinking: we send the answer alone
        assert history_content(ANSWER, THINKING) == ANSWER

"""UTF-8 streaming and stop strings (fuzzed with hypothesis: any split reassembles)."""

from hypothesis import given
from hypothesis import strategies as st

from localspec.core.textstream import TextStream

TEXT = "안녕하세요 😀 hello 세계"


def feed_all(chunks, stop=()):
    s = TextStream(stop)
    out = [s.feed(c) for c in chunks] + [s.flush()]
    return out, s


class TestUtf8:
    def test_never_emits_a_broken_character(self):
        data = TEXT.encode()
        out, s = feed_all([data[i : i + 1] for i in range(len(data))])
        assert "".join(out) == TEXT
        assert all("\ufffd" not in piece for piece in out)

    @given(st.text(), st.lists(st.integers(min_value=0, max_value=64), max_size=20))
    def test_any_byte_split_reassembles(self, text, cuts):
        data = text.encode()
        points = sorted({min(c, len(data)) for c in cuts})
        chunks = [data[a:b] for a, b in zip([0, *points], [*points, len(data)])]
        out, _ = feed_all(chunks)
        assert "".join(out) == text


class TestStop:
    def test_stop_string_split_across_tokens_is_removed(self):
        out, s = feed_all([b"abc<|e", b"nd|>more"], stop=["<|end|>"])
        assert "".join(out) == "abc" and s.stopped

    def test_prefix_of_stop_that_does_not_complete_is_released(self):
        out, s = feed_all([b"a<|x", b"yz"], stop=["<|end|>"])
        assert "".join(out) == "a<|xyz" and not s.stopped

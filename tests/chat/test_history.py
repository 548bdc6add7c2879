"""localspec/chat/history.py: the past replies kept on disk per tokenizer, two segments each,
what a damaged or foreign file comes to (random damage to each array included), and two
processes adding at once."""

from __future__ import annotations

import contextlib
import io
import multiprocessing
import os
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from localspec.chat import history
from localspec.chat.history import FORMAT, MERGE_MIN_TOKENS, HistoryStore
from localspec.chat.replies import PastReplies, TokenizerKey
from localspec.core import suffix

KEY = "0a1b2c"
FORK = multiprocessing.get_context("fork")  # for children that build no suffix array
# Children that build one are spawned: libdivsufsort runs on OpenMP (libgomp), whose threads a
# forked child does not get back, so a fork after a build hangs in the next one.
SPAWN = multiprocessing.get_context("spawn")


def reply(n: int, first: int = 0) -> list[int]:
    """``n`` distinct token ids from ``first``: replies made with other ``first`` never repeat one."""
    return list(range(first, first + n))


def kept(store: HistoryStore, key: str = KEY) -> list[list[int]]:
    """Every reply kept, oldest segment first, as lists of ids."""
    segments, _ = store.load(key)
    return [r.tolist() for c in segments for r in c.replies()]


def segment_sizes(store: HistoryStore, key: str = KEY) -> list[int]:
    return [c.n_tokens for c in store.load(key)[0]]


def set_aside(folder: Path) -> list[str]:
    return sorted(p.name.split(".bad-")[0] for p in folder.iterdir() if ".bad-" in p.name)


class TestRoundTrip:
    def test_replies_come_back_in_order_in_another_store(self, tmp_path):
        store = HistoryStore(tmp_path)
        store.add(KEY, reply(5), now=1.0)
        store.add(KEY, reply(3, 100), now=2.0)
        again = HistoryStore(tmp_path)
        assert kept(again) == [reply(5), reply(3, 100)]
        (corpus,) = again.load(KEY)[0]
        assert corpus.used.tolist() == [1.0, 2.0] and again.load(KEY)[1] == []

    def test_both_segments_come_back_oldest_first(self, tmp_path):
        store = HistoryStore(tmp_path)
        store.add(KEY, reply(MERGE_MIN_TOKENS + 1), now=1.0)  # alone past the threshold: base
        store.add(KEY, reply(3, 10**6), now=2.0)  # recent
        assert kept(HistoryStore(tmp_path)) == [reply(MERGE_MIN_TOKENS + 1), reply(3, 10**6)]

    def test_add_answers_with_what_load_reads(self, tmp_path):
        store = HistoryStore(tmp_path)
        segments, warnings = store.add(KEY, reply(4), now=1.0)
        assert warnings == [] and [r.tolist() for c in segments for r in c.replies()] == kept(store)

    def test_the_default_root_is_in_the_data_dir(self, tmp_path):
        store = HistoryStore()
        store.add(KEY, reply(2))
        assert (tmp_path / "data" / "history" / KEY / "recent.npz").exists()  # conftest's LOCALSPEC_DATA_DIR

    def test_nothing_kept_is_an_empty_history_and_no_warning(self, tmp_path):
        assert HistoryStore(tmp_path).load(KEY) == ((), [])

    def test_an_empty_reply_and_one_over_the_cap_are_not_kept(self, tmp_path):
        store = HistoryStore(tmp_path, cap_tokens=10)
        assert store.add(KEY, []) == ((), []) and store.add(KEY, reply(11)) == ((), [])
        assert not (tmp_path / KEY).exists()

    @pytest.mark.parametrize("key", ["", "../x", "ABC", "a/b", "0" * 65])
    def test_a_key_that_is_not_short_hex_is_refused(self, tmp_path, key):
        with pytest.raises(ValueError, match="short hex"):
            HistoryStore(tmp_path).load(key)

    @pytest.mark.parametrize("ids", [[-1], [int(suffix.SEP)]])
    def test_ids_no_tokenizer_gives_are_refused(self, tmp_path, ids):
        with pytest.raises(ValueError, match="token ids run from 0"):
            HistoryStore(tmp_path).add(KEY, ids)

    def test_a_greedy_answer_given_twice_is_marked_with_its_prompt_in_another_store(self, tmp_path):
        store = HistoryStore(tmp_path)
        store.add(KEY, reply(5), now=1.0, prompt=77)
        store.add(KEY, reply(3, 100), now=2.0, prompt=78)
        assert store.load(KEY)[0][0].reproduced == frozenset()  # each given once
        store.add(KEY, reply(5), now=3.0, prompt=77)  # the same answer again
        (corpus,) = HistoryStore(tmp_path).load(KEY)[0]
        assert corpus.prompts.tolist() == [77, 0] and corpus.reproduced == {77}

    def test_a_format_1_file_is_read_with_no_prompt_known_and_kept_on(self, tmp_path):
        path = tmp_path / KEY / "recent.npz"
        valid_file(path, version=np.int64(1), prompts=None, asked=None)  # as the first format wrote it
        store = HistoryStore(tmp_path)
        (corpus,), warnings = store.load(KEY)
        assert warnings == [] and kept(store) == [reply(3), reply(2, 10)] and corpus.reproduced == frozenset()
        store.add(KEY, reply(2, 10), now=3.0, prompt=9)  # written again in today's format, nothing lost
        store.add(KEY, reply(4, 50), now=4.0)
        (corpus,) = HistoryStore(tmp_path).load(KEY)[0]
        assert kept(store) == [reply(3), reply(2, 10), reply(4, 50)] and corpus.prompts.tolist() == [0, 9, 0]

    def test_each_reply_keeps_the_prompt_it_answered_greedy_or_not(self, tmp_path):
        store = HistoryStore(tmp_path)
        store.add(KEY, reply(5), now=1.0, asked=41)  # sampled: no mark, but its prompt is known
        store.add(KEY, reply(3, 100), now=2.0, prompt=42, asked=42)
        store.add(KEY, reply(5), now=3.0, asked=43)  # the same text for another prompt: the latest
        store.add(KEY, reply(MERGE_MIN_TOKENS + 1, 10**6), now=4.0, asked=44)  # recent merges into base
        (base,) = HistoryStore(tmp_path).load(KEY)[0]
        assert base.asked.tolist() == [43, 42, 44] and base.prompts.tolist() == [0, 0, 0]

    def test_a_format_2_file_is_read_with_no_prompt_asked_known(self, tmp_path):
        path = tmp_path / KEY / "recent.npz"
        valid_file(path, version=np.int64(2), asked=None)  # as the second format wrote it
        store = HistoryStore(tmp_path)
        (corpus,), warnings = store.load(KEY)
        assert warnings == [] and corpus.asked.tolist() == [0, 0]
        store.add(KEY, reply(4, 50), now=4.0, asked=7)  # written again in today's format, nothing lost
        assert kept(store) == [reply(3), reply(2, 10), reply(4, 50)] and store.load(KEY)[0][0].asked.tolist() == [
            0,
            0,
            7,
        ]

    def test_histories_of_two_tokenizers_stay_apart(self, tmp_path):
        store = HistoryStore(tmp_path)
        store.add("aa", reply(2))
        store.add("bb", reply(3, 50))
        assert kept(store, "aa") == [reply(2)] and kept(store, "bb") == [reply(3, 50)]


class TestDedupe:
    def test_a_repeated_reply_is_kept_once_and_its_use_refreshed(self, tmp_path):
        store = HistoryStore(tmp_path)
        store.add(KEY, reply(4), now=1.0)
        store.add(KEY, reply(4, 10), now=2.0)
        store.add(KEY, reply(4), now=3.0)
        (corpus,) = store.load(KEY)[0]
        assert kept(store) == [reply(4), reply(4, 10)]  # not a third
        assert corpus.used.tolist() == [3.0, 2.0]

    def test_a_reply_merged_into_base_is_refreshed_there(self, tmp_path):
        store = HistoryStore(tmp_path)
        big = reply(MERGE_MIN_TOKENS + 1)  # alone past the threshold: merged at once
        store.add(KEY, big, now=1.0)
        store.add(KEY, reply(3, 10**6), now=2.0)
        store.add(KEY, big, now=5.0)
        base, recent = store.load(KEY)[0]
        assert (base.used.tolist(), recent.used.tolist()) == ([5.0], [2.0])

    def test_a_reproduced_reply_keeps_its_mark_through_a_merge(self, tmp_path):
        store = HistoryStore(tmp_path)
        store.add(KEY, reply(4), now=1.0)
        store.add(KEY, reply(4), now=2.0, prompt=5)  # given again, greedy: reproduced
        store.add(KEY, reply(4), now=3.0)  # sampled again: the mark stays
        assert store.load(KEY)[0][0].prompts.tolist() == [5]
        store.add(KEY, reply(MERGE_MIN_TOKENS + 1, 10), now=4.0, prompt=6)  # recent merges into base
        base, *recent = store.load(KEY)[0]
        assert not recent and base.prompts.tolist() == [5, 0]

    def test_a_longer_or_shorter_reply_is_another_reply(self, tmp_path):
        store = HistoryStore(tmp_path)
        for r in (reply(4), reply(3), reply(5)):
            store.add(KEY, r)
        assert kept(store) == [reply(4), reply(3), reply(5)]


class TestEviction:
    """Cap 100 tokens, replies of 30: three fit, the least recently written goes first."""

    def test_the_least_recently_written_goes_first(self, tmp_path):
        store = HistoryStore(tmp_path, cap_tokens=100)
        for i in range(4):
            store.add(KEY, reply(30, 100 * i), now=float(i))
        assert kept(store) == [reply(30, 100), reply(30, 200), reply(30, 300)]  # r0 dropped

    def test_a_refreshed_reply_outlives_newer_ones(self, tmp_path):
        store = HistoryStore(tmp_path, cap_tokens=100)
        for i in range(3):
            store.add(KEY, reply(30, 100 * i), now=float(i))
        store.add(KEY, reply(30, 0), now=10.0)  # r0 written again: now the most recent
        store.add(KEY, reply(30, 300), now=11.0)  # r1 is the least recent and goes
        assert sorted(kept(store)) == [reply(30, 0), reply(30, 200), reply(30, 300)]

    def test_eviction_spans_both_segments(self, tmp_path):
        store = HistoryStore(tmp_path, cap_tokens=MERGE_MIN_TOKENS + 20)
        store.add(KEY, reply(MERGE_MIN_TOKENS + 1), now=1.0)  # base
        store.add(KEY, reply(10, 10**6), now=2.0)  # recent
        store.add(KEY, reply(10, 2 * 10**6), now=3.0)  # 21 past the cap: the base's reply goes
        assert kept(store) == [reply(10, 10**6), reply(10, 2 * 10**6)]
        assert sum(segment_sizes(store)) == 20


class TestMerge:
    def test_recent_is_merged_once_past_the_minimum(self, tmp_path):
        store = HistoryStore(tmp_path)
        n = MERGE_MIN_TOKENS // 4
        for i in range(4):
            store.add(KEY, reply(n, i * n), now=float(i))
        assert segment_sizes(store) == [4 * n]  # exactly the minimum: still recent alone
        store.add(KEY, reply(1, 10**6), now=4.0)
        assert segment_sizes(store) == [4 * n + 1]  # one past it: merged into base
        base_file, recent_file = (tmp_path / KEY / "base.npz"), (tmp_path / KEY / "recent.npz")
        assert base_file.exists() and recent_file.exists()
        store.add(KEY, reply(2, 2 * 10**6), now=5.0)
        assert segment_sizes(store) == [4 * n + 1, 2]  # the next reply starts recent again

    def test_past_the_minimum_recent_may_grow_to_a_quarter_of_base(self, tmp_path):
        store = HistoryStore(tmp_path)
        base = 8 * MERGE_MIN_TOKENS
        store.add(KEY, reply(base), now=0.0)
        quarter = base // 4
        for i in range(2):
            store.add(KEY, reply(quarter // 2, 10**7 + i * quarter), now=1.0 + i)
        assert segment_sizes(store) == [base, quarter]  # a quarter exactly: not merged
        store.add(KEY, reply(1, 10**8), now=3.0)
        assert segment_sizes(store) == [base + quarter + 1]

    def test_a_merge_keeps_every_reply_in_order_and_drafts_match_them(self, tmp_path):
        store = HistoryStore(tmp_path)
        replies = [reply(MERGE_MIN_TOKENS // 2, 10**6 * (i + 1)) for i in range(3)]
        for i, r in enumerate(replies):
            store.add(KEY, r, now=float(i))
        (base,) = store.load(KEY)[0]
        assert [r.tolist() for r in base.replies()] == replies
        tail = np.array(replies[1][:50], dtype=np.uint32)
        assert suffix.match_corpus(base, tail, depth=64, max_ends=4).length == 50  # its suffix array is sound


class TestReadsOnlyWhatChanged:
    def test_a_reply_kept_beside_an_unchanged_base_does_not_parse_the_base_again(self, tmp_path, monkeypatch):
        store = HistoryStore(tmp_path)
        store.add(KEY, reply(MERGE_MIN_TOKENS + 1), now=0.0)  # past the minimum: merged into base
        (base,) = store.load(KEY)[0]
        parsed: list[str] = []
        real = history.read_segment
        monkeypatch.setattr(
            history, "read_segment", lambda path, key, *vocab: parsed.append(path.name) or real(path, key, *vocab)
        )
        segments, _ = store.add(KEY, reply(3, 10**6), now=1.0)
        assert segments[0] is base and "base.npz" not in parsed  # the same object, its offsets kept
        assert [c.n_replies for c in store.load(KEY)[0]] == [1, 1] and parsed == []  # both as written

    def test_a_file_another_store_replaced_is_read_again(self, tmp_path):
        ours, theirs = HistoryStore(tmp_path), HistoryStore(tmp_path)
        ours.add(KEY, reply(5), now=0.0)
        theirs.add(KEY, reply(5, 100), now=1.0)
        assert kept(ours) == [reply(5), reply(5, 100)]


def valid_file(path: Path, key: str = KEY, **override) -> None:
    """A segment file of two replies, with any of its arrays replaced."""
    corpus = suffix.build([reply(3), reply(2, 10)], [1.0, 2.0])
    arrays = {name: getattr(corpus, name) for name in history.ARRAYS}
    path.parent.mkdir(parents=True, exist_ok=True)
    given = {**arrays, "version": np.int64(FORMAT), "key": np.str_(key), **override}
    with open(path, "wb") as f:
        np.savez(f, **{name: a for name, a in given.items() if a is not None})  # None: left out


class TestDamagedFiles:
    """Each damaged or foreign file is set aside with a warning naming it; the other segment
    and later adds work as before."""

    @pytest.fixture
    def store(self, tmp_path) -> HistoryStore:
        store = HistoryStore(tmp_path)
        store.add(KEY, reply(MERGE_MIN_TOKENS + 1), now=1.0)  # base
        store.add(KEY, reply(5, 10**6), now=2.0)  # recent
        return store

    def spoil_recent(self, store: HistoryStore, how: str) -> Path:
        path = store.root / KEY / "recent.npz"
        if how == "random bytes":
            path.write_bytes(np.random.default_rng(0).bytes(4096))
        elif how == "truncated":
            path.write_bytes(path.read_bytes()[:300])
        elif how == "one array":
            with open(path, "wb") as f:
                np.save(f, np.arange(3))
        elif how == "other arrays":
            with open(path, "wb") as f:
                np.savez(f, weights=np.zeros(4), bias=np.ones(2))
        elif how == "wrong dtype":
            valid_file(path, tokens=np.zeros(8, dtype=np.int64))
        elif how == "inconsistent":
            valid_file(path, starts=np.array([1, 4], dtype=np.int64))
        elif how == "pickled":
            with open(path, "wb") as f:
                np.savez(f, tokens=np.array([{"a": 1}], dtype=object))
        elif how in ("encrypted", "unknown compression"):  # one zip header field changed
            data = bytearray(path.read_bytes())
            central = data.rfind(b"PK\x01\x02")  # the last member's entry in the zip's directory
            if how == "encrypted":
                data[central + 8] |= 1  # its flags
            else:
                data[central + 10] = 99  # its method
            path.write_bytes(bytes(data))
        return path

    @pytest.mark.parametrize(
        "how",
        [
            "random bytes",
            "truncated",
            "one array",
            "other arrays",
            "wrong dtype",
            "inconsistent",
            "pickled",
            "encrypted",
            "unknown compression",
        ],
    )
    def test_a_damaged_or_foreign_file_is_set_aside(self, store, how):
        path = self.spoil_recent(store, how)
        segments, warnings = store.load(KEY)
        assert [c.n_tokens for c in segments] == [MERGE_MIN_TOKENS + 1]  # base still drafts
        assert len(warnings) == 1 and str(path) in warnings[0] and "set aside as recent.npz.bad-" in warnings[0]
        assert set_aside(path.parent) == ["recent.npz"] and not path.exists()
        assert store.load(KEY)[1] == []  # said once: the file is gone
        store.add(KEY, reply(2, 7 * 10**6))
        assert kept(store)[-1] == reply(2, 7 * 10**6)

    def test_another_tokenizers_file_is_set_aside(self, store):
        other = store.root / "ff" / "recent.npz"
        other.parent.mkdir()
        other.write_bytes((store.root / KEY / "recent.npz").read_bytes())
        segments, warnings = store.load("ff")
        assert segments == () and len(warnings) == 1
        assert f"another tokenizer's history (key '{KEY}', not 'ff')" in warnings[0]
        assert set_aside(other.parent) == ["recent.npz"]

    def test_a_newer_format_is_set_aside_and_said_so(self, store):
        path = store.root / KEY / "base.npz"
        valid_file(path, version=np.int64(FORMAT + 1))
        segments, warnings = store.load(KEY)
        assert kept(store) == [reply(5, 10**6)]
        assert f"written by a newer localspec (history format {FORMAT + 1}; this one reads {FORMAT})" in warnings[0]
        assert set_aside(path.parent) == ["base.npz"]

    def test_add_sets_a_damaged_file_aside_and_keeps_the_reply(self, store):
        self.spoil_recent(store, "random bytes")
        segments, warnings = store.add(KEY, reply(2, 9 * 10**6), now=3.0)
        assert "set aside" in warnings[0]
        assert kept(store) == [reply(MERGE_MIN_TOKENS + 1), reply(2, 9 * 10**6)]

    def test_a_damaged_file_is_left_while_another_process_holds_the_lock(self, store, monkeypatch):
        from localspec import lockedfile

        monkeypatch.setattr(lockedfile, "LOCK_TIMEOUT", 0.2)
        path = self.spoil_recent(store, "random bytes")
        done, held = FORK.Event(), FORK.Event()
        holder = FORK.Process(target=hold_lock, args=(store.root / KEY / "history", held, done))
        holder.start()
        try:
            assert held.wait(30)
            segments, warnings = store.load(KEY)
        finally:
            done.set()
            holder.join(30)
        assert "left as it is" in warnings[0] and path.exists() and set_aside(path.parent) == []

    def test_a_segment_that_cannot_be_read_is_left_alone(self, store):
        path = store.root / KEY / "recent.npz"
        path.unlink()
        path.mkdir()  # an OSError on reading, not damage: nothing to set aside
        segments, warnings = store.load(KEY)
        assert [c.n_tokens for c in segments] == [MERGE_MIN_TOKENS + 1]
        assert warnings == [
            f"{path}: cannot be read ([Errno 21] Is a directory: '{path}'); left as it is, drafting without it"
        ]
        assert path.is_dir()

    def test_a_root_that_is_not_a_folder_is_an_empty_history_with_a_warning(self, tmp_path):
        (tmp_path / "file").write_text("x")
        store = HistoryStore(tmp_path / "file")
        segments, warnings = store.load(KEY)
        assert segments == () and len(warnings) == 2 and "cannot be read" in warnings[0]
        segments, warnings = store.add(KEY, reply(3))
        assert segments == () and "this reply was not kept" in warnings[-1]

    @pytest.mark.skipif(os.geteuid() == 0, reason="root reads a folder whatever its permissions")
    def test_a_folder_without_read_permission_is_an_empty_history_with_a_warning(self, store):
        folder = store.root / KEY
        folder.chmod(0)
        try:
            segments, warnings = store.load(KEY)
        finally:
            folder.chmod(0o755)
        assert segments == () and all("Permission denied" in w for w in warnings) and len(warnings) == 2


# --- checked against the tokenizer, whatever the damage ----------------------------------------
N_VOCAB = 1000  # the tokenizer the files below belong to


def write_npz(path: Path, arrays: dict[str, np.ndarray], claims: dict[str, tuple[int, ...]] | None = None) -> None:
    """A segment file as ``np.savez`` writes one (an uncompressed zip of .npy members), except
    that a member's header may claim another shape than the data it holds (``claims``)."""
    claims = claims or {}
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for name, a in arrays.items():
            member = io.BytesIO()
            header = np.lib.format.header_data_from_array_1_0(a)
            np.lib.format.write_array_header_1_0(member, {**header, "shape": claims.get(name, a.shape)})
            member.write(np.ascontiguousarray(a).tobytes())
            z.writestr(f"{name}.npy", member.getvalue())


def file_of(corpus: suffix.Corpus) -> dict[str, np.ndarray]:
    """The arrays a segment file of ``corpus`` holds, as ``write_segment`` writes them."""
    arrays = {name: np.array(getattr(corpus, name)) for name in history.ARRAYS}
    return {**arrays, "version": np.array(FORMAT, dtype=np.int64), "key": np.array(KEY)}


def past_replies(root: Path, n_vocab: int = N_VOCAB) -> PastReplies:
    """What a session on a tokenizer of ``n_vocab`` tokens reads (``Session.replies``)."""
    return PastReplies(HistoryStore(root), TokenizerKey(KEY, n_vocab))


@contextlib.contextmanager
def allocations_bounded(extra: int = 2 << 30):
    """An allocation past ``extra`` more bytes of address space fails with MemoryError while the
    block runs, instead of taking the machine's memory: a read that sizes an array from a
    damaged value (np.arange of 4 billion ids, 29.8 GiB) shows as an error of the test."""
    try:
        import resource

        pages = int(Path("/proc/self/statm").read_text().split()[0])
    except (ImportError, OSError):  # not Linux: nothing to bound with
        yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (pages * os.sysconf("SC_PAGE_SIZE") + extra, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def assert_a_history(corpus: suffix.Corpus) -> None:
    """``corpus`` is exactly what its own replies build (its arrays agree with one another and
    its suffix array is theirs), every id is in the vocabulary, and matching reads it."""
    built = suffix.build(corpus.replies(), corpus.used, corpus.prompts, corpus.asked)
    for name in history.ARRAYS:
        assert np.array_equal(getattr(corpus, name), getattr(built, name), equal_nan=name == "used"), name
    assert int(corpus.tokens[corpus.tokens != suffix.SEP].max()) < N_VOCAB
    assert len(corpus.first_offsets) <= N_VOCAB + 1
    for r in corpus.replies():
        assert suffix.match_corpus(corpus, r.astype(np.int64), depth=8, max_ends=4).length >= 1


class TestCheckedAgainstTheTokenizer:
    """A file is checked against the tokenizer it belongs to before anything is sized from it;
    one that fails is set aside as a damaged one is, and drafting goes on without it."""

    def test_an_id_past_the_vocabulary_sets_the_file_aside_and_the_other_segment_drafts(self, tmp_path):
        store = HistoryStore(tmp_path)
        store.add(KEY, reply(MERGE_MIN_TOKENS + 1, 0), now=1.0, n_vocab=10**6)  # base
        path = tmp_path / KEY / "recent.npz"
        path.parent.mkdir(parents=True, exist_ok=True)
        spoilt = file_of(suffix.build([[5, 6, 7], [8, 9]]))
        spoilt["tokens"][2] = 4_000_000_000  # the damage: one id of a kept reply
        write_npz(path, spoilt)
        with allocations_bounded():
            replies = past_replies(tmp_path, n_vocab=10**6)
        (warning,) = replies.warnings
        assert warning.startswith(f"{path}: token id 4000000000 is not in this tokenizer's vocabulary of 1,000,000")
        assert "set aside as recent.npz.bad-" in warning and set_aside(path.parent) == ["recent.npz"]
        assert [c.n_tokens for c in replies.corpora()] == [MERGE_MIN_TOKENS + 1]  # base still drafts
        replies.keep(list(range(20)), [1, 2, 3])  # and the next reply is kept
        assert kept(store)[-1][-3:] == [1, 2, 3]

    def test_the_same_file_passes_for_a_larger_vocabulary_and_listing_it_sets_nothing_aside(self, tmp_path):
        path = tmp_path / KEY / "recent.npz"
        path.parent.mkdir(parents=True)
        write_npz(path, file_of(suffix.build([[5, 6, 7], [8, 2000]])))
        assert HistoryStore(tmp_path).summary()[0].replies == 2  # `localspec history` knows no tokenizer
        assert past_replies(tmp_path, n_vocab=2001).warnings == []
        assert (
            "token id 2000 is not in this tokenizer's vocabulary of 2,000" in past_replies(tmp_path, 2000).warnings[0]
        )

    def test_a_reply_past_the_vocabulary_is_not_kept(self, tmp_path):
        with pytest.raises(ValueError, match="token ids run from 0 to 999"):
            HistoryStore(tmp_path).add(KEY, [5, 1000], n_vocab=N_VOCAB)
        assert not (tmp_path / KEY / "recent.npz").exists()

    @pytest.mark.parametrize(
        ("name", "claim", "words"),
        [
            ("tokens", (10**12,), "tokens claims 4,000,000,000,000 bytes, more than the"),
            ("rsa", (2**40,), "rsa claims 4,398,046,511,104 bytes"),
            ("key", (10**9,), "key claims"),
        ],
    )
    def test_a_header_that_claims_more_than_the_file_holds_allocates_nothing(self, tmp_path, name, claim, words):
        path = tmp_path / KEY / "recent.npz"
        path.parent.mkdir(parents=True)
        write_npz(path, file_of(suffix.build([[5, 6, 7]])), claims={name: claim})
        with allocations_bounded():
            replies = past_replies(tmp_path)
        assert replies.corpora() == () and words in replies.warnings[0] and "set aside" in replies.warnings[0]

    def test_a_suffix_array_out_of_order_is_set_aside(self, tmp_path):
        arrays = file_of(suffix.build([[5, 6, 7], [5, 6, 8]]))
        arrays["rsa"][[1, 2]] = arrays["rsa"][[2, 1]]  # a permutation still, not sorted
        path = tmp_path / KEY / "recent.npz"
        path.parent.mkdir(parents=True)
        write_npz(path, arrays)
        assert "its suffix array is not the sorted order of its tokens" in past_replies(tmp_path).warnings[0]


# the values a damaged element may take: each dtype's extremes, the vocabulary's edge, the
# separator, small numbers near the arrays' lengths, anything
INTERESTING = {
    "u": [0, 1, N_VOCAB - 1, N_VOCAB, 4_000_000_000, int(suffix.SEP) - 1, int(suffix.SEP)],
    "i": [-(2**31), -1, 0, 1, 2, 5, 2**31 - 1],
}


PAST_THE_VOCABULARY = st.sampled_from([N_VOCAB, 4_000_000_000, int(suffix.SEP) - 1]) | st.integers(
    N_VOCAB, int(suffix.SEP) - 1
)


def element(dtype: np.dtype):
    info = np.iinfo(dtype) if dtype.kind in "iu" else None
    if info is None:
        return st.floats(allow_nan=True, allow_infinity=True)
    edges = [v for v in INTERESTING[dtype.kind] if info.min <= v <= info.max]
    return st.one_of(
        st.sampled_from(edges), st.integers(-3, 40).filter(lambda v: v >= info.min), st.integers(info.min, info.max)
    )


# what a damage is done to: each array of a file, and a reply's token id put past the
# vocabulary with the suffix array sorted again to agree, so that only the id is wrong
TARGETS = [*history.ARRAYS, "an id, sorted again"]
HOWS = ["set", "drop", "add", "swap", "empty", "dtype", "claim"]


@st.composite
def damage(draw, arrays: dict[str, np.ndarray], target: str) -> tuple[dict, dict[str, tuple[int, ...]]]:
    """``arrays`` with one to three random damages to ``target`` (``TARGETS``): an element
    changed, dropped, added or swapped, the array emptied or stored as another dtype, or its
    header claiming another length than the data it holds; and the claims made."""
    arrays, claims = {name: a.copy() for name, a in arrays.items()}, {}
    if target not in history.ARRAYS:
        tokens = arrays["tokens"]
        tokens[draw(st.sampled_from(np.flatnonzero(tokens != suffix.SEP).tolist()))] = draw(PAST_THE_VOCABULARY)
        arrays["rsa"] = suffix.suffix_array(tokens[::-1])
        return arrays, claims
    for how in draw(st.lists(st.sampled_from(HOWS), min_size=1, max_size=3)):
        a = arrays[target]
        at = draw(st.integers(0, max(len(a) - 1, 0)))
        if how == "set" and len(a):
            a[at] = draw(element(a.dtype))
        elif how == "drop" and len(a):
            a = np.delete(a, at)
        elif how == "add":
            a = np.insert(a, at, draw(element(a.dtype)))
        elif how == "swap" and len(a):
            other = draw(st.integers(0, len(a) - 1))
            a[[at, other]] = a[[other, at]]
        elif how == "empty":
            a = a[:0]
        elif how == "dtype":
            with np.errstate(invalid="ignore"):  # nan as an integer: any value will do
                a = a.astype(draw(st.sampled_from([np.int64, np.uint32, np.float64, np.int32])))
        elif how == "claim":
            claims[target] = (draw(st.sampled_from([0, len(a) + 1, 2**31, 2**40])),)
        arrays[target] = a
    return arrays, claims


ANY_REPLIES = st.lists(st.lists(st.integers(0, N_VOCAB - 1), min_size=1, max_size=12), min_size=1, max_size=5)


class TestAnyDamage:
    """Random damage to each array of a segment file: reading it either gives a history that is
    exactly what its replies build, or sets the file aside with a warning; it never raises, and
    never allocates from a damaged value (``allocations_bounded``)."""

    @pytest.mark.parametrize("target", TARGETS)
    @settings(max_examples=20, deadline=None, database=None)
    @given(replies=ANY_REPLIES, data=st.data())
    def test_reading_gives_valid_arrays_or_sets_the_file_aside(self, target, replies, data):
        corpus = suffix.build(replies, np.arange(len(replies), dtype=np.float64), asked=range(1, len(replies) + 1))
        arrays, claims = data.draw(damage(file_of(corpus), target))
        with tempfile.TemporaryDirectory() as root:
            path = Path(root) / KEY / "recent.npz"
            path.parent.mkdir()
            write_npz(path, arrays, claims)
            with allocations_bounded():
                read = past_replies(Path(root))
            if read.warnings:
                (warning,) = read.warnings
                assert warning.startswith(str(path)) and "set aside as recent.npz.bad-" in warning
                assert not path.exists() and read.corpora() == ()
            else:
                for c in read.corpora():
                    assert_a_history(c)


def hold_lock(path: Path, held, done) -> None:
    from localspec.lockedfile import locked

    with locked(path):
        held.set()
        done.wait(30)


# 2 processes of 50 replies of 1,000 tokens: 100,000 tokens, so a merge into base happens while both write
PROCESSES, REPLIES, LENGTH = 2, 50, 1000


def add_many(root: Path, start, i: int) -> None:
    store = HistoryStore(root)
    start.wait()
    for j in range(REPLIES):
        store.add(KEY, reply(LENGTH, (i * REPLIES + j) * LENGTH))


class TestConcurrentWriters:
    def test_two_processes_adding_at_once_lose_no_reply(self, tmp_path):
        start = SPAWN.Barrier(PROCESSES)
        procs = [SPAWN.Process(target=add_many, args=(tmp_path, start, i)) for i in range(PROCESSES)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(120)
        assert [p.exitcode for p in procs] == [0] * PROCESSES
        store = HistoryStore(tmp_path)
        want = {tuple(reply(LENGTH, k * LENGTH)) for k in range(PROCESSES * REPLIES)}
        assert {tuple(r) for r in kept(store)} == want and len(kept(store)) == PROCESSES * REPLIES
        assert store.load(KEY)[1] == [] and len(store.load(KEY)[0]) == 2  # merged once at least
        assert sorted(p.name for p in (tmp_path / KEY).iterdir()) == ["base.npz", "history.lock", "recent.npz"]


class TestClearAndSummary:
    def test_summary_lists_each_history(self, tmp_path):
        store = HistoryStore(tmp_path)
        store.add("aa", reply(3))
        store.add("aa", reply(4, 10))
        store.add("bb", reply(5))
        (a, b) = store.summary()
        assert (a.key, a.replies, a.tokens, a.path) == ("aa", 2, 7, tmp_path / "aa")
        assert (b.key, b.replies, b.tokens) == ("bb", 1, 5)
        assert a.size_bytes == (tmp_path / "aa" / "recent.npz").stat().st_size and a.warnings == ()

    def test_nothing_kept_is_an_empty_summary(self, tmp_path):
        assert HistoryStore(tmp_path / "none").summary() == []

    def test_a_damaged_file_shows_in_the_summary(self, tmp_path):
        (tmp_path / "cc").mkdir()
        (tmp_path / "cc" / "base.npz").write_bytes(b"junk")
        (s,) = HistoryStore(tmp_path).summary()
        assert (s.key, s.replies) == ("cc", 0) and "set aside" in s.warnings[0]

    def test_clear_one_key(self, tmp_path):
        store = HistoryStore(tmp_path)
        store.add("aa", reply(3))
        store.add("aa", reply(4, 10))
        store.add("bb", reply(5))
        assert store.clear("aa") == 2
        assert [s.key for s in store.summary()] == ["bb"] and kept(store, "aa") == []

    def test_clear_all_forgets_set_aside_copies_too(self, tmp_path):
        store = HistoryStore(tmp_path)
        store.add("aa", reply(MERGE_MIN_TOKENS + 1))
        store.add("aa", reply(4, 10**6))
        store.add("bb", reply(5))
        (tmp_path / "bb" / "base.npz").write_bytes(b"junk")
        store.load("bb")
        assert store.clear() == 3
        assert store.summary() == [] and store.clear() == 0
        assert [sorted(p.name for p in (tmp_path / k).iterdir()) for k in ("aa", "bb")] == [["history.lock"]] * 2

    def test_a_cleared_history_starts_again(self, tmp_path):
        store = HistoryStore(tmp_path)
        store.add(KEY, reply(3))
        store.clear()
        store.add(KEY, reply(2, 50))
        assert kept(store) == [reply(2, 50)]


class TestSpeed:
    """A million tokens (half the default cap) loads in milliseconds; the bound only catches a
    load that parses per token."""

    def test_a_million_tokens_load_fast(self, tmp_path):
        store = HistoryStore(tmp_path)
        rng = np.random.default_rng(0)
        for i in range(4):  # each a merge: 250k, 500k, 750k, then 1M in base
            store.add(KEY, rng.integers(0, 150_000, 250_000).tolist(), now=float(i))
        store.add(KEY, rng.integers(0, 150_000, 500).tolist(), now=5.0)  # and a reply in recent
        began = time.perf_counter()
        segments, warnings = store.load(KEY)
        took = time.perf_counter() - began
        print(f"load of {sum(c.n_tokens for c in segments):,} tokens: {took * 1000:.1f} ms")
        assert warnings == [] and segment_sizes(store) == [1_000_000, 500]
        assert took < 1.0

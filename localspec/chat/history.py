"""The past replies that drafts come from (``localspec.core.suffix``), kept on disk.

One history per tokenizer, under ``ROOT/KEY/`` (``KEY``: a short hex string the caller derives
from the tokenizer), since token ids mean nothing across tokenizers. Each history is two
segments, ``base.npz`` (large, rebuilt rarely) and ``recent.npz`` (small): a reply is added to
recent, rebuilding only recent's suffix array, and recent is merged into base (one build of
the whole, the least recently used replies dropped until it fits the cap) once it holds more
than a quarter of base or the two together pass the cap. A reply identical to one kept is not
kept twice: its last use is refreshed, so the replies dropped first are those least recently
written.

A segment is an ``.npz`` of the corpus's arrays, the format (``FORMAT``) and the key, written
atomically (``lockedfile``); a file of an older format is read with what it lacks unknown
(format 1 has no ``prompts``, the prompts whose greedy answer was given twice; formats 1 and 2
no ``asked``, the prompt each reply answered). ``add`` and ``clear`` hold
``KEY/history.lock`` from their read to their write and read the files as they are under it (a
file another process replaced is parsed again, one this store read or wrote last is not), so
the app and ``localspec serve`` adding at once lose no reply; reads take no lock. A file that
is damaged, not a history, another tokenizer's or from a newer localspec is set aside
(``base.npz.bad-YYYYmmdd-HHMMSS``) with a warning naming it, and drafting goes on without it:
nothing here raises for a file. A file is checked whole before anything is sized from it: each
array's header against the file's size (numpy allocates what a header claims before reading),
the arrays against each other and the suffix array against the tokens (the drafter indexes
with both), and, given the tokenizer's vocabulary size, every token id below it (a drafter
sizes a table by the largest id, and the target is handed the ids it proposes).
"""

from __future__ import annotations

import dataclasses
import io
import math
import os
import re
import time
import zipfile
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core import suffix
from ..core.suffix import Corpus
from ..lockedfile import file_version, locked, write_atomic
from ..settings import backup_name, data_dir

FORMAT = 3  # the files' layout; a file of a later one is set aside, not guessed at
# 8 bytes a token (4 for the token, 4 for its suffix array entry): about 16 MB in memory and as
# much on disk, a quarter of the 64 MB a history may take
DEFAULT_CAP_TOKENS = 2_000_000
# Recent is merged into base once it holds more than a quarter of base: a reply rebuilds at most
# a fifth of the whole, and a merge (a full build) comes once per quarter of base written. Below
# 65,536 tokens (a build of about ten milliseconds) recent is never merged, so a young history is not
# rebuilt whole at every reply.
MERGE_FRACTION, MERGE_MIN_TOKENS = 4, 65_536
SEGMENTS = ("base", "recent")  # written in this order: a crash between the two repeats a reply, never loses one
ARRAYS = {
    "tokens": np.uint32,
    "starts": np.int64,
    "used": np.float64,
    "rsa": np.int32,
    "prompts": np.uint64,
    "asked": np.uint64,
}
SINCE = {"prompts": 2, "asked": 3}  # the format that added an array; an older file is read without it
LOCK = "history"  # KEY/history.lock
KEY_PATTERN = re.compile(r"[0-9a-f]{1,64}")
# what reading a damaged or foreign file raises (a missing or unreadable one raises OSError);
# RuntimeError: zipfile's for a member marked encrypted or packed by an unknown method, one bit
# of a zip header away from a history's own
DAMAGED = (ValueError, TypeError, KeyError, EOFError, RuntimeError, zipfile.BadZipFile, zlib.error)


class NotAHistory(ValueError):
    """A segment file that is not a history this localspec can read; says why."""


@dataclass(frozen=True)
class HistorySummary:
    """One tokenizer's history as ``localspec history`` lists it."""

    key: str
    replies: int
    tokens: int
    size_bytes: int  # on disk
    path: Path  # its folder
    warnings: tuple[str, ...] = ()


class HistoryStore:
    """The histories under ``root`` (default: the data dir's ``history``), each at most
    ``cap_tokens`` tokens."""

    def __init__(self, root: Path | None = None, cap_tokens: int = DEFAULT_CAP_TOKENS) -> None:
        self.root = Path(root) if root is not None else data_dir() / "history"
        self.cap_tokens = cap_tokens
        # a segment's file version, the vocabulary size it was checked against, and its corpus
        self._read_as: dict[Path, tuple[tuple[int, ...], int | None, Corpus]] = {}

    def folder(self, key: str) -> Path:
        if not KEY_PATTERN.fullmatch(key):
            raise ValueError(f"a history key is a short hex string (got {key!r})")
        return self.root / key

    # --- reading --------------------------------------------------------------------------------
    def load(self, key: str, n_vocab: int | None = None) -> tuple[tuple[Corpus, ...], list[str]]:
        """The segments that hold replies (none: an empty tuple), and what was wrong with the
        files, each warning naming its file and what was done. ``n_vocab``: the tokenizer's
        vocabulary size, which every id must be below (None: not known here, as in
        ``localspec history``, where nothing is sized from the ids)."""
        folder, found, warnings = self.folder(key), [], []
        for name in SEGMENTS:
            corpus, warning = self._read(folder, name, key, n_vocab)
            found.append(corpus)
            warnings += [warning] if warning else []
        return _kept(found), warnings

    def _read(self, folder: Path, name: str, key: str, n_vocab: int | None) -> tuple[Corpus, str | None]:
        """One segment, without the lock unless it is damaged: then it is read again under the
        lock before it is set aside, so a file another process has just written whole stays."""
        path = folder / f"{name}.npz"

        def damaged(e: Exception) -> tuple[Corpus, str | None]:
            try:
                with locked(folder / LOCK):
                    return self._read_locked(folder, name, key, n_vocab)
            except OSError as why:  # no lock to be had (a read-only folder, a stuck holder)
                return Corpus(), f"{path}: {_problem(e)}; left as it is ({why}), drafting without it"

        return self._try_read(path, key, n_vocab, damaged)

    def _read_locked(self, folder: Path, name: str, key: str, n_vocab: int | None) -> tuple[Corpus, str | None]:
        """``_read``, the lock held: a damaged file is set aside."""
        path = folder / f"{name}.npz"
        return self._try_read(path, key, n_vocab, lambda e: (Corpus(), _set_aside(path, e)))

    def _try_read(
        self, path: Path, key: str, n_vocab: int | None, damaged: Callable[[Exception], tuple[Corpus, str | None]]
    ) -> tuple[Corpus, str | None]:
        """A segment and no warning; a missing or unreadable file is empty with a warning, and a
        damaged one is ``damaged``'s to deal with."""
        try:
            return self._segment(path, key, n_vocab), None
        except OSError as e:
            return Corpus(), _unreadable(path, e)
        except DAMAGED as e:
            return damaged(e)

    def _segment(self, path: Path, key: str, n_vocab: int | None) -> Corpus:
        """``read_segment``, parsed again only when the file is another version than the one this
        store read or wrote last (``file_version``), or was checked against another vocabulary:
        a base of millions of tokens changes only at a merge, so a reply kept does not read it,
        nor recompute what a session derives from it."""
        try:
            version = file_version(path)
        except FileNotFoundError:
            return Corpus()
        kept = self._read_as.get(path)
        if kept is None or kept[:2] != (version, n_vocab):
            kept = self._read_as[path] = (version, n_vocab, read_segment(path, key, n_vocab))
        return kept[2]

    def _write(self, path: Path, key: str, corpus: Corpus, n_vocab: int | None) -> None:
        write_segment(path, key, corpus)
        self._read_as[path] = (file_version(path), n_vocab, corpus)

    def keys(self) -> list[str]:
        """Every key with a folder under the root; an OSError when the root cannot be listed."""
        try:
            return sorted(p.name for p in self.root.iterdir() if KEY_PATTERN.fullmatch(p.name) and p.is_dir())
        except FileNotFoundError:
            return []

    def summary(self) -> list[HistorySummary]:
        """Each history that holds replies (or whose files had something to say); an OSError
        when the root cannot be listed."""
        out = []
        for key in self.keys():
            segments, warnings = self.load(key)
            folder = self.folder(key)
            if segments or warnings:
                out.append(
                    HistorySummary(
                        key,
                        sum(c.n_replies for c in segments),
                        sum(c.n_tokens for c in segments),
                        sum(_size(folder / f"{name}.npz") for name in SEGMENTS),
                        folder,
                        tuple(warnings),
                    )
                )
        return out

    # --- writing --------------------------------------------------------------------------------
    def add(
        self,
        key: str,
        reply_tokens: Sequence[int],
        now: float | None = None,
        prompt: int = 0,
        asked: int = 0,
        n_vocab: int | None = None,
    ) -> tuple[tuple[Corpus, ...], list[str]]:
        """Keep a reply (its token ids, below ``n_vocab`` where it is given: as ``load``), used
        ``now`` (default: the time), the answer to the prompt ``asked`` (``suffix.prompt_hash``;
        0: not known) and, where it is greedy, to ``prompt`` (0: not greedy), which marks the
        same reply kept before as reproduced; answers as ``load``, with the history as written.
        An empty reply, or one longer than the cap, is not kept. A failed write is a warning,
        not an error: drafting goes on from what was kept."""
        reply = as_reply(reply_tokens, n_vocab)
        if not 0 < len(reply) <= self.cap_tokens:
            return self.load(key, n_vocab)
        now = time.time() if now is None else now
        folder = self.folder(key)
        try:
            with locked(folder / LOCK):
                segments, warnings = self._read_all_locked(folder, key, n_vocab)
                changed = self._with_reply(segments["base"], segments["recent"], reply, now, prompt, asked)
                for name, corpus in changed.items():
                    self._write(folder / f"{name}.npz", key, corpus, n_vocab)
        except OSError as e:
            segments_now, warnings_now = self.load(key, n_vocab)
            return segments_now, [*warnings_now, f"{folder}: this reply was not kept ({e})"]
        return _kept(list({**segments, **changed}.values())), warnings

    def _read_all_locked(
        self, folder: Path, key: str, n_vocab: int | None = None
    ) -> tuple[dict[str, Corpus], list[str]]:
        segments: dict[str, Corpus] = {}
        warnings: list[str] = []
        for name in SEGMENTS:
            segments[name], warning = self._read_locked(folder, name, key, n_vocab)
            warnings += [warning] if warning else []
        return segments, warnings

    def _with_reply(
        self, base: Corpus, recent: Corpus, reply: np.ndarray, now: float, prompt: int, asked: int
    ) -> dict[str, Corpus]:
        """The segments that change when ``reply`` is added (``prompt``, ``asked``: as ``add``),
        in the order they are written."""
        for name, corpus in (("base", base), ("recent", recent)):
            i = find(corpus, reply)
            if i is not None:
                used, marks, questions = corpus.used.copy(), corpus.prompts.copy(), corpus.asked.copy()
                used[i], marks[i], questions[i] = now, prompt or marks[i], asked or questions[i]
                return {name: dataclasses.replace(corpus, used=used, prompts=marks, asked=questions)}
        recent = suffix.with_reply(recent, reply.tolist(), now, self.cap_tokens, asked)
        total = base.n_tokens + recent.n_tokens
        if recent.n_tokens > max(base.n_tokens // MERGE_FRACTION, MERGE_MIN_TOKENS) or total > self.cap_tokens:
            return {"base": merged(base, recent, self.cap_tokens), "recent": Corpus()}
        return {"recent": recent}

    def clear(self, key: str | None = None) -> int:
        """Forget one history, or all of them: how many replies were forgotten. Set-aside
        copies go too, since they hold the same replies."""
        return sum(self._clear(k) for k in ([key] if key is not None else self.keys()))

    def _clear(self, key: str) -> int:
        folder = self.folder(key)
        if not folder.is_dir():
            return 0
        with locked(folder / LOCK):
            segments, _ = self._read_all_locked(folder, key)
            forgotten = sum(c.n_replies for c in segments.values())
            # the lock file stays: a process waiting on it must get the same file when it is let in
            for path in folder.iterdir():
                if any(path.name.startswith(p) for p in _segment_files()):
                    path.unlink(missing_ok=True)
        return forgotten


# --- the files ------------------------------------------------------------------------------
def read_segment(path: Path, key: str, n_vocab: int | None = None) -> Corpus:
    """The corpus ``path`` holds (an empty one when there is no file); ``NotAHistory`` (or
    another of ``DAMAGED``) when it is not one of ``key``'s, or holds a token id of
    ``n_vocab`` or more (None: ids are not checked against a vocabulary)."""
    try:
        size = path.stat().st_size
        z = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        return Corpus()
    if not isinstance(z, np.lib.npyio.NpzFile):
        raise NotAHistory("one array, not a history's")
    with z:
        _check_sizes(z, size)
        version = _check_header(z, key)
        arrays = {}
        for name, dtype in arrays_of(version).items():
            a = z[name]
            if a.dtype != dtype or a.ndim != 1:
                raise NotAHistory(f"{name} is {a.dtype} of shape {a.shape}, not a row of {np.dtype(dtype)}")
            arrays[name] = a
    for name in SINCE:  # an array an older format's file lacks: nothing known
        arrays.setdefault(name, np.zeros(len(arrays["starts"]), dtype=ARRAYS[name]))
    corpus = Corpus(**arrays)
    # the starts first: Corpus.check indexes the tokens with them
    if not np.array_equal(corpus.starts, np.flatnonzero(corpus.tokens == suffix.SEP)[:-1] + 1):
        raise NotAHistory("its replies do not start where its separators say")
    corpus.check()
    _check_ids(corpus, n_vocab)
    _check_suffix_array(corpus)
    return corpus


# the .npy header readers by format version; localspec writes 1.0 (2.0: a header over 64 KiB)
NPY_HEADERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


def _check_sizes(z: np.lib.npyio.NpzFile, limit: int) -> None:
    """NotAHistory when an array's header claims more bytes than the whole file (``limit``)
    holds: numpy allocates what a header claims before it reads the data, so a damaged shape
    would ask for terabytes. localspec writes its arrays uncompressed (``np.savez``)."""
    archive = z.zip
    assert archive is not None  # (None only once the file is closed)
    for name in z.files:
        with archive.open(f"{name}.npy") as f:
            read_header = NPY_HEADERS.get(np.lib.format.read_magic(f))
            if read_header is None:
                raise NotAHistory(f"{name} is in a .npy format this localspec does not write")
            shape, _, dtype = read_header(f)
        claimed = math.prod(shape) * dtype.itemsize
        if claimed > limit:
            raise NotAHistory(f"{name} claims {claimed:,} bytes, more than the {limit:,} of the whole file")


def _check_suffix_array(corpus: Corpus) -> None:
    """NotAHistory unless ``rsa`` is the suffix array of the reversed tokens, which the
    drafter searches as sorted (``suffix.match_corpus``): checked in linear time, as a
    permutation whose neighbours are in order (Burkhardt and Kärkkäinen 2003): the first tokens
    ascend, and where two are equal, the suffixes after them are in the order of their ranks
    (the empty suffix first). Strictly ascending pairs are distinct, so there is no position twice."""
    text, sa, n = corpus.reversed, corpus.rsa.astype(np.int64), len(corpus.tokens)
    if len(sa) != n or (n and (int(sa.min()) < 0 or int(sa.max()) >= n)):
        raise NotAHistory("its suffix array points outside its tokens")
    rank = np.full(n + 1, -1, dtype=np.int64)  # rank[n]: the empty suffix, before every other
    rank[sa] = np.arange(n)
    first, after = text[sa], rank[sa + 1]
    ascending = (first[:-1] < first[1:]) | ((first[:-1] == first[1:]) & (after[:-1] < after[1:]))
    if not ascending.all():
        raise NotAHistory("its suffix array is not the sorted order of its tokens")


def _check_ids(corpus: Corpus, n_vocab: int | None) -> None:
    """NotAHistory when a token id is not in the tokenizer's vocabulary of ``n_vocab``."""
    ids = corpus.tokens[corpus.tokens != suffix.SEP]
    if n_vocab is not None and len(ids) and int(ids.max()) >= n_vocab:
        raise NotAHistory(f"token id {int(ids.max())} is not in this tokenizer's vocabulary of {n_vocab:,}")


def arrays_of(version: int) -> dict[str, type]:
    """The arrays (``ARRAYS``) a file of format ``version`` holds."""
    return {name: dtype for name, dtype in ARRAYS.items() if version >= SINCE.get(name, 1)}


def _check_header(z: np.lib.npyio.NpzFile, key: str) -> int:
    """The file's format, where it is one of ``key``'s histories that this localspec reads."""
    names = set(z.files)
    foreign = f"holds {', '.join(sorted(names)) or 'nothing'}, not a history's arrays"
    if "version" not in names:
        raise NotAHistory(foreign)
    version = z["version"]
    if version.shape != () or version.dtype.kind not in "iu" or int(version) < 1:
        raise NotAHistory("no format version")
    if int(version) > FORMAT:
        raise NotAHistory(f"written by a newer localspec (history format {int(version)}; this one reads {FORMAT})")
    if names != {*arrays_of(int(version)), "version", "key"}:
        raise NotAHistory(foreign)
    stored = z["key"]
    if stored.shape != () or stored.dtype.kind != "U" or str(stored) != key:
        raise NotAHistory(f"another tokenizer's history (key {str(stored)[:64]!r}, not {key!r})")
    return int(version)


def write_segment(path: Path, key: str, corpus: Corpus) -> None:
    buffer = io.BytesIO()
    arrays = {name: getattr(corpus, name) for name in ARRAYS}
    np.savez(buffer, **arrays, version=np.int64(FORMAT), key=np.str_(key))
    write_atomic(path, buffer.getvalue())


def _segment_files() -> list[str]:
    """The starts of the names of a segment, its set-aside copies and its temp files."""
    return [prefix for name in SEGMENTS for prefix in (f"{name}.npz", f".{name}.npz.")]


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _problem(e: Exception) -> str:
    return str(e) if isinstance(e, NotAHistory) else f"not a history of replies ({type(e).__name__}: {e})"


def _unreadable(path: Path, e: OSError) -> str:
    return f"{path}: cannot be read ({e}); left as it is, drafting without it"


def _set_aside(path: Path, e: Exception) -> str:
    backup = backup_name(path)
    try:
        os.replace(path, backup)
    except OSError as why:
        return f"{path}: {_problem(e)}; could not be set aside ({why}), drafting without it"
    return f"{path}: {_problem(e)}; set aside as {backup.name}, drafting without its replies"


# --- the replies ----------------------------------------------------------------------------
def as_reply(tokens: Sequence[int], n_vocab: int | None = None) -> np.ndarray:
    """``tokens`` as a row of uint32; a ValueError for what the tokenizer does not give (a
    negative id, one of ``n_vocab`` or more, or the separator's): kept, it would have the whole
    file set aside at its next read."""
    end = min(n_vocab, int(suffix.SEP)) if n_vocab is not None else int(suffix.SEP)
    ids = np.asarray(tokens, dtype=np.int64).reshape(-1)
    if len(ids) and (ids.min() < 0 or ids.max() >= end):
        raise ValueError(f"token ids run from 0 to {end - 1} (got {ids.min()}..{ids.max()})")
    return ids.astype(np.uint32)


def find(corpus: Corpus, reply: np.ndarray) -> int | None:
    """The index of the reply in ``corpus`` identical to ``reply``, None when there is none."""
    lengths = np.diff(np.append(corpus.starts, len(corpus.tokens))) - 1
    for i in np.flatnonzero(lengths == len(reply)):
        start = int(corpus.starts[i])
        if np.array_equal(corpus.tokens[start : start + len(reply)], reply):
            return int(i)
    return None


def merged(base: Corpus, recent: Corpus, cap_tokens: int) -> Corpus:
    """One corpus of both segments' replies, oldest first, each once (at its latest use), the
    least recently used dropped until the tokens fit ``cap_tokens`` (``suffix.most_recent``)."""
    latest: dict[bytes, tuple[np.ndarray, float, int, int]] = {}
    for corpus in (base, recent):
        for reply, used, prompt, asked in zip(corpus.replies(), corpus.used, corpus.prompts, corpus.asked):
            seen = latest.get(reply.tobytes())
            if seen is None or used > seen[1]:
                latest[reply.tobytes()] = (reply, float(used), int(prompt), int(asked))
    replies, used, prompts, asked = zip(*latest.values()) if latest else ((), (), (), ())
    return suffix.most_recent(list(replies), list(used), cap_tokens, list(prompts), list(asked))


def _kept(segments: Sequence[Corpus]) -> tuple[Corpus, ...]:
    return tuple(c for c in segments if c.n_replies)

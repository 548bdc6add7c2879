"""Drafts from what was written before: the longest suffix match over the current context and
over a history of past replies, and the continuation seen most often after it
(SuffixDecoding, Oliaro et al. 2024, arXiv 2411.04975).

The history is a :class:`Corpus`: the replies' tokens back to back, each between separators,
and the suffix array of the *reversed* tokens. Reading the context backwards from its last
token, one token at a time, narrows a range of that array (its suffixes are sorted, so the
ones that share the last L tokens of the context are one range, sorted by the token before
them): the longest match is found in O(L log N) without a Python object per token. The live
context, a few thousand tokens that grow every step, is scanned with numpy instead.

Each occurrence of the match is followed by what came next there. The draft walks the
continuations together, taking at each position the token most of the still-agreeing
occurrences continue with; its probability is the share that agree, and the walk stops when
the product falls below ``policy.min_path_prob`` (SuffixDecoding's ``min_token_prob``). How much
of a walk is proposed is the gate's call (``rules.LookupGate``): it learns, per source and match
length, how often such walks are accepted, and prices them as the free drafts they are.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from .drafters import Draft, DrafterBase
from .options import MAX_DRAFT
from .policy import DEFAULT, Policy
from .protocol import common_prefix
from .rules import LookupGate

SEP = np.uint32(0xFFFFFFFF)  # between replies: no token id, so no match runs across it


@dataclass(frozen=True, eq=False)
class Corpus:
    """Past replies as one token array: ``SEP r_1 SEP r_2 ... r_n SEP`` (uint32), where reply i
    starts at ``starts[i]``, and ``rsa``, the suffix array of the reversed tokens (int32).
    ``prompts[i]``: the ``prompt_hash`` of the prompt whose greedy answer reply i is, once that
    answer was given twice (this machine's target reproduced it); 0: not (yet) reproduced.
    ``asked[i]``: the ``prompt_hash`` of the prompt reply i answered (0: not known, a file of an
    older format), so a prompt that only ends like that one is told from the same prompt."""

    tokens: np.ndarray = field(default_factory=lambda: np.array([SEP], dtype=np.uint32))
    starts: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    used: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float64))  # last use, for LRU
    rsa: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=np.int32))
    prompts: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.uint64))
    asked: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.uint64))

    @functools.cached_property
    def reversed(self) -> np.ndarray:
        return self.tokens[::-1]

    @functools.cached_property
    def first_offsets(self) -> np.ndarray:
        """Where each token id's range starts in ``rsa`` (by the suffix's first token), so the
        first step of a match is two reads, not a search."""
        first = self.reversed[self.rsa]
        ids = first[first != SEP]
        return np.searchsorted(first, np.arange(int(ids.max()) + 2 if len(ids) else 1)).astype(np.int32)

    @functools.cached_property
    def reproduced(self) -> frozenset[int]:
        """The prompts (``prompt_hash``) whose greedy answer here was given twice."""
        return frozenset(int(h) for h in self.prompts if h)

    @property
    def n_replies(self) -> int:
        return len(self.starts)

    @property
    def n_tokens(self) -> int:
        return len(self.tokens) - 1 - self.n_replies  # less the separators

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.tokens, self.starts, self.used, self.rsa, self.prompts, self.asked))

    def replies(self) -> list[np.ndarray]:
        ends = np.append(self.starts[1:] - 1, len(self.tokens) - 1)
        return [self.tokens[s:e] for s, e in zip(self.starts, ends)]

    def check(self) -> None:
        """A ``ValueError`` unless the arrays describe a corpus (a damaged or foreign file)."""
        t, n = self.tokens, len(self.tokens)
        ok = (
            t.dtype == np.uint32
            and self.rsa.dtype == np.int32
            and self.prompts.dtype == self.asked.dtype == np.uint64
            and n >= 1
            and len(self.rsa) == n
            and len(self.used) == len(self.starts) == len(self.prompts) == len(self.asked)
            and t[0] == SEP
            and t[-1] == SEP
            and int((t == SEP).sum()) == len(self.starts) + 1
            and (len(self.starts) == 0 or bool((t[self.starts - 1] == SEP).all()))
            and (n < 2 or int(self.rsa.min()) >= 0 and int(self.rsa.max()) < n)
        )
        if not ok:
            raise ValueError("not a history of replies")


def build(
    replies: Sequence[Sequence[int] | np.ndarray],
    used: Sequence[float] | np.ndarray | None = None,
    prompts: Sequence[int] | np.ndarray | None = None,
    asked: Sequence[int] | np.ndarray | None = None,
) -> Corpus:
    """The corpus of ``replies`` (oldest first, each last ``used`` then, reproduced answers to
    ``prompts``, answers to ``asked``) and its suffix array."""
    parts, starts, at = [np.array([SEP], dtype=np.uint32)], [], 1
    for r in replies:
        starts.append(at)
        parts += [np.asarray(r, dtype=np.uint32), np.array([SEP], dtype=np.uint32)]
        at += len(r) + 1
    tokens = np.concatenate(parts)
    used_arr = np.asarray(used if used is not None else np.zeros(len(starts)), dtype=np.float64)
    prompts_arr, asked_arr = (
        np.asarray(a if a is not None else np.zeros(len(starts)), np.uint64) for a in (prompts, asked)
    )
    return Corpus(tokens, np.asarray(starts, np.int64), used_arr, suffix_array(tokens[::-1]), prompts_arr, asked_arr)


def with_reply(corpus: Corpus, reply: Sequence[int], now: float, cap_tokens: int, asked: int = 0) -> Corpus:
    """``corpus`` with ``reply`` added (used ``now``, answering the prompt ``asked``), within
    ``cap_tokens`` (``most_recent``)."""
    replies = [*corpus.replies(), np.asarray(reply, dtype=np.uint32)]
    return most_recent(replies, [*corpus.used, now], cap_tokens, [*corpus.prompts, 0], [*corpus.asked, asked])


def most_recent(
    replies: Sequence[np.ndarray], used: Sequence[float], cap_tokens: int, prompts: Sequence[int], asked: Sequence[int]
) -> Corpus:
    """The corpus of the most recently used ``replies`` (with their ``prompts`` marks and
    ``asked`` prompts) whose tokens together fit ``cap_tokens`` (the least recently used dropped
    first), in their order."""
    order = np.argsort(-np.asarray(used, dtype=np.float64), kind="stable")  # most recent first
    fits = np.cumsum([len(replies[i]) for i in order]) <= cap_tokens
    keep = np.sort(order[: int(np.argmin(fits)) if not fits.all() else len(order)])
    marks, questions = (np.asarray(a, dtype=np.uint64)[keep] for a in (prompts, asked))
    return build([replies[i] for i in keep], [used[i] for i in keep], marks, questions)


def prompt_hash(prompt: Sequence[int]) -> int:
    """A prompt's tokens as a nonzero 64-bit number, the same in every process (Python's own
    ``hash`` of a str is not)."""
    digest = hashlib.blake2b(np.asarray(prompt, dtype=np.uint32).tobytes(), digest_size=8).digest()
    return int.from_bytes(digest, "little") or 1


def suffix_array(text: np.ndarray) -> np.ndarray:
    """The suffix array of ``text`` (uint32) as int32: libdivsufsort, through pydivsufsort."""
    if len(text) < 2:
        return np.zeros(len(text), dtype=np.int32)
    from pydivsufsort import divsufsort

    return np.asarray(divsufsort(np.ascontiguousarray(text)), dtype=np.int32)


@dataclass(frozen=True)
class Match:
    """The longest match of the context's end: its ``length`` and where its occurrences end
    (forward positions, latest last) in the tokens they were found in."""

    length: int = 0
    ends: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


def match_corpus(corpus: Corpus, tail: np.ndarray, depth: int, max_ends: int) -> Match:
    """The longest suffix of ``tail`` (the context's last ``depth`` tokens at most) that occurs
    in ``corpus``: the reversed suffix array's range for the last token, narrowed one token
    further back at a time while it is wide, then the few suffixes left compared at once."""
    rev, rsa, n = corpus.reversed, corpus.rsa, len(corpus.tokens)
    want = tail[::-1][:depth].astype(np.int64)
    offsets = corpus.first_offsets
    if not len(want) or not 0 <= want[0] < len(offsets) - 1:
        return Match()
    lo, hi, length = int(offsets[want[0]]), int(offsets[want[0] + 1]), 1
    while length < len(want) and hi - lo > _FEW:
        v = want[length]
        lo2 = bisect.bisect_left(range(lo, hi), v, key=lambda i: rev[rsa[i] + length]) + lo
        hi2 = bisect.bisect_right(range(lo2, hi), v, key=lambda i: rev[rsa[i] + length]) + lo2
        if lo2 == hi2:
            break
        lo, hi, length = lo2, hi2, length + 1
    if lo == hi:
        return Match()
    starts = rsa[lo : min(hi, lo + max_ends)].astype(np.int64)  # a sample of a common match
    if length < len(want) and hi - lo <= _FEW:  # the rest of the pattern, for every suffix at once
        block = rev[np.minimum(starts[:, None] + np.arange(length, len(want)), n - 1)]
        agree = block == want[length:]
        run = np.where(agree.all(axis=1), agree.shape[1], agree.argmin(axis=1))
        starts, length = starts[run == run.max()], length + int(run.max())
    return Match(length, np.sort(n - 1 - starts))


# Below this many suffixes a range is not narrowed token by token: comparing the rest of the
# pattern against all of them at once costs less than one more Python-level search.
_FEW = 64


def match_context(ctx: np.ndarray, depth: int, max_ends: int) -> Match:
    """The longest suffix of ``ctx`` (up to ``depth`` tokens) that also occurs earlier in it,
    with something after it: the occurrences ending at the last token, narrowed one token
    further back at a time."""
    n = len(ctx)
    ends = np.flatnonzero(ctx[: n - 1] == ctx[-1]) if n >= 2 else np.zeros(0, dtype=np.int64)
    if not len(ends):
        return Match()
    length = 1
    while length < min(depth, n - 1):
        more = ends[ends >= length]
        more = more[ctx[more - length] == ctx[n - 1 - length]]
        if not len(more):
            break
        ends, length = more, length + 1
    return Match(length, ends[-max_ends:])


def continuations(tokens: np.ndarray, ends: np.ndarray, depth: int, stop: int) -> np.ndarray:
    """What followed each occurrence: up to ``depth`` tokens after each end, cut at a separator
    and at ``stop`` (exclusive; the context's own end), as an int64 matrix padded with -1."""
    idx = ends[:, None] + 1 + np.arange(depth)[None, :]
    inside = idx < stop
    out = np.where(inside, tokens[np.minimum(idx, stop - 1)].astype(np.int64), -1)
    out[out == int(SEP)] = -1
    out[np.maximum.accumulate(out == -1, axis=1)] = -1  # nothing after a cut
    return out


def walk(follow: np.ndarray, limit: int, min_prob: float) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """The path most occurrences agree on, token by token (at a tie, the latest occurrence's),
    and each token's path probability (the share of occurrences that continue so, times the
    path's so far), while that is at least ``min_prob``, for at most ``limit`` tokens.
    ``follow``'s rows are the occurrences, oldest first."""
    rows, j, p = np.arange(len(follow)), 0, 1.0
    ids: list[int] = []
    probs: list[float] = []
    limit = min(limit, follow.shape[1])
    while j < limit:
        block = follow[rows, j:limit]
        same = (block == block[-1]).all(axis=0) & (block[-1] >= 0)  # where every occurrence agrees
        n_same = len(same) if same.all() else int(same.argmin())
        ids += [int(t) for t in block[-1, :n_same]]
        probs += [p] * n_same
        j += n_same
        if j >= limit:
            break
        col = block[:, n_same]
        values, inverse, counts = np.unique(col, return_inverse=True, return_counts=True)
        counts[values < 0] = 0  # an occurrence that ended continues with nothing
        top = np.flatnonzero(counts[inverse] == counts.max())[-1]  # the latest of the most seen
        if counts.max() == 0 or p * counts.max() / len(rows) < min_prob:
            break
        p *= counts.max() / len(rows)
        ids.append(int(col[top]))
        probs.append(float(p))
        rows, j = rows[col == col[top]], j + 1
    return tuple(ids), tuple(probs)


def bucket(length: int, policy: Policy = DEFAULT) -> int:
    """Matches earn trust by length: shorter than ``long_match`` (4) each on their own, that many
    or more together (a 4-token match is rarely a coincidence, and a longer one is the same kind
    of evidence, so it need not earn trust again)."""
    return min(length, policy.long_match)


class SuffixDrafter(DrafterBase):
    """Drafts from the longest suffix match in the context or in the history of past replies:
    no second model, so a proposal costs no pass. Strong on edits, quotes, regenerated replies
    and requests that repeat a format.

    A :class:`LookupGate` (with measured costs) decides how much of a walk to propose, from what
    drafts of its source and match length (``bucket``) have earned: a 1-token match in prose is
    mostly a coincidence, a 16-token one rarely is; the answers to another prompt that only ends
    like this reply's are a kind of their own."""

    name = "suffix"

    def __init__(
        self,
        history: Callable[[], Sequence[Corpus]] | None = None,
        gate: LookupGate | None = None,
        policy: Policy = DEFAULT,
        prompt_len: int = 0,
    ) -> None:
        self.history = history or (lambda: ())
        self.gate, self.policy = gate, policy
        self.prompt_len = prompt_len  # the reply's prompt: the context's first tokens (0: the first draft's context)
        self._tokens = _GrowingArray()  # the context as an array, extended step by step
        self._prompt = 0  # the reply's prompt (``prompt_hash``), read at its first draft
        self._regenerate: bool | None = None  # a greedy reply to a prompt answered before (see draft)
        self._sure: Draft | None = None  # the last draft proposed as the earlier answer

    def draft(self, context, k, params, rng, draft_max=0, after=()) -> Draft:
        """The walk after the longest match, context or history (the longer match; at a tie the
        context, unless this reply answers a prompt answered before: then the earlier answer); as
        much of it as the gate says matches of its source and length have earned.
        The whole walk rides along to be scored against what the step keeps (``observe``)."""
        if k <= 0 or len(context) < 2:
            return Draft()
        if not self._prompt:  # a drafter drafts one reply: its prompt
            self.prompt_len = self.prompt_len or len(context)
            self._prompt = prompt_hash(context[: self.prompt_len])
        if self._regenerate is None and self.gate is not None:
            reproduced = any(self._prompt in corpus.reproduced for corpus in self.history())
            self._regenerate = params.greedy and (self._prompt in self.gate.prompts or reproduced)
            self.gate.prompts.add(self._prompt)
        found = self._match(self._tokens.of(context), len(context) - self.prompt_len)
        if found is None:
            return Draft()
        source, m, tokens, stop, other = found
        # A context walk may run past its match, as far as a verify takes: the context is the
        # text the reply works on (an edit copies the rest of a line after a few tokens); its
        # copy goes as far as its kind has earned (LookupGate.reach). A
        # history match is another conversation's text, evidence for about as many tokens as it
        # is long (``max_spec_factor``), unless it is as long as a match gets.
        depth = min(k, MAX_DRAFT)
        if source == "history" and m.length < self.policy.suffix_depth:
            depth = min(depth, int(self.policy.max_spec_factor * m.length))
        ids, probs = walk(continuations(tokens, m.ends, depth, stop), depth, self.policy.min_path_prob)
        if not ids:
            return Draft()
        key = (source, "another prompt" if other else bucket(m.length, self.policy))
        if self.gate is None:
            return Draft(ids, confidence=(), match=key, continuation=ids, source=source)
        # a greedy answer to a prompt answered in this process, or whose answer this machine gave
        # twice (a target's batched and single-token kernels may part at a near-tie: one answer
        # is no promise across processes), follows that answer (its lead-in and then itself, a
        # full-depth match) token for token: sure as far as every occurrence agrees (another
        # prompt that ends the same may have been answered otherwise), until a copy fails
        n_sure = (
            probs.count(1.0) if self._regenerate and source == "history" and m.length >= self.policy.suffix_depth else 0
        )
        sure = n_sure > 0
        # a sure copy's verdicts are a kind of their own: all kept, they would lift the trust of
        # every 4-token history match (into another reply) that the gate prices
        key = ("history", "regenerate") if sure else key
        alpha = 1.0 if sure else self.gate.alpha(key)
        j = self.gate.length(key, n_sure if sure else len(ids), alpha, capped=source == "context")
        draft = Draft(ids[:j], confidence=(), alpha=alpha, match=key, continuation=ids, source=source)
        self._sure = draft if sure else None
        return draft

    def _match(self, ctx: np.ndarray, n_reply: int) -> tuple[str, Match, np.ndarray, int, bool] | None:
        """The longest match: its source, the match, the tokens it is in and where they stop,
        and whether it is of answers to another prompt (``_answers``; ``n_reply``: the reply's
        tokens so far)."""
        depth, n_ends = self.policy.suffix_depth, self.policy.suffix_ends
        best = ("context", match_context(ctx, depth, n_ends), ctx, len(ctx), False)
        tail = ctx[-depth:]
        for corpus in self.history():
            m, other = self._answers(corpus, match_corpus(corpus, tail, depth, n_ends), n_reply)
            if m.length > best[1].length or (self._regenerate and m.length >= depth):  # the earlier answer, at a tie
                best = ("history", m, corpus.tokens, len(corpus.tokens), other)
        return best if best[1].length else None

    def _answers(self, corpus: Corpus, m: Match, n_reply: int) -> tuple[Match, bool]:
        """A history match that reaches into this reply's prompt (longer than the ``n_reply``
        tokens so far) is of what followed the end of that prompt: where some occurrences
        answered this very prompt, those alone (a regenerate follows its earlier answers, not
        those of prompts that end the same); where every one answered another prompt, a match
        of its own kind (True), whose trust is earned apart: a prompt that ends like another
        asks another question."""
        if m.length <= n_reply or not len(m.ends):
            return m, False
        asked = corpus.asked[np.searchsorted(corpus.starts, m.ends, side="right") - 1]
        same = asked == self._prompt
        if same.any():
            return Match(m.length, m.ends[same]), False
        return m, bool((asked != 0).all())

    def observe(self, draft: Draft, verdict: tuple[int, int] | None, kept: Sequence[int]) -> None:
        """A walk's verdict: the verify's where its tokens were tested, else the tokens the step
        kept, compared with the walk as far as they go. So a source and length that lost the
        gate's trust win it back, or not, without costing a verify row; greedy, this is exactly
        the verdict a verify would have given on those tokens."""
        if self.gate is None or not draft.match:
            return
        if draft is self._sure and draft.continuation[: len(kept)] != tuple(kept[: len(draft.continuation)]):
            self._regenerate = False  # the earlier answer and this one part: the gate decides from here
        if verdict is not None and verdict[0] > 0:
            self.gate.observe(draft.match, *verdict)
        else:
            follow = draft.continuation
            self.gate.observe(draft.match, min(len(follow), len(kept)), common_prefix(follow, kept))


class _GrowingArray:
    """A context list as an int64 array, converting only what was appended since the last call:
    the engine only ever appends to its context list (a new reply is a new list), and the
    whole conversion of a 2,000-token context took half of a lookup's time."""

    def __init__(self) -> None:
        self._source: Sequence[int] | None = None
        self._buf = np.empty(0, dtype=np.int64)
        self._n = 0

    def of(self, context: Sequence[int]) -> np.ndarray:
        n = len(context)
        if context is not self._source or n < self._n:  # another list: start over
            self._source, self._n = context, 0
        if n > len(self._buf):
            grown = np.empty(max(n, 2 * len(self._buf)), dtype=np.int64)
            grown[: self._n] = self._buf[: self._n]
            self._buf = grown
        if n > self._n:
            self._buf[self._n : n] = np.asarray(context[self._n : n], dtype=np.int64)
            self._n = n
        return self._buf[:n]

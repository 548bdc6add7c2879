"""Rolling back a recurrent or hybrid cache (Mamba, RWKV, LFM2, Qwen3.5's delta-net layers).

A KV cache drops a tail by forgetting its cells. A recurrent layer keeps one state that every
token has updated, so dropping tokens means going back to an earlier state. Three ways, cheapest
first (``LlamaModel._remove``):

1. **Snapshots** (llama.cpp's ``n_rs_seq``): one evaluation of n tokens also keeps the states
   after each of its last ``n_rs_seq`` tokens, so ``llama_memory_seq_rm`` can drop up to
   ``min(n - 1, n_rs_seq)`` of *that evaluation's* tokens for free, once. Tokens evaluated one
   at a time (a draft model's passes) are out of reach: llama.cpp would silently read a stale
   snapshot there, so the plan never asks for it.
2. **A checkpoint**: the recurrent part of the state copied out
   (``llama_state_seq_get_data_ext`` with ``PARTIAL_ONLY``) where a caller said it may come back
   (``CachedModel.checkpoint``); restoring it and evaluating the tokens after it costs what those
   tokens cost, however long the context before it.
3. **A new prefill** of every kept token, when neither reaches.

The engine asks for a checkpoint before a verify its snapshots cannot undo, after each prefill
(a regenerated reply starts there) and before a draft model's passes.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable
from dataclasses import dataclass

import llama_cpp as L

log = logging.getLogger(__name__)

_PARTIAL = 1  # LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY: the recurrent part, not the KV cells


@dataclass
class Checkpoint:
    n_tokens: int  # the cache held this many tokens
    data: ctypes.Array  # llama.cpp's serialised recurrent state of sequence 0
    lasting: bool = False  # a reply's prompt (kept until the next one), else a step's


class Rollback:
    """What a recurrent model's ``truncate`` can do, and its checkpoints."""

    def __init__(self, ctx, snapshots: int) -> None:
        self._ctx = ctx
        self.snapshots = snapshots  # llama_n_rs_seq: 0 where the architecture has none
        self.checkpoints: list[Checkpoint] = []
        self._last: tuple[int, int] | None = None  # (first position, tokens) of the latest evaluation
        self.restores = 0  # rollbacks by checkpoint so far (what the tests and the docs count)
        self.prefills = 0  # ... and by a new prefill
        # checkpoints llama.cpp would not copy out or put back: each makes a rollback that
        # needed it a new prefill (the first of each kind is also logged as a warning)
        self.failed_saves = 0
        self.failed_restores = 0

    def evaluated(self, start: int, n: int) -> None:
        """An evaluation of ``n`` tokens at ``start`` (one llama_decode) succeeded."""
        self._last = (start, n)

    def by_snapshot(self, n_cached: int, keep: int) -> bool:
        """Whether going back from ``n_cached`` tokens to ``keep`` stays within the latest
        evaluation's snapshots (which hold the states after its tokens, never before them)."""
        if self._last is None or keep <= 0:
            return False
        start, n = self._last
        return start + n == n_cached and n_cached - keep <= min(n - 1, self.snapshots)

    def latest(self, keep: int) -> Checkpoint | None:
        """The checkpoint nearest to ``keep`` tokens at or before it."""
        usable = [c for c in self.checkpoints if c.n_tokens <= keep]
        return max(usable, key=lambda c: c.n_tokens) if usable else None

    def dropped(self, keep: int) -> None:
        """The cache now holds ``keep`` tokens: later checkpoints are of tokens it no longer has,
        and no snapshot reaches back from here until the next evaluation."""
        self.checkpoints = [c for c in self.checkpoints if c.n_tokens <= keep]
        self._last = None

    def save(self, n_tokens: int, lasting: bool = False) -> None:
        """A checkpoint of the state after ``n_tokens``. At most two are kept, each a copy of
        the recurrent state (about 18 MB for a Qwen3.5-2B, 150 MB for a 27B): the latest
        lasting one, and the latest other one (a draft model's step and a verify come back
        only to the latest)."""
        same = [c for c in self.checkpoints if c.n_tokens == n_tokens]
        if same:
            same[0].lasting |= lasting
            return
        old = [c for c in self.checkpoints if c.lasting == lasting]
        size = L.llama_state_seq_get_size_ext(self._ctx, 0, _PARTIAL)
        data = old[0].data if old and len(old[0].data) == size else (ctypes.c_uint8 * size)()
        self.checkpoints = [c for c in self.checkpoints if c.lasting != lasting]
        if size > 0 and L.llama_state_seq_get_data_ext(self._ctx, data, size, 0, _PARTIAL) == size:
            self.checkpoints.append(Checkpoint(n_tokens, data, lasting))
            return
        self.failed_saves += 1
        if self.failed_saves == 1:
            log.warning(
                "llama.cpp could not copy out the recurrent state after %d tokens (%d bytes): "
                "rolling back to there evaluates every kept token again",
                n_tokens,
                size,
            )

    def restore(self, checkpoint: Checkpoint, remove_from: Callable[[int], bool]) -> bool:
        """Put ``checkpoint``'s recurrent state back, then drop the KV cells after it
        (``remove_from(n)``); False when llama.cpp refused either (the caller then evaluates
        every kept token again)."""
        size = len(checkpoint.data)
        if L.llama_state_seq_set_data_ext(self._ctx, checkpoint.data, size, 0, _PARTIAL) != size:
            return self._refused(checkpoint, "the recurrent state saved")
        if not remove_from(checkpoint.n_tokens):
            return self._refused(checkpoint, "to drop the cache cells after the state saved")
        self.restores += 1
        return True

    def _refused(self, checkpoint: Checkpoint, what: str) -> bool:
        self.failed_restores += 1
        if self.failed_restores == 1:
            log.warning(
                "llama.cpp refused %s after %d tokens: rolling back there evaluates every kept token again",
                what,
                checkpoint.n_tokens,
            )
        return False

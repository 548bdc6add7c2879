"""The tiny protocol the core speaks to a language model, and the cache bookkeeping every model shares.

A model holds a KV cache of the token ids it has evaluated, in position order. ``evaluate``
appends ids and returns logit rows for the last ``n_logits`` of them; ``truncate`` rolls the
cache back. Everything in the core (engine, drafters, controller) uses only this, so it runs
the same on llama.cpp and on the scripted fakes in the tests.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np


class ContextFull(Exception):
    """The model's context window cannot hold the tokens asked for."""


class CachedModel(ABC):
    """A model with a KV cache of ``self.cached`` ids; subclasses implement the two primitives."""

    n_vocab: int
    n_ctx: int
    # How many tokens of its latest evaluation ``truncate`` can drop without evaluating anything
    # again: None for a KV cache, which drops any tail; a recurrent or hybrid model (Mamba,
    # Qwen3.5's delta-net layers) keeps snapshots of its last few states, or none (0). Past
    # that depth, a rollback restores the latest ``checkpoint`` and evaluates what follows it.
    rollback_depth: int | None = None
    # Evaluations of one size in a row before the backend runs that size at its steady cost: 0
    # on a CPU; llama.cpp's GPU backends 2 (CUDA re-captures its graph after every change of
    # batch size and runs the next two evaluations without one, up to 1.5x slower). The verify
    # curve holds steady costs: the calibration times each size after this many untimed
    # evaluations (``calibration.time_sizes``), and a verify that was not ``steady`` is no sample.
    settle: int = 0
    # Whether it can read tokens the target has not evaluated (a copy, to draft on from): a
    # separate model can; a draft that reads the target's hidden states (MTP, an assistant) cannot.
    reads_ahead: bool = True

    def __init__(self) -> None:
        self.cached: list[int] = []
        self._sizes: list[int] = []  # the latest evaluations' sizes, newest last (``steady``)

    @property
    def steady(self) -> bool:
        """Whether the latest evaluation ran at its size's steady cost: always where the backend
        does not ``settle``, else when the ``settle`` evaluations before it had its size too."""
        if self.settle == 0:
            return True
        recent = self._sizes[-(self.settle + 1) :]
        return len(recent) == self.settle + 1 and len(set(recent)) == 1

    @property
    def last_size(self) -> int:
        """The latest evaluation's size where the backend ``settle``s (0: none yet, or a backend
        that does not settle)."""
        return self._sizes[-1] if self._sizes else 0

    # --- what a backend implements -------------------------------------------------------
    @abstractmethod
    def _decode(self, tokens: Sequence[int], start: int, n_logits: int) -> Sequence[np.ndarray]:
        """Evaluate ``tokens`` at positions ``start..``; return n_logits float32 rows of n_vocab
        (they may be views into the backend's buffer, valid until the next evaluation)."""

    @abstractmethod
    def _remove(self, start: int) -> None:
        """Drop cache positions ``start..`` (all sequences of this model)."""

    def checkpoint(self, lasting: bool = False) -> None:
        """Keep the model's state here: a later ``truncate`` to this length, or past it, then
        evaluates at most the tokens after it, however long the context. A KV cache needs
        none (it does nothing); a recurrent state copies itself. A checkpoint is kept until
        the next one, a ``lasting`` one (a reply's prompt, which regenerating comes back to)
        until the next lasting one."""
        return None  # a KV cache: nothing to keep

    @abstractmethod
    def tokenize(self, text: str, *, add_bos: bool = True, special: bool = True) -> list[int]: ...

    @abstractmethod
    def token_bytes(self, token: int) -> bytes:
        """The raw bytes of one token's text; byte-level tokens may be a partial UTF-8 char."""

    @abstractmethod
    def is_eog(self, token: int) -> bool:
        """End of generation: EOS, EOT, <|im_end|> and the like."""

    def _decode_greedy(self, tokens: Sequence[int], start: int, n_logits: int) -> Sequence[int]:
        """As ``_decode``, but each row's greedy token (its argmax) instead of its logits. A
        backend that can pick it where it computed the logits (llama.cpp's backend sampling:
        on a GPU no logits cross to the host) overrides this; here each row's argmax is taken
        when it is read, so a verify that stops at a rejected draft never reads the rest."""
        return Argmax(self._decode(tokens, start, n_logits))

    # --- shared bookkeeping --------------------------------------------------------------
    def evaluate(self, tokens: Sequence[int], n_logits: int = 1) -> Sequence[np.ndarray]:
        """Append ``tokens`` to the cache; logits for the last ``n_logits`` of them."""
        return self._evaluate(tokens, n_logits, self._decode)

    def _evaluate(self, tokens, n_logits, decode):
        if not tokens:
            raise ValueError("evaluate() needs at least one token")
        if len(self.cached) + len(tokens) > self.n_ctx:
            raise ContextFull(f"{len(self.cached) + len(tokens)} tokens > context {self.n_ctx}")
        rows = decode(tokens, len(self.cached), n_logits)
        self.cached.extend(int(t) for t in tokens)
        self._sizes = [*self._sizes[-self.settle :], len(tokens)] if self.settle else []
        return rows

    def truncate(self, n: int) -> None:
        """Roll the cache back so it holds only its first ``n`` tokens."""
        if n < len(self.cached):
            self._remove(n)
            del self.cached[n:]

    def sync(self, tokens: Sequence[int], n_logits: int = 0, known: int = 0) -> Sequence[np.ndarray] | None:
        """Make the cache hold exactly ``tokens``, evaluating only what is not cached yet.

        This is prefix reuse: a follow-up chat turn shares its history with the cache, so only
        the new tokens are evaluated. With ``n_logits`` > 0 the last ``n_logits`` tokens are
        (re-)evaluated so their logit rows can be returned. ``known``: the caller vouches that
        the cache already holds ``tokens[:known]``, so only what follows is compared (an engine
        step would otherwise compare the whole conversation, every step).
        """
        rows = self._sync(tokens, n_logits, known, self._decode)
        return rows if n_logits else None

    def sync_greedy(self, tokens: Sequence[int], n_logits: int = 0, known: int = 0) -> Sequence[int]:
        """As ``sync``, but the greedy token of each of the last ``n_logits`` rows (none for 0):
        what a greedy verify without a repetition penalty needs (``_decode_greedy``)."""
        ids = self._sync(tokens, n_logits, known, self._decode_greedy)
        return ids if n_logits and ids is not None else ()

    def _sync(self, tokens, n_logits, known, decode):
        known = max(0, min(known, len(self.cached), len(tokens)))
        keep = known + common_prefix(self.cached[known:], tokens[known:])
        keep = min(keep, len(tokens) - n_logits)
        self.truncate(keep)
        rest = tokens[keep:]
        if not rest:
            return None
        return self._evaluate(rest, max(n_logits, 1), decode)


class Argmax(Sequence[int]):
    """Each row's argmax, taken when it is read (and kept)."""

    def __init__(self, rows: Sequence[np.ndarray]) -> None:
        self.rows = rows
        self.seen: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i):  # ints only: a verify reads by index
        if i not in self.seen:
            self.seen[i] = int(np.argmax(self.rows[i]))
        return self.seen[i]


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    if n == 0:
        return 0
    x = np.asarray(a[:n], dtype=np.int64)
    y = np.asarray(b[:n], dtype=np.int64)
    diff = np.flatnonzero(x != y)
    return int(diff[0]) if len(diff) else n

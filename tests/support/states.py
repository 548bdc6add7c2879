"""Wrong hidden states for the drafters that read their target's (MTP blocks, Gemma 4
assistants), to show that their drafts rest on the right ones. Both read the target's state
at a position through ``HiddenStates.row``, which ``feed_wrong`` replaces."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from localspec.llama.backend import HiddenStates

# zeros; the state one position earlier; another layer's: llama.cpp hands out the last layer's
# state only, so the token's embedding stands for it (the first layer's input at that position)
WRONG = ("zeros", "earlier", "embedding")


def feed_wrong(monkeypatch, how: str, target, embeddings: np.ndarray) -> None:
    """From now on every state of ``target`` that a drafter reads is ``how`` wrong (``WRONG``);
    ``embeddings``: the target's token embeddings, scaled to the state's norm when fed."""
    monkeypatch.setattr(HiddenStates, "row", _wrong_row(HiddenStates.row, how, target, embeddings))


@contextmanager
def wrong_states(how: str, target, embeddings: np.ndarray) -> Iterator[None]:
    """``feed_wrong`` for the length of a ``with`` block, where no pytest fixture is at hand."""
    real = HiddenStates.row
    HiddenStates.row = _wrong_row(real, how, target, embeddings)  # type: ignore[method-assign]
    try:
        yield
    finally:
        HiddenStates.row = real  # type: ignore[method-assign]


def _wrong_row(real: Callable, how: str, target, embeddings: np.ndarray) -> Callable:
    if how not in WRONG:
        raise ValueError(f"unknown wrong state {how!r}: one of {', '.join(WRONG)}")

    def row(self, pos: int, n_cached: int) -> np.ndarray | None:
        h = real(self, pos, n_cached)
        if h is None:
            return None
        if how == "zeros":
            return np.zeros_like(h)
        if how == "earlier":
            before = real(self, pos - 1, n_cached) if pos > 0 else None
            return np.zeros_like(h) if before is None else before
        e = embeddings[target.cached[pos]]
        return (e * (np.linalg.norm(h) / np.linalg.norm(e))).astype(np.float32)

    return row


def token_embeddings(path: Path | str) -> np.ndarray:
    """(n_vocab, n_embd): the ``token_embd.weight`` of a GGUF file the tests wrote (F32)."""
    import gguf

    t = next(t for t in gguf.GGUFReader(str(path)).tensors if t.name == "token_embd.weight")
    return np.asarray(t.data, dtype=np.float32).reshape(-1, int(t.shape[0]))

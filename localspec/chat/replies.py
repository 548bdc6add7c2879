"""A session's past replies: what the suffix drafter reads (``core.suffix``), kept on this
machine by a :class:`~localspec.chat.history.HistoryStore` between runs.

Token ids mean something only to one tokenizer, so the history is kept per tokenizer
(``tokenizer_key``): two models of one family share it, as they share their drafts. Each reply
is kept with the last ``LEAD_IN`` tokens of its prompt in front (the chat template's opening of
the reply and the end of the user's turn): a regenerated reply, or one more request in a
format seen before, then matches from its first token on.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..core.policy import DEFAULT
from ..core.suffix import Corpus, prompt_hash

# The end of the prompt kept before each reply: the template's "assistant" opening (a few
# tokens) and the last words of the user's turn, as much as a match reads (``suffix_depth``),
# so a regenerated reply matches at full depth from its first token (a shorter history match
# drafts no further than it is long: ``SuffixDrafter``); short enough that the history holds
# replies, not prompts.
LEAD_IN = DEFAULT.suffix_depth
# A tokenizer is told apart by this many of its tokens' bytes, spread over its vocabulary:
# reading all 150,000 of them would cost a noticeable part of a load.
SAMPLED_TOKENS = 4096


@dataclass(frozen=True)
class TokenizerKey:
    """The history a model's replies belong to: ``key``, a short name for its tokenizer (the
    history's folder), and ``n_vocab``, its vocabulary size, which every id in the history
    must be below: a file is checked against it before anything is sized from its ids."""

    key: str
    n_vocab: int


def tokenizer_key(model) -> TokenizerKey:
    """``model``'s tokenizer, named by its vocabulary size and a sample of its tokens."""
    n = model.n_vocab
    h = hashlib.sha256(str(n).encode())
    for t in np.unique(np.linspace(0, n - 1, min(n, SAMPLED_TOKENS)).astype(np.int64)):
        h.update(model.token_bytes(int(t)) + b"\x00")
    return TokenizerKey(h.hexdigest()[:16], n)


class PastReplies:
    """The replies kept for one tokenizer: loaded once, and each new reply added through the store."""

    def __init__(self, store, tokenizer: TokenizerKey) -> None:
        self.store, self.tokenizer = store, tokenizer
        self.key = tokenizer.key  # the store's name for this history
        self._corpora, self.warnings = self._load()

    def corpora(self) -> Sequence[Corpus]:
        return self._corpora

    def keep(self, prompt: Sequence[int], reply: Sequence[int], greedy: bool = False) -> None:
        """Add ``reply`` (after the end of its ``prompt``, whose hash it keeps; a ``greedy`` one
        given before is marked reproduced, so a greedy reply to that prompt, in any process,
        copies it as sure); a store that cannot be written leaves the history as it was, with a
        warning: a convenience must not fail a chat."""
        if not reply:
            return
        tokens = [int(t) for t in prompt[-LEAD_IN:]] + [int(t) for t in reply]
        asked = prompt_hash(prompt)
        self._corpora, warnings = self._ready(
            *self.store.add(self.key, tokens, time.time(), asked if greedy else 0, asked, self.tokenizer.n_vocab)
        )
        self.warnings += warnings

    def _load(self) -> tuple[tuple[Corpus, ...], list[str]]:
        return self._ready(*self.store.load(self.key, self.tokenizer.n_vocab))

    @staticmethod
    def _ready(corpora: Sequence[Corpus], warnings: Sequence[str]) -> tuple[tuple[Corpus, ...], list[str]]:
        for corpus in corpora:
            corpus.first_offsets  # noqa: B018 (computed now, as it is read, not in a reply's first step)
        return tuple(corpora), list(warnings)

"""Every tunable of the draft-length decision, in one place.

A :class:`Policy` is built once (the defaults, or ``localspec bench --replay --set NAME=VALUE``)
and passed down: the controller, the estimates, the budgets, the rules and the drafters read
their tunables from the one they were given, never from a module constant, so an override
reaches every user of a value. Each field says why it has its value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace


@dataclass(frozen=True)
class Policy:
    # --- what the pair accepts -----------------------------------------------------------
    decay: float = 0.95
    """Verdicts fade by this a step (acceptance, lookup lengths, confidence calibration), so
    text of a new kind (prose after code) shows within about 20 steps."""
    prior_alpha: float = 0.75
    """An untried pair starts in the middle of what same-family pairs agree on at greedy (about
    0.67 on chat to 0.96 on edits of given code)."""
    prior_weight: float = 16.0
    """The prior weighs this many verdicts, so one rejected draft moves 0.75 to 0.71 rather than
    switching drafting off; a profile's prior has the same weight."""

    # --- a reply's opening ---------------------------------------------------------------------
    opening_steps: int = 6
    """Before anything was drafted, a first try waits a reply's first steps out: chat models open
    with a phrase of their own before what a draft predicts well, and a try made on it fails."""

    # --- tries while drafting is off -------------------------------------------------------------
    trial_steps: int = 4
    """A try's length: one unlucky step decides nothing. The proposal rate starts at a trial's
    worth of proposals."""
    probe_k: int = 2
    """A try's draft length where the model wants none, and every step's before anything is
    timed: cheap, and it tests two tokens."""
    first_try_share: float = 0.25
    """An off step earns tries this share of what drafting could win at best, so a cheap try
    comes within a few steps; each failed try in a row halves it ..."""
    try_share: float = 0.05
    """... down to this, so tries that keep failing cost at most this share of the best case."""

    # --- how far one draft goes --------------------------------------------------------------
    sure: float = 0.8
    """A draft may run past k while every token's confidence is at least this: Leviathan's k
    assumes the mean acceptance, which a run of confident tokens beats. Tokens of 0.8-0.95 are
    accepted about as often as they say."""
    min_gain: float = 1.05
    """A proposal must promise this much over proposing nothing (a copy beside drafts: over
    the drafts): the speed model leaves out a step's Python work and bookkeeping, a few per cent
    together. So a try's step is priced at least this much over 1 of its time, and drafting is
    never tried where even a draft always accepted cannot promise it."""

    # --- drafts from suffix matches (the context, past replies) ----------------------------
    suffix_depth: int = 24
    """The longest match looked for: SuffixDecoding's tree depth (vLLM's default); a match this
    long already leaves no doubt. The walk after it runs as far as a verify takes
    (``options.MAX_DRAFT``) where the occurrences agree and the gate prices it worth it; after a
    shorter match in the history, no further than the match is long."""
    min_path_prob: float = 0.1
    """A walk stops where fewer than this share of the occurrences agree on the path so far
    (SuffixDecoding's ``min_token_prob``): below it the next token is a guess."""

    @property
    def suffix_ends(self) -> int:
        """At most this many occurrences of a match are read for its continuations, so a common
        short match costs what a rare long one does: 1 / ``min_path_prob``² of them measure a
        share at the walk's bar to within a third of itself (its standard error)."""
        return math.ceil(1.0 / self.min_path_prob**2)

    def __post_init__(self) -> None:
        if not 0.0 < self.min_path_prob <= 1.0:
            raise ValueError(f"min_path_prob={self.min_path_prob}: a share, above 0 and at most 1")

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    def with_setting(self, assignment: str) -> Policy:
        """This policy with ``NAME=VALUE`` applied (``sure=0.9``); an unknown name or a
        value of the wrong kind is a ``ValueError`` that says what is known."""
        name, sep, text = assignment.partition("=")
        name = name.strip()
        if not sep or name not in self.names():
            raise ValueError(f"{assignment!r}: give NAME=VALUE with NAME one of: {', '.join(self.names())}")
        current = getattr(self, name)
        try:
            value = type(current)(text)
        except ValueError:
            raise ValueError(f"{assignment!r}: {name} takes a value like {current!r}") from None
        return replace(self, **{name: value})


DEFAULT = Policy()

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

    # --- a long prompt (``reading``) ------------------------------------------------------------
    read_share: float = 0.5
    """Where drafting is on, the draft model reads a reply's prompt only where that costs at most
    this share of what drafting is expected to save on the reply; else it sits the reply out. The
    saving rests on the acceptance learnt over other replies, and one prompt's answers agree with
    the draft more or less than that (0.80 to 1.0 over six document questions): at a half, a
    reply whose drafting saves half what was expected still does not lose by the wall clock."""

    # --- tries while drafting is off -------------------------------------------------------------
    trial_steps: int = 4
    """A try's length: one unlucky step decides nothing. The proposal rate starts at a trial's
    worth of proposals."""
    probe_k: int = 2
    """A try's draft length where the model wants none, and every step's before anything is
    timed: cheap, and it tests two tokens."""
    first_try_share: float = 0.25
    """An off step earns tries this share of what drafting could win at best, so a cheap try
    comes within a few steps; each failed try in a row halves it (``try_backoff``) ..."""
    try_share: float = 0.05
    """... down to this, so tries that keep failing cost at most this share of the best case."""
    try_backoff: float = 2.0
    """Each try in a row that did not switch drafting back on divides the share by this
    (exponential backoff; a try that succeeds starts the share over): halving, a drafter that
    keeps failing reaches the ``try_share`` floor after three failed tries (0.25, 0.125, 0.0625, 0.05),
    so a few unlucky tries leave tries cheap while a hopeless drafter soon costs the floor."""

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
    shorter match in the history, no further than ``max_spec_factor`` times the match's length."""
    min_path_prob: float = 0.1
    """A walk stops where fewer than this share of the occurrences agree on the path so far
    (SuffixDecoding's ``min_token_prob``): below it the next token is a guess."""
    max_spec_factor: float = 1.0
    """A walk after a history match shorter than ``suffix_depth`` runs at most this many times
    the match's length (SuffixDecoding's ``max_spec_factor``, its default): another
    conversation's text is evidence for about as many tokens as it matched, so the trust that
    regenerates earned does not send a 4-token match in a new reply 32 tokens on."""
    long_match: int = 4
    """Matches earn the gate's trust by source and length, 1 to 3 tokens each on their own and
    this many or more together (``suffix.bucket``): a 4-token match is rarely a coincidence, and
    a longer one is the same kind of evidence, so it need not earn trust again."""
    copy_growth: float = 2.0
    """A copy from the context goes no further than a verify that costs this many times the
    verify of the longest run of its kind kept so far (at first, of ``probe_k`` tokens;
    ``rules.LookupGate.reach``): a long copy is earned by doubling, as TCP's slow start earns a
    window. A kind's trust is learnt mostly from short copies, while a long copy that fails at
    its first token loses its whole verify; on a flat curve (a GPU) it binds nothing."""

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

"""Drafters: where the k candidate tokens of a step come from.

One method that matters, ``draft(context, k, params, rng) -> Draft``. ``context`` is every
token so far, the last one not yet seen by the target. A drafter may return fewer than ``k``
tokens (none at all is fine: the step is then a plain target step), and more only when they
cost nothing to propose (a copy from the context); the engine cuts a draft at the token budget
and the context. ``Draft.q_draft`` holds the processed distribution each token was *sampled*
from; ``None`` means the tokens were chosen deterministically (prompt lookup, greedy
drafting), which the verification rule treats as one-hot q (transformers'
PromptLookupCandidateGenerator does the same).

Three hooks, no-ops in :class:`DrafterBase`: ``prefill(context)`` reads the prompt before the
first step (a draft model), ``behind(context)`` says how many tokens it would have to read
before drafting (a draft model that has not run for a while), ``observe(n_drafted,
n_accepted, kept)`` hears each verify's verdict (drafters that learn from it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from . import costs as _costs
from .costs import CostModel
from .options import DEFAULT_P_MIN  # a tuning choice, explained there
from .protocol import CachedModel, common_prefix
from .rules import LookupGate, MarginalRule
from .sampling import SamplingParams, apply_repeat_penalty, process, sample


@dataclass(frozen=True)
class Draft:
    ids: tuple[int, ...] = ()
    q_draft: tuple[np.ndarray, ...] | None = None
    n_evals: int = 0  # forward passes the drafter ran (0 for lookup): feeds the cost model
    confidence: tuple[float, ...] = ()  # the draft's probability for each token it proposed
    copied: bool = False  # a copy from the context in place of a draft model's tokens
    n_read: int = 0  # tokens the first pass read at once (catching up on the context)
    read_seconds: float = 0.0  # ... and its time, when that was costs.READ_MIN tokens or more


@runtime_checkable
class Drafter(Protocol):
    name: str

    def draft(
        self, context: Sequence[int], k: int, params: SamplingParams, rng: np.random.Generator, draft_max: int = 0
    ) -> Draft:
        """Up to ``k`` tokens after ``context`` (a free copy may run longer: see Draft);
        ``draft_max`` > k: a draft model may go on to ``draft_max`` tokens while it is sure of every
        one (rules.MarginalRule)."""
        ...

    def copy(self, context: Sequence[int], limit: int, params: SamplingParams, rng: np.random.Generator) -> Draft:
        """A step the controller gave no drafts: a free copy of up to ``limit`` tokens, if any."""
        ...

    def prefill(self, context: Sequence[int]) -> None: ...

    def behind(self, context: Sequence[int]) -> int: ...

    def time_pass(self, context: Sequence[int]) -> float | None: ...

    def observe(self, n_drafted: int, n_accepted: int, kept: Sequence[int] = ()) -> None: ...


class DrafterBase(Drafter):
    """A drafter whose hooks do nothing: subclass it and write ``draft``."""

    name = "base"

    def draft(
        self, context: Sequence[int], k: int, params: SamplingParams, rng: np.random.Generator, draft_max: int = 0
    ) -> Draft:
        raise NotImplementedError

    def prefill(self, context: Sequence[int]) -> None:
        """Read the prompt before the first step (only a draft model has one to read)."""

    def copy(self, context: Sequence[int], limit: int, params: SamplingParams, rng: np.random.Generator) -> Draft:
        """A free copy of up to ``limit`` tokens for a step the controller gave no drafts (only a
        draft model's prompt lookup has one to offer)."""
        return Draft()

    def behind(self, context: Sequence[int]) -> int:
        """Tokens of ``context`` the drafter must read before it can draft (a draft model's
        catch-up; nothing for drafters without a model)."""
        return 0

    def time_pass(self, context: Sequence[int]) -> float | None:
        """Seconds of one draft pass, timed now (None: the drafter has no model to time)."""
        return None

    def observe(self, n_drafted: int, n_accepted: int, kept: Sequence[int] = ()) -> None:
        """The verify's verdict on the last draft: ``kept`` is what the step added to the
        context (the accepted drafts and the target's own token)."""


class NoDrafter(DrafterBase):
    """The target alone, through the same loop: the baseline every speed-up is measured against."""

    name = "none"

    def draft(self, context, k, params, rng, draft_max=0) -> Draft:
        return Draft()


class ModelDrafter(DrafterBase):
    """A small model of the same vocabulary proposes tokens one forward pass at a time.

    Drafting stops early when the draft's top probability falls below ``p_min``: a token it is
    unsure of is likely rejected, and every rejected token costs a draft pass and a verify row.
    Given the measured ``costs``, the :class:`MarginalRule` decides as well, and the first
    token is then proposed whenever the rule says its verify row pays, whatever ``p_min``:
    its draft pass is spent already.
    """

    name = "draft"

    def __init__(
        self,
        model: CachedModel,
        n_vocab_target: int,
        p_min: float = DEFAULT_P_MIN,
        banned: Iterable[int] = (),
        costs: CostModel | None = None,
    ) -> None:
        self.model = model
        self.costs = costs
        self.n_vocab_target = n_vocab_target
        self.p_min = p_min
        # ids the draft must never propose: beyond the target's vocab, or special tokens whose
        # text differs between the two models (see compat.check_compatible)
        self._banned = np.array(sorted(set(banned) | set(range(n_vocab_target, model.n_vocab))), dtype=np.int64)
        self._last_context, self._last_len = None, 0
        self.lookup: PromptLookupDrafter | None = None  # see with_lookup
        self.max_copy = 0  # the longest copy (with_lookup)
        self._from_lookup = False  # this step's draft is a copy
        self._looked = False  # this step looked for a match

    def time_pass(self, context: Sequence[int]) -> float | None:
        """One pass of the context's last token, timed where the draft model's cache ends (it
        is left as it was): a fresh sample for a controller whose verdict of "never here"
        rests on the draft pass (``recheck_draft``)."""
        n = len(self.model.cached)
        if not context or n >= self.model.n_ctx:
            return None
        self.model.checkpoint()  # a recurrent draft model rolls the pass back from here
        t0 = _costs.clock()
        self.model.evaluate(context[-1:], 1)
        seconds = _costs.clock() - t0
        self.model.truncate(n)
        return seconds

    def with_lookup(self, lookup: PromptLookupDrafter, max_copy: int = 16) -> ModelDrafter:
        """Take a prompt-lookup match first when its gate trusts it: on edits and quotes the
        continuation is in the context already, and copying it costs no draft pass. A copy
        may run past the controller's k (it costs no pass) up to ``max_copy`` tokens."""
        self.lookup = lookup
        self.max_copy = max_copy
        return self

    def draft(self, context, k, params, rng, draft_max=0) -> Draft:
        copied = self._copy(context, max(k, self.max_copy) if k > 0 else 0, params, rng, off=False)
        if k <= 0 or copied.ids:
            return copied
        room = self.model.n_ctx - len(context)
        k, draft_max = min(k, room), min(draft_max, room)
        if k <= 0:
            return Draft()
        known = self._known(context)
        n_read = len(context) - known - common_prefix(self.model.cached[known:], context[known:])
        t0 = _costs.clock()
        rows = self.model.sync(context, n_logits=1, known=known)
        read_seconds = _costs.clock() - t0 if n_read >= _costs.READ_MIN else 0.0
        assert rows is not None  # sync returns the rows asked for
        n_evals = 1
        ids: list[int] = []
        qs: list[np.ndarray] = []
        conf: list[float] = []
        history = list(context[-max(params.repeat_last_n, 1) :])
        rule = MarginalRule(self.costs, k, draft_max) if self.costs and self.costs.verify else None
        while True:
            logits = fit_vocab(rows[0], self.n_vocab_target, self._banned)
            token, q, top_p = self._choose(logits, history, params, rng)
            if not self._keep(len(ids), top_p, rule):
                break
            ids.append(token)
            conf.append(top_p)
            history.append(token)
            if q is not None:
                qs.append(q)
            if len(ids) == (rule.draft_max_now if rule else k) or (rule and not rule.another_pass(top_p)):
                break
            if n_evals == 1:  # the passes after this one are rolled back after the verify
                self.model.checkpoint()
            rows = self.model.evaluate([token], 1)
            n_evals += 1
        q_draft = tuple(qs) if not params.greedy else None
        return Draft(tuple(ids), q_draft, n_evals, tuple(conf), n_read=max(n_read, 1), read_seconds=read_seconds)

    def copy(self, context, limit, params, rng) -> Draft:
        """A prompt-lookup match of up to ``limit`` tokens, where the gate trusts it: it costs no
        draft pass, so it is proposed while the controller drafts nothing too (on edits and
        quotes a copy pays where the draft model's passes and catch-up do not), at the higher
        bar a copy in place of the target's own step must clear (``PromptLookupDrafter.trusted``);
        every match looked at is scored against what the step kept."""
        return self._copy(context, limit, params, rng, off=True)

    def _copy(self, context, limit, params, rng, off: bool) -> Draft:
        self._from_lookup = self._looked = False
        if self.lookup is None or limit <= 0:
            return Draft()
        copied = self.lookup.draft(context, limit, params, rng)
        self._looked = True
        self._from_lookup = self.lookup.trusted(len(copied.ids), off)
        return Draft(copied.ids, copied=True) if self._from_lookup else Draft()

    def prefill(self, context: Sequence[int]) -> None:
        """Read the prompt (all but its last token, which the first draft reads) up front;
        a prompt the draft's context cannot hold is left alone (then it drafts nothing)."""
        if len(context) < self.model.n_ctx:
            self.model.sync(context[:-1])
            self.model.checkpoint(lasting=True)  # a recurrent draft model regenerates from here

    def behind(self, context: Sequence[int]) -> int:
        return len(context) - common_prefix(self.model.cached, context)

    def observe(self, n_drafted: int, n_accepted: int, kept: Sequence[int] = ()) -> None:
        """Copied runs learn from their verdict; a match that was not used is scored against
        the tokens the step kept (``PromptLookupDrafter.score``)."""
        copied, looked = self._from_lookup, self._looked
        self._from_lookup = self._looked = False  # a step that drafts nothing has no verdict
        if self.lookup is None or not looked:
            return
        if copied:
            self.lookup.observe(n_drafted, n_accepted, kept)
        else:
            self.lookup.score(kept)

    def _known(self, context) -> int:
        """The engine only ever appends to its context list, so when it hands over the same
        list as last time, the draft cache still holds what that list held then (and maybe
        draft tokens after it, which the comparison from there on sorts out)."""
        known = self._last_len if context is self._last_context else 0
        self._last_context, self._last_len = context, len(context)
        return known

    def _keep(self, i: int, top_p: float, rule: MarginalRule | None) -> bool:
        if rule is None:
            return top_p >= self.p_min
        return (i == 0 or top_p >= self.p_min) and rule.keep(top_p)

    def _choose(self, logits, history, params: SamplingParams, rng):
        return choose_token(logits, history, params, rng)  # a subclass may watch (scripts/parity_llamacpp.py)


def fit_vocab(row: np.ndarray, n_vocab: int, banned: np.ndarray) -> np.ndarray:
    """A draft's logits on the target's vocabulary of ``n_vocab`` ids, ``banned`` ids at -inf."""
    out = np.full(n_vocab, -np.inf, dtype=np.float32)
    m = min(n_vocab, row.shape[0])
    out[:m] = row[:m]
    if len(banned):
        out[banned[banned < n_vocab]] = -np.inf
    return out


def choose_token(logits: np.ndarray, history, params: SamplingParams, rng) -> tuple[int, np.ndarray | None, float]:
    """The draft's token, its processed distribution q_draft (None when greedy) and its
    confidence: greedy, the top probability of the temperature-1 softmax (for the p_min stop);
    sampling, q_draft's largest probability."""
    if params.greedy:
        z = apply_repeat_penalty(logits, history, params)
        top = int(np.argmax(z))
        return top, None, float(1.0 / np.exp(z - z[top]).sum())
    q = process(logits, history, params)
    return sample(q, rng), q, float(q.max())


class PromptLookupDrafter(DrafterBase):
    """Prompt lookup decoding: find the latest earlier occurrence of the context's last n-gram
    and propose the tokens that followed it. No second model; strong on edits and quotes."""

    name = "lookup"

    # Tuning choice: a 1-gram match is mostly a coincidence; 2-4 grams carry the context of an
    # edit or a quote (docs/design.md, "Why each constant has its value"). With measured
    # ``costs`` a LookupGate decides how much of each match to propose from what matches of its
    # length have earned.
    def __init__(
        self, max_ngram: int = 4, min_ngram: int = 2, costs: CostModel | None = None, gate: LookupGate | None = None
    ) -> None:
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.gate = gate or (LookupGate(costs) if costs is not None else None)
        self._last_n: int | None = None  # match length of the last proposal
        self._match: tuple[int, tuple[int, ...]] | None = None  # the last match: length, continuation
        self._tokens = _GrowingArray()  # the context as an array, extended step by step

    def draft(self, context, k, params, rng, draft_max=0) -> Draft:
        self._last_n, self._match = None, None
        if k <= 0 or len(context) < self.min_ngram + 1:
            return Draft()
        ctx = self._tokens.of(context)
        for n in range(min(self.max_ngram, len(ctx) - 1), self.min_ngram - 1, -1):
            start = find_latest_ngram(ctx, n)
            if start is not None:
                follow = tuple(int(t) for t in ctx[start + n : start + n + k])
                j = self.gate.length(n, len(follow)) if self.gate else len(follow)
                self._last_n = n if j else None
                self._match = (n, follow)
                return Draft(follow[:j])
        return Draft()

    # Tuning choices: beside a draft model, a copied run must be at least this long and its
    # match length this trusted; shorter or shakier copies are left to the model. In place of a
    # step of the target alone (drafting off) the bar is higher: there a rejected copy costs its
    # whole verify, 1.4 passes for 3 tokens on a compute-bound target, against a step that could
    # not have gone wrong. On the Zen 3's Q4 recording 0.75 left one edit at 0.94x the target
    # alone, 0.85 none below 0.99x (docs/design.md).
    MIN_COPY, MIN_COPY_ALPHA, MIN_OFF_COPY_ALPHA = 2, 0.75, 0.85

    def trusted(self, n_proposed: int, off: bool = False) -> bool:
        """Whether the last proposal should replace a draft model's, or (``off``) stand in for a
        step of the target alone (see ModelDrafter)."""
        return (
            self.gate is not None
            and self._last_n is not None
            and n_proposed >= self.MIN_COPY
            and self.gate.alpha(self._last_n) >= (self.MIN_OFF_COPY_ALPHA if off else self.MIN_COPY_ALPHA)
        )

    def observe(self, n_drafted: int, n_accepted: int, kept: Sequence[int] = ()) -> None:
        """The verify's verdict on the last proposal (the engine calls this every step); a
        match that proposed nothing is scored against what the step kept."""
        if self.gate and self._last_n is not None and n_drafted:
            self.gate.observe(self._last_n, n_drafted, n_accepted)
            self._last_n, self._match = None, None
        else:
            self.score(kept)

    def score(self, kept: Sequence[int]) -> None:
        """Score the last match, which was not verified, against the tokens the step kept
        (as far as they go): a match length that lost the gate's trust wins it back, or not,
        without costing a verify row. Greedy, this is exactly the verdict a verify would
        have given on those tokens."""
        match, self._match, self._last_n = self._match, None, None
        if self.gate is None or match is None:
            return
        n, follow = match
        self.gate.observe(n, min(len(follow), len(kept)), common_prefix(follow, kept))


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


def find_latest_ngram(ctx: np.ndarray, n: int) -> int | None:
    """Start of the latest earlier occurrence of ``ctx[-n:]`` that has a token after it."""
    tail = ctx[-n:]
    m = len(ctx) - n  # candidate starts 0..m-1 (the tail itself starts at m)
    if m <= 0:
        return None
    hit = ctx[:m] == tail[0]
    for j in range(1, n):
        hit &= ctx[j : m + j] == tail[j]
    starts = np.flatnonzero(hit)
    return int(starts[-1]) if len(starts) else None


class OracleDrafter(DrafterBase):
    """Benchmarking only: replays a known continuation of this prompt (the target-only output)
    with a fraction ``corrupt`` of its tokens replaced by wrong ones.

    It costs nothing to run and its acceptance is set by the caller, so a bench can measure
    what verification and the engine's own overhead allow on a machine (a GPU, say) apart from
    how good a draft model is. Which tokens are corrupted depends only on their position, so
    every draft length sees the same ones. Once the reply leaves the reference (a near-tie
    broken differently by a batched kernel), the oracle knows nothing more and proposes none.
    """

    name = "oracle"

    def __init__(
        self, prompt_len: int, reference: Sequence[int], n_vocab: int, corrupt: float = 0.0, seed: int = 0
    ) -> None:
        if not 0.0 <= corrupt <= 1.0:
            raise ValueError(f"corrupt must be in [0, 1], got {corrupt}")
        self.prompt_len = prompt_len
        rng = np.random.default_rng(seed)
        ref = np.asarray(reference, dtype=np.int64)
        wrong = rng.random(len(ref)) < corrupt
        shift = rng.integers(1, max(n_vocab, 2), size=len(ref))  # never the right token
        self.reference = [int(t) for t in ref]
        self.proposals = [int(t) for t in np.where(wrong, (ref + shift) % n_vocab, ref)]
        self.left_reference_at: int | None = None
        self._checked = 0  # reply tokens already compared with the reference

    def draft(self, context, k, params, rng, draft_max=0) -> Draft:
        pos = len(context) - self.prompt_len  # reply tokens so far
        if not self._on_reference(context, pos) or k <= 0 or pos >= len(self.proposals):
            return Draft()
        return Draft(tuple(self.proposals[pos : pos + k]))

    def _on_reference(self, context, pos: int) -> bool:
        for i in range(self._checked, min(pos, len(self.reference))):
            if self.left_reference_at is None and context[self.prompt_len + i] != self.reference[i]:
                self.left_reference_at = i
        self._checked = max(self._checked, pos)
        return self.left_reference_at is None

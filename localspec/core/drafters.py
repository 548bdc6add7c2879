"""Drafters: where the k candidate tokens of a step come from, one class per way of drafting
(transformers' candidate generators, llama.cpp's ``common_speculative`` types): a draft model
(:class:`ModelDrafter`), suffix matches over the context and past replies
(``suffix.SuffixDrafter``); the bench adds its oracle (``bench.modes.OracleDrafter``).

``draft(context, k, params, rng) -> Draft``: ``context`` is every token so far, the last not yet
seen by the target. A drafter may return fewer than ``k`` tokens (none: a plain target step) and
more only where they cost no pass (a copy). ``Draft.q_draft`` holds the processed distribution
each token was sampled from; ``None`` means chosen deterministically, which verification treats
as one-hot q. The hooks ``behind`` and ``observe`` are no-ops in
:class:`DrafterBase`. A copier stands beside a draft model: the engine asks it every step, and
the controller takes its proposal where it is worth more (``Controller.decide``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from . import costs as _costs
from .costs import CostModel
from .options import DEFAULT_P_MIN  # a tuning choice, explained there
from .policy import DEFAULT, Policy
from .protocol import CachedModel, common_prefix
from .rules import MarginalRule
from .sampling import SamplingParams, apply_repeat_penalty, process, sample


@dataclass(frozen=True)
class Draft:
    ids: tuple[int, ...] = ()
    q_draft: tuple[np.ndarray | None, ...] | None = None  # per token; None: one-hot (a copy's)
    n_evals: int = 0  # forward passes the drafter ran (0 for lookup): feeds the cost model
    confidence: tuple[float, ...] = ()  # the draft's probability for each token it proposed
    copied: bool = False  # a copy from the context: no pass, its verdict is the drafter's own business
    n_read: int = 0  # tokens the first pass read at once (catching up on the context)
    read_seconds: float = 0.0  # ... and its time, when that was costs.READ_MIN tokens or more
    alpha: float | None = None  # a copy: its source's per-token acceptance estimate for it
    match: tuple[str, int | str] | None = None  # a copy: what its gate judges it by (source, length bucket or kind)
    continuation: tuple[int, ...] = ()  # a copy: all that followed the match, proposed or not
    source: str = ""  # where the tokens come from: "context", "history" (a copy), else the drafter's name
    extension: Draft | None = None  # a copy: the draft model's tokens after it (the end of ``ids``)

    @property
    def n_copied(self) -> int:
        """The tokens of ``ids`` the copy proposed (all of a copy without an extension)."""
        return len(self.ids) - (len(self.extension.ids) if self.extension else 0)


@runtime_checkable
class Drafter(Protocol):
    name: str
    extends: bool  # whether ``draft`` takes ``after``: tokens a copy proposed, to draft on from

    def draft(
        self,
        context: Sequence[int],
        k: int,
        params: SamplingParams,
        rng: np.random.Generator,
        draft_max: int = 0,
        after: Sequence[int] = (),
    ) -> Draft:
        """Up to ``k`` tokens after ``context`` (a free copy may run longer: see Draft);
        ``draft_max`` > k: a draft model may go on to ``draft_max`` tokens while it is sure of every
        one (rules.MarginalRule); ``after`` (where ``extends``): after ``context`` and these."""
        ...

    def behind(self, context: Sequence[int]) -> int: ...

    def observe(self, draft: Draft, verdict: tuple[int, int] | None, kept: Sequence[int]) -> None: ...


class DrafterBase(Drafter):
    """A drafter whose hooks do nothing: subclass it and write ``draft``."""

    name = "base"
    extends = False

    def behind(self, context: Sequence[int]) -> int:
        """Tokens of ``context`` the drafter must read before it can draft (a draft model's
        catch-up; nothing for drafters without a model)."""
        return 0

    def observe(self, draft: Draft, verdict: tuple[int, int] | None, kept: Sequence[int]) -> None:
        """What became of ``draft``: ``verdict`` is (tokens tested, tokens accepted), None where
        the step verified another proposal; ``kept`` is what the step added to the context (the
        accepted drafts and the target's own token)."""


class NoDrafter(DrafterBase):
    """The target alone, through the same loop: the baseline every speed-up is measured against."""

    name = "none"

    def draft(self, context, k, params, rng, draft_max=0, after=()) -> Draft:
        return Draft()


class ModelDrafter(DrafterBase):
    """A small model of the same vocabulary proposes tokens one forward pass at a time.

    Drafting stops early when the draft's top probability falls below ``p_min``: a token it is
    unsure of is likely rejected, and every rejected token costs a draft pass and a verify row.
    Given the measured ``costs``, the :class:`MarginalRule` decides as well, and the first
    token is then proposed whenever the rule says its verify row pays, whatever ``p_min``:
    its draft pass is spent already. It can draft on from a copy (``after``) where its model
    ``reads_ahead``: it reads the copy with its first pass.
    """

    name = "draft"

    def __init__(
        self,
        model: CachedModel,
        n_vocab_target: int,
        p_min: float = DEFAULT_P_MIN,
        banned: Iterable[int] = (),
        costs: CostModel | None = None,
        policy: Policy = DEFAULT,
        source: str = "draft",
    ) -> None:
        self.model, self.extends = model, model.reads_ahead
        self.source = source  # what its tokens are counted as: "draft", or "mtp" (the target's own layers)
        self.costs, self.policy = costs, policy
        self.n_vocab_target = n_vocab_target
        self.p_min = p_min
        # ids the draft must never propose: beyond the target's vocab, or special tokens whose
        # text differs between the two models (see compat.check_compatible)
        self._banned = np.array(sorted(set(banned) | set(range(n_vocab_target, model.n_vocab))), dtype=np.int64)
        self._last_context, self._last_len = None, 0

    def draft(self, context, k, params, rng, draft_max=0, after=()) -> Draft:
        room = self.model.n_ctx - len(context) - len(after)
        k, draft_max = min(k, room), min(draft_max, room)
        if k <= 0:
            return Draft()
        known = self._known(context)
        t0 = _costs.clock()
        n_read = self._keep_prompt(context, known)  # (a recurrent model's prompt, read already)
        context = [*context, *after] if after else context
        n_read += len(context) - known - common_prefix(self.model.cached[known:], context[known:])
        n_evals = caught_up = self._catch_up(context, known, n_read)
        rows = self.model.sync(context, n_logits=1, known=known)
        read_seconds = _costs.clock() - t0 if n_read >= _costs.READ_MIN else 0.0
        assert rows is not None  # sync returns the rows asked for
        ids: list[int] = []
        qs: list[np.ndarray] = []
        conf: list[float] = []
        history = list(context[-max(params.repeat_last_n, 1) :])
        rule = MarginalRule(self.costs, k, draft_max, self.policy) if self.costs and self.costs.verify else None
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
            if self.model.is_eog(token):  # an accepted end ends the reply: no token after it is kept
                break
            if n_evals == caught_up:  # the passes after this one are rolled back after the verify
                self.model.checkpoint()
            rows = self.model.evaluate([token], 1)
            n_evals += 1
        q_draft = tuple(qs) if not params.greedy else None
        return Draft(
            tuple(ids),
            q_draft,
            n_evals,
            tuple(conf),
            n_read=max(n_read, 1),
            read_seconds=read_seconds,
            source=self.source,
        )

    def _catch_up(self, context: Sequence[int], known: int, n_read: int) -> int:
        """Where a change of the draft model's batch size costs more than the passes it saves (a
        GPU: ``CostModel.draft_change``), read the tokens it has not seen one at a time but the
        last, so every pass keeps one size; the passes this added, and the first pass (1)."""
        costs = self.costs
        if costs is None or n_read < 2 or (n_read - 1) * costs.t_draft >= 2.0 * costs.draft_change:
            return 1
        for end in range(len(context) - n_read + 1, len(context)):
            self.model.sync(context[:end], known=known)
        return n_read

    def _keep_prompt(self, context: Sequence[int], known: int) -> int:
        """A recurrent draft model that has a prompt to read reads all of it but its last token
        first and keeps a lasting checkpoint there: a regenerated reply starts from it, not
        from the first token. The tokens read."""
        n_behind = self.behind(context) if self.model.rollback_depth is not None else 0
        if n_behind < _costs.READ_MIN:
            return 0
        self.model.sync(context[:-1], known=known)
        self.model.checkpoint(lasting=True)
        return n_behind - 1

    def behind(self, context: Sequence[int]) -> int:
        return len(context) - common_prefix(self.model.cached, context)

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

"""The speculative decoding loop (Leviathan et al. 2023, Algorithm 1; Chen et al. 2023).

Each step:
  1. draft   - the drafter proposes up to k tokens x_1..x_k after the context;
  2. verify  - ONE target evaluation of [pending, x_1..x_k] gives the k+1 rows p_target[0..k];
  3. accept  - greedy: keep x_i while it is the target's argmax; sampling: min(1, p/q) rule;
               the target then adds its own token (correction, or bonus when all k were kept),
               so a step yields at least one token;
  4. rollback- the target's cache drops the rejected drafts; the draft's cache is brought to
               the new context lazily, by prefix, on its next draft.
With k = 0 a step is exactly one target-only decode: the baseline runs through this same loop.

The engine yields a frozen :class:`Step` per iteration and never prints.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import cast

import numpy as np

from . import costs as _costs
from .controller import AdaptiveController, Controller, FixedController
from .costs import CostModel
from .drafters import Draft, Drafter, NoDrafter
from .plan import Now, Plan
from .protocol import CachedModel
from .sampling import (
    SamplingParams,
    Verdict,
    greedy_token,
    penalised,
    process,
    verify_greedy,
    verify_match,
    verify_speculative,
)
from .textstream import TextStream

Finish = str  # "eos" | "stop" | "length" | "context"


@dataclass(frozen=True, kw_only=True)
class Step:
    drafted: tuple[int, ...]  # x_1..x_k as proposed
    n_accepted: int  # how many of them the target kept
    token: int  # the target's own token: correction, or bonus if all were kept
    emitted: tuple[int, ...]  # tokens added to the reply (cut at EOS / max tokens)
    text: str  # new complete text (whole UTF-8 characters, stop strings removed)
    model_k: int  # the draft length the controller's speed model asked for (a copy, a sure run may differ)
    predicted_speedup: float  # controller's expectation for k vs the target alone
    prefill_seconds: float  # prompt evaluation (first step only)
    draft_seconds: float
    verify_seconds: float
    step_seconds: float  # wall time of the whole step, prefill excluded
    finish: Finish | None = None
    source: str = ""  # where the drafts came from: "context", "history", "draft", "mtp" ("": none drafted)
    extended: tuple[str, int] | None = None  # a copy the draft model extended: its source, its tokens (the last)
    n_copied: int = 0  # the first drafts that a copy proposed (the rest: the drafter's own)
    n_padded: int = 0  # rows verified past the draft to keep the batch size steady (Choice.rows)

    @property
    def k(self) -> int:
        """The draft length: the tokens this step proposed (a copy's and an extension's included)."""
        return len(self.drafted)

    @property
    def overhead_seconds(self) -> float:
        return max(self.step_seconds - self.draft_seconds - self.verify_seconds, 0.0)

    def accepted_by_source(self) -> dict[str, int]:
        """The accepted drafts by where they came from: a copy's, then its extension's."""
        if not self.source:
            return {}
        if self.extended is None:
            return {self.source: self.n_accepted}
        return {self.source: min(self.n_accepted, self.n_copied), self.extended[0]: self.own_verdict()[1]}

    def own_verdict(self) -> tuple[int, int]:
        """The drafter's own drafts and how many the target kept; (0, 0) where none were tested
        (after a copy, they are only where all of it was kept). A copy's verdict is its gate's."""
        n_own, kept = len(self.drafted) - self.n_copied, self.n_accepted - self.n_copied
        return (n_own, kept) if n_own > 0 and kept >= 0 else (0, 0)


class SpeculativeEngine:
    def __init__(
        self,
        target: CachedModel,
        drafter: Drafter | None = None,
        controller: Controller | None = None,
        copiers: Sequence[Drafter] = (),
    ) -> None:
        """``copiers``: drafters whose proposals cost no pass (suffix matches), asked every step
        beside ``drafter``; the controller picks which proposal a step verifies."""
        self.target = target
        self.drafter: Drafter = drafter or NoDrafter()
        self.copiers = tuple(copiers)
        if controller is None:
            no_draft = isinstance(self.drafter, NoDrafter)
            controller = FixedController(CostModel(), 0) if no_draft else AdaptiveController(CostModel())
        self.controller: Controller = controller
        # called once the prompt is in the cache, before the reply's first decision (the
        # session checks there whether the costs still hold: ``calibration.recheck``)
        self.after_prefill: Callable[[], object] | None = None

    def generate(
        self,
        prompt: Sequence[int],
        params: SamplingParams = SamplingParams(),
        max_tokens: int = 256,
        stop: Sequence[str] = (),
        expected_tokens: int | None = None,
    ) -> Iterator[Step]:
        """The reply's steps; ``expected_tokens``: how long a reply of this kind usually runs
        (at most ``max_tokens``): what drafting may win on it, against the draft's reading of
        the prompt (``reading``)."""
        if not prompt:
            raise ValueError("empty prompt")
        rng = np.random.default_rng(params.seed)
        context = [int(t) for t in prompt]
        stream = TextStream(stop)
        t0 = _costs.clock()
        picked = params.greedy and not penalised(params)  # the target's argmax is all a verify reads
        # prefill (the last prompt token is the first 'pending'), in the mode the verifies use
        (self.target.sync_greedy if picked else self.target.sync)(context[:-1])
        self.target.checkpoint(lasting=True)  # a recurrent target regenerates without a prefill
        if self.after_prefill is not None:
            self.after_prefill()
        self.controller.begin_reply()
        n_reply = min(max_tokens, expected_tokens or max_tokens)
        self.controller.plan_read(len(context), self.drafter.behind(context), n_reply)
        prefill = _costs.clock() - t0
        n_out = 0
        while True:
            room = self.target.n_ctx - len(context)
            if room < 1:
                yield final_step(stream, "context", prefill)
                return
            step = self._step(context, params, rng, stream, max_tokens - n_out, room, prefill, picked)
            prefill = 0.0
            n_out += len(step.emitted)
            yield step
            if step.finish:
                return

    def _step(self, context, params, rng, stream, budget, room, prefill, picked) -> Step:
        t_start = _costs.clock()
        plan = self.controller.decide(
            Now(
                budget,
                room,
                lambda n: [c.draft(context, n, params, rng) for c in self.copiers],
                lambda: self.drafter.behind(context),
                self.drafter.extends,
                partial(through_eog, self.target),
                self.drafter.name,
            )
        )
        t0 = _costs.clock()
        draft = self._propose(plan, context, params, rng)
        t1 = _costs.clock()
        drafted = draft.ids[: through_eog(self.target, draft.ids[: plan.limit])]  # a draft ends at its first end
        padding = pad(self.target, context, drafted, plan.rows)
        batch = context + list(drafted) + padding
        prepare_rollback(self.target, len(drafted) + len(padding))
        n_rows, known = len(batch) - len(context) + 1, known_prefix(self.target, context)
        if picked:  # verify: the target's greedy tokens, picked where it computed the logits
            choices = self.target.sync_greedy(batch, n_rows, known)
            t2 = _costs.clock()
            verdict = verify_greedy(drafted, choices)
        else:  # verify: the rows (sync returns those asked for)
            rows = cast(Sequence[np.ndarray], self.target.sync(batch, n_rows, known))[: len(drafted) + 1]
            t2 = _costs.clock()
            verdict = accept(rows, context, drafted, draft, params, rng)
        self.target.truncate(len(context) + verdict.n_accepted)  # rollback rejected drafts
        self._learn(draft, plan.copy, plan.copies, drafted, verdict, n_rows, t1 - t0, t2 - t1)
        kept = list(drafted[: verdict.n_accepted]) + [verdict.token]
        emitted, finish = cut(self.target, kept, budget)
        context.extend(kept)
        text = "".join(stream.feed(self.target.token_bytes(t)) for t in emitted)
        if stream.stopped:
            finish = "stop"
        elif finish:
            text += stream.flush()
        return Step(
            drafted=tuple(drafted),
            n_accepted=verdict.n_accepted,
            token=verdict.token,
            emitted=tuple(emitted),
            text=text,
            model_k=plan.model_k,
            predicted_speedup=plan.choice.predicted_speedup,
            prefill_seconds=prefill,
            draft_seconds=t1 - t0,
            verify_seconds=t2 - t1,
            step_seconds=_costs.clock() - t_start,
            finish=finish,
            source=(draft.source or self.drafter.name) if drafted else "",
            extended=(draft.extension.source, len(draft.extension.ids)) if draft.extension else None,
            n_copied=min(draft.n_copied, len(drafted)) if draft.match else 0,  # a suffix match's, in any mode
            n_padded=len(padding),
        )

    def _propose(self, plan: Plan, context, params, rng) -> Draft:
        """The plan's proposal: its copy and the drafter's tokens after it, or the drafter's own."""
        if plan.copy is not None:  # its verdict is the copier's business
            return extend(self.drafter, replace(plan.copy, copied=True), context, plan.k, params, rng)
        return self.drafter.draft(context, plan.k, params, rng, plan.draft_max) if plan.k else Draft()

    def _learn(
        self, draft: Draft, copy: Draft | None, copies, drafted, verdict: Verdict, n_verified: int, t_draft, t_verify
    ):
        costs = self.controller.costs
        if self.target.steady:  # the curve holds steady costs (CachedModel.settle)
            costs.observe_verify(n_verified, t_verify)
        read = draft.read_seconds  # a first pass that caught up: timed as reading, not drafting
        if read > 0:
            costs.observe_read(draft.n_read, read)
        costs.observe_draft(draft.n_evals - (read > 0), t_draft - read)
        # the drafter's own tokens (after a copy, tested where all of it was kept); a copy's are its gate's
        n_copied = min(draft.n_copied, len(drafted)) if draft.copied else 0
        n_own, own_kept = len(drafted) - n_copied, verdict.n_accepted - n_copied
        if draft.confidence and own_kept >= 0:
            costs.observe_confidence(draft.confidence[:n_own], own_kept)
        if not (n_own and own_kept < 0):  # untested: drafts after a copy not kept whole (a refusal counts)
            self.controller.observe(n_own, max(own_kept, 0), draft.n_evals)
        kept = (*drafted[: verdict.n_accepted], verdict.token)
        if copy is None:
            self.drafter.observe(draft, (len(drafted), verdict.n_accepted), kept)
        tested = (n_copied, min(verdict.n_accepted, n_copied))
        for copier, proposed in zip(self.copiers, copies):
            copier.observe(proposed, tested if proposed is copy else None, kept)


def drafts(engine: SpeculativeEngine) -> bool:
    """Whether ``engine`` can propose anything: a drafter, or copiers beside none. The target
    alone (neither) decides nothing from the costs."""
    return not isinstance(engine.drafter, NoDrafter) or bool(engine.copiers)


def accept(rows, context, drafted, draft: Draft, params, rng) -> Verdict:
    """The verdict on ``drafted`` from the target's ``rows``: greedy, the "match" rule, or speculative sampling."""
    history = _History(context, drafted, params)
    if params.greedy:
        return verify_greedy(drafted, cast(Sequence[int], _Choices(rows, history, params)))  # read by index
    p_target = [process(rows[i], history(i), params) for i in range(len(rows))]
    if params.rule == "match":
        return verify_match(drafted, p_target, rng)
    q_draft = draft.q_draft[: len(drafted)] if draft.q_draft is not None else None
    return verify_speculative(drafted, p_target, q_draft, rng)


def extend(drafter: Drafter, copy: Draft, context, m: int, params, rng) -> Draft:
    """``copy`` and the draft model's up to ``m`` tokens after it, in one draft: the model
    reads the copy with its first pass; a copy's own tokens are one-hot q."""
    if m <= 0:
        return copy
    ext = drafter.draft(context, m, params, rng, m, after=copy.ids)
    if not ext.ids and not ext.n_evals:
        return copy
    return replace(
        copy,
        ids=copy.ids + ext.ids,
        q_draft=None if ext.q_draft is None else (None,) * len(copy.ids) + ext.q_draft,
        confidence=ext.confidence,
        n_evals=ext.n_evals,
        n_read=ext.n_read,
        read_seconds=ext.read_seconds,
        extension=ext if ext.ids else None,
    )


def through_eog(target: CachedModel, ids: Sequence[int]) -> int:
    """How many of ``ids`` run up to and including the first end-of-generation token: an
    accepted end ends the reply, so a draft token after it can never be kept."""
    return next((i + 1 for i, t in enumerate(ids) if target.is_eog(t)), len(ids))


def cut(target: CachedModel, kept: list[int], budget: int) -> tuple[list[int], Finish | None]:
    """End-of-generation inside an accepted run ends the reply there; so does the budget."""
    end = through_eog(target, kept)
    if end and target.is_eog(kept[end - 1]):
        return kept[: end - 1], "eos"
    if len(kept) >= budget:
        return kept[:budget], "length"
    return kept, None


def pad(target: CachedModel, context: list[int], drafted: Sequence[int], rows: int) -> list[int]:
    """Tokens after the draft that bring the verify to ``rows`` rows (the plan's steady size,
    ``Choice.rows``), as far as the context has room: on a backend that pays for a change of
    batch size (a GPU) a row past a short draft costs next to nothing. Their logits are read by
    no one and the rollback drops them with the rejected drafts; any token of the vocabulary
    serves, and the draft's last one (or the pending token) is one."""
    n = min(rows - len(drafted) - 1, target.n_ctx - len(context) - len(drafted))
    return [drafted[-1] if drafted else context[-1]] * max(n, 0)


def prepare_rollback(target: CachedModel, n_droppable: int) -> None:
    """The rollback after a verify drops up to every draft and padding token: a target whose
    snapshots do not reach that far (a recurrent or hybrid cache) keeps a checkpoint first, so
    a rejection costs the same however long the conversation is."""
    depth = target.rollback_depth
    if depth is not None and n_droppable > depth:
        target.checkpoint()


def known_prefix(target: CachedModel, context: list[int]) -> int:
    """After the prefill and after every step the target's cache holds all of the context
    but its last token (rollback keeps exactly the accepted tokens); the check on length
    and last token guards against a cache someone else has touched since."""
    cached = target.cached
    if len(cached) == len(context) - 1 and (not cached or cached[-1] == context[-2]):
        return len(cached)
    return 0


def final_step(stream: TextStream, finish: Finish, prefill: float) -> Step:
    """A step that drafts and evaluates nothing: the reply ends (the context is full) with
    whatever text the stream still holds."""
    return Step(
        drafted=(),
        n_accepted=0,
        token=-1,
        emitted=(),
        text=stream.flush(),
        model_k=0,
        predicted_speedup=float("nan"),
        prefill_seconds=prefill,
        draft_seconds=0.0,
        verify_seconds=0.0,
        step_seconds=0.0,
        finish=finish,
    )


class _Choices:
    """The target's greedy token for each verify row, computed when the verify reads it: rows
    after a rejected draft token are never read. Each is an argmax over the whole vocabulary,
    the largest Python-side cost of a step on a fast (GPU) target."""

    def __init__(self, rows, history: _History, params: SamplingParams) -> None:
        self.rows, self.history, self.params = rows, history, params
        self.seen: dict[int, int] = {}

    def __getitem__(self, i: int) -> int:
        if i not in self.seen:
            self.seen[i] = greedy_token(self.rows[i], self.history(i), self.params)
        return self.seen[i]


class _History:
    """Recent tokens seen by row i (context + x_1..x_i), for the repetition penalty."""

    def __init__(self, context, drafted, params: SamplingParams) -> None:
        self.n = params.repeat_last_n if penalised(params) else 0
        self.tail = list(context[-self.n :]) if self.n else []
        self.drafted = list(drafted)

    def __call__(self, i: int) -> list[int]:
        return (self.tail + self.drafted[:i])[-self.n :] if self.n else []

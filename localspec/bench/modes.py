"""Modes only the bench runs, registered beside the session's own (``register_modes``): oracles
that replay the target-only reply with a known share of right tokens, the draft model replaying
a real pair's recorded verdicts (``verdicts``), fixed draft configurations for ``--sweep``, the
control (the target alone once more), and 'X:match', mode X verified by token matching. None of
them is the user's use of the pair."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from ..core.controller import FixedController
from ..core.costs import CostModel
from ..core.drafters import Draft, DrafterBase, ModelDrafter
from ..core.modes import Drafting, ModeContext, ModeFactory, ReplySpec, controller_for, draft_model
from ..core.protocol import CachedModel
from .verdicts import PromptVerdicts, RecordedVerdicts


def split_mode(mode: str) -> tuple[str, str]:
    """'draft:match' is the draft mode verified by token matching (for the rule comparison)."""
    base, _, rule = mode.partition(":")
    return base, rule or "speculative"


def parse_oracle(mode: str) -> tuple[float, int | None] | None:
    """'oracle-80' proposes the target-only reply with 80 % of its tokens right, k chosen by
    the controller; 'oracle-100/8' always drafts 8 tokens. None for every other mode."""
    base = split_mode(mode)[0]
    if not base.startswith("oracle-"):
        return None
    pct, _, k = base.removeprefix("oracle-").partition("/")
    return int(pct) / 100, (int(k) if k else None)


class OnReference:
    """Where a reply stands on its reference (the target-only reply of its prompt). Once the
    reply leaves it (a near-tie broken differently by a batched kernel), a drafter that replays
    the reference knows nothing more about the reply and proposes none."""

    def __init__(self, prompt_len: int, reference: Sequence[int]) -> None:
        self.prompt_len, self.reference = prompt_len, [int(t) for t in reference]
        self.left_at: int | None = None
        self._checked = 0  # reply tokens already compared with the reference

    def position(self, context: Sequence[int]) -> int | None:
        """The reply position of the token after ``context`` (reply tokens so far), or None
        once the reply has left the reference."""
        pos = len(context) - self.prompt_len
        for i in range(self._checked, min(pos, len(self.reference))):
            if self.left_at is None and context[self.prompt_len + i] != self.reference[i]:
                self.left_at = i
        self._checked = max(self._checked, pos)
        return pos if self.left_at is None else None


class OracleDrafter(DrafterBase):
    """Benchmarking only: replays a known continuation of this prompt (the target-only output)
    with a fraction ``corrupt`` of its tokens replaced by wrong ones.

    It costs nothing to run and its acceptance is set by the caller, so a bench can measure
    what verification and the engine's own overhead allow on a machine (a GPU, say) apart from
    how good a draft model is. Which tokens are corrupted depends only on their position, so
    every draft length sees the same ones. Off the reference it proposes nothing (OnReference).
    """

    name = "oracle"

    def __init__(
        self, prompt_len: int, reference: Sequence[int], n_vocab: int, corrupt: float = 0.0, seed: int = 0
    ) -> None:
        if not 0.0 <= corrupt <= 1.0:
            raise ValueError(f"corrupt must be in [0, 1], got {corrupt}")
        rng = np.random.default_rng(seed)
        ref = np.asarray(reference, dtype=np.int64)
        wrong = rng.random(len(ref)) < corrupt
        shift = rng.integers(1, max(n_vocab, 2), size=len(ref))  # never the right token
        self.on_reference = OnReference(prompt_len, reference)
        self.reference = self.on_reference.reference
        self.proposals = [int(t) for t in np.where(wrong, (ref + shift) % n_vocab, ref)]

    @property
    def left_reference_at(self) -> int | None:
        return self.on_reference.left_at

    def draft(self, context, k, params, rng, draft_max=0, after=()) -> Draft:
        pos = self.on_reference.position(context)
        if pos is None or k <= 0 or pos >= len(self.proposals):
            return Draft()
        return Draft(tuple(self.proposals[pos : pos + k]))


class ReplaysReference:
    """A bench mode given, before each run, the prompt it runs next and that prompt's
    target-only reply (``replay``; the bench runs the target alone first)."""

    def __init__(self) -> None:
        self.prompt_id = ""
        self.reference: Sequence[int] | None = None
        self.seed = 0

    def replay(self, prompt_id: str, reference: Sequence[int] | None, seed: int) -> None:
        self.prompt_id, self.reference, self.seed = prompt_id, reference, seed

    def _reference(self) -> Sequence[int]:
        if self.reference is None:
            raise ValueError("this bench mode replays the target-only run of the same prompt: run that first")
        return self.reference


class Oracle(ReplaysReference):
    """The factory of an oracle mode: an :class:`OracleDrafter` at zero draft cost, replaying
    the reference the bench gave it last, with a fraction ``accuracy`` of its tokens right;
    ``k`` fixes the draft length."""

    def __init__(self, accuracy: float, k: int | None = None) -> None:
        super().__init__()
        self.accuracy, self.k = accuracy, k

    def __call__(self, ctx: ModeContext) -> Drafting:
        n_vocab = ctx.target.n_vocab
        return Drafting(
            controller_for(ctx, draft_cost=False, fixed_k=self.k), lambda reply: self._drafter(reply, n_vocab)
        )

    def _drafter(self, reply: ReplySpec, n_vocab: int) -> OracleDrafter:
        return OracleDrafter(reply.prompt_len, self._reference(), n_vocab, 1.0 - self.accuracy, self.seed)


class VerdictDrafter(ModelDrafter):
    """Benchmarking only: the draft model at work exactly as in draft mode (its passes, the
    p_min stop and the marginal rule), each token it proposes replaced by a real pair's recorded
    verdict there (``bench.verdicts``): at reply position p the reference token (the target-only
    reply) where the real draft model agreed with its target, a wrong one where it did not, and
    the real draft's confidence in place of this model's.

    So a draft model of random weights on a GPU pays its real passes and drafts as far as the
    real pair's confidence would take it, and the target keeps what the real pair's would keep
    (greedy: a verify keeps the run of agreeing positions). The recorded confidence after a
    wrong token is the real draft's after the true prefix, not after its own mistake; no token
    after a wrong one is kept either way. Past the recorded reply, off the reference, or for a
    prompt with no recording, it proposes nothing and runs no pass.
    """

    name = "verdicts"

    def __init__(
        self,
        model: CachedModel,
        n_vocab_target: int,
        verdicts: PromptVerdicts | None,
        prompt_len: int,
        reference: Sequence[int],
        **model_drafter,
    ) -> None:
        super().__init__(model, n_vocab_target, **model_drafter)  # p_min, banned, costs, policy, source
        agree = verdicts.agree if verdicts else ()
        n = min(len(reference), len(agree))
        self.on_reference = OnReference(prompt_len, reference)
        self.proposals = [
            int(t) if agree[p] else wrong_token(int(t), n_vocab_target, model) for p, t in enumerate(reference[:n])
        ]
        self.confidence = verdicts.confidence[:n] if verdicts else ()
        self._next = 0  # the reply position of the token ``_choose`` proposes next

    def draft(self, context, k, params, rng, draft_max=0, after=()) -> Draft:
        if not params.greedy:
            raise ValueError("recorded verdicts are greedy: the verdicts mode runs at temperature 0")
        pos = self.on_reference.position(context)
        if pos is None:
            return Draft()
        self._next = pos + len(after)  # the first position this draft proposes for
        room = len(self.proposals) - self._next
        if room <= 0 or k <= 0:
            return Draft()
        return super().draft(context, min(k, room), params, rng, min(draft_max, room), after)

    def _choose(self, logits, history, params, rng):
        p, self._next = self._next, self._next + 1
        return self.proposals[p], None, self.confidence[p]


def wrong_token(token: int, n_vocab: int, model: CachedModel) -> int:
    """A token that is not ``token`` and ends nothing (an end of generation would stop the
    draft there, which the real draft model did not)."""
    wrong = (token + 1) % n_vocab
    while model.is_eog(wrong) or wrong == token:
        wrong = (wrong + 1) % n_vocab
    return wrong


class VerdictReplay(ReplaysReference):
    """The factory of the verdicts mode: draft mode's controller on the session's draft model
    (auto unless --no-adapt, as draft mode), with a :class:`VerdictDrafter` per reply replaying
    ``recorded`` for the prompt the bench runs. No copies: a copy's tokens come from the context,
    and a random-weight target's repetitive text would have them accepted where the real pair's
    would not; the recording holds the draft model's verdicts alone."""

    def __init__(self, recorded: RecordedVerdicts) -> None:
        super().__init__()
        self.recorded = recorded

    def __call__(self, ctx: ModeContext) -> Drafting:
        draft = ctx.draft
        if draft is None:
            raise ValueError("the verdicts mode spends a draft model's passes: give --draft")
        ctx = replace(ctx, copy=False)
        controller = draft_model(ctx).controller
        rule_costs = controller.costs if ctx.adaptive else None

        def new_drafter(reply: ReplySpec) -> VerdictDrafter:
            verdicts = self.recorded.get(self.prompt_id)
            return VerdictDrafter(
                draft,
                ctx.target.n_vocab,
                verdicts,
                reply.prompt_len,
                self._reference(),
                p_min=reply.p_min,
                banned=ctx.banned,
                costs=rule_costs,
                policy=ctx.policy,
                source=ctx.draft_source,
            )

        return Drafting(controller, new_drafter)


# --sweep: fixed draft configurations (k, p_min) beside auto mode, as in
# `localspec run --no-adapt --draft-max K --p-min P`
SWEEP_KS = (2, 3, 4, 6, 8)
SWEEP_P_MINS = (0.0, 0.75)


def fixed_mode(k: int, p_min: float) -> str:
    return f"fixed-k{k}-p{p_min:g}"


def sweep_modes() -> list[str]:
    return [fixed_mode(k, p) for k in SWEEP_KS for p in SWEEP_P_MINS]


def parse_fixed(mode: str) -> tuple[int, float] | None:
    """'fixed-k4-p0.75' -> (4, 0.75); None for every other mode."""
    m = re.fullmatch(r"fixed-k(\d+)-p([0-9.]+)", split_mode(mode)[0])
    return (int(m.group(1)), float(m.group(2))) if m else None


@dataclass(frozen=True)
class FixedDraft:
    """The factory of a fixed configuration: the draft model at a fixed k, stopped only by
    p_min (no marginal rule, no copies), on a private copy of the session's costs: what a
    fixed configuration measures must not teach auto mode, which has to learn this machine
    by itself."""

    k: int
    p_min: float

    def __call__(self, ctx: ModeContext) -> Drafting:
        draft = ctx.draft
        if draft is None:
            raise ValueError("a fixed draft configuration needs a draft model")
        costs = CostModel(ctx.costs.verify.copy(), ctx.costs.draft.copy())
        n_vocab, banned = ctx.target.n_vocab, ctx.banned
        return Drafting(
            FixedController(costs, self.k),
            lambda reply: ModelDrafter(draft, n_vocab, self.p_min, banned, None),
        )


def changing(ctx: ModeContext) -> Drafting:
    """Draft mode as it ran before steady sizes: on a private copy of the costs that says a change
    of batch size costs nothing, so every verify is as long as its draft (``sizes.SteadySize``
    plans no rows). Beside "draft" on a GPU it measures what the steady sizes are worth."""
    verify = ctx.costs.verify.copy()
    verify.change = 0.0
    return draft_model(replace(ctx, costs=CostModel(verify, ctx.costs.draft.copy(), ctx.policy)))


CHANGING = "changing"

# The draft model replaying a real pair's recorded verdicts (``VerdictReplay``)
VERDICTS = "verdicts"

# The target alone once more, interleaved like every mode: its speed-up against "none" is
# what this run's noise alone does to a ratio (nothing differs but the time it ran).
CONTROL = "control"


def register_modes(session, modes: Sequence[str], verdicts: RecordedVerdicts | None = None) -> None:
    """The bench's own modes, on the session's registry beside the built-in ones: oracles,
    the verdicts mode (replaying ``verdicts``), fixed configurations, the control, and 'X:match'
    (mode X verified by token matching, with a controller of its own). None of them is the
    user's use of the pair."""
    for name in modes:
        base = split_mode(name)[0]
        if base == CONTROL and base not in session.modes:
            session.modes.register(CONTROL, session.modes["none"].build, counts_as_use=False)
        if base not in session.modes:
            session.modes.register(base, _bench_factory(base, verdicts), counts_as_use=False)
        if name not in session.modes:
            session.modes.register(name, session.modes[base].build, counts_as_use=False)


def _bench_factory(base: str, verdicts: RecordedVerdicts | None) -> ModeFactory:
    oracle, fixed = parse_oracle(base), parse_fixed(base)
    if oracle:
        return Oracle(*oracle)
    if fixed:
        return FixedDraft(*fixed)
    if base == CHANGING:
        return changing
    if base == VERDICTS:
        if verdicts is None:
            raise ValueError("the verdicts mode replays recorded verdicts: give them (--verdicts)")
        return VerdictReplay(verdicts)
    raise ValueError(f"unknown bench mode {base!r}")

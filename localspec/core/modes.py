"""Drafting modes: a name for each way of drafting, and the factory that builds it.

A factory gets a :class:`ModeContext` (the session's models, their measured costs and the
drafting options, for one longest draft ``draft_max``) and builds a :class:`Drafting`: the
controller that picks k each step, kept across replies because what it learns (acceptance,
measured speed) belongs to this configuration, and a fresh drafter for each reply. A session
keeps one Drafting per registered mode and longest draft, so two configurations never share
a controller.

"none", "draft" and "lookup" are built in (:func:`builtin_modes`); the bench registers its
own (an oracle, fixed k and p_min, token matching) on its session's registry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace

from .controller import AdaptiveController, Controller, FixedController
from .costs import CostModel, DraftCost
from .drafters import Drafter, ModelDrafter, NoDrafter
from .engine import SpeculativeEngine
from .options import DEFAULT_DRAFT_MAX, DEFAULT_P_MIN
from .policy import DEFAULT, Policy
from .protocol import CachedModel
from .rules import LookupGate
from .suffix import Corpus, SuffixDrafter


@dataclass(frozen=True)
class ModeContext:
    """What a mode is built from: one per session and longest draft."""

    target: CachedModel
    draft: CachedModel | None
    costs: CostModel  # the pair's, measured at load: one verify curve for every mode of a target
    draft_max: int = DEFAULT_DRAFT_MAX  # the longest draft
    adaptive: bool = True  # False: every step drafts draft_max tokens (--no-adapt)
    copy: bool = True  # draft mode may copy trusted suffix matches (context, past replies) instead of drafting
    banned: frozenset[int] = frozenset()  # ids the draft must never propose (compat)
    prior: float | None = None  # the acceptance prior: what the pair's profile counted (else policy.prior_alpha)
    policy: Policy = DEFAULT  # every tunable of the draft-length decision
    fixed_note: str = "fixed: --no-adapt"  # without adaptation: what the drafting line says fixed k
    history: Callable[[], Sequence[Corpus]] | None = None  # past replies to draft from (None: none kept)
    draft_source: str = "draft"  # what the draft model's tokens are counted as ("mtp": the target's own layers)


@dataclass(frozen=True)
class ReplySpec:
    """What a drafter is made for: one reply."""

    prompt_len: int = 0
    p_min: float = DEFAULT_P_MIN  # the draft's confidence floor for this reply


@dataclass(frozen=True)
class Drafting:
    """A mode's state in a session: its controller, and a new drafter for each reply (which
    may share what the mode learns across replies, such as a lookup gate)."""

    controller: Controller
    new_drafter: Callable[[ReplySpec], Drafter]
    # drafters whose proposals cost no pass, asked beside new_drafter's every step (suffix
    # matches beside a draft model): the controller verifies one where it trusts it, whatever k
    new_copiers: Callable[[ReplySpec], tuple[Drafter, ...]] | None = None
    suffix: bool = False  # some of its drafts are suffix matches (so past replies count, where kept)

    @property
    def copies(self) -> bool:
        return self.new_copiers is not None

    def engine(self, target: CachedModel, reply: ReplySpec) -> SpeculativeEngine:
        """The engine for one reply of this mode."""
        copiers = self.new_copiers(reply) if self.new_copiers else ()
        return SpeculativeEngine(target, self.new_drafter(reply), self.controller, copiers)


ModeFactory = Callable[[ModeContext], Drafting]


@dataclass(frozen=True)
class DraftingMode:
    """A registered mode. Equal modes (same name, same factory) share their state in a
    session; a factory that holds its configuration as fields compares by it."""

    name: str
    build: ModeFactory
    counts_as_use: bool = True  # the user's drafting: its use goes into the machine's profile


class ModeRegistry:
    """Drafting modes by name."""

    def __init__(self) -> None:
        self._modes: dict[str, DraftingMode] = {}

    def register(self, name: str, build: ModeFactory, counts_as_use: bool = True) -> DraftingMode:
        """Add ``name`` (or replace it: the session then builds the new one afresh)."""
        self._modes[name] = DraftingMode(name, build, counts_as_use)
        return self._modes[name]

    def __getitem__(self, name: str) -> DraftingMode:
        try:
            return self._modes[name]
        except KeyError:
            raise ValueError(f"unknown drafting mode {name!r} (known: {', '.join(self._modes)})") from None

    def __contains__(self, name: object) -> bool:
        return name in self._modes

    def __iter__(self) -> Iterator[str]:
        return iter(self._modes)


def controller_for(
    ctx: ModeContext, draft_cost: bool, fixed_k: int | None = None, gated: bool = False, extend_when_sure: bool = False
) -> Controller:
    """A controller on the pair's verify curve (one target, so one table of verify times shared
    by every mode); a draft token costs the draft model's pass, or nothing (prompt lookup,
    whose gate decides each proposal: ``gated``; a draft model's marginal rule may run a
    draft it is sure of past k: ``extend_when_sure``). Without adaptation every step drafts ``draft_max``
    tokens unless ``fixed_k`` says otherwise."""
    costs = CostModel(ctx.costs.verify, ctx.costs.draft if draft_cost else DraftCost(), ctx.policy)
    if fixed_k is not None or not ctx.adaptive:
        k = ctx.draft_max if fixed_k is None else fixed_k
        return FixedController(costs, k, ctx.fixed_note, ctx.policy)
    return AdaptiveController(
        costs, ctx.draft_max, gated=gated, extend_when_sure=extend_when_sure, prior=ctx.prior, policy=ctx.policy
    )


def target_alone(ctx: ModeContext) -> Drafting:
    """The "none" mode: the target alone, through the same loop."""
    return Drafting(controller_for(ctx, draft_cost=False, fixed_k=0), lambda reply: NoDrafter())


def draft_model(ctx: ModeContext) -> Drafting:
    """The "draft" mode: the draft model, which copies a suffix match instead when the match has
    earned it (adaptive, with ``copy``). With --no-adapt the draft length is the user's: p_min
    alone stops a draft, no marginal rule."""
    draft = ctx.draft
    if draft is None:
        raise ValueError("this session has no draft model")
    controller = controller_for(ctx, draft_cost=True, extend_when_sure=True)
    rule_costs = controller.costs if ctx.adaptive else None
    # beside a draft model, copies (suffix matches) start distrusted (LookupGate.prior, below what a copy needs)
    # and earn trust from being scored against what the model's steps kept, for free: a
    # trusting start copies long stretches early that get rejected, and drags the draft
    # model's own acceptance and measured speed down with them
    gate = LookupGate(controller.costs, ctx.policy) if ctx.adaptive and ctx.copy else None

    def new_drafter(reply: ReplySpec) -> Drafter:
        return ModelDrafter(
            draft, ctx.target.n_vocab, reply.p_min, ctx.banned, rule_costs, ctx.policy, ctx.draft_source
        )

    def new_copiers(reply: ReplySpec) -> tuple[Drafter, ...]:
        return (SuffixDrafter(ctx.history, gate, ctx.policy, reply.prompt_len),)

    return Drafting(controller, new_drafter, new_copiers if gate else None, suffix=gate is not None)


def prompt_lookup(ctx: ModeContext) -> Drafting:
    """The "lookup" mode: suffix matches over the context and past replies, no draft model;
    the gate (adaptive) keeps what it learnt across replies."""
    controller = controller_for(ctx, draft_cost=False, gated=True)
    gate = LookupGate(controller.costs, ctx.policy) if ctx.adaptive else None

    def new_drafter(reply: ReplySpec) -> Drafter:
        return SuffixDrafter(ctx.history, gate, ctx.policy, reply.prompt_len)

    return Drafting(controller, new_drafter, suffix=True)


# the modes that draft with a model (a draft file, or the target's own MTP layers): a draft
# token costs that model's pass, and the rest is the same
MODEL_MODES = ("draft", "mtp")


def builtin_modes() -> ModeRegistry:
    """A registry with the modes every session has. "mtp" is "draft" with the target's own
    next-token-prediction layers as the draft model (the session's ``draft``)."""
    modes = ModeRegistry()
    modes.register("none", target_alone)
    modes.register("draft", draft_model)
    modes.register("mtp", draft_model)
    modes.register("lookup", prompt_lookup)
    return modes


def repeatable(mode: DraftingMode, ctx: ModeContext, at_load: CostModel) -> Drafting:
    """``mode`` with draft lengths that follow no timing, for a sampled reply with a seed.

    The speculative rule's random draws depend on how many tokens each step drafts, so a draft
    length picked from this moment's measured speed would make the same seed give another reply.
    Here k is fixed for every reply: the user's (``--no-adapt``), else what the costs measured
    at load choose at the prior acceptance; no marginal rule, no copies. The
    reply's distribution is the same either way; only the adaptation is given up. (Greedy
    replies never need this: they are the target's own, token for token.)"""
    if not ctx.adaptive:  # the user's fixed length already repeats
        return mode.build(replace(ctx, copy=False))
    k = mode.build(replace(ctx, costs=at_load)).controller.state().best_k
    note = "fixed for a seeded reply, as the costs measured at load chose"
    return mode.build(replace(ctx, draft_max=k, adaptive=False, copy=False, fixed_note=note))

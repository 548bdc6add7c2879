"""Modes only the bench runs, registered beside the session's own (``register_modes``): oracles
that replay the target-only reply with a known share of right tokens, fixed draft
configurations for ``--sweep``, the control (the target alone once more), and 'X:match', mode
X verified by token matching. None of them is the user's use of the pair."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..core.controller import FixedController
from ..core.costs import CostModel
from ..core.drafters import Draft, DrafterBase, ModelDrafter
from ..core.modes import Drafting, ModeContext, ModeFactory, ReplySpec, controller_for


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

    def draft(self, context, k, params, rng, draft_max=0, after=()) -> Draft:
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


class Oracle:
    """The factory of an oracle mode: an :class:`OracleDrafter` at zero draft cost, replaying
    the reference the bench gave it last (``replay``: the target-only reply of the prompt it
    runs next), with a fraction ``accuracy`` of its tokens right; ``k`` fixes the draft length."""

    def __init__(self, accuracy: float, k: int | None = None) -> None:
        self.accuracy, self.k = accuracy, k
        self.reference: Sequence[int] | None = None
        self.seed = 0

    def replay(self, reference: Sequence[int] | None, seed: int) -> None:
        self.reference, self.seed = reference, seed

    def __call__(self, ctx: ModeContext) -> Drafting:
        n_vocab = ctx.target.n_vocab
        return Drafting(
            controller_for(ctx, draft_cost=False, fixed_k=self.k), lambda reply: self._drafter(reply, n_vocab)
        )

    def _drafter(self, reply: ReplySpec, n_vocab: int) -> OracleDrafter:
        if self.reference is None:
            raise ValueError("an oracle mode needs the target-only run of the same prompt first")
        return OracleDrafter(reply.prompt_len, self.reference, n_vocab, 1.0 - self.accuracy, self.seed)


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


# The target alone once more, interleaved like every mode: its speed-up against "none" is
# what this run's noise alone does to a ratio (nothing differs but the time it ran).
CONTROL = "control"


def register_modes(session, modes: Sequence[str]) -> None:
    """The bench's own modes, on the session's registry beside the built-in ones: oracles,
    fixed configurations, the control, and 'X:match' (mode X verified by token matching, with
    a controller of its own). None of them is the user's use of the pair."""
    for name in modes:
        base = split_mode(name)[0]
        if base == CONTROL and base not in session.modes:
            session.modes.register(CONTROL, session.modes["none"].build, counts_as_use=False)
        if base not in session.modes:
            session.modes.register(base, _bench_factory(base), counts_as_use=False)
        if name not in session.modes:
            session.modes.register(name, session.modes[base].build, counts_as_use=False)


def _bench_factory(base: str) -> ModeFactory:
    oracle, fixed = parse_oracle(base), parse_fixed(base)
    if oracle:
        return Oracle(*oracle)
    if fixed:
        return FixedDraft(*fixed)
    raise ValueError(f"unknown bench mode {base!r}")

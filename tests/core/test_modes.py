"""Drafting modes on fakes: the built-in three, what each builds, and the registry."""

import pytest

from localspec.core.drafters import ModelDrafter, NoDrafter
from localspec.core.modes import (
    Drafting,
    DraftingMode,
    ModeContext,
    ReplySpec,
    builtin_modes,
    controller_for,
    draft_model,
    prompt_lookup,
    target_alone,
)
from localspec.core.suffix import SuffixDrafter
from tests.support.fakes import fixed_k, mode_context

V = 32


def context(draft=True, **kw) -> ModeContext:
    return mode_context(V, draft, **kw)


class TestBuiltinModes:
    def test_the_target_alone_never_drafts(self):
        drafting = target_alone(context())
        assert fixed_k(drafting.controller) == 0
        assert isinstance(drafting.new_drafter(ReplySpec()), NoDrafter)

    def test_draft_mode_pays_the_draft_pass_and_copies_with_a_gate_kept_across_replies(self):
        ctx = context(draft_max=6)
        drafting = draft_model(ctx)
        assert drafting.controller.costs.t_draft == ctx.costs.t_draft == 0.2
        assert drafting.controller.costs.verify is ctx.costs.verify  # one curve per target
        first, second = drafting.new_drafter(ReplySpec(p_min=0.3)), drafting.new_drafter(ReplySpec())
        assert isinstance(first, ModelDrafter) and isinstance(second, ModelDrafter)
        assert first is not second and first.p_min == 0.3 and second.p_min == 0.0
        assert first.costs is drafting.controller.costs  # the marginal rule's costs
        assert drafting.copies and drafting.new_copiers is not None
        (lookup,), (again,) = drafting.new_copiers(ReplySpec()), drafting.new_copiers(ReplySpec())
        assert isinstance(lookup, SuffixDrafter) and lookup is not again
        assert lookup.gate is again.gate and lookup.gate is not None and lookup.gate.prior == (1.0, 1.0)

    @pytest.mark.parametrize("adaptive, copy", [(False, True), (True, False)])
    def test_draft_mode_without_copies(self, adaptive, copy):
        drafting = draft_model(context(draft_max=5, adaptive=adaptive, copy=copy))
        drafter = drafting.new_drafter(ReplySpec())
        assert isinstance(drafter, ModelDrafter) and not drafting.copies
        # --no-adapt: every step drafts draft_max, stopped by p_min alone (no marginal rule)
        assert fixed_k(drafting.controller) == (None if adaptive else 5)
        assert (drafter.costs is None) == (not adaptive)

    def test_draft_mode_needs_a_draft_model(self):
        with pytest.raises(ValueError, match="no draft model"):
            draft_model(context(draft=False))

    def test_lookup_costs_no_draft_pass_and_keeps_its_gate(self):
        drafting = prompt_lookup(context())
        assert drafting.controller.costs.t_draft == 0.0
        first, second = drafting.new_drafter(ReplySpec()), drafting.new_drafter(ReplySpec())
        assert isinstance(first, SuffixDrafter) and isinstance(second, SuffixDrafter)
        assert first.gate is not None and first.gate is second.gate
        assert prompt_lookup(context(adaptive=False)).new_drafter(ReplySpec()).gate is None

    def test_a_fixed_k_wins_over_the_options(self):
        ctx = context(draft_max=8, adaptive=False)
        assert fixed_k(controller_for(ctx, draft_cost=False)) == 8
        assert fixed_k(controller_for(ctx, draft_cost=False, fixed_k=3)) == 3
        assert controller_for(ctx, draft_cost=False).costs.t_draft == 0.0


class TestRegistry:
    def test_the_built_in_names(self):
        modes = builtin_modes()
        assert list(modes) == ["none", "draft", "mtp", "lookup"]
        assert modes["draft"].build is draft_model and modes["draft"].counts_as_use
        # the target's own MTP layers draft as a draft model does, with a controller of their own
        assert modes["mtp"].build is draft_model and modes["mtp"] != modes["draft"]

    def test_an_unknown_name_says_which_are_known(self):
        with pytest.raises(ValueError, match="unknown drafting mode 'nope' \\(known: none, draft, mtp, lookup\\)"):
            builtin_modes()["nope"]

    def test_a_mode_is_its_name_and_its_factory(self):
        def build(ctx):
            return Drafting(controller_for(ctx, draft_cost=False, fixed_k=2), lambda reply: NoDrafter())

        modes = builtin_modes()
        added = modes.register("two", build, counts_as_use=False)
        assert modes["two"] is added and "two" in modes and not added.counts_as_use
        assert added == DraftingMode("two", build, False)  # the session keys its state on this
        assert added != DraftingMode("other", build, False)
        assert modes.register("two", target_alone) != added  # replaced: built afresh

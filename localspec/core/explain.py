"""Why drafting is on or off right now, in numbers and plain words: the statistics panel,
``localspec run`` and the server show it. It reads the controller; it decides nothing."""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, replace

from .controller import OPTIMISTIC_ALPHA, PROBE_K, UNMEASURED_K, AdaptiveController, Controller, FixedController


@dataclass(frozen=True)
class DraftingState:
    on: bool
    k: int  # the draft length the controller would ask for now (0: off)
    why: str  # a few words, with the measured numbers
    _: KW_ONLY
    next_try_in: int | None = None  # off: steps until drafting is tried again (None: not tried)
    draft_cost: float | None = None  # a draft pass, in target passes T(1)
    verify_cost: float | None = None  # checking k + 1 tokens (2 when off), in target passes
    expected_speedup: float | None = None  # the model's speed-up at its best k
    # off: the draft's catch-up grows faster than tries earn (controller.Tries.outpaced)
    outpaced: bool = False
    copies: bool = False  # off: trusted prompt-lookup matches are still proposed (they cost no draft pass)

    @property
    def line(self) -> str:
        then = ""
        if not self.on and self.next_try_in is not None:
            then = f"; tries again in {self.next_try_in} steps"
        elif not self.on and self.outpaced:
            then = "; not tried again while each step off adds more to the draft's catch-up than tries earn"
        elif not self.on and self.next_try_in is None and self.draft_cost is not None:
            then = "; not tried again on this hardware"
        if not self.on and self.copies:
            then += "; copies from the context still proposed where a match is trusted"
        return f"{'on' if self.on else 'off'}: {self.why}{then}"

    def as_dict(self) -> dict:
        return {
            "on": self.on,
            "k": self.k,
            "why": self.why,
            "line": self.line,
            "next_try_in": self.next_try_in,
            "draft_cost": self.draft_cost,
            "verify_cost": self.verify_cost,
            "expected_speedup": self.expected_speedup,
            "outpaced": self.outpaced,
            "copies": self.copies,
        }


def explain(ctl: Controller, copies: bool = False) -> DraftingState:
    """The controller's state in words: what a step does now, and the measurement behind it;
    ``copies``: the mode's drafter proposes trusted prompt-lookup matches while drafting is off."""
    state = _explain(ctl)
    return replace(state, copies=True) if copies and not state.on else state


def _explain(ctl: Controller) -> DraftingState:
    if isinstance(ctl, FixedController):
        if ctl.k == 0:
            return DraftingState(False, 0, "the target alone (no draft mode chosen)")
        return DraftingState(True, ctl.k, f"k={ctl.k} every step ({ctl.reason})")
    assert isinstance(ctl, AdaptiveController)
    if not ctl.costs.verify:
        k = min(UNMEASURED_K, ctl.draft_max)
        return DraftingState(True, k, f"nothing measured yet: starting at k={k}")
    if not ctl.hardware_allows():
        return _off_here(ctl)
    if ctl.tries.left > 0:  # a try's trial at PROBE_K, where the model itself wants none
        off = _guard(ctl) if ctl.model_k() > 0 else _off(ctl)
        return DraftingState(
            True, PROBE_K, f"trying k={PROBE_K} for a few steps, as {off.why}", draft_cost=off.draft_cost
        )
    if ctl.on():
        return _gated(ctl) if ctl.gated else _on(ctl, ctl.best_k())
    if ctl.model_k() > 0:
        return _guard(ctl)
    return _off(ctl)


def _units(ctl: AdaptiveController) -> tuple[float, float, float]:
    """T(1) in seconds, a draft pass and checking 2 tokens in target passes."""
    t1 = ctl.costs.T(1)
    return t1, ctl.costs.t_draft / t1, ctl.costs.T(2) / t1


def _on(ctl: AdaptiveController, k: int) -> DraftingState:
    t1, draft_cost, _ = _units(ctl)
    rates = ctl.speeds()
    speedup = float(rates[k] / rates[0])
    again = "a try found drafting pays again; " if ctl.resumed else ""
    cost = f"a draft token costs {draft_cost:.2f} of a target pass, " if ctl.costs.t_draft else ""
    extended = (
        f"; up to {ctl.draft_max} while the draft is sure of every token"
        if ctl.extend_when_sure and ctl.draft_max > k
        else ""
    )
    verify = ctl.costs.T(k + 1) / t1
    why = (
        f"{again}k={k}, expected {speedup:.2f}× ({cost}checking {k + 1} tokens costs {verify:.2f} passes, "
        f"acceptance {ctl.alpha:.0%}){extended}"
    )
    return DraftingState(True, k, why, draft_cost=draft_cost, verify_cost=verify, expected_speedup=speedup)


def _gated(ctl: AdaptiveController) -> DraftingState:
    """On, with the drafter's gate deciding each proposal (prompt lookup)."""
    _, draft_cost, check2 = _units(ctl)
    again = "a try found proposing pays again; " if ctl.resumed else ""
    why = (
        f"{again}up to {ctl.draft_max} tokens, as much of each match as matches of its length have "
        f"earned (checking 2 tokens costs {check2:.2f} passes, acceptance so far {ctl.alpha:.0%})"
    )
    return DraftingState(True, ctl.draft_max, why, draft_cost=draft_cost, verify_cost=check2)


def _guard(ctl: AdaptiveController) -> DraftingState:
    """Off although the model likes drafting: the guard measured it slower."""
    t1, draft_cost, check2 = _units(ctl)
    base, realized = 1.0 / t1, ctl.guard.rate or 0.0
    rates = ctl.speeds()
    why = f"drafting measured {realized:.1f} tok/s against {base:.1f} tok/s for the target alone "
    why += f"({realized / base:.2f}×)"
    return DraftingState(
        False,
        0,
        why,
        next_try_in=ctl.tries.next_in(),
        draft_cost=draft_cost,
        verify_cost=check2,
        expected_speedup=float(rates.max() / rates[0]),
        outpaced=ctl.tries.outpaced,
    )


def _costs_words(ctl: AdaptiveController) -> str:
    _, draft_cost, check2 = _units(ctl)
    draft = f"a draft token costs {draft_cost:.2f} of a target pass and " if ctl.costs.t_draft else ""
    return f"{draft}checking 2 tokens costs {check2:.2f} passes"


def _off_here(ctl: AdaptiveController) -> DraftingState:
    """Off because even OPTIMISTIC_ALPHA could not pay on this hardware: never tried."""
    _, draft_cost, check2 = _units(ctl)
    rates = ctl.speeds(OPTIMISTIC_ALPHA)
    best = float(rates[1:].max() / rates[0])
    why = f"{_costs_words(ctl)}; drafting would run at about {best:.2f}× even at {OPTIMISTIC_ALPHA:.0%} acceptance"
    return DraftingState(False, 0, why, draft_cost=draft_cost, verify_cost=check2, expected_speedup=best)


def _off(ctl: AdaptiveController) -> DraftingState:
    """Off because at the learnt acceptance drafting does not pay (tried again now and then)."""
    _, draft_cost, check2 = _units(ctl)
    rates = ctl.speeds()
    best = float(max(rates[1:].max(), 1e-12) / rates[0])
    why = f"{_costs_words(ctl)}; at the measured acceptance ({ctl.alpha:.0%}) drafting would run at about {best:.2f}×"
    return DraftingState(
        False,
        0,
        why,
        next_try_in=ctl.tries.next_in(),
        draft_cost=draft_cost,
        verify_cost=check2,
        expected_speedup=best,
        outpaced=ctl.tries.outpaced,
    )

"""Why drafting is on or off right now, in numbers and plain words: the statistics panel,
``localspec run`` and the server show it. It formats the controller's ``Choice`` (its reason
and figures) with the measured costs; it decides nothing."""

from __future__ import annotations

from dataclasses import KW_ONLY, asdict, dataclass, replace

from .choice import Choice, Reason
from .costs import CostModel
from .reading import Reading


@dataclass(frozen=True)
class DraftingState:
    on: bool
    model_k: int  # the speed model's draft length now (0: off); a step's proposal may differ (Step.k)
    why: str  # a few words, with the measured numbers
    _: KW_ONLY
    next_try_in: int | None = None  # off: steps until drafting is tried again (None: not tried)
    draft_cost: float | None = None  # a draft pass, in target passes T(1)
    verify_cost: float | None = None  # checking k + 1 tokens (2 when off), in target passes
    expected_speedup: float | None = None  # the model's speed-up at its best k
    # off: the draft's catch-up grows faster than tries earn (controller.Tries.outpaced)
    outpaced: bool = False
    # off: no try's drafts, every one accepted, would switch drafting on (budget.trial_length)
    unreachable: bool = False
    copies: bool = False  # off: trusted suffix matches are still proposed (they cost no draft pass)
    history: str = ""  # where the mode's suffix drafts may also come from: "12 past replies" ("": none)
    reading: str = ""  # where the draft does not read the prompt now: why, in numbers (``Reading.line``)

    @property
    def line(self) -> str:
        # no draft for now where the prompt's reading decides it: no try is waited for
        then = f"; {self.reading}" if self.reading else self._tries()
        where = f"the context and {self.history}" if self.history else "the context"
        if not self.on and self.copies:
            then += f"; copies from {where} still proposed where a match is trusted"
        elif self.history and self.on:
            then += f"; matches from {where}"
        return f"{'on' if self.on else 'off'}: {self.why}{then}"

    def _tries(self) -> str:
        """Off: when drafting is tried again, if ever."""
        if self.on:
            return ""
        if self.next_try_in is not None:
            return f"; tries again in {self.next_try_in} steps"
        if self.unreachable:
            return "; not tried again at this acceptance: a try would not switch drafting on, every draft accepted"
        if self.outpaced:
            return "; not tried again while each step off adds more to the draft's catch-up than tries earn"
        return "; not tried again on this hardware" if self.draft_cost is not None else ""

    def as_dict(self) -> dict:
        fields = asdict(self)
        return {
            "on": fields.pop("on"),
            "model_k": fields.pop("model_k"),
            "why": fields.pop("why"),
            "line": self.line,
            **fields,
        }


def explain(
    choice: Choice, costs: CostModel, copies: bool = False, history: str = "", reading: Reading | None = None
) -> DraftingState:
    """A controller's choice (``Controller.state``) in words, with the measurements behind it
    read from ``costs``; ``copies``: the mode's drafter proposes trusted suffix matches while
    drafting is off; ``history``: the past replies they may come from, in words; ``reading``:
    the draft's reading of the reply's prompt (said where it is put off or skipped)."""
    said = reading.line if reading is not None and choice.reason is Reason.READING else ""
    state = replace(_words(choice, costs), history=history, reading=said)
    return replace(state, copies=True) if copies and not state.on else state


def _words(c: Choice, costs: CostModel) -> DraftingState:
    if c.reason is Reason.FIXED:
        if c.k == 0:
            return DraftingState(False, 0, "the target alone (no draft mode chosen)")
        return DraftingState(True, c.k, f"k={c.k} every step ({c.note})")
    if c.reason is Reason.UNMEASURED:
        return DraftingState(True, c.k, f"nothing measured yet: starting at k={c.k}")
    _, draft_cost, check2 = _units(costs)
    if c.reason is Reason.ON:
        return _on(c, costs)
    if c.reason is Reason.GATED:
        again = "a try found proposing pays again; " if c.resumed else ""
        why = (
            f"{again}up to {c.k} tokens, as much of each match as matches of its source and length have "
            f"earned (checking 2 tokens costs {check2:.2f} passes, acceptance so far {c.alpha:.0%})"
        )
        return DraftingState(True, c.k, why, draft_cost=draft_cost, verify_cost=check2)
    if c.reason is Reason.STEADY:
        return _steady(c, costs)
    if c.reason is Reason.READING:
        read = f" (k={c.best_k} would run at about {c.best_speedup:.2f}× with the prompt read)" if c.best_k else ""
        why = f"no draft this step{read}"
        return DraftingState(False, 0, why, draft_cost=draft_cost, verify_cost=check2, expected_speedup=c.best_speedup)
    if c.reason is Reason.TRY:
        off = _off(c, costs)
        return DraftingState(True, c.k, f"trying k={c.k} for a few steps, as {off.why}", draft_cost=draft_cost)
    return _off(c, costs)


def _units(costs: CostModel) -> tuple[float, float, float]:
    """T(1) in seconds, a draft pass and checking 2 tokens in target passes."""
    t1 = costs.T(1)
    return t1, costs.t_draft / t1, costs.T(2) / t1


def _on(c: Choice, costs: CostModel) -> DraftingState:
    t1, draft_cost, _ = _units(costs)
    k = c.best_k
    again = "a try found drafting pays again; " if c.resumed else ""
    cost = f"a draft token costs {draft_cost:.2f} of a target pass, " if costs.t_draft else ""
    extended = f"; up to {c.draft_max} while the draft is sure of every token" if c.draft_max > k else ""
    verify = costs.T(k + 1) / t1
    why = (
        f"{again}k={k}, expected {c.best_speedup:.2f}× ({cost}checking {k + 1} tokens costs {verify:.2f} passes, "
        f"acceptance {c.alpha:.0%}){extended}"
    )
    return DraftingState(True, k, why, draft_cost=draft_cost, verify_cost=verify, expected_speedup=c.best_speedup)


def _steady(c: Choice, costs: CostModel) -> DraftingState:
    """The verify size kept: the size another choice wanted would not save a change of it."""
    t1, draft_cost, _ = _units(costs)
    kept = f"k={c.k}, checking {c.rows} tokens, padded," if c.k else "the target alone"
    wanted = "the target alone" if c.wanted == 1 else f"checking {c.wanted} tokens"
    why = (
        f"{kept} kept: {wanted} would not save what a change of batch size costs "
        f"({costs.change / t1:.2f} passes) over the tokens ahead (acceptance {c.alpha:.0%})"
    )
    return DraftingState(c.k > 0, c.k, why, draft_cost=draft_cost, verify_cost=costs.T(max(c.rows, 1)) / t1)


def _off(c: Choice, costs: CostModel) -> DraftingState:
    """Off: the hardware rules drafting out (never tried), or the learnt acceptance does not pay
    (tried again now and then)."""
    _, draft_cost, check2 = _units(costs)
    draft = f"a draft token costs {draft_cost:.2f} of a target pass and " if costs.t_draft else ""
    words = f"{draft}checking 2 tokens costs {check2:.2f} passes"
    if c.reason is Reason.HARDWARE:
        why = f"{words}; drafting would run at about {c.best_speedup:.2f}× even at {c.alpha:.0%} acceptance"
    else:
        refused = f", the draft proposing in {c.propose:.0%} of its passes" if c.propose < 0.9 else ""
        why = f"{words}; at the measured acceptance ({c.alpha:.0%}{refused}) drafting would run "
        why += f"at about {c.best_speedup:.2f}×"
    return DraftingState(
        False,
        0,
        why,
        next_try_in=c.next_try_in,
        draft_cost=draft_cost,
        verify_cost=check2,
        expected_speedup=c.best_speedup,
        outpaced=c.outpaced,
        unreachable=c.unreachable,
    )

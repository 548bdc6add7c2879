"""Steady verify sizes where a change of batch size costs (a GPU): the rows a step's plan verifies.

llama.cpp's CUDA backend captures a graph per batch shape, so an evaluation of another size than
the one before costs more than either size (``calibration.time_change`` measures it at load;
``CostModel.change``). There, each step verifies a steady number of rows, its draft padded to
them (``engine.pad``), and the number changes only where the change pays for itself. On a CPU a
change costs nothing and nothing here runs.
"""

from __future__ import annotations

from dataclasses import replace

from .choice import Choice, Reason
from .costs import CostModel, expected_tokens, pays_to_change, speeds
from .policy import DEFAULT, Policy


class SteadySize:
    """The rows the target verifies now (``size``; 0: none yet this reply), kept in the costs
    too (``CostModel.size``) so every rule that prices tokens within a step reads the step's
    curve (``CostModel.step_curve``)."""

    def __init__(self, costs: CostModel, policy: Policy = DEFAULT) -> None:
        self.costs, self.policy = costs, policy
        self.size = 0

    def reset(self) -> None:
        """A new reply: the prompt's read changes the size anyway."""
        self.size = self.costs.size = 0

    def plan(self, choice: Choice, alpha: float, propose: float, budget: int | None, gated: bool) -> Choice:
        """``choice`` with the rows its step verifies: k + 1. The size of the step before stays
        unless the new one saves more than a change costs (``_pays``), or it is a try from single
        tokens (its price counts its changes); kept, the draft runs to the size, no further
        (docs/design.md, "Sure runs where a change costs"). Lookup's copies, of every length,
        stay one-offs beside single tokens (their gate prices the changes). Where a change costs
        nothing (a CPU), ``choice`` as it is."""
        if not self.costs.change:
            return choice
        if choice.reason is Reason.READING:  # single tokens while the draft waits on the prompt's
            self.costs.size = 1  # reading (copies priced at them); ``size`` stays unset: the first
            return replace(choice, rows=1)  # drafting step's is chosen afresh, as after the prompt
        want = 1 if gated else choice.k + 1
        held = self.size not in (0, want) and not (choice.reason is Reason.TRY and self.size == 1)
        if held and not self._pays(want, alpha, propose, budget):
            choice = replace(choice, k=self.size - 1, reason=Reason.STEADY, wanted=want)
            want = self.size
        self.size = self.costs.size = want
        return replace(choice, rows=want)

    def _pays(self, rows: int, alpha: float, propose: float, budget: int | None) -> bool:
        """Whether moving from ``size`` rows to ``rows`` saves a change over the tokens the
        acceptance estimate speaks for (its memory, 1 / (1 - decay) steps, of the size that drafts
        more), or the reply's budget: either way of the change is judged on the same tokens."""
        drafts = max(rows, self.size) - 1
        tokens = float(expected_tokens(alpha, drafts)) / (1.0 - self.policy.decay)
        tokens = min(tokens, budget) if budget is not None else tokens
        now, new = self.rate(self.size, alpha, propose), self.rate(rows, alpha, propose)
        return pays_to_change(now, new, tokens, self.costs.change)

    def rate(self, rows: int, alpha: float, propose: float) -> float:
        """The best expected rate of a step verifying ``rows`` rows, its draft padded to them."""
        return float(speeds(self.costs, alpha, rows - 1, propose=propose, steady=rows).max())

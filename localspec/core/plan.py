"""A step's whole plan, made in one call (``decide``): what it proposes, from where, how far a
sure draft may run and how many rows the target verifies. The engine carries the plan out and
decides nothing; docs/design.md, "How a step is decided", walks through it with examples that
tests/core/test_design_examples.py runs.

The order of the decision:
  1. the controller's draft length k and why (``Controller.choose``: the speed model at the
     learnt acceptance, tries while off, the reading of a long prompt, a steady verify size);
  2. the step's limit: the reply's token budget and the context's room;
  3. a copy (a suffix match from the context or past replies; each proposed at no pass, its
     length priced by its gate) in place of the draft model's k tokens where its expected rate
     beats theirs, and the draft model's tokens after it (``Controller.pick``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .choice import Choice
from .drafters import Draft
from .options import MAX_DRAFT


@dataclass(frozen=True)
class Now:
    """What is known when a step is planned."""

    budget: int  # the tokens the reply may still emit
    room: int  # the context's free positions
    copies: Callable[[int], Sequence[Draft]] = lambda n: ()  # the copiers' proposals of up to n tokens (no pass)
    behind: Callable[[], int] | None = None  # the tokens the draft model has not read (asked only if needed)
    extends: bool = False  # the drafter can draft on after a copy
    ends: Callable[[Sequence[int]], int] = len  # how many tokens run through the first end of generation
    drafter: str = ""  # the drafter's name: the source of its own tokens


@dataclass(frozen=True)
class Plan:
    """One step: propose ``copy`` (if any), then up to ``k`` of the drafter's tokens (after a
    copy, its extension), on to ``draft_max`` where every one is sure; verify ``rows`` rows
    (the proposal padded to them; 0: as many as were proposed, plus one)."""

    choice: Choice  # the controller's k and why, with the figures behind it
    source: str = ""  # "": the target alone; "context" or "history": a copy; else the drafter's name
    copy: Draft | None = None
    k: int = 0  # the drafter's tokens (the draft length it is asked for)
    draft_max: int = 0  # how far a sure draft may run (0 or k: no further than k)
    limit: int = 0  # the most tokens a proposal may have: the budget's and the room's
    rows: int = 0
    copies: tuple[Draft, ...] = ()  # every copier's proposal, the one taken or not (each copier learns from its own)

    @property
    def model_k(self) -> int:
        """The speed model's k within the step's limit (``Step.model_k``)."""
        return min(self.choice.k, self.limit)

    @property
    def line(self) -> str:
        """The plan in one line, as docs/design.md's examples write it."""
        copied = f" copy={len(self.copy.ids)}" if self.copy is not None else ""
        sure = f" draft_max={self.draft_max}" if self.draft_max > self.k else ""
        source = self.source or "none"
        return f"source={source}{copied} k={self.k}{sure} rows={self.rows} reason={self.choice.reason.value}"


def step_limit(budget: int, room: int) -> int:
    """Drafting past the token budget or the context's room is wasted work: a step emits one
    token of the target's own besides its accepted drafts."""
    return max(0, min(budget - 1, room - 1))


def copy_limit(budget: int, room: int) -> int:
    """The longest copy the copiers are asked for (its gate prices how much of it to propose),
    and the room a copy and its extension share."""
    return min(step_limit(budget, room), MAX_DRAFT)


class Decides:
    """``decide``, for a controller: its ``choose`` gives k and why, its ``pick`` the copy."""

    def choose(self, behind: Callable[[], int] | None = None, budget: int | None = None) -> Choice:
        raise NotImplementedError

    def pick(self, copies: Sequence[Draft], k: int, room: int = 0) -> tuple[Draft | None, int]:
        raise NotImplementedError

    def decide(self, now: Now) -> Plan:
        """The step's whole plan from what is known ``now``: the controller's k and why; then,
        within the step's limit, the copy worth more than k drafts, if any, and the draft
        model's tokens after it (none after a copy through an end of generation)."""
        choice = self.choose(now.behind, now.budget)
        limit = step_limit(now.budget, now.room)
        k = min(choice.k, limit)
        n_copy = copy_limit(now.budget, now.room)
        copies = tuple(now.copies(n_copy)) if n_copy > 0 else ()
        copy, n_extend = self.pick(copies, k, n_copy if now.extends else 0)
        if copy is not None:
            n_extend = n_extend if now.ends(copy.ids) == len(copy.ids) else 0
            return Plan(choice, copy.source, copy, n_extend, n_extend, limit, choice.rows, copies)
        draft_max = min(choice.draft_max, limit)
        return Plan(choice, now.drafter if k else "", None, k, draft_max, limit, choice.rows, copies)

"""Whether the draft model reads a reply's prompt: only where reading it costs less than what
drafting is expected to save on the reply.

A draft model reads, token for token, what the target read before it can draft. On a CPU a 0.5B
draft reads a prompt in about a third of a 1.5B target's time, and a question over an 800-token
document then lost by the wall clock what drafting won on its 128-token answer. So, at the start
of each reply:

- ``win_seconds``: what drafting is expected to save: the reply's expected tokens times (1 /
  tokens per second alone - 1 / tokens per second at the best draft length), at the learnt
  acceptance;
- ``read_seconds``: what the draft's reading of the tokens it has not read costs here
  (``CostModel.read``, timed at load and refined by every catch-up);
- the draft model sits the reply out (``skip``) where reading costs more than
  ``Policy.read_share`` of the saving. Copies from the context and the history cost no reading
  and are still proposed. Where drafting is off, a try prices the reading itself
  (``budget.Tries``), but for the first, which nothing prices: its saving is taken at best
  (every draft accepted);
- else it reads when it first drafts. Where that would delay the first token by more than a
  target pass, the first step drafts nothing (``hold``): the first token comes at the target's
  own speed.

A window of the prompt's end was measured and dropped: over six questions on documents of
1,200-1,700 tokens the 0.5B draft agreed with the target on 0.89 of the answers' tokens after
the whole prompt (mean), 0.83 after its last 1,024 tokens, 0.64 after its last 512: what an
answer needs is anywhere in a document (the Q4 pair, greedy, ``/tmp``-free: the commit message
holds the command). Before anything is timed (``CostModel.verify`` empty) the draft reads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .costs import CostModel
from .policy import Policy


@dataclass(frozen=True)
class Reading:
    """What the draft model's reading of a reply's prompt costs, and what is made of it."""

    n_prompt: int  # the context's tokens when the reply began
    n_read: int  # the tokens the draft had not read (its cache holds the rest)
    read_seconds: float  # what reading them costs here (NaN: nothing timed yet)
    win_seconds: float  # what drafting is expected to save over the reply (0: nothing)
    n_reply: int  # the reply tokens that expectation counts
    skip: bool = False  # reading costs more than the share of the saving: no draft this reply
    hold: bool = False  # reading would delay the first token by more than a target pass

    @property
    def line(self) -> str:
        """The drafting line's account of it, in numbers ("" where nothing is said)."""
        read = f"reading its {self.n_read:,} prompt tokens would cost {self.read_seconds:.2f} s"
        if self.skip:
            return (
                f"the draft sits this reply out: {read}, more than it is expected to save "
                f"({self.win_seconds:.2f} s over {self.n_reply} tokens)"
            )
        if self.hold:
            return f"the first token is the target's alone: the draft reads after it ({read})"
        return ""


def win_seconds(rates: np.ndarray, n_reply: int) -> float:
    """Seconds drafting saves over ``n_reply`` tokens at the best of ``rates`` (tokens per
    second by draft length, ``rates[0]`` the target alone), 0 where none beats the target."""
    if len(rates) < 2 or not rates[0] > 0:
        return 0.0
    return max(0.0, n_reply * (1.0 / float(rates[0]) - 1.0 / float(np.nanmax(rates))))


def plan_reading(
    costs: CostModel, rates: np.ndarray, n_prompt: int, n_read: int, n_reply: int, policy: Policy
) -> Reading:
    """Whether the draft reads the ``n_read`` tokens it has not read of a context of ``n_prompt``
    for a reply of ``n_reply`` expected tokens, at ``rates`` (``costs.speeds``)."""
    if not costs.verify:
        return Reading(n_prompt, n_read, math.nan, math.nan, n_reply)
    win, read = win_seconds(rates, n_reply), costs.read(n_read)
    skip = win > 0 and read > policy.read_share * win  # (no saving: tries price the reading themselves)
    return Reading(n_prompt, n_read, read, win, n_reply, skip=skip, hold=not skip and read > costs.T(1))

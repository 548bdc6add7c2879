"""docs/design.md, "How a step is decided": each example's state built here, its plan made by
``Controller.decide`` and checked against the plan line the page writes under it, so the page
cannot drift from the code (issue 66)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from localspec.core.controller import AdaptiveController
from localspec.core.drafters import Draft
from localspec.core.plan import Now, Plan
from tests.support.plans import H200_F16, costs, draft_mode

DESIGN = Path(__file__).resolve().parents[2] / "docs" / "design.md"
REPLY = 256


def page_plans() -> dict[str, str]:
    """The page's examples: a fenced block ```plan NAME holding the plan's line."""
    text = DESIGN.read_text(encoding="utf-8")
    return dict(re.findall(r"```plan ([\w.-]+)\n(.*?)\n```", text))


def first_plan(ctl: AdaptiveController, n_prompt: int, n_read: int, copies=()) -> Plan:
    ctl.begin_reply()
    ctl.plan_read(n_prompt, n_read, REPLY)
    return ctl.decide(Now(REPLY, 4096, lambda n: list(copies), extends=bool(copies), drafter="draft"))


def cold_first_step() -> Plan:
    return first_plan(draft_mode(costs()), 20, 20)


def cold_first_step_60() -> Plan:
    return first_plan(draft_mode(costs()), 60, 60)


def acceptance_09() -> Plan:
    return first_plan(draft_mode(costs(), prior=0.9), 100, 0)


def history_match_20() -> Plan:
    match = Draft(ids=tuple(range(100, 120)), alpha=0.95, source="history", match=("history", 8))
    return first_plan(draft_mode(costs(), prior=0.9), 100, 0, copies=[match])


def gpu_change_1() -> Plan:
    return first_plan(draft_mode(costs(H200_F16, 0.56, read=0.01, change=1.0), prior=0.9), 100, 0)


EXAMPLES = {
    "cold-first-step": cold_first_step,
    "cold-first-step-60-token-prompt": cold_first_step_60,
    "acceptance-0.9-steep-cpu": acceptance_09,
    "history-match-20-with-draft-on": history_match_20,
    "acceptance-0.9-gpu-change-1.0": gpu_change_1,
}


def test_the_page_shows_every_example_and_no_other():
    assert set(page_plans()) == set(EXAMPLES)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_the_page_predicts_the_plan(name):
    assert EXAMPLES[name]().line == page_plans()[name]


def test_the_gpu_example_keeps_its_size_the_next_step():
    """The page's GPU paragraph: the next step keeps 4 rows where 5 would not save the change."""
    ctl = draft_mode(costs(H200_F16, 0.56, read=0.01, change=1.0), prior=0.9)
    first = first_plan(ctl, 100, 0)
    ctl.observe(first.k, first.k, 1)  # all kept: acceptance rises
    then = ctl.decide(Now(REPLY, 4096, drafter="draft"))
    assert (then.rows, then.choice.reason.value) == (4, "steady") and then.choice.wanted == 5

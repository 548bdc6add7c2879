"""``Controller.decide``: one call makes a step's whole plan (core/plan.py)."""

from __future__ import annotations

from localspec.core.controller import FixedController
from localspec.core.drafters import Draft
from localspec.core.plan import Now, copy_limit, step_limit
from tests.support.plans import costs, draft_mode

COPY = Draft(ids=(7, 8, 9, 10), alpha=1.0, source="context", match=("context", 4))


def test_the_limit_is_the_budget_and_the_room_less_the_targets_own_token():
    assert step_limit(budget=10, room=100) == 9
    assert step_limit(budget=100, room=4) == 3
    assert step_limit(budget=1, room=100) == 0
    assert copy_limit(budget=1000, room=1000) == 32  # options.MAX_DRAFT


def test_a_fixed_k_is_cut_to_the_limit():
    plan = FixedController(costs(), 8).decide(Now(budget=4, room=100, drafter="draft"))
    assert (plan.source, plan.k, plan.draft_max, plan.limit, plan.model_k) == ("draft", 3, 0, 3, 3)


def test_k_zero_proposes_nothing_and_names_no_source():
    plan = FixedController(costs(), 0).decide(Now(budget=100, room=100, drafter="draft"))
    assert (plan.source, plan.k, plan.copy) == ("", 0, None)
    assert plan.line == "source=none k=0 rows=0 reason=fixed"


def test_every_copiers_proposal_is_in_the_plan_the_one_taken_or_not():
    asked = []
    other = Draft(ids=(1,), alpha=0.1, source="history", match=("history", 2))

    def copies(n):
        asked.append(n)
        return [COPY, other]

    plan = draft_mode(costs(), prior=0.9).decide(Now(100, 1000, copies, extends=True, drafter="draft"))
    assert asked == [32] and plan.copies == (COPY, other)
    assert plan.copy is COPY and plan.source == "context"


def test_a_copy_through_an_end_of_generation_is_not_extended():
    def ends_at_first(ids):  # the first token ends the reply
        return 1

    for ends, extended in ((len, True), (ends_at_first, False)):
        ctl = draft_mode(costs(shape=(1.0,) * 15, draft_pass=0.05), prior=0.9)  # flat: an extension pays
        ctl.begin_reply()
        plan = ctl.decide(Now(100, 1000, lambda n: [COPY], extends=True, ends=ends, drafter="draft"))
        assert plan.copy is COPY and (plan.k > 0) == extended


def test_no_copier_is_asked_where_the_step_has_no_room():
    asked = []
    plan = draft_mode(costs()).decide(Now(1, 100, lambda n: asked.append(n) or [COPY], drafter="draft"))
    assert asked == [] and plan.copy is None and plan.k == 0

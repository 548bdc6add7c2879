"""A load's timings and draft mode's controller, as docs/design.md's examples state them
(tests/core/test_design_examples.py, test_plan.py)."""

from __future__ import annotations

from localspec.core.calibration import CALIBRATION_PREFIX
from localspec.core.controller import AdaptiveController
from localspec.core.costs import CostModel, DraftCost, VerifyCurve

STEEP = (1.58, 1.75, 1.88, 2.17, 2.24, 2.46, 2.82, 2.82)  # T(n)/T(1), n = 2..9 (design.md's "steep")
H200_F16 = (1.27, 1.3, 1.34, 1.36, 1.38, 1.41, 1.43, 1.47, 1.5, 1.54, 1.58, 1.61, 1.65, 1.69, 1.72)


def costs(shape=STEEP, draft_pass=0.27, read=0.02, t1=0.1, change=0.0) -> CostModel:
    """A load's timings: the curve T(1)·shape, a draft pass and a prompt token's read in T(1)."""
    curve = {1: t1, **{n + 2: t1 * r for n, r in enumerate(shape)}}
    draft = DraftCost(draft_pass * t1)
    draft.observe_read(CALIBRATION_PREFIX, read * t1 * CALIBRATION_PREFIX)
    verify = VerifyCurve(curve)
    verify.change = change * t1
    return CostModel(verify, draft)


def draft_mode(c: CostModel, prior: float | None = None) -> AdaptiveController:
    """Draft mode's controller (``modes.draft_model``): --draft-max 16, sure drafts run past k."""
    return AdaptiveController(c, 16, extend_when_sure=True, prior=prior)

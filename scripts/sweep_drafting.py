"""Side-by-side sweep of drafting variants on one loaded pair, for tuning the engine.

Each variant keeps its own controller (and copy gate) across prompts, as a session does; the
variants run interleaved per prompt, so a noisy machine slows them alike. Variants:
  none         the target alone
  adaptive     the draft model, adaptive k, no copies from the context
  adaptive-p0  the same with p_min 0: the marginal rule alone ends a draft
  hybrid       adaptive plus copies from the context (what `--draft` does by default)

    .venv/bin/python scripts/sweep_drafting.py TARGET DRAFT --prompts edit-refactor,edit-js,code-lru --rounds 2
"""

from __future__ import annotations

import argparse
from pathlib import Path

from localspec.bench import suites
from localspec.chat.session import LoadOptions, PairSpec, Session
from localspec.core.controller import AdaptiveController, Controller, FixedController
from localspec.core.costs import CostModel, DraftCost
from localspec.core.drafters import ModelDrafter, NoDrafter, PromptLookupDrafter
from localspec.core.engine import SpeculativeEngine
from localspec.core.modes import COPY_PRIOR
from localspec.core.rules import LookupGate
from localspec.core.sampling import SamplingParams
from localspec.core.stats import RunStats

VARIANTS = ("none", "adaptive", "adaptive-p0", "hybrid")


class Variant:
    def __init__(self, name: str, session: Session) -> None:
        self.name, self.session = name, session
        # private copies: what one variant measures must not teach another
        costs = CostModel(session.costs.verify.copy(), session.costs.draft.copy() if name != "none" else DraftCost())
        draft_max = session.options.draft_max
        self.controller: Controller = (
            FixedController(costs, 0) if name == "none" else AdaptiveController(costs, draft_max)
        )
        self.gate = LookupGate(costs, COPY_PRIOR) if name == "hybrid" else None

    def drafter(self):
        s = self.session
        if self.name == "none":
            return NoDrafter()
        p_min = 0.0 if self.name == "adaptive-p0" else s.options.p_min
        d = ModelDrafter(s.draft, s.target.n_vocab, p_min, s.compat.banned_draft_ids, self.controller.costs)
        return d.with_lookup(PromptLookupDrafter(gate=self.gate)) if self.gate else d

    def run(self, prompt: str, n_tokens: int) -> RunStats:
        self.session.reset()
        ids = self.session.fit([{"role": "user", "content": prompt}], n_tokens)[0]
        stats = RunStats()
        engine = SpeculativeEngine(self.session.target, self.drafter(), self.controller)
        for step in engine.generate(ids, SamplingParams(), n_tokens):
            stats.add(step)
        return stats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("target", type=Path)
    ap.add_argument("draft", type=Path)
    ap.add_argument("--prompts", default="edit-refactor,edit-js,code-lru")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    args = ap.parse_args()
    session = Session.load(PairSpec(args.target, args.draft), LoadOptions())
    suite = {p["id"]: p["prompt"] for p in suites.load_suite()["prompts"]}
    variants = [Variant(name, session) for name in ["none", *(v for v in args.variants.split(",") if v != "none")]]
    for _ in range(args.rounds):
        for pid in args.prompts.split(","):
            base = None
            for v in variants:
                st = v.run(suite[pid], args.max_tokens)
                base = base or st.tokens_per_second
                print(
                    f"{pid:16} {v.name:9} {st.tokens_per_second:5.2f} tok/s  "
                    f"x{st.tokens_per_second / base:.2f}  acceptance {st.acceptance_rate or 0:.2f}  "
                    f"tok/pass {st.tokens_per_pass:.2f}  draft {st.draft_seconds:.1f}s "
                    f"verify {st.verify_seconds:.1f}s",
                    flush=True,
                )
    session.close()


if __name__ == "__main__":
    main()

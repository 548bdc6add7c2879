"""One cold reply, step by step: what the controller chose and believed, and what the step cost.

Loads the pair as ``localspec run`` does (calibration, no warm-up; with ``--profile`` from the
pair's profile in the data dir, as for a returning user, else from none), runs one prompt
of a suite greedily, and prints per step the draft length k, the tokens drafted and accepted,
the draft's and the verify's time, the cost model's draft pass and T(1) at that point, and
the drafting line wherever it changes (what the app shows: why drafting is on or off); then
the totals. Where auto and a fixed configuration differ on a prompt, two traces side by side
show whether the choice or the costs it rests on part from what the steps measured.

    .venv/bin/python scripts/trace_reply.py --target models/qwen2.5-coder-1.5b-f16.gguf \\
        --draft models/qwen2.5-coder-0.5b.gguf --prompt held-edit-errors-go [--suite heldout] [--fixed 4] \\
        [--profile]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from localspec.bench import suites
from localspec.chat.session import LoadOptions, PairSpec, Session
from localspec.core.sampling import SamplingParams
from localspec.models.profiles import PROFILES_FILE, ProfileStore
from localspec.settings import data_dir


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", required=True)
    ap.add_argument("--draft", required=True)
    ap.add_argument("--prompt", required=True, help="a prompt id of the suite")
    ap.add_argument("--suite", default="heldout")
    ap.add_argument("--fixed", type=int, default=0, help="draft this many every step (--no-adapt, p_min 0)")
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument(
        "--profile",
        action="store_true",
        help="start from the pair's profile in the data dir (LOCALSPEC_DATA_DIR), as `localspec run` does "
        "for a returning user, and add this reply to it",
    )
    args = ap.parse_args()
    prompts = {p["id"]: p["prompt"] for p in suites.load_suite(args.suite)["prompts"]}
    if args.prompt not in prompts:
        raise SystemExit(f"no prompt {args.prompt!r} in the {args.suite} suite: {', '.join(prompts)}")
    options = LoadOptions(adaptive=False, draft_max=args.fixed, p_min=0.0) if args.fixed else LoadOptions()
    profiles = ProfileStore(data_dir() / PROFILES_FILE) if args.profile else None
    session = Session.load(PairSpec(Path(args.target), Path(args.draft)), options, profiles=profiles)
    try:
        costs = session.costs
        print(
            f"at load: T(1) {1000 * costs.T(1):.1f} ms, a draft pass {costs.t_draft / costs.T(1):.2f} T(1), "
            f"T(3) {costs.T(3) / costs.T(1):.2f}, T(5) {costs.T(5) / costs.T(1):.2f} T(1)"
        )
        steps, line = [], ""
        for s in session.chat([{"role": "user", "content": prompts[args.prompt]}], SamplingParams(), args.max_tokens):
            steps.append(s)  # printed as it comes: the model's costs are those of this step
            step = f"k={s.k:2d} drafted={len(s.drafted):2d} accepted={s.n_accepted:2d}"
            spent = f"draft={1000 * s.draft_seconds:6.1f} ms verify={1000 * s.verify_seconds:6.1f} ms"
            model = f"model: pass {1000 * costs.t_draft:5.1f} ms, T(1) {1000 * costs.T(1):5.1f} ms"
            now = session.drafting_state().line  # the drafting line, printed where it changes
            print(f"{step} {spent}  {model}" + (f"  {now}" if now != line else ""))
            line = now
        n_tokens = sum(len(s.emitted) for s in steps)
        decode = sum(s.step_seconds for s in steps)
        print(
            f"{len(steps)} steps, {n_tokens} tokens, {sum(len(s.drafted) for s in steps)} drafted, "
            f"{sum(s.n_accepted for s in steps)} accepted; draft {sum(s.draft_seconds for s in steps):.2f} s, "
            f"verify {sum(s.verify_seconds for s in steps):.2f} s, {n_tokens / decode:.1f} tok/s of decode"
        )
    finally:
        session.close()


if __name__ == "__main__":
    main()

"""Short replies (issue 11): auto mode beside a fixed k = 4, p_min 0.75 and the target alone,
at 16, 32 and 64 tokens, interleaved on one loaded pair, so the ratios are measured side by side.

    .venv/bin/python scripts/short_replies.py --target models/qwen2.5-coder-1.5b-f16.gguf \\
        --draft models/qwen2.5-coder-0.5b.gguf [--lengths 16,32,64] [--repeats 3] [--json out.json]

Per length and prompt it takes the median tokens/s over the repeats (decode, as the bench
reports it, and end to end with the prefill), then prints auto / fixed and auto / none per
prompt with their median and minimum over the prompts. The session lives for the whole run, as
in a chat: what auto mode learnt on one reply carries to the next.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from localspec.bench import measure as bench_measure
from localspec.bench import modes, suites
from localspec.chat.session import LoadOptions, PairSpec, Session
from localspec.core.sampling import SamplingParams

FIXED = modes.fixed_mode(4, 0.75)
MODES = ("none", "draft", FIXED)


def speeds(run: bench_measure.WarmRun) -> tuple[float, float]:
    """(decode tokens/s, end-to-end tokens/s with the prefill)."""
    s = run.stats
    total = (s["prefill_seconds"] or 0.0) + (s["decode_seconds"] or 0.0)
    return s["tokens_per_second"] or 0.0, (s["n_tokens"] / total if total > 0 else 0.0)


def measure(session, prompts, lengths, repeats) -> dict:
    out: dict = {}
    greedy = SamplingParams()
    for n in lengths:
        for prompt in prompts:
            runs: dict[str, list[tuple[float, float]]] = {m: [] for m in MODES}
            for _ in range(repeats):
                for mode in MODES:  # interleaved
                    runs[mode].append(speeds(bench_measure.run_once(session, prompt, mode, greedy, n)))
            out.setdefault(n, {})[prompt["id"]] = {
                m: [statistics.median(r[i] for r in rs) for i in (0, 1)] for m, rs in runs.items()
            }
        print(f"{n} tokens done", file=sys.stderr, flush=True)
    return out


def table(results: dict) -> list[str]:
    lines = ["| tokens | prompt | auto tok/s | fixed k4 p0.75 | none | auto / fixed | auto / none | e2e auto / fixed |"]
    lines.append("|---|---|---|---|---|---|---|---|")
    for n, per_prompt in results.items():
        vs_fixed, vs_none, e2e = [], [], []
        for pid, m in per_prompt.items():
            a, f, z = m["draft"], m[FIXED], m["none"]
            vs_fixed.append(a[0] / f[0])
            vs_none.append(a[0] / z[0])
            e2e.append(a[1] / f[1])
            lines.append(
                f"| {n} | {pid} | {a[0]:.1f} | {f[0]:.1f} | {z[0]:.1f} | {vs_fixed[-1]:.2f} | {vs_none[-1]:.2f} "
                f"| {e2e[-1]:.2f} |"
            )
        lines.append(
            f"| {n} | **median / min** | | | | **{statistics.median(vs_fixed):.2f} / {min(vs_fixed):.2f}** "
            f"| {statistics.median(vs_none):.2f} / {min(vs_none):.2f} "
            f"| {statistics.median(e2e):.2f} / {min(e2e):.2f} |"
        )
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", required=True, type=Path)
    p.add_argument("--draft", required=True, type=Path)
    p.add_argument("--lengths", default="16,32,64")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--prompts", help="comma-separated prompt ids (default: the whole default suite)")
    p.add_argument("--threads", type=int)
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    suite = suites.load_suite("default")
    prompts = (suites.only(suite, args.prompts) if args.prompts else suite)["prompts"]
    session = Session.load(PairSpec(args.target, args.draft), LoadOptions(threads=args.threads))
    try:
        modes.register_modes(session, MODES)
        bench_measure.run_once(session, prompts[0], "draft", SamplingParams(), 8)  # warm-up
        results = measure(session, prompts, [int(x) for x in args.lengths.split(",")], args.repeats)
    finally:
        session.close()
    print("\n".join(table(results)))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

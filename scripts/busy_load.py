"""A pair loaded while the machine is busy, then used once it is quiet: what the replies run at.

A user's laptop is busy while the pair loads (a build, a browser): ``--hogs`` CPU-bound
processes run through each load and are stopped when it ends. Then the pair answers
``--prompts`` in its own mode (as the app would), and after each reply a session of the
target alone, loaded once at the start on the quiet machine, answers the same prompt: each
reply's tok/s (its prompt read included) over the target alone's is measured side by side.
The loads share one profile folder, as one machine's loads would.

    .venv/bin/python scripts/busy_load.py --target models/qwen2.5-coder-1.5b.gguf \\
        --draft models/qwen2.5-coder-0.5b.gguf [--loads 6] [--hogs 2] [--max-tokens 128] [--json]

Per load: what the calibration read (T(1) and T(2) / T(1)), whether the first reply timed the
costs again (``calibration.recheck``) and how long that took, and each reply's ratio with the
drafting line after it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from localspec.chat import session as session_module
from localspec.chat.session import LoadOptions, PairSpec, Session
from localspec.models.profiles import ProfileStore

PROMPTS = (
    "Write a Python function that parses an ISO 8601 date string without using datetime.fromisoformat.",
    "Explain in three short paragraphs why the sky looks blue and sunsets look red.",
    'Convert this to a TypeScript interface: {"id": 1, "name": "ann", "tags": ["a"], "active": true}',
)


def reply_tps(session: Session, prompt: str, max_tokens: int, mode: str | None = None) -> float:
    """A greedy reply's tokens over its seconds, its prompt read included."""
    t0, n = time.perf_counter(), 0
    for step in session.chat([{"role": "user", "content": prompt}], max_tokens=max_tokens, mode=mode):
        n += len(step.emitted)
    return n / (time.perf_counter() - t0)


def load_busy(spec: PairSpec, options: LoadOptions, store: ProfileStore, hogs: int) -> Session:
    """The pair loaded while ``hogs`` CPU-bound processes run; they are stopped when it ends."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(hogs)]
    try:
        time.sleep(0.5 if hogs else 0.0)
        return Session.load(spec, options, profiles=store)
    finally:
        for p in procs:
            p.kill()
            p.wait()


def measure(spec: PairSpec, loads: int, hogs: int, max_tokens: int, prompts=PROMPTS, threads: int | None = None):
    options = LoadOptions(threads=threads)
    rechecks: list[tuple[object, bool, float]] = []  # (whose costs, timed again, seconds)
    real = getattr(session_module, "recheck", None)  # (a checkout from before it: not timed)

    def timed_recheck(costs, *args, **kwargs) -> bool:
        t0 = time.perf_counter()
        did = real(costs, *args, **kwargs) if real is not None else False
        rechecks.append((costs, did, time.perf_counter() - t0))
        return did

    alone = Session.load(PairSpec(spec.target), options)
    out = []
    try:
        for p in prompts:  # its own first reply, before any load is measured
            reply_tps(alone, p, max_tokens)
        with tempfile.TemporaryDirectory() as folder:
            store = ProfileStore(Path(folder) / "profiles.json")
            for _ in range(loads):
                session = load_busy(spec, options, store, hogs)
                if real is not None:
                    session_module.recheck = timed_recheck
                try:
                    out.append(one_load(session, alone, prompts, max_tokens, rechecks))
                finally:
                    if real is not None:
                        session_module.recheck = real
                    session.close()
                rechecks.clear()
    finally:
        alone.close()
    return out


def one_load(session: Session, alone: Session, prompts, max_tokens: int, rechecks: list) -> dict:
    t1 = session.costs.T(1)
    load = {"t1_ms": 1000 * t1, "t2_over_t1": session.costs.T(2) / t1, "ratios": [], "lines": []}
    for p in prompts:
        tps = reply_tps(session, p, max_tokens)
        load["ratios"].append(tps / reply_tps(alone, p, max_tokens))
        load["lines"].append(session.drafting_state().why)
    timed_again = [seconds for costs, did, seconds in rechecks if did and costs is session.costs]
    load["timed_again_s"] = timed_again[0] if timed_again else None
    load["median"] = statistics.median(load["ratios"])
    return load


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", type=Path, required=True)
    ap.add_argument("--draft", type=Path, required=True)
    ap.add_argument("--loads", type=int, default=6)
    ap.add_argument("--hogs", type=int, default=2, help="CPU-bound processes running through each load")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    loads = measure(PairSpec(args.target, args.draft), args.loads, args.hogs, args.max_tokens, threads=args.threads)
    if args.json:
        print(json.dumps(loads, indent=1))
        return
    for i, load in enumerate(loads, 1):
        again = f"timed again in {load['timed_again_s']:.1f} s" if load["timed_again_s"] else "not timed again"
        ratios = " ".join(f"{r:.2f}" for r in load["ratios"])
        print(f"load {i}: T(1) {load['t1_ms']:.0f} ms, T(2)/T(1) {load['t2_over_t1']:.2f}, {again}; replies {ratios}")
    medians = [load["median"] for load in loads]
    print(f"median of each load's replies: {' '.join(f'{m:.2f}' for m in medians)}")


if __name__ == "__main__":
    main()

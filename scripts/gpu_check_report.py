"""Summarise the bench JSONs of scripts/gpu-check.sh: per target the cost curve T(k), the draft
pass, the per-step overhead outside llama.cpp (ms and share of step time) and the measured
speed-ups, then the issue's two GPU targets checked against the measurements and, per target,
auto mode's speed-up over the target alone at the real pair's acceptance (the verdicts mode).

    python scripts/gpu_check_report.py OUT/bench-*.json
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

OVERHEAD_TARGET_MS = 0.5
ORACLE_TARGET = ("7b-q4_k_m", "oracle-100/8", 3.0)  # target file, mode, least speed-up
VERDICTS = "verdicts"  # the bench's mode replaying a real pair's verdicts (localspec.bench.modes.VERDICTS)


def main(paths: list[str]) -> int:
    reports = [(Path(p), json.loads(Path(p).read_text())) for p in paths if Path(p).is_file()]
    if not reports:
        print("no bench results to summarise")
        return 1
    for _path, rep in reports:
        print("\n".join(target_section(rep)), end="\n\n")
    print("\n".join(verdicts(reports)))
    return 0


def target_section(rep: dict) -> list[str]:
    curve = rep["cost_curve"]
    t1 = curve["verify_seconds"]["1"]
    ratio = curve["verify_ratio"]
    draft = curve.get("draft_seconds_per_token")
    lines = [f"## {Path(rep['target']).name} (draft {Path(rep['draft'] or '-').name})", ""]
    if rep.get("offload"):
        lines.append(f"Offload: {rep['offload']}")
    lines.append(
        f"T(1) = {t1 * 1000:.2f} ms; T(k)/T(1): "
        + ", ".join(f"{k}: {ratio[k]:.2f}" for k in ("2", "4", "8", "9", "12", "16", "32") if k in ratio)
    )
    if draft:
        what = "MTP pass" if rep.get("draft") == "MTP" else "Draft pass"
        lines.append(f"{what}: {draft * 1000:.2f} ms = {draft / t1:.2f} x T(1)")
        if curve.get("draft_read_over_t1"):  # what `bench --replay --draft-read` replays a GPU at
            lines.append(f"A prompt token's read by the draft: {curve['draft_read_over_t1']:.4f} x T(1)")
    change = rep.get("size_change")
    if change:
        both = change["extra_over_t1"]
        lines.append(
            f"Two changes of size (1 -> {change['k']} -> 1) add {change['extra_seconds'] * 1000:.2f} ms = "
            f"{both:.2f} x T(1), {both / 2:.2f} a change (`bench --replay --size-change {both / 2:.2f}`; "
            f"one-token steps in a run: {change['seconds']['one'] * 1000:.2f} ms)"
        )
    if curve.get("predicted_at_acceptance"):
        lines.append(
            "Predicted speed-up at acceptance "
            + ", ".join(f"{a}: {v:.2f}x" for a, v in curve["predicted_at_acceptance"].items())
        )
    lines += [
        "",
        "| mode | median speed-up | min | acceptance | tokens/pass | overhead ms/pass | overhead share | identical |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for mode, rows in by_mode(rep).items():
        lines.append(mode_line(mode, rows))
    return lines


def by_mode(rep: dict) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in rep["rows"]:
        out.setdefault(r["mode"], []).append(r)
    return out


def mode_line(mode: str, rows: list[dict]) -> str:
    med = lambda key: _median([r[key] for r in rows if r.get(key) is not None])
    ups = [r["speedup"] for r in rows if r.get("speedup")]
    ident = [r["identical"] for r in rows if r.get("identical") is not None]
    return (
        f"| {mode} | {_f(med('speedup'))} | {_f(min(ups) if ups else None)} | "
        f"{_f(med('acceptance_rate'))} | {_f(med('tokens_per_pass'))} | "
        f"{_f(med('overhead_ms_per_step'), 3)} | {_f(med('overhead_fraction'), 3)} | "
        f"{f'{sum(ident)}/{len(ident)}' if ident else '—'} |"
    )


def verdicts(reports: list[tuple[Path, dict]]) -> list[str]:
    lines = ["## Targets", ""]
    worst = max(
        (
            r["overhead_ms_per_step"]
            for _, rep in reports
            for r in rep["rows"]
            if r.get("overhead_ms_per_step") is not None
        ),
        default=None,
    )
    if worst is not None:
        ok = "met" if worst <= OVERHEAD_TARGET_MS else "MISSED"
        lines.append(
            f"- Per-step overhead outside llama.cpp <= {OVERHEAD_TARGET_MS} ms: {ok} "
            f"(worst median over modes and prompts: {worst:.3f} ms)"
        )
    name, mode, least = ORACLE_TARGET
    for _, rep in reports:
        if name in Path(rep["target"]).name:
            ups = [r["speedup"] for r in rep["rows"] if r["mode"] == mode and r.get("speedup")]
            if ups:
                got = _median(ups)
                ok = "met" if got >= least else "MISSED"
                void = " (void: the texts parted, below)" if parted(rep) else ""
                lines.append(f"- {mode} on {name}: >= {least}x target-only: {ok} (median {got:.2f}x){void}")
    lines += [replay_line(rep) for _, rep in reports if any(r["mode"].startswith("oracle") for r in rep["rows"])]
    lines += [real_pair_line(rep) for _, rep in reports if any(r["mode"] == VERDICTS for r in rep["rows"])]
    return lines


def parted(rep: dict) -> list[dict]:
    """The oracle runs whose text parted from the target alone's: from there on the oracle
    replays a text the target no longer writes, so their acceptance and speed-up are not the
    ones the oracle was set to."""
    return [r for r in rep["rows"] if r["mode"].startswith("oracle") and r.get("identical") is False]


def replay_line(rep: dict) -> str:
    oracle = [r for r in rep["rows"] if r["mode"].startswith("oracle")]
    off = parted(rep)
    name = Path(rep["target"]).name
    if not off:
        return f"- Oracle runs on {name} write the target alone's text: met ({len(oracle)} of {len(oracle)})"
    where = sorted((r.get("divergence") or {}).get("index", -1) for r in off)
    gaps = [(r.get("divergence") or {}).get("gap") for r in off]
    gaps = [g for g in gaps if g is not None]
    gap = f", top-2 gaps {min(gaps):.3g}-{max(gaps):.3g}" if gaps else ""
    return (
        f"- Oracle runs on {name} write the target alone's text: MISSED ({len(off)} of {len(oracle)} "
        f"parted, at tokens {where[0]}-{where[-1]}{gap}): their speed-ups are void"
    )


def real_pair_line(rep: dict) -> str:
    """Auto mode over the target alone where the draft model pays its passes on this GPU and the
    target keeps what the real pair's target kept: the speed-up the real pair would get here.
    A run whose text parted from the target alone's proposed nothing from there on."""
    rows = [r for r in rep["rows"] if r["mode"] == VERDICTS]
    ups = [r["speedup"] for r in rows if r.get("speedup")]
    med = lambda key: _median([r[key] for r in rows if r.get(key) is not None])
    same = sum(1 for r in rows if r.get("identical") is not False)
    return (
        f"- The real pair's acceptance ({rep.get('verdicts') or 'recorded verdicts'}) on {Path(rep['target']).name}: "
        f"auto / the target alone {_f(med('speedup'))}x (min {_f(min(ups) if ups else None)}x; acceptance "
        f"{_f(med('acceptance_rate'))}, {_f(med('tokens_per_pass'))} tokens/pass; {same} of {len(rows)} identical)"
    )


def _median(xs):
    return statistics.median(xs) if xs else None


def _f(x, digits: int = 2) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The warm bench's report: the runs of each prompt, mode and temperature summed up as medians
over repeats (``Row``, ``summarise``) beside what Leviathan et al. predict from the measured
costs, then the JSON report (``report``) and its Markdown tables (``markdown``)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from ..core.costs import CostModel, speeds
from ..core.modes import MODEL_MODES
from ..core.options import DEFAULT_DRAFT_MAX
from .measure import COST_SIZES, WarmRun, first_divergence
from .modes import CONTROL, VERDICTS, fixed_mode, parse_fixed, split_mode


@dataclass(kw_only=True)
class Row:
    """One prompt x mode x temperature, medians over repeats."""

    prompt_id: str
    category: str
    mode: str
    temperature: float
    tokens_per_second: float
    speedup: float | None  # this mode's tokens/s / target-only tokens/s, same prompt, same run
    acceptance_rate: float | None
    tokens_per_pass: float
    draft_length: float
    time_to_first_token: float | None
    draft_seconds: float
    verify_seconds: float
    overhead_seconds: float
    overhead_fraction: float
    overhead_ms_per_step: float  # decode time outside draft and verify, per target pass
    identical: bool | None  # greedy only: same text as target-only
    divergence: dict | None  # greedy, not identical: first differing token and target top-2 gap
    predicted_speedup: float | None  # Leviathan et al. with the measured T(k) and acceptance
    achieved_over_predicted: float | None
    n_tokens: int
    runs_tokens_per_second: tuple[float, ...] = ()  # every repeat, in the order they ran


PREDICTED_AT = (0.6, 0.7, 0.8)  # acceptance rates the report predicts the speed-up at


def predicted_speedup(
    costs: CostModel, alpha: float | None, mode: str, draft_max: int = DEFAULT_DRAFT_MAX
) -> float | None:
    """Best expected speed-up over k (Leviathan et al. eq. with T(k+1) measured)."""
    mode = split_mode(mode)[0]
    if alpha is None or mode == "none":
        return None
    t_draft = costs.t_draft if mode in (*MODEL_MODES, VERDICTS) or parse_fixed(mode) else 0.0
    rates = speeds(costs, alpha, draft_max, t_draft=t_draft)
    return float(rates.max() / rates[0])


def curve_comparison(engine: CostModel, direct: CostModel) -> dict:
    """The engine's T(k)/T(1) (calibrated at load, refined by every verify) beside the direct
    measurement, and their ratio per k."""
    e1, d1 = engine.T(1), direct.T(1)
    out = {}
    for k in COST_SIZES:
        er, dr = engine.T(k) / e1, direct.T(k) / d1
        out[str(k)] = {
            "engine": er,
            "direct": dr,
            "engine_over_direct": er / dr,
            "engine_samples": engine.verify.n_samples(k),
        }
    return {
        "ratios": out,
        "engine_t1": e1,
        "direct_t1": d1,
        "engine_draft_seconds": engine.t_draft or None,
        "direct_draft_seconds": direct.t_draft or None,
    }


def sweep_summary(collected) -> list[dict]:
    """Per prompt: auto (draft or MTP mode) beside the best fixed configuration, and auto's spread."""
    out = []
    for prompt, temp, runs in collected:
        auto_mode = next((m for m in MODEL_MODES if m in runs), None)
        if auto_mode is None:
            continue
        med = {m: statistics.median(r.stats["tokens_per_second"] for r in rs) for m, rs in runs.items() if rs}
        fixed = {m: v for m, v in med.items() if parse_fixed(m)}
        if not fixed:
            continue
        best = max(fixed, key=lambda m: fixed[m])
        auto = [r.stats["tokens_per_second"] for r in runs[auto_mode]]
        base = med.get("none")
        out.append(
            {
                "prompt_id": prompt["id"],
                "temperature": temp,
                "auto_tps": med[auto_mode],
                "best_fixed": best,
                "best_fixed_tps": fixed[best],
                "auto_over_best_fixed": med[auto_mode] / fixed[best],
                "auto_spread": max(auto) / min(auto) if min(auto) > 0 else None,
                "auto_speedup": med[auto_mode] / base if base else None,
                "best_fixed_speedup": fixed[best] / base if base else None,
                "fixed_k4_p075_tps": fixed.get(fixed_mode(4, 0.75)),
            }
        )
    return out


def summarise(session, costs, prompt, temp, runs: dict[str, list[WarmRun]]) -> list[Row]:
    base = median_or_none([r.stats["tokens_per_second"] for r in runs.get("none", [])])
    ref = runs["none"][0] if "none" in runs else None
    out = []
    for mode, rs in runs.items():
        greedy = temp == 0.0 and mode != "none"
        identical, divergence = _identity(session, prompt, rs, ref) if greedy else (None, None)
        out.append(_row(costs, prompt, mode, temp, rs, base, identical, divergence))
    return out


def _row(costs, prompt, mode, temp, rs: list[WarmRun], base, identical, divergence) -> Row:
    """Medians over the repeats; the speed-up is against target-only's median tokens/s."""
    s = [r.stats for r in rs]
    tps = statistics.median(x["tokens_per_second"] for x in s)
    pred = predicted_speedup(costs, median_or_none([r.alpha for r in rs if r.alpha is not None]), mode)
    speedup = tps / base if base else None
    decode = statistics.median(x["decode_seconds"] for x in s)
    over = statistics.median(x["overhead_seconds"] for x in s)
    ttft = median_or_none([x["time_to_first_token"] for x in s if x["time_to_first_token"] is not None])
    per_step = median_or_none([1000 * x["overhead_seconds"] / x["n_steps"] for x in s if x["n_steps"]]) or 0.0
    return Row(
        prompt_id=prompt["id"],
        category=prompt["category"],
        mode=mode,
        temperature=temp,
        tokens_per_second=tps,
        speedup=speedup,
        acceptance_rate=median_or_none([x["acceptance_rate"] for x in s if x["acceptance_rate"] is not None]),
        tokens_per_pass=statistics.median(x["tokens_per_pass"] for x in s),
        draft_length=statistics.median(x["draft_length"] for x in s),
        time_to_first_token=ttft,
        draft_seconds=statistics.median(x["draft_seconds"] for x in s),
        verify_seconds=statistics.median(x["verify_seconds"] for x in s),
        overhead_seconds=over,
        overhead_fraction=over / decode if decode else 0.0,
        overhead_ms_per_step=per_step,
        identical=identical,
        divergence=divergence,
        predicted_speedup=pred,
        achieved_over_predicted=(speedup / pred) if (speedup and pred) else None,
        n_tokens=int(statistics.median(x["n_tokens"] for x in s)),
        runs_tokens_per_second=tuple(x["tokens_per_second"] for x in s),
    )


def median_or_none(xs: Sequence[float]) -> float | None:
    return statistics.median(xs) if xs else None


def _identity(session, prompt: dict, rs: list[WarmRun], ref: WarmRun | None) -> tuple[bool | None, dict | None]:
    """Greedy: whether every repeat's text is the target-only one, and where the first that
    is not parts from it."""
    if ref is None:
        return None, None
    differing = [r for r in rs if r.tokens != ref.tokens]
    if not differing:
        return True, None
    return False, first_divergence(session, prompt, ref.tokens, differing[0].tokens)


def report(rows: list[Row], costs: CostModel, session, suite, modes, temperatures, repeats) -> dict:
    t1 = costs.T(1)
    summary = {}
    for mode in modes:
        for temp in temperatures:
            sel = [r for r in rows if r.mode == mode and r.temperature == temp]
            ups = [r.speedup for r in sel if r.speedup]
            summary[f"{mode}@{temp}"] = {
                "median_tokens_per_second": statistics.median([r.tokens_per_second for r in sel]),
                "median_speedup": statistics.median(ups) if ups else None,
                "min_speedup": min(ups) if ups else None,
                "max_speedup": max(ups) if ups else None,
                "identical": sum(1 for r in sel if r.identical) if temp == 0.0 and mode != "none" else None,
                "by_category": {
                    c: statistics.median([r.speedup for r in sel if r.category == c and r.speedup])
                    for c in sorted({r.category for r in sel})
                    if any(r.speedup for r in sel if r.category == c)
                },
            }
    return {
        "memory": memory_report(session),
        "offload": session.offload.summary if session.offload else None,
        "target": str(session.spec.target),
        "draft": str(session.spec.draft) if session.spec.draft else ("MTP" if session.spec.mtp else None),
        "suite": suite.get("name", "custom"),
        "max_tokens": suite.get("max_tokens"),
        "repeats": repeats,
        "cost_curve": {
            "verify_seconds": {str(k): costs.T(k) for k in COST_SIZES},
            "verify_ratio": {str(k): costs.T(k) / t1 for k in COST_SIZES},
            "draft_seconds_per_token": costs.t_draft or None,
            "draft_pass_over_t1": costs.t_draft / t1 if costs.t_draft else None,
            # a prompt token's read by the draft, timed on 200 at once (``calibration.time_read``)
            "draft_read_over_t1": costs.read(1) / t1 if costs.t_draft else None,
            # Leviathan et al.'s best speed-up with these costs, were the draft accepted this often
            "predicted_at_acceptance": {str(a): predicted_speedup(costs, a, "draft") for a in PREDICTED_AT}
            if costs.t_draft
            else None,
        },
        "summary": summary,
        "rows": [asdict(r) for r in rows],
    }


def memory_report(session) -> dict:
    """Resident memory now vs what the models need: file sizes + KV cache at this context."""
    from ..llama import ggufinfo

    page = 4096
    try:
        with open("/proc/self/statm") as f:
            rss = int(f.read().split()[1]) * page
    except OSError:
        rss = None
    need = 0
    for m in filter(None, (session.target, session.draft)):
        if m.path == session.target.path and m is not session.target:
            continue  # the target's own MTP layers: in its file already
        info = ggufinfo.read_info(m.path)
        need += info.size_bytes + info.kv_bytes_per_token * m.n_ctx
    return {"rss_bytes": rss, "files_plus_kv_bytes": need, "rss_over_need": (rss / need) if rss and need else None}


def markdown(rep: dict) -> str:
    lines = [
        f"Target `{rep['target']}`, draft `{rep['draft']}`, suite {rep['suite']}, "
        f"{rep['max_tokens']} tokens, {rep['repeats']} repeat(s).",
        "",
        "| prompt | mode | temp | tok/s | speed-up | acceptance | tok/pass | identical | predicted | achieved/pred "
        "| overhead (per pass) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    f = lambda x, p=2: "—" if x is None else (f"{x:.{p}f}" if isinstance(x, float) else str(x))
    for r in rep["rows"]:
        div = r["divergence"] or {}
        ident = (
            "—"
            if r["identical"] is None
            else ("yes" if r["identical"] else f"no (at {div.get('index')}, gap {f(div.get('gap'), 3)})")
        )
        lines.append(
            f"| {r['prompt_id']} | {r['mode']} | {r['temperature']} | {f(r['tokens_per_second'], 1)} | "
            f"{f(r['speedup'])} | {f(r['acceptance_rate'])} | {f(r['tokens_per_pass'])} | {ident} | "
            f"{f(r['predicted_speedup'])} | {f(r['achieved_over_predicted'])} | "
            f"{r['overhead_fraction']:.1%} ({r['overhead_ms_per_step']:.2f} ms) |"
        )
    lines += ["", "| mode | median tok/s | median speed-up | min speed-up | by category |", "|---|---|---|---|---|"]
    for key, s in rep["summary"].items():
        cats = ", ".join(f"{c} {v:.2f}" for c, v in s["by_category"].items())
        lines.append(
            f"| {key} | {f(s['median_tokens_per_second'], 1)} | {f(s['median_speedup'])} | "
            f"{f(s['min_speedup'])} | {cats} |"
        )
    cost = rep["cost_curve"]
    drafter = "MTP pass" if rep.get("draft") == "MTP" else "Draft pass"
    lines += [
        "",
        "Cost curve T(k)/T(1): " + ", ".join(f"{k}: {v:.2f}" for k, v in cost["verify_ratio"].items()),
        f"{drafter}: {f(cost['draft_seconds_per_token'], 4)} s/token"
        + (f" ({cost['draft_pass_over_t1']:.2f} of T(1))" if cost.get("draft_pass_over_t1") else "")
        + (f"; a prompt token read: {cost['draft_read_over_t1']:.3f} of T(1)" if cost.get("draft_read_over_t1") else "")
        + f"; T(1) = {cost['verify_seconds']['1']:.4f} s",
    ]
    if cost.get("predicted_at_acceptance"):
        lines.append(
            "Predicted speed-up with these costs at acceptance "
            + ", ".join(f"{a}: {v:.2f}×" for a, v in cost["predicted_at_acceptance"].items())
        )
    lines += control_markdown(rep["summary"].get(f"{CONTROL}@0.0"))
    lines += curve_markdown(rep.get("engine_curve"))
    lines += size_change_markdown(rep.get("size_change"))
    lines += sweep_markdown(rep.get("sweep"))
    mem = rep.get("memory") or {}
    if mem.get("rss_bytes"):
        lines.append(
            f"Memory: RSS {mem['rss_bytes'] / 1e9:.2f} GB vs files + KV cache "
            f"{mem['files_plus_kv_bytes'] / 1e9:.2f} GB ({mem['rss_over_need']:.2f}x)"
        )
    return "\n".join(lines) + "\n"


def control_markdown(control: dict | None) -> list[str]:
    if not control or control.get("median_speedup") is None:
        return []
    return [
        f"Control (the target alone again, interleaved): speed-up median {control['median_speedup']:.2f}, "
        f"min {control['min_speedup']:.2f}, max {control['max_speedup']:.2f}: ratios this far from 1.00 "
        "are this run's noise."
    ]


def curve_markdown(cmp: dict | None) -> list[str]:
    if not cmp:
        return []
    ks = [k for k in cmp["ratios"] if int(k) <= 9 or int(k) in (12, 16, 24, 32, 33)]
    r = cmp["ratios"]
    return [
        "",
        "| k | " + " | ".join(ks) + " |",
        "|---|" + "---|" * len(ks),
        "| engine T(k)/T(1) | " + " | ".join(f"{r[k]['engine']:.2f}" for k in ks) + " |",
        "| direct T(k)/T(1) | " + " | ".join(f"{r[k]['direct']:.2f}" for k in ks) + " |",
        "| engine ÷ direct | " + " | ".join(f"{r[k]['engine_over_direct']:.2f}" for k in ks) + " |",
        f"Engine T(1) {cmp['engine_t1']:.4f} s, direct {cmp['direct_t1']:.4f} s (after the runs, "
        "200 cached tokens, median of 5).",
    ]


def size_change_markdown(change: dict | None) -> list[str]:
    if not change:
        return []
    m, k, both = change["seconds"], change["k"], change["extra_over_t1"]
    return [
        f"Two changes of size (a verify of {k} between one-token steps: into {k} and back) add "
        f"{change['extra_seconds'] * 1000:.2f} ms = {both:.2f} T(1) to the steps around them, {both / 2:.2f} T(1) a "
        f"change (`bench --replay --size-change {both / 2:.2f}`): T({k}) {m['k_after_ones'] * 1000:.2f} ms "
        f"after one-token steps, {m['k'] * 1000:.2f} ms repeated; the two one-token steps after it "
        f"{m['one_after_k'] * 1000:.2f} and {m['two_after_k'] * 1000:.2f} ms, {m['one'] * 1000:.2f} ms in a run "
        "(median of 5; CUDA re-captures its graph after a change of size).",
        f"The load timed one change at {change.get('at_load_seconds', 0.0) * 1000:.2f} ms (0: none timed, a backend "
        "that does not settle), which the steady verify sizes are planned on.",
    ]


def sweep_markdown(sweep: list[dict] | None) -> list[str]:
    if not sweep:
        return []
    f = lambda x, p=2: "—" if x is None else f"{x:.{p}f}"
    lines = [
        "",
        "| prompt | auto tok/s | best fixed | its tok/s | auto ÷ best fixed | auto spread (max÷min) "
        "| auto speed-up | best fixed speed-up |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for x in sweep:
        lines.append(
            f"| {x['prompt_id']} | {f(x['auto_tps'], 1)} | {x['best_fixed']} | {f(x['best_fixed_tps'], 1)} | "
            f"{f(x['auto_over_best_fixed'])} | {f(x['auto_spread'])} | {f(x['auto_speedup'])} | "
            f"{f(x['best_fixed_speedup'])} |"
        )
    return lines

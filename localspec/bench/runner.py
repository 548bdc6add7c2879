"""Measured speed-ups, side by side: every mode runs on the same prompt, interleaved
(A, B, A, B ...) after a warm-up, so a noisy machine slows them alike. Speed-ups are ratios of
runs measured in this process, never against a stored number. Returns data; the CLI prints.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path

from ..core.controller import FixedController
from ..core.costs import CostModel, calibrate, speeds
from ..core.drafters import ModelDrafter, OracleDrafter
from ..core.modes import Drafting, ModeContext, ModeFactory, ReplySpec, controller_for
from ..core.sampling import SamplingParams
from ..core.stats import RunStats

QUICK_PROMPTS = ("code-intervals", "edit-refactor", "explain-gil")
QUICK_MAX_TOKENS = 48
SUITE_MAX_TOKENS = 200  # a suite that names no reply length
COST_SIZES = tuple(range(1, 17))


@dataclass
class Run:
    prompt_id: str
    category: str
    mode: str
    temperature: float
    stats: dict
    text: str
    tokens: list[int] = field(repr=False)
    alpha: float | None  # per-token acceptance (geometric estimate) of this run


@dataclass
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


# The built-in suites, by name. "heldout" holds prompts nothing is tuned on: it checks that a
# claim made on the default suite holds on prompts it was not made on.
BUILTIN_SUITES = ("default", "heldout")


def load_suite(name_or_path: str = "default") -> dict:
    """A built-in suite by name, or a suite file: ``{"prompts": [{"id", "category", "prompt"}, ...]}``
    with an optional ``name`` and ``max_tokens``."""
    if name_or_path in BUILTIN_SUITES:
        text = resources.files("localspec.bench").joinpath(f"suites/{name_or_path}.json").read_text("utf-8")
        return json.loads(text)
    path = Path(name_or_path)
    try:
        suite = json.loads(path.read_text("utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: cannot read the suite ({e})") from e
    if not isinstance(suite.get("prompts"), list) or not all("prompt" in p for p in suite["prompts"]):
        raise ValueError(f'{path}: a suite is {{"prompts": [{{"id", "category", "prompt"}}, ...]}}')
    for i, p in enumerate(suite["prompts"]):
        p.setdefault("id", f"prompt-{i + 1}")
        p.setdefault("category", "custom")
    return suite


def only(suite: dict, ids: str) -> dict:
    """The suite with only the prompts whose ids ``ids`` lists (comma-separated); ValueError
    when none of them is in it."""
    wanted = set(ids.split(","))
    prompts = [p for p in suite["prompts"] if p["id"] in wanted]
    if not prompts:
        raise ValueError(f"no prompt with id in {sorted(wanted)}")
    return {**suite, "prompts": prompts}


def quick(suite: dict) -> dict:
    prompts = [p for p in suite["prompts"] if p["id"] in QUICK_PROMPTS] or suite["prompts"][:3]
    return {**suite, "prompts": prompts, "max_tokens": QUICK_MAX_TOKENS}


def measure_costs(session, prefix: int = 200, repeats: int = 5) -> CostModel:
    """T(k) for k = 1..16 and one draft pass, measured directly: after ``prefix`` cached
    tokens, medians of ``repeats`` interleaved rounds; caches restored."""
    return CostModel(
        *calibrate(session.target, COST_SIZES, draft=session.draft, repeats=repeats, prefix=prefix, warmup=1)
    )


def split_mode(mode: str) -> tuple[str, str]:
    """'draft:match' is the draft mode verified by token matching (for the rule comparison)."""
    base, _, rule = mode.partition(":")
    return base, rule or "speculative"


def parse_oracle(mode: str) -> tuple[float, int | None] | None:
    """'oracle-80' proposes the target-only reply with 80 % of its tokens right, k chosen by
    the controller; 'oracle-100/8' always drafts 8 tokens. None for every other mode."""
    base = split_mode(mode)[0]
    if not base.startswith("oracle-"):
        return None
    pct, _, k = base.removeprefix("oracle-").partition("/")
    return int(pct) / 100, (int(k) if k else None)


class Oracle:
    """The factory of an oracle mode: an :class:`OracleDrafter` at zero draft cost, replaying
    the reference the bench gave it last (``replay``: the target-only reply of the prompt it
    runs next), with a fraction ``accuracy`` of its tokens right; ``k`` fixes the draft length."""

    def __init__(self, accuracy: float, k: int | None = None) -> None:
        self.accuracy, self.k = accuracy, k
        self.reference: Sequence[int] | None = None
        self.seed = 0

    def replay(self, reference: Sequence[int] | None, seed: int) -> None:
        self.reference, self.seed = reference, seed

    def __call__(self, ctx: ModeContext) -> Drafting:
        n_vocab = ctx.target.n_vocab
        return Drafting(
            controller_for(ctx, draft_cost=False, fixed_k=self.k), lambda reply: self._drafter(reply, n_vocab)
        )

    def _drafter(self, reply: ReplySpec, n_vocab: int) -> OracleDrafter:
        if self.reference is None:
            raise ValueError("an oracle mode needs the target-only run of the same prompt first")
        return OracleDrafter(reply.prompt_len, self.reference, n_vocab, 1.0 - self.accuracy, self.seed)


# --sweep: fixed draft configurations (k, p_min) beside auto mode, as in
# `localspec run --no-adapt --draft-max K --p-min P`
SWEEP_KS = (2, 3, 4, 6, 8)
SWEEP_P_MINS = (0.0, 0.75)


def fixed_mode(k: int, p_min: float) -> str:
    return f"fixed-k{k}-p{p_min:g}"


def sweep_modes() -> list[str]:
    return [fixed_mode(k, p) for k in SWEEP_KS for p in SWEEP_P_MINS]


def parse_fixed(mode: str) -> tuple[int, float] | None:
    """'fixed-k4-p0.75' -> (4, 0.75); None for every other mode."""
    m = re.fullmatch(r"fixed-k(\d+)-p([0-9.]+)", split_mode(mode)[0])
    return (int(m.group(1)), float(m.group(2))) if m else None


@dataclass(frozen=True)
class FixedDraft:
    """The factory of a fixed configuration: the draft model at a fixed k, stopped only by
    p_min (no marginal rule, no copies), on a private copy of the session's costs: what a
    fixed configuration measures must not teach auto mode, which has to learn this machine
    by itself."""

    k: int
    p_min: float

    def __call__(self, ctx: ModeContext) -> Drafting:
        draft = ctx.draft
        if draft is None:
            raise ValueError("a fixed draft configuration needs a draft model")
        costs = CostModel(ctx.costs.verify.copy(), ctx.costs.draft.copy())
        n_vocab, banned = ctx.target.n_vocab, ctx.banned
        return Drafting(
            FixedController(costs, self.k),
            lambda reply: ModelDrafter(draft, n_vocab, self.p_min, banned, None),
        )


# The target alone once more, interleaved like every mode: its speed-up against "none" is
# what this run's noise alone does to a ratio (nothing differs but the time it ran).
CONTROL = "control"


def register_modes(session, modes: Sequence[str]) -> None:
    """The bench's own modes, on the session's registry beside the built-in ones: oracles,
    fixed configurations, the control, and 'X:match' (mode X verified by token matching, with
    a controller of its own). None of them is the user's use of the pair."""
    for name in modes:
        base = split_mode(name)[0]
        if base == CONTROL and base not in session.modes:
            session.modes.register(CONTROL, session.modes["none"].build, counts_as_use=False)
        if base not in session.modes:
            session.modes.register(base, _bench_factory(base), counts_as_use=False)
        if name not in session.modes:
            session.modes.register(name, session.modes[base].build, counts_as_use=False)


def _bench_factory(base: str) -> ModeFactory:
    oracle, fixed = parse_oracle(base), parse_fixed(base)
    if oracle:
        return Oracle(*oracle)
    if fixed:
        return FixedDraft(*fixed)
    raise ValueError(f"unknown bench mode {base!r}")


def run_once(
    session, prompt: dict, mode: str, params: SamplingParams, max_tokens: int, reference: Sequence[int] | None = None
) -> Run:
    """One reply in ``mode`` (registered: see ``register_modes``); an oracle replays
    ``reference``."""
    session.reset()  # every run starts cold: no prefix reuse across modes
    params = params.model_copy(update={"rule": split_mode(mode)[1]})
    build = session.modes[mode].build
    if isinstance(build, Oracle):
        build.replay(reference, params.seed or 0)
    stats = RunStats()
    tokens: list[int] = []
    text: list[str] = []
    n_rejections = 0
    msgs = [{"role": "user", "content": prompt["prompt"]}]
    for step in session.chat(msgs, params, max_tokens, mode=mode, repeatable=False):
        stats.add(step)
        tokens.extend(step.emitted)
        text.append(step.text)
        n_rejections += step.n_accepted < len(step.drafted)
    alpha = stats.n_accepted / (stats.n_accepted + n_rejections) if stats.n_drafted else None
    return Run(
        prompt["id"], prompt["category"], mode, params.temperature, stats.as_dict(), "".join(text), tokens, alpha
    )


def predicted_speedup(costs: CostModel, alpha: float | None, mode: str, draft_max: int = 16) -> float | None:
    """Best expected speed-up over k (Leviathan et al. eq. with T(k+1) measured)."""
    mode = split_mode(mode)[0]
    if alpha is None or mode == "none":
        return None
    t_draft = costs.t_draft if mode == "draft" or parse_fixed(mode) else 0.0
    rates = speeds(costs, alpha, draft_max, t_draft=t_draft)
    return float(rates.max() / rates[0])


def first_divergence(session, prompt: dict, ref: Sequence[int], got: Sequence[int]) -> dict | None:
    """Where a greedy speculative text parts from target-only (``Session.divergence``)."""
    return session.divergence([{"role": "user", "content": prompt["prompt"]}], ref, got)


def run_bench(
    session,
    suite: dict,
    modes: Sequence[str],
    temperatures: Sequence[float],
    repeats: int = 1,
    seed: int = 1234,
    progress: Callable[[int, int, str], None] | None = None,
) -> dict:
    """Every prompt in every mode, interleaved; the direct cost curve is measured at the end
    (a filled cache, after the runs have warmed everything) and set beside the engine's."""
    max_tokens = suite.get("max_tokens", SUITE_MAX_TOKENS)
    prompts = suite["prompts"]
    total = len(prompts) * len(modes) * len(temperatures) * repeats + 2
    done = 0
    say = progress or (lambda *_: None)
    register_modes(session, modes)
    say(done, total, "warm-up")
    run_once(session, prompts[0], modes[0], SamplingParams(), 8)  # page weights in, warm caches
    done += 1
    collected = []
    for prompt in prompts:
        for temp in temperatures:
            params = SamplingParams(temperature=temp, seed=seed)
            runs: dict[str, list[Run]] = {m: [] for m in modes}
            for _ in range(repeats):
                for mode in modes:  # interleaved: A, B, C, A, B, C
                    say(done, total, f"{prompt['id']} {mode} t={temp}")
                    ref = runs["none"][0].tokens if runs.get("none") else None
                    runs[mode].append(run_once(session, prompt, mode, params, max_tokens, ref))
                    done += 1
            collected.append((prompt, temp, runs))
    say(done, total, "measuring the cost curve directly")
    costs = measure_costs(session)
    rows = [row for prompt, temp, runs in collected for row in summarise(session, costs, prompt, temp, runs)]
    say(done + 1, total, "done")
    rep = report(rows, costs, session, suite, modes, temperatures, repeats)
    rep["engine_curve"] = curve_comparison(session.costs, costs)
    if any(parse_fixed(m) for m in modes):
        rep["sweep"] = sweep_summary(collected)
    return rep


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
    """Per prompt: auto (draft mode) beside the best fixed configuration, and auto's spread."""
    out = []
    for prompt, temp, runs in collected:
        if "draft" not in runs:
            continue
        med = {m: statistics.median(r.stats["tokens_per_second"] for r in rs) for m, rs in runs.items() if rs}
        fixed = {m: v for m, v in med.items() if parse_fixed(m)}
        if not fixed:
            continue
        best = max(fixed, key=lambda m: fixed[m])
        auto = [r.stats["tokens_per_second"] for r in runs["draft"]]
        base = med.get("none")
        out.append(
            {
                "prompt_id": prompt["id"],
                "temperature": temp,
                "auto_tps": med["draft"],
                "best_fixed": best,
                "best_fixed_tps": fixed[best],
                "auto_over_best_fixed": med["draft"] / fixed[best],
                "auto_spread": max(auto) / min(auto) if min(auto) > 0 else None,
                "auto_speedup": med["draft"] / base if base else None,
                "best_fixed_speedup": fixed[best] / base if base else None,
                "fixed_k4_p075_tps": fixed.get(fixed_mode(4, 0.75)),
            }
        )
    return out


def summarise(session, costs, prompt, temp, runs: dict[str, list[Run]]) -> list[Row]:
    base = _median([r.stats["tokens_per_second"] for r in runs.get("none", [])])
    ref = runs["none"][0] if "none" in runs else None
    out = []
    for mode, rs in runs.items():
        s = [r.stats for r in rs]
        tps = statistics.median(x["tokens_per_second"] for x in s)
        pred = predicted_speedup(costs, _median([r.alpha for r in rs if r.alpha is not None]), mode)
        speedup = tps / base if base else None
        identical, divergence = _identity(session, prompt, rs, ref) if temp == 0.0 and mode != "none" else (None, None)
        decode = statistics.median(x["decode_seconds"] for x in s)
        over = statistics.median(x["overhead_seconds"] for x in s)
        out.append(
            Row(
                prompt["id"],
                prompt["category"],
                mode,
                temp,
                tps,
                speedup,
                _median([x["acceptance_rate"] for x in s if x["acceptance_rate"] is not None]),
                statistics.median(x["tokens_per_pass"] for x in s),
                statistics.median(x["draft_length"] for x in s),
                _median([x["time_to_first_token"] for x in s if x["time_to_first_token"] is not None]),
                statistics.median(x["draft_seconds"] for x in s),
                statistics.median(x["verify_seconds"] for x in s),
                over,
                over / decode if decode else 0.0,
                _median([1000 * x["overhead_seconds"] / x["n_steps"] for x in s if x["n_steps"]]) or 0.0,
                identical,
                divergence,
                pred,
                (speedup / pred) if (speedup and pred) else None,
                int(statistics.median(x["n_tokens"] for x in s)),
                tuple(x["tokens_per_second"] for x in s),
            )
        )
    return out


def _median(xs: Sequence[float]) -> float | None:
    return statistics.median(xs) if xs else None


def _identity(session, prompt: dict, rs: list[Run], ref: Run | None) -> tuple[bool | None, dict | None]:
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
        "draft": str(session.spec.draft) if session.spec.draft else None,
        "suite": suite.get("name", "custom"),
        "max_tokens": suite.get("max_tokens"),
        "repeats": repeats,
        "cost_curve": {
            "verify_seconds": {str(k): costs.T(k) for k in COST_SIZES},
            "verify_ratio": {str(k): costs.T(k) / t1 for k in COST_SIZES},
            "draft_seconds_per_token": costs.t_draft or None,
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
    curve = rep["cost_curve"]["verify_ratio"]
    lines += [
        "",
        "Cost curve T(k)/T(1): " + ", ".join(f"{k}: {v:.2f}" for k, v in curve.items()),
        f"Draft pass: {f(rep['cost_curve']['draft_seconds_per_token'], 4)} s/token; "
        f"T(1) = {rep['cost_curve']['verify_seconds']['1']:.4f} s",
    ]
    lines += control_markdown(rep["summary"].get(f"{CONTROL}@0.0"))
    lines += curve_markdown(rep.get("engine_curve"))
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
    ks = [k for k in cmp["ratios"] if int(k) <= 9 or int(k) in (12, 16)]
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


# --- --cold: every run a fresh `localspec run --json` process ------------------------------------
# A user's `localspec run`, the app's first reply and the server's first request all start
# cold: the pair loads, the costs are calibrated and the controller starts from its priors.
# The warm bench above never sees that (it warms up and keeps each mode's controller), so
# --cold runs each reply the way a user meets it. The process inherits the environment: it
# reads and writes the same data dir (profiles.json) as the user's own runs.

COLD_REPEATS = 5  # the acceptance rule below counts collapses per five cold runs
COLD_AUTO, COLD_FIXED, COLD_TARGET = "auto", "fixed k=4", "target only"
# Acceptance criteria for cold starts: where a fixed k = 4 clearly pays (≥ 1.3× the target
# alone), at most one auto run in five may collapse (draft less than a quarter of what fixed
# k = 4 drafts), and auto's median tok/s must reach 0.95× fixed's.
COLLAPSE_FRACTION = 0.25
FIXED_PAYS = 1.3
MAX_COLLAPSE_SHARE = 1 / 5
AUTO_OVER_FIXED_FLOOR = 0.95


def cold_configs(draft: str, drafting: Sequence[str] = ()) -> dict[str, list[str]]:
    """The flags each configuration adds to ``localspec run``: auto is run's default adaptive
    drafting (with ``drafting``, the bench's own drafting flags, if any), fixed k = 4 is
    ``--no-adapt --draft-max 4 --p-min 0``, and the target alone is ``--no-draft``."""
    return {
        COLD_AUTO: ["--draft", draft, *drafting],
        COLD_FIXED: ["--draft", draft, "--no-adapt", "--draft-max", "4", "--p-min", "0"],
        COLD_TARGET: ["--no-draft"],
    }


@dataclass(frozen=True)
class ColdTask:
    """One planned cold run: which prompt, temperature, repeat, and configuration."""

    prompt: dict
    temperature: float
    repeat: int
    config: str


def cold_plan(suite: dict, configs: Sequence[str], temperatures: Sequence[float], repeats: int) -> list[ColdTask]:
    """Prompt by prompt, repeat by repeat, every configuration once, the order rotated by one
    each repeat and each prompt: a machine that runs faster or slower with the time (heat,
    the page cache) never favours the configuration that always runs first."""
    plan = []
    for i, prompt in enumerate(suite["prompts"]):
        for temp in temperatures:
            for r in range(repeats):
                shift = (i + r) % len(configs)
                for config in [*configs[shift:], *configs[:shift]]:
                    plan.append(ColdTask(prompt, temp, r, config))
    return plan


@dataclass
class ColdRun:
    """One cold run: what ``localspec run --json`` printed (``out``) and the process's wall
    time, loading and calibration included."""

    prompt_id: str
    category: str
    config: str
    temperature: float
    repeat: int
    wall_seconds: float
    out: dict

    @property
    def tokens_per_second(self) -> float | None:
        return self.out.get("tokens_per_second")

    @property
    def n_drafted(self) -> int:
        return int(self.out.get("n_drafted") or 0)


class ColdRunFailed(RuntimeError):
    """A ``localspec run`` exited with an error; the message has its command and stderr."""


def spawn_run(argv: Sequence[str], prompt: str) -> subprocess.CompletedProcess:
    """A fresh process; the prompt goes in on stdin ('-'), so no prompt reads as a flag."""
    return subprocess.run(list(argv), input=prompt.encode(), capture_output=True, check=False)


def run_cold(
    suite: dict,
    base: Sequence[str],
    configs: dict[str, list[str]],
    temperatures: Sequence[float],
    repeats: int,
    spawn: Callable[[Sequence[str], str], subprocess.CompletedProcess] = spawn_run,
    progress: Callable[[int, int, str], None] | None = None,
) -> list[ColdRun]:
    """Every task of :func:`cold_plan` as ``base + configs[config] + --temp T -``, one fresh
    process each. ``base`` is the ``localspec run --json`` command with the model options.
    No --seed: a seeded sampled reply drafts the fixed length chosen at load
    (``modes.repeatable``), which is not auto mode."""
    plan = cold_plan(suite, list(configs), temperatures, repeats)
    say = progress or (lambda *_: None)
    runs = []
    for done, task in enumerate(plan):
        say(done, len(plan), f"{task.prompt['id']} {task.config} t={task.temperature} (cold)")
        argv = [*base, *configs[task.config], "--temp", f"{task.temperature:g}", "-"]
        start = time.perf_counter()
        proc = spawn(argv, task.prompt["prompt"])
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            err = proc.stderr.decode("utf-8", "replace").strip()[-2000:]
            raise ColdRunFailed(f"{shlex.join(argv)} exited with {proc.returncode}:\n{err}")
        try:
            out = json.loads(proc.stdout)
        except json.JSONDecodeError as e:
            raise ColdRunFailed(f"{shlex.join(argv)} printed no JSON object ({e})") from e
        runs.append(
            ColdRun(task.prompt["id"], task.prompt["category"], task.config, task.temperature, task.repeat, wall, out)
        )
    say(len(plan), len(plan), "done")
    return runs


def collapse_floor(fixed_drafted: Sequence[int]) -> float | None:
    """An auto run that drafts fewer tokens than this collapsed: a quarter of the median
    fixed k = 4 run's."""
    return COLLAPSE_FRACTION * statistics.median(fixed_drafted) if fixed_drafted else None


def collapses(auto_drafted: Sequence[int], fixed_drafted: Sequence[int]) -> int:
    floor = collapse_floor(fixed_drafted)
    return 0 if floor is None else sum(1 for n in auto_drafted if n < floor)


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def cold_row(runs: Sequence[ColdRun]) -> dict:
    """One prompt at one temperature: each configuration's median tok/s and the ratios between
    them, the drafted tokens of every auto and fixed run, the collapses, and (greedy) how many
    repeats each drafting configuration's text equals the target alone's of the same repeat."""
    by = {c: [r for r in runs if r.config == c] for c in (COLD_AUTO, COLD_FIXED, COLD_TARGET)}
    tps = {c: _median([r.tokens_per_second for r in rs if r.tokens_per_second is not None]) for c, rs in by.items()}
    auto_drafted = [r.n_drafted for r in by[COLD_AUTO]]
    fixed_drafted = [r.n_drafted for r in by[COLD_FIXED]]
    n_collapsed = collapses(auto_drafted, fixed_drafted)
    fixed_over_target = _ratio(tps[COLD_FIXED], tps[COLD_TARGET])
    auto_over_fixed = _ratio(tps[COLD_AUTO], tps[COLD_FIXED])
    first = runs[0]
    return {
        "prompt_id": first.prompt_id,
        "category": first.category,
        "temperature": first.temperature,
        "tokens_per_second": tps,
        "auto_over_fixed": auto_over_fixed,
        "fixed_over_target": fixed_over_target,
        "auto_over_target": _ratio(tps[COLD_AUTO], tps[COLD_TARGET]),
        "auto_drafted": auto_drafted,
        "fixed_drafted": fixed_drafted,
        "collapse_floor": collapse_floor(fixed_drafted),
        "collapses": n_collapsed,
        "n_auto": len(auto_drafted),
        "collapse_flag": bool(
            fixed_over_target is not None
            and fixed_over_target >= FIXED_PAYS
            and n_collapsed > MAX_COLLAPSE_SHARE * len(auto_drafted)
        ),
        "below_fixed_flag": auto_over_fixed is not None and auto_over_fixed < AUTO_OVER_FIXED_FLOOR,
        "identical": _cold_identity(by) if first.temperature == 0.0 else None,
        "wall_seconds": {c: _median([r.wall_seconds for r in rs]) for c, rs in by.items()},
    }


def _cold_identity(by: dict[str, list[ColdRun]]) -> dict[str, str]:
    """'k/n': in how many of n repeats the configuration's text is the target alone's of the
    same repeat (greedy replies must be the target's own)."""
    ref = {r.repeat: r.out.get("text") for r in by[COLD_TARGET]}
    out = {}
    for config in (COLD_AUTO, COLD_FIXED):
        same = [r.repeat in ref and r.out.get("text") == ref[r.repeat] for r in by[config]]
        out[config] = f"{sum(same)}/{len(same)}"
    return out


def cold_rows(runs: Sequence[ColdRun]) -> list[dict]:
    """One row per prompt and temperature, in the order they ran."""
    groups: dict[tuple[str, float], list[ColdRun]] = {}
    for r in runs:
        groups.setdefault((r.prompt_id, r.temperature), []).append(r)
    return [cold_row(rs) for rs in groups.values()]


def cold_summary(rows: Sequence[dict]) -> dict:
    """Across prompts: the collapses where fixed k = 4 pays, the flagged rows, auto ÷ fixed."""
    paying = [r for r in rows if (r["fixed_over_target"] or 0) >= FIXED_PAYS]
    ratios = [r["auto_over_fixed"] for r in rows if r["auto_over_fixed"] is not None]
    return {
        "rows_where_fixed_pays": len(paying),
        "collapses_where_fixed_pays": sum(r["collapses"] for r in paying),
        "auto_runs_where_fixed_pays": sum(r["n_auto"] for r in paying),
        "collapse_flagged": [r["prompt_id"] for r in rows if r["collapse_flag"]],
        "below_fixed_flagged": [r["prompt_id"] for r in rows if r["below_fixed_flag"]],
        "median_auto_over_fixed": _median(ratios),
        "min_auto_over_fixed": min(ratios) if ratios else None,
    }


def cpu_model() -> str:
    """lscpu's model name; /proc/cpuinfo's or the platform's where lscpu is missing."""
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, check=False, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        text = ""
    for line in text.splitlines():
        if line.strip().startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), platform.machine())
    except OSError:
        return platform.processor() or platform.machine()


def cold_report(
    runs: Sequence[ColdRun], suite: dict, base: Sequence[str], configs: dict[str, list[str]], repeats: int
) -> dict:
    """The report of a --cold bench: machine and command, each configuration's command, one
    row per prompt and temperature, the summary, and every run."""
    rows = cold_rows(runs)
    return {
        "cold": True,
        "machine": {"cpu": cpu_model(), "cpu_count": os.cpu_count()},
        "command": shlex.join(["localspec", *sys.argv[1:]]),  # this process's, as typed
        "configs": {c: shlex.join([*base, *flags, "--temp", "T", "-"]) for c, flags in configs.items()},
        "target": _flag_value(base, "--target"),
        "draft": _flag_value(configs[COLD_AUTO], "--draft"),
        "suite": suite.get("name", "custom"),
        "max_tokens": suite.get("max_tokens"),
        "repeats": repeats,
        "rows": rows,
        "summary": cold_summary(rows),
        "runs": [{**asdict(r), "tokens_per_second": r.tokens_per_second, "n_drafted": r.n_drafted} for r in runs],
    }


def _flag_value(argv: Sequence[str], flag: str) -> str | None:
    return next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag), None)


def cold_markdown(rep: dict) -> str:
    f = lambda x, p=2: "—" if x is None else f"{x:.{p}f}"
    lines = [
        f"Cold runs (a fresh `localspec run` per reply): target `{rep['target']}`, draft `{rep['draft']}`, "
        f"suite {rep['suite']}, {rep['max_tokens']} tokens, {rep['repeats']} repeat(s), "
        f"CPU {rep['machine']['cpu']} ({rep['machine']['cpu_count']} CPUs).",
        f"Command: `{rep['command']}`",
        "",
        "| prompt | temp | auto tok/s | fixed k=4 tok/s | target tok/s | auto ÷ fixed | fixed ÷ target "
        "| auto ÷ target | auto drafted | fixed drafted | collapses | identical (auto, fixed) | flag |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rep["rows"]:
        tps, ident = r["tokens_per_second"], r["identical"]
        flags = [f"collapses > 1 in {round(1 / MAX_COLLAPSE_SHARE)}" if r["collapse_flag"] else ""]
        flags.append(f"auto < {AUTO_OVER_FIXED_FLOOR}× fixed" if r["below_fixed_flag"] else "")
        flag = ", ".join(filter(None, flags))
        lines.append(
            f"| {r['prompt_id']} | {r['temperature']:g} | {f(tps[COLD_AUTO], 1)} | {f(tps[COLD_FIXED], 1)} | "
            f"{f(tps[COLD_TARGET], 1)} | {f(r['auto_over_fixed'])} | {f(r['fixed_over_target'])} | "
            f"{f(r['auto_over_target'])} | {', '.join(map(str, r['auto_drafted']))} | "
            f"{', '.join(map(str, r['fixed_drafted']))} | {r['collapses']}/{r['n_auto']} | "
            f"{'—' if ident is None else ident[COLD_AUTO] + ', ' + ident[COLD_FIXED]} | {flag} |"
        )
    s = rep["summary"]
    lines += [
        "",
        f"Where fixed k=4 runs at ≥ {FIXED_PAYS}× target only ({s['rows_where_fixed_pays']} rows), auto collapsed "
        f"(drafted < {COLLAPSE_FRACTION:g} of fixed's median) in {s['collapses_where_fixed_pays']} of "
        f"{s['auto_runs_where_fixed_pays']} runs; flagged: {', '.join(s['collapse_flagged']) or 'none'}.",
        f"Auto ÷ fixed k=4: median {f(s['median_auto_over_fixed'])}, min {f(s['min_auto_over_fixed'])}; "
        f"below {AUTO_OVER_FIXED_FLOOR}: {', '.join(s['below_fixed_flagged']) or 'none'}.",
    ]
    return "\n".join(lines) + "\n"

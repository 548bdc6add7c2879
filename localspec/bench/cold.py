"""``localspec bench --cold``: every run a fresh ``localspec run --json`` process.

A user's ``localspec run``, the app's first reply and the server's first request all start
cold: the pair loads, the costs are calibrated and the controller starts from its priors. The
warm bench (``runner``) never sees that (it warms up and keeps each mode's controller), so
--cold runs each reply the way a user meets it. The process inherits the environment: it reads
and writes the same data dir (profiles.json) as the user's own runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from .report import median_or_none

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

    @property
    def key(self) -> tuple[str, float, int, str]:
        """The task's place in the plan, as :func:`run_key` gives a finished run's."""
        return (self.prompt["id"], self.temperature, self.repeat, self.config)


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


@dataclass(kw_only=True)
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
    done: Sequence[ColdRun] = (),
    on_run: Callable[[list[ColdRun]], None] | None = None,
) -> list[ColdRun]:
    """Every task of :func:`cold_plan` as ``base + configs[config] + --temp T -``, one fresh
    process each. ``base`` is the ``localspec run --json`` command with the model options.
    No --seed: a seeded sampled reply drafts the fixed length chosen at load
    (``core.modes.repeatable``), which is not auto mode. ``done``: runs an interrupted bench
    finished (their tasks are skipped); ``on_run`` is called with all runs after each new one."""
    plan = cold_plan(suite, list(configs), temperatures, repeats)
    finished = {run_key(r) for r in done}
    say = progress or (lambda *_: None)
    runs = list(done)
    for n, task in enumerate(plan):
        if task.key in finished:
            continue
        say(n, len(plan), f"{task.prompt['id']} {task.config} t={task.temperature} (cold)")
        runs.append(_one_run(task, [*base, *configs[task.config], "--temp", f"{task.temperature:g}", "-"], spawn))
        if on_run:
            on_run(runs)
    say(len(plan), len(plan), "done")
    return runs


def run_key(run: ColdRun) -> tuple[str, float, int, str]:
    return (run.prompt_id, run.temperature, run.repeat, run.config)


def _one_run(task: ColdTask, argv: list[str], spawn) -> ColdRun:
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
    return ColdRun(
        prompt_id=task.prompt["id"],
        category=task.prompt["category"],
        config=task.config,
        temperature=task.temperature,
        repeat=task.repeat,
        wall_seconds=wall,
        out=out,
    )


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
    tps = {
        c: median_or_none([r.tokens_per_second for r in rs if r.tokens_per_second is not None]) for c, rs in by.items()
    }
    auto_drafted = [r.n_drafted for r in by[COLD_AUTO]]
    fixed_drafted = [r.n_drafted for r in by[COLD_FIXED]]
    n_collapsed = collapses(auto_drafted, fixed_drafted)
    fixed_over_target = _ratio(tps[COLD_FIXED], tps[COLD_TARGET])
    auto_over_fixed = _ratio(tps[COLD_AUTO], tps[COLD_FIXED])
    paired = paired_ratios(by[COLD_AUTO], by[COLD_FIXED])
    first = runs[0]
    return {
        "prompt_id": first.prompt_id,
        "category": first.category,
        "temperature": first.temperature,
        "tokens_per_second": tps,
        "auto_over_fixed": auto_over_fixed,
        "fixed_over_target": fixed_over_target,
        "auto_over_target": _ratio(tps[COLD_AUTO], tps[COLD_TARGET]),
        "paired_auto_over_fixed": paired,
        "paired_median": median_or_none(paired),
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
        "wall_seconds": {c: median_or_none([r.wall_seconds for r in rs]) for c, rs in by.items()},
    }


def paired_ratios(auto: Sequence[ColdRun], fixed: Sequence[ColdRun]) -> list[float]:
    """Auto ÷ fixed k = 4 within each repeat, by repeat: the two ran one after the other, so a
    machine whose speed drifts between sittings (by up to a third on these VMs) moves both.
    The target's rule stays the ratio of the medians; this says how much of a miss is drift."""
    fixed_tps = {r.repeat: r.tokens_per_second for r in fixed}
    return [
        a / f
        for r in sorted(auto, key=lambda r: r.repeat)
        if (a := r.tokens_per_second) is not None and (f := fixed_tps.get(r.repeat))
    ]


def _cold_identity(by: dict[str, list[ColdRun]]) -> dict[str, str]:
    """'k/n': in how many of n repeats the configuration's text is the target alone's of the
    same repeat (greedy replies must be the target's own); a repeat whose target-alone run has
    not run yet (an unfinished report) is not counted."""
    ref = {r.repeat: r.out.get("text") for r in by[COLD_TARGET]}
    out = {}
    for config in (COLD_AUTO, COLD_FIXED):
        same = [r.out.get("text") == ref[r.repeat] for r in by[config] if r.repeat in ref]
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
        "median_auto_over_fixed": median_or_none(ratios),
        "median_paired_auto_over_fixed": median_or_none([r["paired_median"] for r in rows if r.get("paired_median")]),
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


def code_digest() -> str:
    """A digest of the localspec package's sources (the code every run's process imports): a
    resumed bench must run the code its first runs ran."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.suffix in (".py", ".json", ".toml") and "__pycache__" not in path.parts:
            h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def cold_plan_identity(
    suite: dict, base: Sequence[str], configs: dict[str, list[str]], temperatures: Sequence[float], repeats: int
) -> dict:
    """What runs must share to be one measurement: the machine, the code, the commands, the
    prompts' texts, the temperatures and the repeats. An unfinished report keeps it, and
    ``--resume`` continues only a report whose identity is this one."""
    prompts = json.dumps([[p["id"], p["prompt"]] for p in suite["prompts"]], ensure_ascii=False)
    return {
        "machine": {"cpu": cpu_model(), "cpu_count": os.cpu_count()},
        "code": code_digest(),
        "commands": {c: [*base, *flags] for c, flags in configs.items()},
        "prompts": hashlib.sha256(prompts.encode()).hexdigest()[:16],
        "temperatures": [float(t) for t in temperatures],
        "repeats": repeats,
    }


# what each part of a plan's identity means, for the message that refuses a resume
IDENTITY_WORDS = {
    "machine": "the machine (CPU)",
    "code": "localspec's code",
    "commands": "the model or drafting options",
    "prompts": "the prompts (suite, --prompts)",
    "temperatures": "the temperatures",
    "repeats": "--repeats",
}


def resume_problem(previous: dict, identity: dict) -> str | None:
    """Why ``previous`` (an unfinished --cold report) cannot be continued by a bench of
    ``identity``, in words; None when it can."""
    if not previous.get("cold") or "plan" not in previous or previous.get("complete", True):
        return "it is not an unfinished `localspec bench --cold` report"
    changed = [IDENTITY_WORDS[k] for k in IDENTITY_WORDS if previous["plan"].get(k) != identity.get(k)]
    return f"{', '.join(changed)} changed since its runs ran" if changed else None


def runs_from(report: dict) -> list[ColdRun]:
    """The runs a report keeps, as ColdRuns again."""
    fields = ("prompt_id", "category", "config", "temperature", "repeat", "wall_seconds", "out")
    return [ColdRun(**{f: r[f] for f in fields}) for r in report.get("runs", [])]


def cold_report(
    runs: Sequence[ColdRun],
    suite: dict,
    base: Sequence[str],
    configs: dict[str, list[str]],
    repeats: int,
    plan: dict | None = None,
    planned: int | None = None,
) -> dict:
    """The report of a --cold bench: machine and command, each configuration's command, one
    row per prompt and temperature, the summary, and every run. ``plan``: the bench's
    :func:`cold_plan_identity`; ``planned``: how many runs it has in all (a report with fewer
    is unfinished, and ``--resume`` continues it)."""
    rows = cold_rows(runs)
    planned = len(runs) if planned is None else planned
    return {
        "cold": True,
        "complete": len(runs) >= planned,
        "planned": planned,
        "machine": plan["machine"] if plan else {"cpu": cpu_model(), "cpu_count": os.cpu_count()},
        "plan": plan,
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
        *_unfinished(rep),
        "",
        "| prompt | temp | auto tok/s | fixed k=4 tok/s | target tok/s | auto ÷ fixed | paired: median (range) "
        "| fixed ÷ target | auto ÷ target | auto drafted | fixed drafted | collapses | identical (auto, fixed) "
        "| flag |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rep["rows"]:
        tps, ident = r["tokens_per_second"], r["identical"]
        flags = [f"collapses > 1 in {round(1 / MAX_COLLAPSE_SHARE)}" if r["collapse_flag"] else ""]
        flags.append(f"auto < {AUTO_OVER_FIXED_FLOOR}× fixed" if r["below_fixed_flag"] else "")
        flag = ", ".join(filter(None, flags))
        lines.append(
            f"| {r['prompt_id']} | {r['temperature']:g} | {f(tps[COLD_AUTO], 1)} | {f(tps[COLD_FIXED], 1)} | "
            f"{f(tps[COLD_TARGET], 1)} | {f(r['auto_over_fixed'])} | {_paired(r)} | {f(r['fixed_over_target'])} | "
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
        f"below {AUTO_OVER_FIXED_FLOOR}: {', '.join(s['below_fixed_flagged']) or 'none'}. Paired within each "
        f"repeat (the two runs one after the other), the prompts' median: {f(s.get('median_paired_auto_over_fixed'))}.",
    ]
    return "\n".join(lines) + "\n"


def _paired(row: dict) -> str:
    """The paired ratios' median and range (a report written before they were kept: —)."""
    paired, median = row.get("paired_auto_over_fixed"), row.get("paired_median")
    if not paired or median is None:
        return "—"
    return f"{median:.2f} ({min(paired):.2f}–{max(paired):.2f})"


def _unfinished(rep: dict) -> list[str]:
    if rep.get("complete", True):
        return []
    return [
        f"**Unfinished: {len(rep['runs'])} of {rep['planned']} runs.** The same command with `--resume` "
        "continues it; until then a prompt's medians may rest on fewer repeats than asked."
    ]

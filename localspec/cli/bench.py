"""``localspec bench``: speculative vs target-only, side by side, with the cost curve."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..chat.session import ContextOverflow
from ..core import options
from ..core.options import DraftOptions, ModelOptions, ReplyOptions, SamplingParams
from ..lockedfile import write_atomic
from . import flags
from .progress import StepProgress
from .replay import add_replay_options, cmd_record, cmd_replay, recording_problem
from .run import add_model_options, load_session, wants_mtp

if TYPE_CHECKING:
    pass


def register(sub) -> None:
    p = sub.add_parser("bench", help="measure speed-ups side by side on a prompt suite")
    add_model_options(p, exclusive=False, target_required=False)  # not with --from-json
    p.add_argument(
        "--suite",
        default="default",
        help="'default', 'heldout' (prompts nothing is tuned on, to check a claim), 'documents', 'summaries' "
        "(long documents, held out: questions on them, summaries of them) or a JSON suite file",
    )
    # the bench's own use of two options: a list of temperatures, and the suite's reply length
    flags.add_flag(
        p,
        SamplingParams,
        "temperature",
        action="append",
        default=None,
        help="temperature(s); repeat the flag (default 0)",
    )
    p.add_argument(
        "--repeats", type=int, default=None, help="interleaved repeats per prompt and mode (default 1; 5 with --cold)"
    )
    flags.add_flag(
        p,
        ReplyOptions,
        "max_tokens",
        default=None,
        help="override the suite's reply length (--record, --replay: 96; --repeated: scenarios that set none, 200)",
    )
    p.add_argument(
        "--prompts",
        default=None,
        help="comma-separated prompt ids (--repeated: scenario ids; --replay: shell-style patterns, e.g. 'code-*')",
    )
    p.add_argument("--quick", action="store_true", help="3 prompts, 48 tokens: about a minute")
    p.add_argument(
        "--compare-rules",
        action="store_true",
        help="at temperature > 0 also run token matching ('draft:match') beside speculative sampling",
    )
    p.add_argument(
        "--oracle",
        action="append",
        default=[],
        metavar="PCT[/K]",
        help="also run an oracle drafter that replays the target-only reply with PCT %% "
        "of its tokens right, at zero draft cost (to measure a machine, e.g. a GPU); "
        "PCT/K drafts K tokens every step",
    )
    p.add_argument(
        "--verdicts",
        nargs="?",
        const="",  # the default pair's, shipped (bench.verdicts.DEFAULT_PAIR)
        default=None,
        metavar="FILE",
        help="also run the draft model replaying a real pair's recorded verdicts ('verdicts'): its passes "
        "and auto mode's controller at this machine's cost, the tokens right where the real pair's draft "
        "was (greedy only; scripts/record_verdicts.py writes FILE; alone: the default Qwen pair's, shipped)",
    )
    p.add_argument(
        "--sweep",
        action="store_true",
        help="also run fixed draft configurations (k in 2,3,4,6,8 x p_min in 0,0.75) beside "
        "auto mode and report auto / best fixed per prompt (needs --draft)",
    )
    p.add_argument(
        "--control",
        action="store_true",
        help="also run the target alone a second time ('control'), interleaved like every mode: "
        "its speed-up against the first is this run's noise",
    )
    p.add_argument(
        "--changing",
        action="store_true",
        help="with a draft model: also run draft mode as if a change of batch size cost nothing "
        "('changing': every verify as long as its draft), interleaved; on a GPU, beside 'draft', what "
        "the steady verify sizes are worth",
    )
    p.add_argument(
        "--cold",
        action="store_true",
        help="run every reply as a fresh `localspec run --json` process (load, calibration and drafting "
        "controller from scratch, no warm-up), in three configurations interleaved: auto (run's default "
        "drafting with --draft), fixed k=4 (--no-adapt --draft-max 4 --p-min 0) and the target alone "
        "(--no-draft); reports tok/s, ratios, drafted tokens and auto's collapses per prompt (needs --draft). "
        "The processes inherit this environment, so they use the same data dir and profiles.json as your "
        "own runs. With --replay: a fresh controller for every prompt, its acceptance prior what the earlier "
        "prompts counted (a profile)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="with --cold: continue the unfinished report at --json FILE (a --cold bench saves it after "
        "every run), on the same machine, code, options and prompts",
    )
    p.add_argument("--json", type=Path, default=None, help="write the full report as JSON here")
    p.add_argument("--markdown", type=Path, default=None, help="write the Markdown tables here")
    p.add_argument(
        "--plot",
        type=Path,
        default=None,
        metavar="DIR",
        help="also draw the report as SVG here: the cost curve T(k)/T(1) beside its direct measurement, "
        "and the speed-up by prompt and mode",
    )
    p.add_argument(
        "--from-json",
        type=Path,
        default=None,
        metavar="FILE",
        help="run nothing: print and draw (--plot) a report an earlier --json wrote",
    )
    p.add_argument(
        "--repeated",
        nargs="?",
        const="repeated",
        default=None,
        metavar="SUITE",
        help="play a repeated-work suite ('repeated', 'repeated-heldout': the same kinds, nothing tuned on, or a "
        "JSON file of scenarios) in order: a regenerate, a function refined over turns, a loop of JSON "
        "extractions, a file edited again; each mode with a "
        "history of its own that starts empty. Modes: none, the pair's own and it with '+history' "
        "(--modes to choose)",
    )
    p.add_argument(
        "--modes",
        default=None,
        help="with --repeated: comma-separated modes, e.g. none,draft,draft+history,lookup+history",
    )
    add_replay_options(p)
    p.set_defaults(func=cmd_bench)


def cmd_repeated(args) -> int:
    """``--repeated``: scenarios of repeated work, played in order (``bench.repeated``)."""
    from ..bench import repeated, suites

    try:
        suite = repeated.with_max_tokens(
            suites.only(repeated.load(args.repeated), args.prompts, "scenarios"), args.max_tokens
        )
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    args.mtp = wants_mtp(args)
    own = "draft" if args.draft else "mtp" if args.mtp else "lookup"
    modes = args.modes.split(",") if args.modes else ["none", own, own + repeated.HISTORY]
    modes = drafting_modes(modes, args.draft_max)
    session = load_session(args, history=False)  # each mode is given a history of its own
    unknown = [m for m in modes if m.removesuffix(repeated.HISTORY) not in session.modes]
    if unknown:
        session.close()
        print(f"error: unknown mode(s) {', '.join(unknown)} (known: {', '.join(session.modes)})", file=sys.stderr)
        return 2
    try:
        temperature = (args.temperature or [0.0])[0]
        rep = repeated.run_repeated(session, suite, modes, temperature, args.repeats or 1, progress=StepProgress())
    finally:
        session.close()
    if args.json:
        write_atomic(args.json, json.dumps(rep, indent=1, ensure_ascii=False))
    md = repeated.markdown(rep)
    print(md)
    if args.markdown:
        args.markdown.write_text(md)
    return 0


def drafting_modes(modes: list[str], draft_max: int) -> list[str]:
    """``modes`` as they run at ``--draft-max`` (``options.drafting_mode``), each once: at 0 every
    drafting mode is the target alone, as the session loaded for it is (``spec_and_options``)."""
    return list(dict.fromkeys(options.drafting_mode(m, draft_max) or m for m in modes))


def check_bench_flags(args) -> str | None:
    """The bench's own flags, in options' words (the model flags are checked by load_session)."""
    problems = [options.check("temperature", t) for t in args.temperature or []]
    problems.append(options.check("max_tokens", args.max_tokens) if args.max_tokens is not None else None)
    if args.resume and not args.cold:
        problems.append("--resume continues an unfinished --cold bench: give --cold (and its --json file)")
    problems.append(verdicts_problem(args))
    if args.repeats is not None and args.repeats < 1:
        problems.append(f"--repeats must be at least 1 (got {args.repeats})")
    problems.append(recording_problem(args))
    return next((f"error: {p}" for p in problems if p), None)


def verdicts_problem(args) -> str | None:
    """Why --verdicts cannot run with these flags (None: it can, or it is not given)."""
    if args.verdicts is None:
        return None
    if args.record or args.replay or args.cold or args.repeated is not None:
        return "--verdicts is a mode of the warm bench: not with --record, --replay, --cold or --repeated"
    if any(t != 0 for t in args.temperature or []):
        return "--verdicts replays greedy verdicts: only at --temp 0"
    if args.target and not args.draft:
        return "--verdicts spends a draft model's passes: give --draft"
    return None


def cmd_bench(args) -> int:
    from ..bench import modes as bench_modes
    from ..bench import report, runner, suites
    from ..bench import verdicts as bench_verdicts

    problem = check_bench_flags(args)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    if args.record:
        return cmd_record(args)
    if args.replay:
        return cmd_replay(args)
    if args.from_json:
        return replot(args)
    if not args.target:
        print("error: the bench needs --target (or --from-json FILE, to draw an earlier report)", file=sys.stderr)
        return 2
    if args.repeated is not None:
        return cmd_repeated(args)

    try:
        suite = suites.load_suite(args.suite)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.quick:
        suite = suites.quick(suite)
    if args.prompts:
        try:
            suite = suites.only(suite, args.prompts)
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    if args.max_tokens:
        suite = {**suite, "max_tokens": args.max_tokens}
    if args.cold:
        return cmd_cold(args, suite)
    repeats = args.repeats or 1
    args.mtp = wants_mtp(args)  # (a target with MTP layers and no --draft drafts with them)
    modes = ["none"] + (["draft"] if args.draft else ["mtp"] if args.mtp else []) + (["lookup"] if args.lookup else [])
    bad = [o for o in args.oracle if not re.fullmatch(r"(100|[1-9]?[0-9])(/([1-9]|[1-5][0-9]|6[0-3]))?", o)]
    if bad:
        print(
            f"error: --oracle {bad[0]}: give a percentage of right tokens, 0 to 100, and "
            "optionally /K for a fixed draft length of 1 to 63 (e.g. 100/8)",
            file=sys.stderr,
        )
        return 2
    modes += [f"oracle-{o}" for o in args.oracle]
    try:
        given = args.verdicts or bench_verdicts.DEFAULT_PAIR
        recorded = bench_verdicts.load(given) if args.verdicts is not None else None
    except ValueError as e:
        print(f"error: --verdicts {e}", file=sys.stderr)
        return 2
    modes += [bench_modes.VERDICTS] if recorded else []
    if args.sweep:
        if not (args.draft or args.mtp):
            print(
                "error: --sweep compares fixed draft configurations with auto mode: give --draft or --mtp",
                file=sys.stderr,
            )
            return 2
        modes += bench_modes.sweep_modes()
    modes = drafting_modes(modes, args.draft_max)
    if args.compare_rules:
        modes += [f"{m}:match" for m in modes if m != "none"]
    if args.control:
        modes.append(bench_modes.CONTROL)
    if args.changing and args.draft:
        modes.append(bench_modes.CHANGING)
    lookup = args.lookup
    args.lookup = False  # the session loads target + draft; lookup is a mode of the same session
    session = load_session(args, history=False)  # one-off prompts: no reply drafts from another's
    try:
        rep = runner.run_bench(
            session, suite, modes, args.temperature or [0.0], repeats, progress=StepProgress(), verdicts=recorded
        )
    except ContextOverflow as e:
        print(f"\nerror: a prompt of the suite does not fit: {e}", file=sys.stderr)
        return 4
    finally:
        session.close()
    rep["lookup"] = lookup
    rep["verdicts"] = recorded.pair if recorded else None
    return write_report(args, rep, report.markdown)


# what --cold cannot combine with: it runs its own three configurations, each in its own process
COLD_EXCLUDES = ("lookup", "sweep", "control", "oracle", "compare_rules", "changing")


def cmd_cold(args, suite: dict) -> int:
    from ..bench import cold, suites

    clash = next((name for name in COLD_EXCLUDES if getattr(args, name)), None)
    if clash or not args.draft:
        why = f"not with --{clash.replace('_', '-')}" if clash else "give --draft"
        print(f"error: --cold runs auto, fixed k=4 and the target alone: {why}", file=sys.stderr)
        return 2
    repeats = args.repeats or cold.COLD_REPEATS
    base = cold_base(args, suite.get("max_tokens", suites.SUITE_MAX_TOKENS))
    configs = cold.cold_configs(str(args.draft), flags.given_flags(args, DraftOptions))
    temperatures = args.temperature or [0.0]
    identity = cold.cold_plan_identity(suite, base, configs, temperatures, repeats)
    done = earlier_cold_runs(args, identity)
    if isinstance(done, str):
        print(f"error: {done}", file=sys.stderr)
        return 2
    planned = len(cold.cold_plan(suite, list(configs), temperatures, repeats))
    report = lambda runs: cold.cold_report(runs, suite, base, configs, repeats, identity, planned)

    def save(runs) -> None:  # after every run: an interrupted bench keeps what it measured
        if args.json:
            write_atomic(args.json, json.dumps(report(runs), indent=1, ensure_ascii=False))

    try:
        runs = cold.run_cold(
            suite, base, configs, temperatures, repeats, progress=StepProgress(), done=done, on_run=save
        )
    except (cold.ColdRunFailed, KeyboardInterrupt) as e:
        why = "interrupted" if isinstance(e, KeyboardInterrupt) else f"error: {e}"
        saved = args.json and args.json.exists()
        kept = f"the runs so far are saved in {args.json}: add --resume to continue" if saved else "no run was saved"
        print(f"\n{why}\n{kept}", file=sys.stderr)
        return 130 if isinstance(e, KeyboardInterrupt) else 1
    return write_report(args, report(runs), cold.cold_markdown)


def earlier_cold_runs(args, identity: dict):
    """The runs to keep from --json's unfinished report with --resume (none without), or why
    the bench must not start: an unfinished report there is never overwritten."""
    from ..bench import cold

    previous = read_report(args.json) if args.json and args.json.exists() else None
    unfinished = isinstance(previous, dict) and previous.get("cold") and previous.get("complete") is False
    if not args.resume:
        if unfinished and previous is not None:
            n, planned = len(previous.get("runs", [])), previous.get("planned")
            return (
                f"{args.json} holds an unfinished --cold bench ({n} of {planned} runs): add --resume to "
                "continue it, or give another --json file"
            )
        return []
    if not args.json:
        return "--resume continues the unfinished report at --json FILE: give --json"
    if previous is None:
        return f"--resume: {args.json} does not exist or is not JSON; without --resume the bench starts anew"
    problem = cold.resume_problem(previous, identity)
    if problem:
        return f"--resume: cannot continue {args.json}: {problem}; start anew with another --json file"
    return cold.runs_from(previous)


def read_report(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None


def write_report(args, rep: dict, markdown) -> int:
    """The report as --json asks (first: the measurements survive whatever happens below), then
    as Markdown, printed and as --markdown asks, then drawn as --plot asks."""
    if args.json:
        write_atomic(args.json, json.dumps(rep, indent=1, ensure_ascii=False))
    md = markdown(rep)
    print(md)
    if args.markdown:
        args.markdown.write_text(md)
    if args.plot:
        from ..bench.plot import write_plots

        args.plot.mkdir(parents=True, exist_ok=True)
        for path in write_plots(rep, args.plot):
            print(f"drew {path}")
    return 0


def replot(args) -> int:
    """A report an earlier ``--json`` wrote, printed and drawn again without running anything."""
    from ..bench import cold, report

    try:
        rep = json.loads(args.from_json.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        print(f"error: --from-json {args.from_json}: cannot read a report there ({e})", file=sys.stderr)
        return 2
    if not isinstance(rep, dict) or "rows" not in rep:
        print(f"error: --from-json {args.from_json}: not a report of `localspec bench --json`", file=sys.stderr)
        return 2
    args.json = None  # it is already on disk
    return write_report(args, rep, cold.cold_markdown if rep.get("cold") else report.markdown)


def cold_base(args, max_tokens: int) -> list[str]:
    """``localspec run --json`` on the bench's target with the bench's model options, in this
    Python (so the same install runs), and the suite's reply length."""
    argv = [sys.executable, "-m", "localspec", "run", "--json", "--target", str(args.target)]
    return [*argv, *flags.given_flags(args, ModelOptions), "--max-tokens", str(max_tokens)]

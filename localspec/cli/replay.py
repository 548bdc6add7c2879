"""``localspec bench --record`` and ``--replay``: the target's greedy replies recorded once, then
drafting policies replayed on them exactly (``localspec.bench.replay``)."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..chat.session import ContextOverflow
from ..core.options import DraftOptions, ModelOptions, SamplingParams
from ..lockedfile import write_atomic
from . import flags
from .run import load_session

if TYPE_CHECKING:
    from ..bench.replay import ReplayOptions


def add_replay_options(p) -> None:
    """--record and --replay, and the options only --replay reads (all default to None, False or
    [], so that a given one can be told from an absent one)."""
    r = p.add_argument_group(
        "recording and replaying",
        "compare drafting policies exactly, without timing noise: --record once, then --replay "
        "(the real engine, controller and draft model on the recorded replies, timed on a virtual clock "
        "from the recorded costs; it compares policies, the bench measures them)",
    )
    r.add_argument(
        "--record",
        type=Path,
        default=None,
        metavar="FILE",
        help="run nothing else: measure the target's verify curve and record its greedy reply to each prompt "
        "of --suite in FILE, for --replay (needs --target and --draft)",
    )
    r.add_argument(
        "--replay",
        type=Path,
        default=None,
        metavar="FILE",
        help="replay --record's FILE with each of --policies and print, per prompt, the speed-up over the "
        "target alone, the mean draft length and the acceptance (needs --draft; the draft's rows are "
        "memoised in FILE.memo, so a second replay runs in seconds)",
    )
    r.add_argument(
        "--policies",
        default=None,
        help="the policies replayed, comma-separated: none, auto, fixed-kK-pP (default: none, auto and "
        "--sweep's fixed configurations)",
    )
    r.add_argument(
        "--noise",
        type=float,
        default=None,
        metavar="SIGMA",
        help="every evaluation's cost times a lognormal factor of this sigma, and the costs calibrated at "
        "load and learnt online as a session does (default 0: the controller is given the recorded curve)",
    )
    r.add_argument("--noise-seed", type=int, default=None, help="the seed of --noise (default 0)")
    r.add_argument(
        "--burst",
        type=burst_flag,
        default=None,
        metavar="START,LENGTH,FACTOR",
        help="target evaluations START to START+LENGTH of each reply (the prefill is 1) and the draft passes "
        "among them run FACTOR times slower: a busy stretch, e.g. 8,12,1.6",
    )
    r.add_argument(
        "--blind",
        type=cost_flag,
        default=None,
        metavar="F",
        help="each verify row past the first costs F times T(1) more, after the verify is timed: work the "
        "cost model does not see (Python on a verify's rows), e.g. 0.1",
    )
    r.add_argument(
        "--size-change",
        type=cost_flag,
        default=None,
        metavar="F",
        help="a target evaluation of another size than the one before costs F times T(1) more and is no "
        "sample until the size settles, as on a GPU (CUDA builds its graph again): a verify between single "
        "tokens pays it twice, into its size and out of it (the H200's 1.5B F16 target paid 1.35 T(1) for "
        "both, 0.68 each), e.g. 0.68",
    )
    r.add_argument("--no-profile", action="store_true", help="with --cold: every prompt from the default prior")
    r.add_argument(
        "--shape",
        type=shape_flag,
        default=None,
        help="another machine's T(n)/T(1) for n = 2, 3, ...: 1.58,1.75,1.88",
    )
    r.add_argument("--draft-pass", type=float, default=None, help="with --shape: a draft pass in T(1), e.g. 0.27")
    r.add_argument(
        "--draft-read",
        type=float,
        default=None,
        help="a prompt token's read by the draft in T(1) (default: the recording's), e.g. 0.01",
    )
    r.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a field of the drafting Policy (localspec/core/policy.py) changed for this replay, e.g. "
        "opening_steps=0 (what a mechanism is worth); repeat for several",
    )
    r.add_argument(
        "--trace",
        default=None,
        metavar="PROMPT",
        help="print this prompt's steps (where the drafts came from, each step's draft and verify time "
        "in T(1)), with the drafting line wherever it changes",
    )
    r.add_argument(
        "--keep-replies",
        action="store_true",
        help="each policy keeps its replies as a history, empty at the start, as a session does: a later "
        "prompt may copy from an earlier reply",
    )
    r.add_argument(
        "--regenerate",
        action="store_true",
        help="replay each prompt twice in a row, keeping the replies: the second, ID:regenerate, is a regenerate",
    )


def burst_flag(text: str) -> tuple[int, int, float]:
    from ..bench.replay import parse_burst

    try:
        return parse_burst(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def cost_flag(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give a cost in T(1)s, 0 or more, e.g. 0.1")
    return value


def shape_flag(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give T(n)/T(1) for n = 2, 3, ..., e.g. 1.58,1.75,1.88") from None


# what --record and --replay take no part in: they run their own comparison and print their own report
NOT_WITH_RECORDINGS = (
    *("mtp", "lookup", "no_draft", "temperature", "repeats", "quick", "compare_rules", "oracle"),
    *("sweep", "control", "resume", "json", "markdown", "plot", "from_json"),
)
# the options only --replay reads
REPLAY_ONLY = (
    *("policies", "noise", "noise_seed", "burst", "no_profile", "shape", "draft_pass", "draft_read", "set", "trace"),
    *("keep_replies", "regenerate", "blind", "size_change"),
)


def given(args, name: str) -> bool:
    """Whether the flag ``name`` was given (its default is None, False or [])."""
    value = getattr(args, name)
    return value is not None and value is not False and value != []


def dashed(name: str) -> str:
    """The flag of ``args.<name>`` as typed."""
    declared = flags.flagged(SamplingParams).get(name)  # --temp
    return declared.name if declared else "--" + name.replace("_", "-")


def recording_problem(args) -> str | None:
    """Why --record or --replay cannot run with these flags, or why a flag of --replay is given
    without it (None: nothing is wrong). The replay's own values are checked by replay_options."""
    which = "--record" if args.record else "--replay" if args.replay else None
    stray = next((name for name in REPLAY_ONLY if given(args, name)), None)
    if which is None or (stray and not args.replay):
        return f"{dashed(stray)} is an option of --replay FILE" if stray else None
    if args.record and args.replay:
        return "--record, then --replay: one at a time"
    clash = next((name for name in NOT_WITH_RECORDINGS if given(args, name)), None)
    if clash:
        return f"{which} runs its own comparison: not with {dashed(clash)}"
    if not args.draft or (args.record and not args.target):
        return "--record needs --target and --draft" if args.record else "--replay needs --draft"
    if args.record and (args.cold or args.prompts):
        return f"--record records every prompt of --suite: not with {'--cold' if args.cold else '--prompts'}"
    loading = [
        f for f in flags.given_flags(args, ModelOptions) + flags.given_flags(args, DraftOptions) if f != "--no-copy"
    ]
    if args.replay and (args.target or loading):
        extra = "--target" if args.target else loading[0]
        return f"--replay runs the recorded target and loads the draft its own way: not with {extra}"
    return None


def cmd_record(args) -> int:
    """The target's costs and greedy replies to --suite, written to --record's file."""
    from ..bench import replay, suites

    try:
        prompts = suites.load_suite(args.suite)["prompts"]
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    session = load_session(args, history=False)  # one-off prompts: no reply drafts from another's
    try:
        recording = replay.record(
            session,
            prompts,
            args.max_tokens or replay.REPLY_TOKENS,
            on_prompt=lambda prompt_id, n_prompt, n_reply: print(prompt_id, n_prompt, n_reply, file=sys.stderr),
        )
    except ContextOverflow as e:
        print(f"\nerror: a prompt of the suite does not fit: {e}", file=sys.stderr)
        return 4
    finally:
        session.close()
    write_atomic(args.record, json.dumps(recording))
    return 0


def replay_options(args) -> ReplayOptions:
    """--replay's options; ValueError naming the flag whose value is wrong."""
    from ..bench import modes, replay

    policies = tuple((args.policies or ",".join(["none", "auto", *modes.sweep_modes()])).split(","))
    problem = next((p for p in map(replay.policy_problem, policies) if p), None)
    if problem:
        raise ValueError(f"--policies: {problem}")
    try:
        policy = replay.policy_from(args.set)
    except ValueError as e:
        raise ValueError(f"--set {e}") from None
    return replay.ReplayOptions(
        policies=policies,
        prompts=args.prompts or "",
        noise=args.noise or 0.0,
        seed=args.noise_seed or 0,
        burst=args.burst,
        blind=args.blind or 0.0,
        size_change=args.size_change or 0.0,
        cold=args.cold,
        no_profile=args.no_profile,
        shape=args.shape or (),
        draft_pass=args.draft_pass,
        draft_read=args.draft_read,
        policy=policy,
        trace=args.trace or "",
        max_tokens=args.max_tokens or replay.REPLY_TOKENS,
        keep_replies=args.keep_replies,
        regenerate=args.regenerate,
        copy=args.copy,
    )


def cmd_replay(args) -> int:
    """--replay's report: its traced steps, if any, then the table per prompt and policy."""
    from ..bench import replay
    from ..llama.backend import ModelLoadError
    from ..llama.preflight import ModelFileError

    try:
        opts = replay_options(args)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        recording, memo = replay.read_recording(args.replay)
    except ValueError as e:
        print(f"error: --replay {args.replay}: {e}", file=sys.stderr)
        return 2
    if not replay.select(recording["prompts"], opts.prompts):
        print(f"error: no prompt of {args.replay} matches --prompts {opts.prompts!r}", file=sys.stderr)
        return 2
    try:
        draft = replay.load_draft(args.draft)
    except (ModelFileError, ModelLoadError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    n_memo = len(memo)
    try:
        result = replay.replay(recording, draft, memo, opts)
    finally:
        draft.close()
    replay.write_memo(args.replay, memo)
    report = replay.report(result.results, list(opts.policies)) + replay.dropped_report(result.dropped)
    print("\n".join([*result.trace, *replay.costs_report(recording, opts), *report]))
    if note := replay.memo_note(len(memo) - n_memo, args.replay):
        print(note, file=sys.stderr)
    return 0

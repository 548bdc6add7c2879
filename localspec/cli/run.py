"""``localspec run``: one prompt, headless. The reply streams to stdout; one stats line follows
on stderr (so stdout stays the reply alone), or ``--json`` prints everything as one object."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..chat.history import HistoryStore
from ..chat.session import (
    ContextOverflow,
    IncompatiblePair,
    LoadOptions,
    PairSpec,
    Session,
    load_options,
    prompt_tokens,
    reply_room,
)
from ..core import options
from ..core.options import DraftOptions, ModelOptions, ReplyOptions, SamplingParams
from ..core.protocol import ContextFull
from ..core.stats import RunStats
from ..llama.offload import OffloadPlan
from ..models.profiles import PROFILES_FILE, ProfileStore
from ..settings import data_dir
from . import flags

FINISH_NOTES = {
    "context": "stopped: the context window is full (raise --ctx or shorten the prompt)",
    "length": None,
    "eos": None,
    "stop": None,
}


# the option groups whose flags each command has (localspec.core.options, localspec.cli.flags):
# the load's are checked before a load (run, bench, serve), the reply's before a reply (run)
LOAD_GROUPS = (ModelOptions, DraftOptions)
REPLY_GROUPS = (SamplingParams, ReplyOptions)
RUN_MAX_TOKENS = 512  # a headless reply stops sooner than the app's (ReplyOptions: 1024)
# Tuning choice: a quantized target's batched and single-token CPU kernels were measured to part
# at top-2 gaps up to 0.18 logits (docs/design.md); past 0.3, numerics are an unlikely cause
# of a divergence
NEAR_TIE = 0.3


def add_model_options(p: argparse.ArgumentParser, exclusive: bool = True, target_required: bool = True) -> None:
    """The files, the drafting mode and the load's options; ``exclusive=False`` lets bench
    take --draft and --lookup together; ``target_required=False`` lets serve name the files
    with --pair instead."""
    p.add_argument("--target", required=target_required, type=Path, help="target GGUF file")
    mode = p.add_mutually_exclusive_group() if exclusive else p
    mode.add_argument("--draft", type=Path, help="draft GGUF (same tokenizer as the target)")
    mode.add_argument(
        "--mtp",
        action="store_true",
        help="draft with the target's own MTP layers (the default when its GGUF has them and no mode is given)",
    )
    mode.add_argument(
        "--lookup",
        action="store_true",
        help="drafts from suffix matches over the context and past replies (prompt lookup), no draft model",
    )
    mode.add_argument("--no-draft", action="store_true", help="the target alone (baseline)")
    for group in LOAD_GROUPS:
        flags.add_flags(p, group)


def add_sampling_options(p: argparse.ArgumentParser) -> None:
    flags.add_flags(p, SamplingParams)
    flags.add_flags(p, ReplyOptions, defaults={"max_tokens": RUN_MAX_TOKENS})


def register(sub) -> None:
    p = sub.add_parser("run", help="generate one reply headless, with statistics")
    p.add_argument("prompt", help="the user message ('-' reads stdin)")
    add_model_options(p)
    add_sampling_options(p)
    p.add_argument("--system", default=None, help="system prompt")
    p.add_argument(
        "--raw",
        action="store_true",
        help="no chat template: the prompt is the text, and special tokens in it (<|im_end|>) are parsed",
    )
    p.add_argument("--json", action="store_true", help="print reply and statistics as one JSON object")
    p.add_argument(
        "--check-identity",
        action="store_true",
        help="greedy only: run the target alone on the same prompt too and report where the replies part",
    )
    p.set_defaults(func=cmd_run)


def sampling_from(args) -> SamplingParams:
    return flags.from_args(SamplingParams, args)


def spec_and_options(args) -> tuple[PairSpec, LoadOptions]:
    """The pair and the load's options from the flags (run, serve and bench load with these):
    with ``--draft-max 0`` the target alone (``options.drafting_mode``), so no draft is loaded
    and no mode is built that would draft at most 0 tokens."""
    drafting = flags.from_args(DraftOptions, args)
    spec = PairSpec(args.target, args.draft, lookup=args.lookup, mtp=wants_mtp(args))
    if options.drafting_mode(spec.mode, drafting.draft_max) == "none":
        spec = PairSpec(args.target)
    return spec, load_options(flags.from_args(ModelOptions, args), drafting)


def wants_mtp(args) -> bool:
    """--mtp, or no drafting mode given and a target whose GGUF carries MTP layers: it drafts
    for itself, as Ollama and llama.cpp's server do with such a file."""
    if getattr(args, "mtp", False):
        return True
    if args.draft or args.lookup or getattr(args, "no_draft", False) or args.target is None:
        return False
    from ..models.catalog import target_mtp

    return target_mtp(args.target).present


def load_session(args, messages: list[dict] | None = None, history: bool = True) -> Session:
    """Load or exit with one clear message (exit 2: an option out of range, a bad or too large
    file, ``messages`` that cannot fit the context; 3: incompatible pair). More --threads than
    CPUs are lowered, with a note. The prompt is checked as soon as the target is loaded, so a
    refusal does not wait for the draft and the calibration."""
    from ..llama.backend import ModelLoadError
    from ..llama.preflight import ModelFileError

    problem = flags.check(args, *LOAD_GROUPS)
    if problem:
        raise SystemExit(_fail(problem, 2))
    args.threads, note = options.clamp_threads(args.threads)
    if note:
        print(f"note: {note}", file=sys.stderr)
    spec, opts = spec_and_options(args)
    try:
        # what the pair costs here is kept for the pair menu and `localspec doctor`
        return Session.load(
            spec,
            opts,
            profiles=ProfileStore(data_dir() / PROFILES_FILE),
            check_target=(lambda target: check_fits(target, messages, args)) if messages else None,
            history=HistoryStore() if history else None,  # past replies to draft from (--no-history: none)
        )
    except PromptTooLong as e:
        raise SystemExit(_fail(str(e), 2)) from None
    except _template_error() as e:  # the prompt check renders the chat template
        raise SystemExit(_fail(f"error: {e}", 2)) from None
    except IncompatiblePair as e:
        raise SystemExit(_fail(f"error: {spec.draft} cannot draft for {spec.target}: {e}", 3)) from None
    except (ModelFileError, ModelLoadError) as e:
        raise SystemExit(_fail(f"error: {e}", 2)) from None


class PromptTooLong(Exception):
    """The prompt leaves no room for the reply in this context; the message says what to do."""


def check_fits(target, messages: list[dict], args) -> None:
    """Raise PromptTooLong when the conversation and its reply cannot fit (the rule of
    Session.fit, which never drops a run's only message)."""
    n = len(prompt_tokens(target, messages, args.raw))
    if n + reply_room(target.n_ctx, args.max_tokens) > target.n_ctx:
        raise PromptTooLong(prompt_too_long(target, messages, args))


def prompt_too_long(target, messages: list[dict], args) -> str:
    """The message for a prompt that leaves no room for the reply, with the --ctx that would."""
    n = len(prompt_tokens(target, messages, args.raw))
    # Session.fit keeps min(max_tokens, n_ctx // 4) for the reply: either n + max_tokens fits,
    # or n_ctx >= 4n/3 leaves a quarter free
    need = max(min(n + args.max_tokens, -(-4 * n // 3)), options.MIN_CTX)
    n_ctx = target.n_ctx
    most = min(getattr(target, "n_ctx_train", 0) or options.MAX_CTX, options.MAX_CTX)
    room = reply_room(n_ctx, args.max_tokens)
    fix = (
        f"raise --ctx to {need} or shorten the prompt"
        if need <= most
        else f"shorten the prompt (this model's context is at most {most} tokens)"
    )
    return f"error: the prompt is {n} tokens and the reply needs {room} more; the context holds {n_ctx}: {fix}"


# An except clause's classes are looked up only when something is raised: llama_cpp is
# imported by the load, never just to parse the command line.
def _template_error() -> type[Exception]:
    from ..llama.backend import ChatTemplateError

    return ChatTemplateError


def _backend_errors() -> tuple[type[Exception], ...]:
    from ..llama.backend import BackendError

    return BackendError, ContextFull


def _fail(message: str, code: int) -> int:
    print(message, file=sys.stderr)
    return code


def read_prompt(arg: str) -> str:
    """'-' reads stdin as bytes: invalid UTF-8 in a piped file becomes U+FFFD, not a traceback.
    The newlines that end a file or an ``echo`` are not part of the message (the shell's
    ``$(cat file)`` drops them too): with them the model answers another message, and a piped
    prompt would not get the reply the same prompt typed as an argument gets."""
    if arg != "-":
        return arg
    return sys.stdin.buffer.read().decode("utf-8", errors="replace").rstrip("\r\n")


def cmd_run(args) -> int:
    # every option is checked before a model is loaded: a mistake costs no load time
    problem = flags.check(args, *LOAD_GROUPS, *REPLY_GROUPS)
    if problem:
        return _fail(problem, 2)
    params = sampling_from(args)
    if args.check_identity and not params.greedy:
        return _fail("error: --check-identity compares greedy replies: use --temp 0 (the default)", 2)
    prompt = read_prompt(args.prompt)
    if not prompt.strip():
        return _fail("error: the prompt is empty: give the message as an argument, or '-' and pipe it in", 2)
    messages = ([{"role": "system", "content": args.system}] if args.system else []) + [
        {"role": "user", "content": prompt}
    ]
    session = load_session(args, messages)
    stats = RunStats()
    parts: list[str] = []
    tokens: list[int] = []
    identity = None
    try:
        for step in session.chat(messages, params, args.max_tokens, raw=args.raw):
            stats.add(step)
            parts.append(step.text)
            tokens.extend(step.emitted)
            if not args.json and step.text:
                sys.stdout.write(step.text)
                sys.stdout.flush()
        drafting = session.drafting_state(params=params)  # the reply's, before the check's own run
        if args.check_identity:
            identity = check_identity(session, messages, params, args, tokens)
    except ContextOverflow:
        return _fail(prompt_too_long(session.target, messages, args), 2)
    except _template_error() as e:
        return _fail(f"error: {e}", 2)
    except _backend_errors() as e:  # a check stopped a call that would have aborted llama.cpp
        return _fail(f"error: {e}", 1)
    finally:
        session.close()
    mode = session.mode
    if args.json:
        plan = session.offload
        out = {
            "text": "".join(parts),
            "mode": mode,
            **stats.as_dict(),
            "speedup": stats.speedup(session.baseline_tokens_per_second),
            "baseline_tokens_per_second": session.baseline_tokens_per_second,
            "drafting": drafting.as_dict(),
            "target": str(args.target),
            "draft": str(args.draft) if args.draft else None,
            "offload": plan.as_dict() if plan else None,
        }
        if identity is not None:
            out["identity"] = identity
        print(json.dumps(out, ensure_ascii=False))
    else:
        sys.stdout.write("\n")
        for warning in session.replies.warnings if session.replies else ():
            print(f"note: {warning}", file=sys.stderr)
        print(stats_line(stats, mode, session.offload), file=sys.stderr)
        print(f"drafting {drafting.line}", file=sys.stderr)
        if identity is not None:
            print(identity_line(identity), file=sys.stderr)
    note = FINISH_NOTES.get(stats.finish or "")
    if note:
        print(note, file=sys.stderr)
    return 0


def check_identity(session: Session, messages: list[dict], params, args, tokens: list[int]) -> dict:
    """The target alone's greedy reply to the same prompt, from empty caches as the reply
    was, and where ``tokens`` part from it (``Session.divergence``)."""
    session.reset()
    ref = [
        t for step in session.chat(messages, params, args.max_tokens, mode="none", raw=args.raw) for t in step.emitted
    ]
    where = session.divergence(messages, ref, tokens, args.raw)
    return {"identical": where is None, "n_tokens": len(ref), "first_divergence": where}


def identity_line(identity: dict) -> str:
    if identity["identical"]:
        return f"identity: the same {identity['n_tokens']} tokens as the target alone"
    where = identity["first_divergence"]
    gap = where["gap"]
    why = (
        f"the target alone's top-2 logit gap there is {gap:.3f}"
        + (" (a near-tie: batched kernels' numerics)" if gap < NEAR_TIE else " (not a near-tie: please report it)")
        if gap is not None
        else "one reply is a prefix of the other"
    )
    return f"identity: parts from the target alone at token {where['index']}; {why}"


def stats_line(s: RunStats, mode: str, offload: OffloadPlan | None = None) -> str:
    """One line of statistics; with a plan, the GPU split ends it ('| GPU  draft 25/25 · ...')."""
    acc = f"{s.acceptance_rate:.0%}" if s.acceptance_rate is not None else "n/a"
    where = f" | {offload.short}" if offload else ""
    sources = f", from {s.sources_line()}" if s.sources_line() else ""
    return (
        f"[{mode}] {s.n_tokens} tokens, {s.tokens_per_second:.1f} tok/s | acceptance {acc} "
        f"({s.n_accepted}/{s.n_drafted}{sources}) | {s.tokens_per_pass:.2f} tokens/pass | "
        f"draft length {s.mean_draft_length:.1f} (last k={s.last_k}) | "
        f"draft {s.draft_seconds:.2f}s verify {s.verify_seconds:.2f}s other {s.overhead_seconds:.2f}s "
        f"prefill {s.prefill_seconds:.2f}s{where}"
    )

"""Every option a user can set, with its allowed range and our message for a value outside it.

This is the one place each range is defined. The CLI checks its flags here, the settings model
and ``SamplingParams`` take their pydantic bounds from here (``bounds``), the settings screens
check each field here, and an API can do the same with ``check(name, value, label)``. So every
entry point refuses the same values in the same words: "--temp must be ≥ 0 (got -1)".

Plain data and functions: no argparse, pydantic, textual or llama_cpp.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

Number = int | float

# llama.cpp rounds every context up to a multiple of 256 cells (llama-context.cpp:
# GGML_PAD(n_ctx, 256)), so a smaller --ctx allocates the same memory and only forgets sooner.
# 256 also holds a chat template with its default system prompt (~30 tokens on Qwen2.5), a
# short message and the quarter of the context Session.fit keeps for the reply.
MIN_CTX = 256
MAX_CTX = 1_048_576  # 2^20: far beyond any model's trained context; a typo, not a request
# The longest draft per step. A verify evaluates k + 1 rows with logits in one llama_decode,
# and llama_backend reserves 64 rows per context (MAX_LOGIT_ROWS); 32 is past the point where
# a longer draft pays on any hardware we measured (docs/benchmarks.md).
MAX_DRAFT = 32
INT32_MAX = 2**31 - 1  # llama.cpp stores layer counts and top-k as int32
UINT64_MAX = 2**64 - 1


@dataclass(frozen=True)
class Option:
    flag: str  # the CLI spelling, used in messages unless the caller gives its own label
    kind: type  # int or float
    lo: Number | None = None
    hi: Number | None = None
    lo_open: bool = False  # lo itself is not allowed (top-p must be > 0)
    optional: bool = False  # None (empty in a form) means "automatic"
    hint: str = ""  # said after a value below the range: why the bound, or what to use instead


OPTIONS: dict[str, Option] = {
    # model and context
    "n_ctx": Option(
        "--ctx", int, MIN_CTX, MAX_CTX, hint="llama.cpp allocates at least 256 tokens of context whatever is asked"
    ),
    # more than the machine's CPUs are lowered to its CPUs at load (clamp_threads)
    "threads": Option("--threads", int, 1, 512, optional=True),
    "gpu_layers": Option("--gpu-layers", int, -1, INT32_MAX, optional=True, hint="-1 = all"),
    "draft_gpu_layers": Option("--draft-gpu-layers", int, -1, INT32_MAX, optional=True, hint="-1 = all"),
    # drafting
    "max_k": Option("--draft-max", int, 0, MAX_DRAFT, hint="0 never drafts"),
    "p_min": Option("--p-min", float, 0.0, 1.0),
    # the reply
    "max_tokens": Option("--max-tokens", int, 1, MAX_CTX),
    "temperature": Option("--temp", float, 0.0, 5.0, hint="0 is greedy"),
    "top_k": Option("--top-k", int, 0, INT32_MAX, hint="0 turns it off"),
    "top_p": Option("--top-p", float, 0.0, 1.0, lo_open=True, hint="1 turns it off"),
    "min_p": Option("--min-p", float, 0.0, 1.0, hint="0 turns it off"),
    "repeat_penalty": Option("--repeat-penalty", float, 1.0, 3.0, hint="1 turns it off"),
    "repeat_last_n": Option("--repeat-last-n", int, 0, MAX_CTX),
    "seed": Option("--seed", int, 0, UINT64_MAX, optional=True),
}


class OptionError(ValueError):
    """A value outside its option's range; the message names the option and the range."""


def check(name: str, value, label: str | None = None) -> str | None:
    """None when ``value`` is allowed for option ``name``, else the message saying why.
    ``label`` replaces the CLI flag in the message (a settings key, a JSON field)."""
    opt = OPTIONS[name]
    label = label or opt.flag
    if value is None:
        return None if opt.optional else f"{label} needs a value, {_range(opt)}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{label} must be {_kind(opt)} {_range(opt)} (got {value!r})"
    if opt.kind is int and not isinstance(value, int):
        return f"{label} must be a whole number {_range(opt)} (got {_fmt(value)})"
    if isinstance(value, float) and math.isnan(value):
        return f"{label} must be a number {_range(opt)} (got nan)"
    if opt.lo is not None and (value <= opt.lo if opt.lo_open else value < opt.lo):
        return _said(f"{label} must be {'>' if opt.lo_open else '≥'} {_fmt(opt.lo)} (got {_fmt(value)})", opt)
    if opt.hi is not None and value > opt.hi:
        return f"{label} must be ≤ {_fmt(opt.hi)} (got {_fmt(value)})"
    return None


def require(name: str, value, label: str | None = None):
    """``value`` if allowed, else OptionError with ``check``'s message."""
    problem = check(name, value, label)
    if problem:
        raise OptionError(problem)
    return value


def parse(name: str, text: str, label: str | None = None):
    """A form field's text as the option's value: '' (or 'auto', 'none') is None where the
    option allows it. OptionError names the field and the range."""
    opt = OPTIONS[name]
    label = label or opt.flag
    text = text.strip()
    if text.lower() in ("", "auto", "none"):
        return require(name, None, label)  # None where the option allows it, else the message
    try:
        value = opt.kind(text)
    except ValueError:
        raise OptionError(f"{label} must be {_kind(opt)} {_range(opt)} (got {text!r})") from None
    return require(name, value, label)


def bounds(name: str) -> dict:
    """The range as pydantic ``Field`` keyword arguments (ge/gt/le)."""
    opt = OPTIONS[name]
    out = {}
    if opt.lo is not None:
        out["gt" if opt.lo_open else "ge"] = opt.lo
    if opt.hi is not None:
        out["le"] = opt.hi
    return out


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def clamp_threads(threads: int | None) -> tuple[int, str | None]:
    """(threads to use, a note when the request was lowered). More threads than CPUs make
    llama.cpp's workers spin-wait on each other: 999 threads on 2 cores gave no reply in 120 s."""
    cpus = usable_cpus()
    if threads is None:
        return cpus, None
    if threads > cpus:
        return cpus, f"--threads {threads} is more than the {cpus} CPUs this process can use; using {cpus}"
    return threads, None


def _said(message: str, opt: Option) -> str:
    return f"{message}; {opt.hint}" if opt.hint else message


def _kind(opt: Option) -> str:
    return "a whole number" if opt.kind is int else "a number"


def _range(opt: Option) -> str:
    """'from 0 to 32', '> 0 and ≤ 1', '≥ 1', with ', or empty for automatic' where allowed."""
    if opt.lo is not None and opt.hi is not None and not opt.lo_open:
        text = f"from {_fmt(opt.lo)} to {_fmt(opt.hi)}"
    else:
        lo = "" if opt.lo is None else f"{'>' if opt.lo_open else '≥'} {_fmt(opt.lo)}"
        hi = "" if opt.hi is None else f"≤ {_fmt(opt.hi)}"
        text = " and ".join(x for x in (lo, hi) if x) or "of any value"
    return text + (", or empty for automatic" if opt.optional else "")


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)

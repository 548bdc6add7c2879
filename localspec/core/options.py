"""Every option a user can set: one frozen pydantic model per group, each field with its
default, its description, its range and its command-line flag.

- :class:`ModelOptions`: how the pair is loaded (GPU layers, threads, context) and what a
  full context does;
- :class:`DraftOptions`: how drafts are made (longest draft, adaptation, confidence floor,
  copies from the context);
- :class:`SamplingParams`: how the next token is chosen (``localspec.core.sampling``);
- :class:`ReplyOptions`: how long a reply may run.

Everything else is read from these fields. The settings file (``localspec.settings``) reuses
the groups; the settings screens list their fields, with the descriptions as help;
``localspec.cli.flags`` makes one flag per field marked with a :class:`Flag`;
``localspec.chat.session.load_options`` builds a load from the model and drafting groups; and
:func:`check` reads each range from the field's constraints (``OPTIONS``). So every entry
point refuses the same values in the same words: "--temp must be ≥ 0 (got -1)".

Adding an option is one field here, plus the code that uses it.
No argparse, textual or llama_cpp here.
"""

from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar, get_args

from annotated_types import Ge, Gt, Le
from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.fields import FieldInfo

Number = int | float

# llama.cpp rounds every context up to a multiple of 256 cells (llama-context.cpp:
# GGML_PAD(n_ctx, 256)), so a smaller --ctx allocates the same memory and only forgets sooner.
# 256 also holds a chat template with its default system prompt (~30 tokens on Qwen2.5), a
# short message and the quarter of the context Session.fit keeps for the reply.
MIN_CTX = 256
CTX_HINT = "llama.cpp allocates at least 256 tokens of context whatever is asked"
MAX_CTX = 1_048_576  # 2^20: far beyond any model's trained context; a typo, not a request
# The longest draft per step. A verify evaluates k + 1 rows with logits in one llama_decode,
# and llama/backend.py reserves k + 1 = 33 rows per context (MAX_LOGIT_ROWS); 32 is past the point where
# a longer draft pays on any hardware we measured (docs/design.md).
MAX_DRAFT = 32
# The longest draft per step unless --draft-max says otherwise, wherever a drafting mode is built
# without one (the options, a mode's context, the controller, the replay, the profiles' estimate).
# The speed model picks k at or below it and a draft the model is sure of runs up to it; past it
# little is left to win: at a per-token acceptance of 0.9 a draft of 16 yields 8.3 tokens a step
# on average, one of 32 only 9.7.
DEFAULT_DRAFT_MAX = 16
# More threads than any machine we know; more than this machine's CPUs are lowered to its
# CPUs at load (clamp_threads), so the bound only catches typos.
MAX_THREADS = 512
INT32_MAX = 2**31 - 1  # llama.cpp stores layer counts and top-k as int32
UINT64_MAX = 2**64 - 1

# Tuning choice: no confidence floor by default. With measured costs the marginal rule ends a
# draft where the next token stops paying, from the draft's calibrated confidence; a floor of
# 0.75 (llama.cpp's default) on top of it cut drafts short: side by side on the F16 target
# here the rule alone was 5-18 % faster on code, edit and prose (docs/design.md). With
# --no-adapt a draft then runs to --draft-max; --p-min sets a floor in either mode.
DEFAULT_P_MIN = 0.0


@dataclass(frozen=True)
class Flag:
    """Marks a field as a command-line option: ``Annotated[int, Flag("--ctx")]``.

    ``name`` is the flag's spelling, which messages use unless the caller gives its own label.
    ``hint`` is said after a value below the range: why the bound, or what to use instead.
    ``help`` replaces the field's description where the flag says the opposite of the field
    (``--no-adapt`` turns ``adaptive`` off)."""

    name: str
    hint: str = ""
    help: str = ""


class ModelOptions(BaseModel):
    """How the pair is loaded, and what happens when its context is full. The settings file
    keeps these at its top level; ``None`` (empty in a form) means automatic."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpu_layers: Annotated[int | None, Flag("--gpu-layers", hint="-1 = all")] = Field(
        None,
        ge=-1,
        le=INT32_MAX,
        description="Target layers offloaded to the GPU, -1 = all; automatic: all that fit beside "
        "the draft (0 on a CPU-only llama.cpp build).",
    )
    draft_gpu_layers: Annotated[int | None, Flag("--draft-gpu-layers", hint="-1 = all")] = Field(
        None,
        ge=-1,
        le=INT32_MAX,
        description="Draft layers offloaded to the GPU, -1 = all; automatic: the draft goes first.",
    )
    threads: Annotated[int | None, Flag("--threads")] = Field(
        None,
        ge=1,
        le=MAX_THREADS,
        description="CPU threads; automatic: every CPU this process may use (a larger number is lowered to that).",
    )
    n_ctx: Annotated[int, Flag("--ctx", hint=CTX_HINT)] = Field(
        4096, ge=MIN_CTX, le=MAX_CTX, description="Context window in tokens."
    )
    overflow: Literal["drop_oldest", "refuse"] = Field(
        "drop_oldest", description="When history + reply exceed the context: drop the oldest turns, or refuse."
    )


# ``copy`` is the option's name everywhere (settings key, LoadOptions, the drafting modes). As
# a field it hides BaseModel.copy, pydantic 1's name for model_copy, which nothing here calls;
# pydantic warns about that when the class is made, so the warning is off for this class only.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", 'Field name "copy"', UserWarning)

    class DraftOptions(BaseModel):
        """How drafts are made."""

        model_config = ConfigDict(frozen=True, extra="forbid")

        @model_validator(mode="before")
        @classmethod
        def _renamed_keys(cls, data: Any) -> Any:
            """Settings files written before the rename say ``max_k``: read it as ``draft_max``."""
            if isinstance(data, dict) and "max_k" in data and "draft_max" not in data:
                data = {("draft_max" if key == "max_k" else key): value for key, value in data.items()}
            return data

        draft_max: Annotated[int, Flag("--draft-max", hint="0 never drafts")] = Field(
            DEFAULT_DRAFT_MAX, ge=0, le=MAX_DRAFT, description="Longest draft per step; 0 never drafts."
        )
        adaptive: Annotated[
            bool, Flag("--no-adapt", help="always draft --draft-max tokens instead of choosing k from measured costs")
        ] = Field(True, description="Pick k each step from measured costs; off: always draft draft_max tokens.")
        p_min: Annotated[float, Flag("--p-min")] = Field(
            DEFAULT_P_MIN,
            ge=0.0,
            le=1.0,
            description="Stop a draft when the draft's top probability is below this; 0: in auto mode the "
            "marginal rule decides from measured costs (llama.cpp uses 0.75).",
        )
        copy: Annotated[
            bool,
            Flag(
                "--no-copy",
                help="draft mode: always run the draft model, never copy a suffix match (context, past replies)",
            ),
        ] = Field(  # type: ignore[assignment]  # hides BaseModel.copy, see above
            True,
            description="Draft mode copies a suffix match (the context, past replies) that has earned trust "
            "instead of running the draft model.",
        )
        history: Annotated[
            bool, Flag("--no-history", help="neither draft from past replies nor keep this one (localspec history)")
        ] = Field(
            True,
            description="Draft from the replies this machine gave before (kept in the data dir, see "
            "`localspec history`), and keep each new one; off: nothing is read or written.",
        )


M = TypeVar("M", bound=str | None)  # a drafting mode's name, or None for the pair's own


def drafting_mode(mode: M, draft_max: int | None) -> M | Literal["none"]:
    """The drafting mode that runs when ``mode`` (a drafting mode's name; None: the pair's own)
    is asked for with a longest draft of ``draft_max`` (None: not said here, the load's): the
    target alone at 0. ``--draft-max 0``, a settings file's ``draft_max: 0`` and a request's
    ``speculative.n_max: 0`` all mean "never draft", and every entry point asks this one rule,
    so none of them builds a mode that would draft at most 0 tokens."""
    return "none" if draft_max == 0 else mode


Rule = Literal["speculative", "match"]


class SamplingParams(BaseModel):
    """How the next token is chosen; shared by the target, the draft and the target-only path
    (``localspec.core.sampling`` applies it)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    temperature: Annotated[float, Flag("--temp", hint="0 is greedy")] = Field(
        0.0, ge=0.0, le=5.0, description="Temperature; 0 is greedy (argmax)."
    )
    top_k: Annotated[int, Flag("--top-k", hint="0 turns it off")] = Field(
        40, ge=0, le=INT32_MAX, description="Keep the k most likely tokens; 0 turns it off."
    )
    top_p: Annotated[float, Flag("--top-p", hint="1 turns it off")] = Field(
        0.95, gt=0.0, le=1.0, description="Nucleus: keep the smallest set with mass ≥ top_p; 1 turns it off."
    )
    min_p: Annotated[float, Flag("--min-p", hint="0 turns it off")] = Field(
        0.05, ge=0.0, le=1.0, description="Drop tokens below min_p × the top probability; 0 turns it off."
    )
    repeat_penalty: Annotated[float, Flag("--repeat-penalty", hint="1 turns it off")] = Field(
        1.0, ge=1.0, le=3.0, description="llama.cpp's penalty on recently seen tokens; 1 turns it off."
    )
    repeat_last_n: Annotated[int, Flag("--repeat-last-n")] = Field(
        64, ge=0, le=MAX_CTX, description="How many recent tokens the penalty looks at."
    )
    seed: Annotated[int | None, Flag("--seed")] = Field(
        None,
        ge=0,
        le=UINT64_MAX,
        description="RNG seed: the same seed gives the same output; automatic: a new one each reply.",
    )
    rule: Annotated[Rule, Flag("--rule")] = Field(
        "speculative",
        description="Acceptance rule at temperature > 0. 'speculative': accept with min(1, p/q) "
        "(Leviathan et al.); 'match': sample from the target and accept while equal (llama.cpp server).",
    )

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


class ReplyOptions(BaseModel):
    """How long a reply may run."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_tokens: Annotated[int, Flag("--max-tokens")] = Field(
        1024, ge=1, le=MAX_CTX, description="Longest reply in tokens."
    )


GROUPS: tuple[type[BaseModel], ...] = (ModelOptions, DraftOptions, SamplingParams, ReplyOptions)


def flag_of(field: FieldInfo) -> Flag | None:
    """The field's command-line flag, or None when it has none (``overflow``)."""
    return next((m for m in field.metadata if isinstance(m, Flag)), None)


def values(obj: BaseModel, group: type[BaseModel]) -> dict[str, Any]:
    """``group``'s fields of ``obj``, an instance of the group or of a model that reuses it
    (the settings are a ModelOptions)."""
    return {name: getattr(obj, name) for name in group.model_fields}


# --- ranges and their messages ---------------------------------------------------------------


@dataclass(frozen=True)
class Option:
    """A numeric field's range, read from its pydantic constraints: what :func:`check` tests."""

    flag: str  # the CLI spelling, used in messages unless the caller gives its own label
    kind: type  # int or float
    lo: Number | None = None
    hi: Number | None = None
    lo_open: bool = False  # lo itself is not allowed (top-p must be > 0)
    optional: bool = False  # None (empty in a form) means "automatic"
    hint: str = ""  # said after a value below the range: why the bound, or what to use instead


def _option(name: str, field: FieldInfo) -> Option | None:
    """The range of an int or float field (or of one that may also be None); None otherwise."""
    types = get_args(field.annotation) or (field.annotation,)
    kinds = [t for t in types if t is not type(None)]
    if kinds not in ([int], [float]):
        return None  # a switch, a choice or a path
    lo: Any = None
    hi: Any = None
    lo_open = False
    for m in field.metadata:
        if isinstance(m, Ge):
            lo = m.ge
        elif isinstance(m, Gt):
            lo, lo_open = m.gt, True
        elif isinstance(m, Le):
            hi = m.le
    flag = flag_of(field)
    return Option(
        flag.name if flag else name, kinds[0], lo, hi, lo_open, len(kinds) < len(types), flag.hint if flag else ""
    )


# every numeric option by its field name (names are unique across the groups)
OPTIONS: dict[str, Option] = {
    name: opt for group in GROUPS for name, field in group.model_fields.items() if (opt := _option(name, field))
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

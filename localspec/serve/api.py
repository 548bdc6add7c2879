"""The OpenAI-compatible API's data: requests as pydantic models, a validated :class:`Job`, and
the JSON bodies of replies, including the ``timings`` object (llama.cpp server's field names
plus ours). No web framework here: ``server`` is the HTTP adapter that uses it, and the
session/engine do the generating.

Names follow OpenAI's API; llama.cpp's server extensions are accepted as it spells them
(``top_k``, ``min_p``, ``repeat_penalty``, and ``speculative.n_max`` / ``.p_min`` / ``.type``
either as literal dotted keys or as one ``speculative`` object).
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..chat.session import Mode
from ..core import options
from ..core.explain import DraftingState
from ..core.modes import MODEL_MODES
from ..core.sampling import SamplingParams
from ..core.stats import RunStats

Kind = Literal["chat", "text"]  # /v1/chat/completions or /v1/completions

# Tuning choices, the server's bounds on one request. A message costs at least a few template
# tokens, so 1024 of them outgrow any context this app loads; 16 stop strings cover what
# editor extensions send (OpenAI allows 4, llama.cpp any number).
MAX_MESSAGES = 1024
MAX_STOP = 16

# JSON field -> its option in localspec.core.options, which holds every range and its message
OPTION_FIELDS = {
    "max_tokens": "max_tokens",
    "max_completion_tokens": "max_tokens",
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "repeat_penalty": "repeat_penalty",
    "seed": "seed",
    "speculative.n_max": "draft_max",
    "speculative.p_min": "p_min",
}

# engine finish -> OpenAI finish_reason; a full context is a length stop to a client
FINISH_REASONS = {"eos": "stop", "stop": "stop", "length": "length", "context": "length"}


class ApiError(Exception):
    """A request the server refuses; ``body`` is OpenAI's error shape."""

    def __init__(
        self,
        status: int,
        message: str,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code

    @property
    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def validation_error(e: ValidationError) -> ApiError:
    """The first problem, named by its JSON path: ``messages.0.role: Input should be ...``."""
    err = e.errors()[0]
    path = ".".join(str(p) for p in err["loc"])
    message = err["msg"].removeprefix("Value error, ")
    if err["type"] == "model_type":  # pydantic names the class: a chat message is 'Message' to clients
        message = message.replace(ChatMessage.__name__, "Message")
    return ApiError(400, f"{path}: {message}" if path else message, param=path or None, code="invalid_value")


# --- requests ------------------------------------------------------------------------------
class Speculative(BaseModel):
    """Per-request drafting, as llama.cpp's server names it. Numbers are checked against
    ``options`` (see ``check_options``), so they are untyped here."""

    model_config = ConfigDict(extra="ignore", strict=True)

    type: Mode | None = Field(None, description="draft, mtp, lookup or none; default: the server's mode.")
    n_max: Any = Field(None, description="Longest draft per step; 0 drafts nothing.")  # llama.cpp's name: draft_max
    p_min: Any = Field(None, description="Stop a draft below this confidence.")


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    include_usage: bool = False


class ChatMessage(BaseModel):
    """One message of a chat request (``chat.store.Message`` is one the app keeps)."""

    model_config = ConfigDict(extra="ignore", strict=True)

    role: Literal["system", "developer", "user", "assistant"]
    content: Any = None

    @field_validator("content")
    @classmethod
    def _text_only(cls, v):
        """A string, or OpenAI's list of parts where every part is text."""
        if v is None or isinstance(v, str):
            return v
        if not isinstance(v, list):
            raise ValueError("should be a string or a list of text parts")
        for part in v:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind != "text" or not isinstance(part.get("text"), str):
                raise ValueError(f"only text content parts are supported (got type {kind!r})")
        return v

    def as_turn(self) -> dict:
        """The session's message: 'developer' is OpenAI's newer name for 'system'."""
        content = self.content
        if isinstance(content, list):
            content = "\n".join(part["text"] for part in content)
        return {"role": "system" if self.role == "developer" else self.role, "content": content or ""}


class _Request(BaseModel):
    """Fields both endpoints share; anything else a client sends is ignored. The numbers
    (``OPTION_FIELDS``) are checked against ``options`` after this, so they are untyped here."""

    model_config = ConfigDict(extra="ignore", strict=True)

    model: str | None = None
    max_tokens: Any = None
    max_completion_tokens: Any = None
    temperature: Any = None
    top_p: Any = None
    top_k: Any = None
    min_p: Any = None
    repeat_penalty: Any = None
    seed: Any = None
    stop: str | list[str] | None = None
    n: int = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    speculative: Speculative | None = None

    @model_validator(mode="before")
    @classmethod
    def _dotted_speculative(cls, data):
        """llama.cpp's server reads literal keys such as ``"speculative.n_max"``."""
        if not isinstance(data, dict):
            return data
        dotted = {k.split(".", 1)[1]: v for k, v in data.items() if k.startswith("speculative.")}
        if dotted and (data.get("speculative") is None or isinstance(data.get("speculative"), dict)):
            data = {**data, "speculative": {**dotted, **(data.get("speculative") or {})}}
        return data

    @field_validator("stop")
    @classmethod
    def _few_stops(cls, v):
        if isinstance(v, list) and len(v) > MAX_STOP:
            raise ValueError(f"at most {MAX_STOP} stop strings")
        return v

    @field_validator("n")
    @classmethod
    def _one_choice(cls, v):
        if v != 1:
            raise ValueError("only n=1 is supported")
        return v


class ChatRequest(_Request):
    messages: list[ChatMessage] = Field(min_length=1, max_length=MAX_MESSAGES)


class CompletionRequest(_Request):
    prompt: str | list[str]
    suffix: str | None = None

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, v):
        if isinstance(v, list) and len(v) != 1:
            raise ValueError("exactly one prompt string is supported")
        return v

    @field_validator("suffix")
    @classmethod
    def _no_suffix(cls, v):
        if v:
            raise ValueError("suffix (fill-in-the-middle) is not supported")
        return v


# --- what a request asks for -----------------------------------------------------------------
@dataclass(frozen=True)
class Served:
    """What the server has loaded; every request is checked against it."""

    model_id: str
    aliases: frozenset[str]  # other names a client may use for it (the target's file name)
    mode: Mode  # the default drafting mode
    has_draft: bool
    n_ctx: int
    # the load's longest draft (--draft-max), which a request that names none drafts up to
    draft_max: int = options.DraftOptions.model_fields["draft_max"].default


@dataclass(frozen=True, kw_only=True)
class Job:
    """One validated request: what to generate and how to answer."""

    kind: Kind
    messages: list[dict]
    raw: bool  # /v1/completions: the prompt is the text, no chat template
    params: SamplingParams
    max_tokens: int | None  # None: until the context is full
    stop: tuple[str, ...]
    mode: Mode
    draft_max: int | None  # None: the server's --draft-max
    p_min: float | None  # None: the server's --p-min
    stream: bool
    include_usage: bool


def parse_job(kind: Kind, data: Any, served: Served) -> Job:
    """The request body (parsed JSON) as a Job, or an ApiError saying what is wrong."""
    try:
        req = (ChatRequest if kind == "chat" else CompletionRequest).model_validate(data)
    except ValidationError as e:
        raise validation_error(e) from None
    check_model(req.model, served)
    check_options(req)
    spec = req.speculative or Speculative()
    mode = options.drafting_mode(spec.type or served.mode, served.draft_max if spec.n_max is None else spec.n_max)
    own = served.mode if served.has_draft and served.mode in MODEL_MODES else None  # what drafts here
    if mode in MODEL_MODES and mode != own:
        what = {"draft": "a draft model", "mtp": "a target with MTP layers"}[mode]
        usable = ", ".join(f"'{m}'" for m in ([own] if own else []) + ["lookup"])
        raise ApiError(
            400,
            f"speculative.type '{mode}' needs {what}; this server has none (use {usable} or 'none')",
            param="speculative.type",
        )
    max_tokens = req.max_completion_tokens or req.max_tokens
    if max_tokens is not None and max_tokens > served.n_ctx:
        raise ApiError(
            400,
            f"max_tokens is {max_tokens}, but the context holds {served.n_ctx} tokens in all",
            param="max_tokens",
            code="invalid_value",
        )
    if isinstance(req, ChatRequest):
        messages, raw = [m.as_turn() for m in req.messages], False
    else:
        prompt = req.prompt if isinstance(req.prompt, str) else req.prompt[0]
        messages, raw = [{"role": "user", "content": prompt}], True
    stops = [req.stop] if isinstance(req.stop, str) else (req.stop or [])
    return Job(
        kind=kind,
        messages=messages,
        raw=raw,
        params=sampling(req),
        max_tokens=max_tokens,
        stop=tuple(s for s in stops if s),
        mode=mode,
        draft_max=spec.n_max or None,
        p_min=spec.p_min,
        stream=req.stream,
        include_usage=bool(req.stream_options and req.stream_options.include_usage),
    )


def check_options(req: _Request) -> None:
    """Each number against its option's range, in the words every entry point uses:
    'temperature must be from 0 to 5 (got 9)'."""
    spec = req.speculative or Speculative()
    for field, name in OPTION_FIELDS.items():
        owner, attr = (spec, field.split(".")[1]) if field.startswith("speculative.") else (req, field)
        value = getattr(owner, attr)
        problem = options.check(name, value, field) if value is not None else None  # None: not sent
        if problem:
            raise ApiError(400, problem, param=field, code="invalid_value")


def check_model(name: str | None, served: Served) -> None:
    """No model named means the loaded one (llama.cpp's server does the same)."""
    if name and name != served.model_id and name not in served.aliases:
        raise ApiError(
            404,
            f"the model {name!r} is not served here; this server serves {served.model_id!r} (GET /v1/models)",
            param="model",
            code="model_not_found",
        )


def sampling(req: _Request) -> SamplingParams:
    """Fields the client left out keep localspec's defaults: temperature 0 (greedy), as in
    ``localspec run``, where OpenAI's default is 1."""
    names = ("temperature", "top_p", "top_k", "min_p", "repeat_penalty")
    given = {k: getattr(req, k) for k in names if getattr(req, k) is not None}
    return SamplingParams(**given, seed=req.seed)


# --- replies -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Head:
    """The fields every body and chunk of one reply repeat."""

    kind: Kind
    model: str
    id: str
    created: int

    @classmethod
    def new(cls, kind: Kind, model: str) -> Head:
        prefix = "chatcmpl-" if kind == "chat" else "cmpl-"
        return cls(kind, model, prefix + secrets.token_hex(12), int(time.time()))

    def fields(self, chunk: bool) -> dict:
        obj = "chat.completion" if self.kind == "chat" else "text_completion"
        return {
            "id": self.id,
            "object": obj + (".chunk" if chunk and self.kind == "chat" else ""),
            "created": self.created,
            "model": self.model,
        }


def choice(head: Head, text: str | None, finish: str | None, chunk: bool, role: bool = False) -> dict:
    """choices[0]: a message (chat), a delta (chat stream) or text (completions)."""
    reason = FINISH_REASONS.get(finish, "stop") if finish else None
    if head.kind == "text":
        return {"index": 0, "text": text or "", "logprobs": None, "finish_reason": reason}
    if not chunk:
        return {
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "logprobs": None,
            "finish_reason": reason,
        }
    delta = ({"role": "assistant"} if role else {}) | ({"content": text} if text is not None else {})
    return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}


def chunk_body(head: Head, text: str | None, finish: str | None = None, role: bool = False) -> dict:
    return {**head.fields(True), "choices": [choice(head, text, finish, True, role)]}


def reply_body(head: Head, text: str, finish: str | None, usage: dict, timings: dict) -> dict:
    return {**head.fields(False), "choices": [choice(head, text, finish, False)], "usage": usage, "timings": timings}


def usage(prompt_tokens: int, completion_tokens: int, cached: int) -> dict:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def timings(
    stats: RunStats, prompt_n: int, cache_n: int, baseline_tps: float, mode: str, state: DraftingState | None = None
) -> dict:
    """llama.cpp server's ``timings`` (``prompt_n`` = prompt tokens evaluated, ``cache_n`` =
    reused from the KV cache) plus ours: tokens per target pass, the speed-up against the
    target-only speed measured on this machine, and the drafting state."""

    def rate(n, seconds):
        return round(n / seconds, 3) if seconds > 0 else None

    def ms(seconds):
        return round(seconds * 1000, 3)

    return {
        "cache_n": cache_n,
        "prompt_n": prompt_n,
        "prompt_ms": ms(stats.prefill_seconds),
        "prompt_per_second": rate(prompt_n, stats.prefill_seconds),
        "predicted_n": stats.n_tokens,
        "predicted_ms": ms(stats.decode_seconds),
        "predicted_per_second": rate(stats.n_tokens, stats.decode_seconds),
        "draft_n": stats.n_drafted,
        "draft_n_accepted": stats.n_accepted,
        "draft_n_accepted_by_source": dict(stats.accepted_by_source),
        "tokens_per_pass": round(stats.tokens_per_pass, 3),
        "target_only_per_second": round(baseline_tps, 3),
        "speed_up": speed_up(stats, baseline_tps),
        "drafting": drafting(mode, stats, state),
    }


def speed_up(stats: RunStats, baseline_tps: float) -> float | None:
    """Against the target alone measured here (``RunStats.speedup``: 1.0 when nothing was drafted)."""
    ratio = stats.speedup(baseline_tps)
    return None if ratio is None else round(ratio, 3)


def drafting(mode: str, stats: RunStats, state: DraftingState | None = None) -> dict:
    """Whether this reply drafted, and the controller's account of why drafting is on or off
    now (``core.explain``: e.g. "off: a draft token costs 0.62 of a target pass ...")."""
    out = {"mode": mode, "drafted": stats.n_drafted, "state": "on" if stats.n_drafted else "off"}
    if state is not None:
        out.update(
            state="on" if state.on else "off", model_k=state.model_k, why=state.line, next_try_in=state.next_try_in
        )
    return out

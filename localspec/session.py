"""A loaded target/draft pair and the chat turns run on it. The CLI and the TUI both use this;
widgets hold no model state.

``Session.chat(messages, ...)`` formats the conversation with the target's chat template,
trims the oldest turns if it would not fit, and yields the engine's Steps. Both models keep
their KV caches between turns, so a follow-up turn evaluates only its new tokens.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Literal, Sequence

from .compat import Compatibility, check_compatible
from .controller import CostModel, DraftController
from .drafters import ModelDrafter, NoDrafter, PromptLookupDrafter
from .engine import SpeculativeEngine, Step, calibrate
from .sampling import SamplingParams

Mode = Literal["draft", "lookup", "none"]


class IncompatiblePair(Exception):
    def __init__(self, compat: Compatibility) -> None:
        super().__init__(compat.message())
        self.compat = compat


class ContextOverflow(Exception):
    """The conversation cannot fit the context even after trimming (or trimming is off)."""


@dataclass(frozen=True)
class PairSpec:
    target: Path
    draft: Path | None = None
    lookup: bool = False

    @property
    def mode(self) -> Mode:
        return "draft" if self.draft else "lookup" if self.lookup else "none"


@dataclass(frozen=True)
class LoadOptions:
    n_ctx: int = 4096
    threads: int | None = None
    gpu_layers: int | None = None  # None: all layers when the build can offload, else 0
    max_k: int = 16
    adaptive: bool = True
    p_min: float = 0.75
    overflow: Literal["drop_oldest", "refuse"] = "drop_oldest"


# Tuning choice: verify sizes measured at load; larger ones are extrapolated, then refined by
# every real verify. 1..8 and 16 take ~0.6 s on the Q4 1.5B target on 2 cores.
CALIBRATION_SIZES = (1, 2, 3, 4, 6, 8, 12, 16)


class Session:
    def __init__(self, target, draft, spec: PairSpec, options: LoadOptions, compat=None) -> None:
        self.target = target
        self.draft = draft
        self.spec = spec
        self.options = options
        self.compat = compat
        self.lock = threading.Lock()  # one generation at a time per pair of caches
        self.costs = calibrate(target, CALIBRATION_SIZES, draft=draft)
        self._controllers: dict[Mode, DraftController] = {}

    @classmethod
    def load(cls, spec: PairSpec, options: LoadOptions = LoadOptions(),
             progress: Callable[[str], None] | None = None) -> "Session":
        from . import llama_backend as backend  # the only adapter that imports llama_cpp
        from . import preflight

        say = progress or (lambda _msg: None)
        # one clear ModelFileError for a missing, foreign, truncated, unsupported or too-large
        # file (the pair's memory summed) before llama.cpp touches either file
        offload = backend.supports_gpu_offload()
        gpu_layers = (-1 if options.gpu_layers is None else options.gpu_layers) if offload else 0
        preflight.check_model_files(list(filter(None, (spec.target, spec.draft))), options.n_ctx, gpu_layers)
        say(f"loading target {spec.target.name}")
        target = backend.LlamaModel.load(spec.target, options.n_ctx, options.threads, options.gpu_layers)
        draft = compat = None
        if spec.draft:
            say(f"loading draft {spec.draft.name}")
            draft = backend.LlamaModel.load(spec.draft, options.n_ctx, options.threads, options.gpu_layers)
            compat = check_compatible(target.vocab_info(), draft.vocab_info())
            if not compat.ok:
                draft.close()
                target.close()
                raise IncompatiblePair(compat)
        say("measuring verify costs on this machine")
        return cls(target, draft, spec, options, compat)

    # --- what the UI shows -------------------------------------------------------------
    @property
    def mode(self) -> Mode:
        return self.spec.mode

    @property
    def baseline_tokens_per_second(self) -> float:
        """Target-only decode speed predicted from the measured single-token evaluation time."""
        return 1.0 / self.costs.T(1)

    baseline_note = "1 / T(1): a single-token target evaluation timed at load (best of 2)"

    def token_text(self, token: int) -> str:
        return self.target.token_bytes(token).decode("utf-8", errors="replace")

    # --- generation --------------------------------------------------------------------
    def engine(self, mode: Mode | None = None) -> SpeculativeEngine:
        mode = mode or self.mode
        if mode not in self._controllers:
            fixed = 0 if mode == "none" else (None if self.options.adaptive else self.options.max_k)
            # one target, so one table of verify times shared by every mode; the cost of a
            # draft token is the draft model's, and zero for prompt lookup
            costs = CostModel(self.costs.verify, self.costs.t_draft if mode == "draft" else 0.0)
            self._controllers[mode] = DraftController(costs, self.options.max_k, fixed)
        controller = self._controllers[mode]
        return SpeculativeEngine(self.target, self._drafter(mode, controller.costs), controller)

    def _drafter(self, mode: Mode, costs: CostModel):
        if mode == "draft":
            if self.draft is None:
                raise ValueError("this session has no draft model")
            banned = self.compat.banned_draft_ids if self.compat else ()
            # with --no-adapt the draft length is the user's: p_min alone stops a draft
            rule_costs = costs if self.options.adaptive else None
            return ModelDrafter(self.draft, self.target.n_vocab, self.options.p_min, banned, rule_costs)
        if mode == "lookup":
            return PromptLookupDrafter()
        return NoDrafter()

    def prompt_tokens(self, messages: Sequence[dict], raw: bool = False) -> list[int]:
        if raw:
            return self.target.tokenize("".join(m["content"] for m in messages))
        return self.target.tokenize(self.target.apply_chat_template(messages), add_bos=False)

    def fit(self, messages: Sequence[dict], max_tokens: int, raw: bool = False) -> tuple[list[int], list[dict]]:
        """Prompt tokens that leave room for the reply (up to a quarter of the context), and
        the messages they came from: the oldest turns are dropped first, the system prompt
        and the last message never. With ``overflow="refuse"`` nothing is dropped."""
        msgs = list(messages)
        room = min(max_tokens, self.target.n_ctx // 4)
        while True:
            ids = self.prompt_tokens(msgs, raw)
            if len(ids) + room <= self.target.n_ctx:
                return ids, msgs
            droppable = [i for i, m in enumerate(msgs[:-1]) if m["role"] != "system"]
            if self.options.overflow == "refuse" or not droppable:
                raise ContextOverflow(
                    f"the conversation is {len(ids)} tokens and the reply needs {room} more; the "
                    f"context holds {self.target.n_ctx}. Start a new chat, shorten the message, "
                    "or raise the context size (--ctx)."
                )
            del msgs[droppable[0]]

    def chat(self, messages: Sequence[dict], params: SamplingParams = SamplingParams(),
             max_tokens: int = 512, mode: Mode | None = None, raw: bool = False,
             stop: Sequence[str] = ()) -> Iterator[Step]:
        ids, _ = self.fit(messages, max_tokens, raw)
        with self.lock:
            yield from self.engine(mode).generate(ids, params, max_tokens, stop)

    def reset(self) -> None:
        """Empty both KV caches (the next turn is evaluated from scratch)."""
        for m in (self.target, self.draft):
            if m is not None:
                m.truncate(0)

    def close(self) -> None:
        for m in (self.draft, self.target):
            if m is not None:
                m.close()

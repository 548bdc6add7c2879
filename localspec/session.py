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
from .controller import CostModel, DraftController, LookupGate
from .drafters import ModelDrafter, NoDrafter, PromptLookupDrafter
from .engine import SpeculativeEngine, Step, calibrate
from .offload import CPU_BUILD, OffloadPlan, cpu_plan, plan_offload
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
    gpu_layers: int | None = None  # target's n_gpu_layers; None: the offload plan's choice
    draft_gpu_layers: int | None = None  # the draft's; -1 = all, None: the plan's choice
    max_k: int = 16
    adaptive: bool = True
    p_min: float = 0.75
    copy: bool = True  # draft mode may copy trusted prompt-lookup matches instead of drafting
    overflow: Literal["drop_oldest", "refuse"] = "drop_oldest"


def offload_plan(spec: PairSpec, options: LoadOptions, backend) -> OffloadPlan:
    """Each model's GPU layers (see ``offload``). A CPU-only build reads no file for it;
    otherwise the layer sizes come from both files' headers and the free memory from ggml."""
    from . import ggufinfo

    if not backend.supports_gpu_offload():
        return cpu_plan(None, None, CPU_BUILD, has_draft=spec.draft is not None)
    target = ggufinfo.read_model_layout(spec.target)
    draft = ggufinfo.read_model_layout(spec.draft) if spec.draft else None
    return plan_offload(target, draft, options.n_ctx, backend.backend_devices(),
                        target_layers=options.gpu_layers, draft_layers=options.draft_gpu_layers)


# Tuning choice: beside a draft model, copies start distrusted (alpha 0.5 < the 0.75 a copy
# needs) and earn trust from being scored against what the model's steps kept, for free. With
# the default prior, long early copies on an edit prompt were rejected, which dragged the
# draft model's own acceptance and measured speed down until drafting switched off.
COPY_PRIOR = (1.0, 1.0)

# Tuning choice: verify sizes measured at load; larger ones are extrapolated, then refined by
# every real verify. 1..8 and 16 take ~0.6 s on the Q4 1.5B target on 2 cores.
CALIBRATION_SIZES = (1, 2, 3, 4, 6, 8, 12, 16)


class Session:
    def __init__(self, target, draft, spec: PairSpec, options: LoadOptions, compat=None,
                 offload: OffloadPlan | None = None) -> None:
        self.target = target
        self.draft = draft
        self.spec = spec
        self.options = options
        self.compat = compat
        self.offload = offload  # the GPU split the models were loaded with
        self.lock = threading.Lock()  # one generation at a time per pair of caches
        self.costs = calibrate(target, CALIBRATION_SIZES, draft=draft)
        self._controllers: dict[Mode, DraftController] = {}
        self._gates: dict[str, LookupGate] = {}

    @classmethod
    def load(cls, spec: PairSpec, options: LoadOptions = LoadOptions(),
             progress: Callable[[str], None] | None = None) -> "Session":
        from . import ggufinfo, preflight
        from . import llama_backend as backend  # the only adapter that imports llama_cpp

        say = progress or (lambda _msg: None)
        files = list(filter(None, (spec.target, spec.draft)))
        try:
            plan = offload_plan(spec, options, backend)
        except ggufinfo.GgufError:
            preflight.check_model_files(files, options.n_ctx)  # its message for the file is clearer
            raise
        # one clear ModelFileError for a missing, foreign, truncated, unsupported or too-large
        # file (the pair's memory summed) before llama.cpp touches either file
        preflight.check_model_files(files, options.n_ctx, [plan.target_layers, plan.draft_layers][:len(files)])
        say(plan.summary)
        say(f"loading target {spec.target.name}")
        target = backend.LlamaModel.load(spec.target, options.n_ctx, options.threads, plan.target_layers)
        draft = compat = None
        if spec.draft:
            say(f"loading draft {spec.draft.name}")
            draft = backend.LlamaModel.load(spec.draft, options.n_ctx, options.threads, plan.draft_layers)
            compat = check_compatible(target.vocab_info(), draft.vocab_info())
            if not compat.ok:
                draft.close()
                target.close()
                raise IncompatiblePair(compat)
        say("measuring verify costs on this machine")
        return cls(target, draft, spec, options, compat, offload=plan)

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
    def engine(self, mode: Mode | str | None = None, drafter=None,
               fixed_k: int | None = None) -> SpeculativeEngine:
        """The engine for ``mode``; ``drafter`` replaces the mode's own (the bench's oracle),
        with its own controller under that mode name. A draft cost of zero unless 'draft'.
        ``fixed_k`` drafts that many tokens every step whatever the options say."""
        mode = mode or self.mode
        if mode not in self._controllers:
            fixed = 0 if mode == "none" else (None if self.options.adaptive else self.options.max_k)
            fixed = fixed_k if fixed_k is not None else fixed
            # one target, so one table of verify times shared by every mode; the cost of a
            # draft token is the draft model's, and zero for prompt lookup
            costs = CostModel(self.costs.verify, self.costs.t_draft if mode == "draft" else 0.0)
            self._controllers[mode] = DraftController(costs, self.options.max_k, fixed)
        controller = self._controllers[mode]
        drafter = drafter or self._drafter(mode, controller.costs)
        return SpeculativeEngine(self.target, drafter, controller)

    def _drafter(self, mode: Mode, costs: CostModel):
        if mode == "draft":
            if self.draft is None:
                raise ValueError("this session has no draft model")
            banned = self.compat.banned_draft_ids if self.compat else ()
            # with --no-adapt the draft length is the user's: p_min alone stops a draft
            rule_costs = costs if self.options.adaptive else None
            drafter = ModelDrafter(self.draft, self.target.n_vocab, self.options.p_min, banned, rule_costs)
            # adaptive: copy from the context when a match has earned it, else the model
            if not (self.options.adaptive and self.options.copy):
                return drafter
            return drafter.with_lookup(self._lookup(mode, costs, COPY_PRIOR), self.options.max_k)
        if mode == "lookup":
            return self._lookup(mode, costs) if self.options.adaptive else PromptLookupDrafter()
        return NoDrafter()

    def _lookup(self, mode: str, costs: CostModel, prior=None) -> PromptLookupDrafter:
        """Prompt lookup with this mode's gate, which keeps what it learnt across turns."""
        if mode not in self._gates:
            self._gates[mode] = LookupGate(costs, *([prior] if prior else []))
        return PromptLookupDrafter(gate=self._gates[mode])

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
             stop: Sequence[str] = (), make_drafter: Callable[[int], object] | None = None,
             fixed_k: int | None = None) -> Iterator[Step]:
        """``make_drafter(prompt_len)``: a drafter in place of the mode's (the bench's oracle)."""
        ids, _ = self.fit(messages, max_tokens, raw)
        drafter = make_drafter(len(ids)) if make_drafter else None
        with self.lock:
            yield from self.engine(mode, drafter, fixed_k).generate(ids, params, max_tokens, stop)

    def reset(self) -> None:
        """Empty both KV caches (the next turn is evaluated from scratch)."""
        for m in (self.target, self.draft):
            if m is not None:
                m.truncate(0)

    def close(self) -> None:
        for m in (self.draft, self.target):
            if m is not None:
                m.close()

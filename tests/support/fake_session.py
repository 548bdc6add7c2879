"""A scripted stand-in for :class:`localspec.chat.session.Session` (no llama.cpp).

A script is a list of steps written by hand as ``(pieces, n_accepted, k)``: ``pieces`` are the
texts of the tokens the step emits, the first ``n_accepted`` of them came from the draft, the
last is the target's own token; ``k - n_accepted - 1`` more drafted tokens were rejected
(the first) and discarded (the rest). Token ids are handed out in order, and ``token_text``
returns the piece (rejected drafts read ``"✗<n>"``), so a test can check colours and the
inspector against the script.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from localspec.chat.replies import PastReplies
from localspec.chat.session import LoadOptions, PairSpec
from localspec.core.engine import Step
from localspec.core.explain import DraftingState
from localspec.llama.offload import CPU_BUILD, OffloadPlan, cpu_plan

ScriptStep = tuple[Sequence[str], int, int]


@dataclass
class FakeSession:
    script: list[ScriptStep]
    step_delay: float = 0.0  # seconds slept per step (simulates the model)
    step_seconds: float = 0.01  # what each Step reports as its wall time
    baseline_tokens_per_second: float = 50.0
    baseline_note: str = "fake: 1 / T(1) from the script"
    spec: PairSpec = field(default_factory=lambda: PairSpec(Path("target.gguf"), Path("draft.gguf")))
    options: LoadOptions = field(default_factory=LoadOptions)  # Session.options: what it was loaded with
    none_script: list[ScriptStep] | None = None  # what mode="none" replies (race); default: same text
    none_step_seconds: float | list[float] = 0.02  # a list: one per mode-"none" reply, in turn
    # where the layers are, as Session.offload: a CPU-only build unless a test sets a GPU plan
    offload: OffloadPlan | None = field(default_factory=lambda: cpu_plan(None, None, CPU_BUILD, has_draft=True))
    gate: threading.Event | None = None  # when set: each step after the first waits for it
    opens_thinking: bool = False  # the chat template opens the <think> block (Session.opens_thinking)
    replies: PastReplies | None = None  # Session.replies: no history kept
    # what drafting_state says after the n-th step of a reply (the last one from then on;
    # before any step, the first); mode "none" always says OFF_NONE
    drafting: list[DraftingState] = field(default_factory=lambda: [ON_K4])
    drafting_asked: int = 0
    calls: list[dict] = field(default_factory=list)
    closed: bool = False
    generator_closed: int = 0
    # Session.lock; the script does not take it (a test holds it to play a generation running)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._texts: dict[int, str] = {}
        self._next_id = 100
        self.steps_yielded = 0
        self._reply_steps = 0  # steps yielded in the reply now running (drafting_state's index)

    @property
    def mode(self) -> str:
        return self.spec.mode

    def drafting_state(self, mode=None, draft_max=None, params=None) -> DraftingState:
        """Scripted: ``drafting[steps yielded in this reply - 1]`` (Session.drafting_state)."""
        self.drafting_asked += 1
        if (mode or self.mode) == "none":
            return OFF_NONE
        return self.drafting[min(max(self._reply_steps - 1, 0), len(self.drafting) - 1)]

    def token_text(self, token: int) -> str:
        return self._texts.get(token, f"<{token}>")

    def _id(self, text: str) -> int:
        self._next_id += 1
        self._texts[self._next_id] = text
        return self._next_id

    def make_step(self, pieces: Sequence[str], n_accepted: int, k: int, seconds: float, finish: str | None) -> Step:
        ids = [self._id(p) for p in pieces]
        rejected = [self._id(f"✗{i}") for i in range(max(0, k - n_accepted))]
        if n_accepted == k:  # all kept: the last emitted token is the target's bonus
            drafted = tuple(ids[:n_accepted])
        else:
            drafted = tuple(ids[:n_accepted]) + tuple(rejected)
        return Step(
            drafted=drafted,
            n_accepted=n_accepted,
            token=ids[-1],
            emitted=tuple(ids),
            text="".join(pieces),
            model_k=k,
            predicted_speedup=1.5,
            prefill_seconds=0.0,
            draft_seconds=seconds * 0.3,
            verify_seconds=seconds * 0.6,
            step_seconds=seconds,
            finish=finish,
        )

    def chat(self, messages, params=None, max_tokens: int = 512, mode=None, raw=False, stop=()) -> Iterator[Step]:
        mode = mode or self.mode
        self.calls.append(
            {"messages": [dict(m) for m in messages], "params": params, "max_tokens": max_tokens, "mode": mode}
        )
        return self._run(mode)

    def _run(self, mode) -> Iterator[Step]:
        if mode == "none":
            script = self.none_script or [([p], 0, 0) for s in self.script for p in s[0]]
            seconds = self.none_step_seconds
            if isinstance(seconds, list):
                seconds = seconds[sum(c["mode"] == "none" for c in self.calls[:-1]) % len(seconds)]
        else:
            script, seconds = self.script, self.step_seconds
        self._reply_steps = 0
        try:
            for i, (pieces, n_acc, k) in enumerate(script):
                if i and self.gate is not None:
                    self.gate.wait(10)
                if self.step_delay:
                    time.sleep(self.step_delay)
                finish = "eos" if i == len(script) - 1 else None
                self.steps_yielded += 1
                self._reply_steps = i + 1
                yield self.make_step(pieces, n_acc, k, seconds, finish)
        finally:
            self.generator_closed += 1

    def close(self) -> None:
        self.closed = True


# A short reply, commented step by step (k = draft length asked):
HELLO = [
    (["Hello", ","], 1, 3),  # accepts 1 ("Hello"), rejects 1, discards 1; target says ","
    ([" world"], 0, 2),  # rejects the first draft; target says " world"
    (["!", " How", " are"], 2, 2),  # accepts both; " are" is the bonus
    ([" you", "?"], 1, 4),  # accepts 1, rejects 1, discards 2
]
HELLO_TEXT = "Hello, world! How are you?"

# Qwen3's format: the thinking first, in <think>…</think> (whole tokens), then "\n\n" and
# the answer. The draft is as good in both parts.
QWEN3 = [
    (["<think>", "\n", "The"], 2, 2),  # accepts both; "The" is the bonus
    ([" user", " wants"], 1, 3),  # accepts 1, rejects 1, discards 1
    ([" a", " greeting", ".\n"], 2, 2),  # accepts both
    (["</think>", "\n\n"], 1, 1),  # the block closes; the blank after it is nobody's text
    (["Hello", "!"], 1, 2),  # accepts "Hello", rejects 1; the answer starts
    ([" How", " are", " you", "?"], 3, 3),  # accepts all three; "?" is the bonus
]
QWEN3_THINKING = "The user wants a greeting."
QWEN3_ANSWER = "Hello! How are you?"

# A pair on a CPU where drafting cannot pay: every step is the target alone (k = 0).
NOT_DRAFTING = [([p], 0, 0) for p in ["Hello", ",", " world", "!", " How", " are", " you", "?"]]

# What the controller says (DraftingState, written out as core.explain would):
ON_K4: DraftingState = DraftingState(
    True,
    4,
    "k=4, expected 1.62× (a draft token costs 0.05 of a target pass, checking 5 "
    "tokens costs 1.10 passes, acceptance 80%)",
    draft_cost=0.05,
    verify_cost=1.10,
    expected_speedup=1.62,
)
OFF_CPU = DraftingState(
    False,
    0,
    "a draft token costs 0.62 of a target pass and checking 2 tokens costs 1.90 "
    "passes; drafting would run at about 0.80× even at 95% acceptance",
    draft_cost=0.62,
    verify_cost=1.90,
    expected_speedup=0.80,
)
OFF_TRY = DraftingState(
    False,
    0,
    "a draft token costs 0.20 of a target pass and checking 2 tokens costs 1.30 "
    "passes; at the measured acceptance (40%) drafting would run at about 0.90×",
    next_try_in=12,
    draft_cost=0.20,
    verify_cost=1.30,
    expected_speedup=0.90,
)
OFF_NONE = DraftingState(False, 0, "the target alone (no draft mode chosen)")


def factory_for(session: FakeSession):
    """A ``session_factory`` for LocalspecApp that records what it was asked to load."""
    loaded: list = []

    def load(spec, options, progress=None):
        if progress:
            progress("loading fake target")
        loaded.append((spec, options))
        session.spec = spec
        return session

    load.loaded = loaded  # type: ignore[attr-defined]
    return load

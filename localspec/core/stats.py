"""Statistics of a reply, accumulated step by step (the CLI, the TUI and the bench share it)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .engine import Step


@dataclass
class RunStats:
    n_tokens: int = 0
    n_steps: int = 0  # target passes (verifies)
    n_drafted: int = 0
    n_accepted: int = 0
    prefill_seconds: float = 0.0
    draft_seconds: float = 0.0
    verify_seconds: float = 0.0
    decode_seconds: float = 0.0  # sum of step wall times (prefill excluded)
    first_token_seconds: float | None = None  # prefill + first step
    last_k: int = 0
    k_sum: int = 0
    predicted_speedup: float = float("nan")
    finish: str | None = None
    tokens_per_pass_history: list[float] = field(default_factory=list)
    accepted_by_source: dict[str, int] = field(default_factory=dict)  # "context", "history", "draft", "mtp"

    def add(self, step: Step) -> None:
        self.n_steps += 1 if step.step_seconds > 0 else 0
        self.n_tokens += len(step.emitted)
        self.n_drafted += len(step.drafted)
        self.n_accepted += step.n_accepted
        for source, n in step.accepted_by_source().items():
            self.accepted_by_source[source] = self.accepted_by_source.get(source, 0) + n
        self.prefill_seconds += step.prefill_seconds
        self.draft_seconds += step.draft_seconds
        self.verify_seconds += step.verify_seconds
        self.decode_seconds += step.step_seconds
        if self.first_token_seconds is None and step.emitted:
            self.first_token_seconds = self.prefill_seconds + self.decode_seconds
        self.last_k = step.k
        self.k_sum += step.k
        if not math.isnan(step.predicted_speedup):
            self.predicted_speedup = step.predicted_speedup
        self.tokens_per_pass_history.append(float(len(step.emitted)))
        self.finish = step.finish or self.finish

    @property
    def tokens_per_second(self) -> float:
        """Decode speed: generated tokens over decode time (prefill excluded, reported apart)."""
        return self.n_tokens / self.decode_seconds if self.decode_seconds > 0 else 0.0

    def speedup(self, baseline_tps: float | None) -> float | None:
        """Decode tokens/s over the target alone's (``baseline_tps``, measured here); exactly
        1 when nothing was drafted: the computation was the target alone's, so any other ratio
        would be noise. None when there is nothing to compare."""
        if not self.n_drafted:
            return 1.0 if self.n_tokens else None
        tps = self.tokens_per_second
        if not tps or not baseline_tps or not math.isfinite(baseline_tps) or baseline_tps <= 0:
            return None
        return tps / baseline_tps

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted / drafted; None when nothing was drafted."""
        return self.n_accepted / self.n_drafted if self.n_drafted else None

    @property
    def tokens_per_pass(self) -> float:
        return self.n_tokens / self.n_steps if self.n_steps else 0.0

    @property
    def mean_draft_length(self) -> float:
        return self.n_drafted / self.n_steps if self.n_steps else 0.0

    @property
    def overhead_seconds(self) -> float:
        return max(self.decode_seconds - self.draft_seconds - self.verify_seconds, 0.0)

    def as_dict(self) -> dict:
        def num(x):
            return None if x is None or (isinstance(x, float) and math.isnan(x)) else round(x, 6)

        return {
            "n_tokens": self.n_tokens,
            "n_steps": self.n_steps,
            "n_drafted": self.n_drafted,
            "n_accepted": self.n_accepted,
            "tokens_per_second": num(self.tokens_per_second),
            "acceptance_rate": num(self.acceptance_rate),
            "tokens_per_pass": num(self.tokens_per_pass),
            "draft_length": num(self.mean_draft_length),
            "last_k": self.last_k,
            "predicted_speedup": num(self.predicted_speedup),
            "prefill_seconds": num(self.prefill_seconds),
            "time_to_first_token": num(self.first_token_seconds),
            "draft_seconds": num(self.draft_seconds),
            "verify_seconds": num(self.verify_seconds),
            "overhead_seconds": num(self.overhead_seconds),
            "decode_seconds": num(self.decode_seconds),
            "finish": self.finish,
            "accepted_by_source": dict(self.accepted_by_source),
        }

    def sources_line(self) -> str:
        """Where the accepted drafts came from, most first: "history 80 · draft 30" ("" if none)."""
        kept = sorted(((n, s) for s, n in self.accepted_by_source.items() if n), reverse=True)
        return " · ".join(f"{s} {n}" for n, s in kept)

"""Scripted fake models for the core tests: logits are a pure function of the cached history,
so a cache that is not rolled back correctly gives different logits and the tests notice."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from localspec.core.costs import CostModel
from localspec.core.drafters import Draft, DrafterBase
from localspec.core.modes import ModeContext
from localspec.core.protocol import CachedModel

EOS = 0


def hashed_logits(seed: int, n_vocab: int, order: int = 3, eos_bias: float = -2.0) -> Callable:
    """Logits depend on the last ``order`` tokens and the seed; EOS gets a fixed bias."""

    def fn(history: Sequence[int]) -> np.ndarray:
        key = [seed, len(history) % 7, *history[-order:]]
        z = np.random.default_rng(key).standard_normal(n_vocab).astype(np.float32) * 2.0
        z[EOS] += eos_bias
        return z

    return fn


class FakeModel(CachedModel):
    def __init__(self, logits_fn: Callable, n_vocab: int, n_ctx: int = 512) -> None:
        super().__init__()
        self.fn = logits_fn
        self.n_vocab = n_vocab
        self.n_ctx = n_ctx
        self.decode_calls: list[tuple[int, int]] = []  # (n_tokens, n_logits) per evaluation

    def _decode(self, tokens, start, n_logits):
        assert start == len(self.cached), "cache bookkeeping out of step"
        self.decode_calls.append((len(tokens), n_logits))
        history = list(self.cached) + list(tokens)
        end = len(history)
        return [self.fn(history[: end - n_logits + j + 1]) for j in range(n_logits)]

    def _remove(self, start):
        pass  # logits are recomputed from self.cached, which the base class truncates

    def tokenize(self, text, *, add_bos=True, special=True):
        return [1 + (b % (self.n_vocab - 1)) for b in text.encode()]

    def token_bytes(self, token):
        return f"<{token}>".encode()

    def is_eog(self, token):
        return token == EOS


class ScriptedDrafter(DrafterBase):
    """Proposes whatever ``propose(context, k)`` returns, deterministically (q = one-hot)."""

    name = "scripted"

    def __init__(self, propose: Callable[[Sequence[int], int], Sequence[int]]) -> None:
        self.propose = propose
        self.calls = 0

    def draft(self, context, k, params, rng, draft_max=0, after=()):
        self.calls += 1
        return Draft(tuple(int(t) for t in self.propose(list(context), k)[:k]))


def oracle_greedy(fn: Callable, context: Sequence[int], k: int) -> list[int]:
    """The target's own greedy continuation: a perfect drafter."""
    ctx, out = list(context), []
    for _ in range(k):
        t = int(np.argmax(fn(ctx)))
        out.append(t)
        ctx.append(t)
    return out


class VirtualClock:
    """A clock that only moves when a fake model says it worked: timings in tests are exact
    (Python's own time counts as zero). Install with ``monkeypatch.setattr(costs, "clock", c)``."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class TimedModel(FakeModel):
    """A FakeModel whose evaluation of n tokens advances ``clock`` by ``seconds(n, call)``:
    ``call`` counts evaluations, so a test can slow the machine down mid-reply or put a spike
    on one call."""

    def __init__(
        self,
        logits_fn: Callable,
        n_vocab: int,
        clock: VirtualClock,
        seconds: Callable[[int, int], float],
        n_ctx: int = 4096,
    ) -> None:
        super().__init__(logits_fn, n_vocab, n_ctx)
        self.clock, self.seconds, self.calls = clock, seconds, 0

    def _decode(self, tokens, start, n_logits):
        self.clock.now += self.seconds(len(tokens), self.calls)
        self.calls += 1
        return super()._decode(tokens, start, n_logits)


class NoisyOracleDrafter(DrafterBase):
    """Proposes the target's greedy continuation with each token wrong with probability
    1 - alpha (fixed per position, so geometric acceptance), at ``t_draft`` virtual seconds
    per proposed token, reported as draft passes so the cost model learns them."""

    name = "noisy-oracle"

    def __init__(self, fn: Callable, alpha: float, clock: VirtualClock, t_draft: float, seed: int = 0) -> None:
        self.fn, self.alpha, self.clock, self.t_draft, self.seed = fn, alpha, clock, t_draft, seed

    def draft(self, context, k, params, rng, draft_max=0, after=()):
        ids = oracle_greedy(self.fn, context, k)
        for i in range(len(ids)):
            u = np.random.default_rng([self.seed, len(context) + i]).random()
            if u > self.alpha:
                ids[i] = (ids[i] + 1) % len(self.fn(context))
        self.clock.now += self.t_draft * len(ids)
        return Draft(tuple(ids), n_evals=len(ids))


def fixed_k(controller) -> int | None:
    """A fixed controller's k (``--no-adapt``, the target alone), None for an adaptive one."""
    from localspec.core.controller import Reason

    choice = controller.state()
    return choice.k if choice.reason is Reason.FIXED else None


def mode_context(n_vocab: int, draft: bool = True, **kw) -> ModeContext:
    """A mode's context on two fake models of ``n_vocab`` ids (the draft's absent with ``draft=False``)
    and hand-written costs: a verify of 4 costs 1.3 passes, a draft pass 0.2."""
    costs = CostModel({1: 1.0, 2: 1.1, 4: 1.3}, t_draft=0.2)
    target = FakeModel(hashed_logits(0, n_vocab), n_vocab)
    return ModeContext(target, FakeModel(hashed_logits(1, n_vocab), n_vocab) if draft else None, costs, **kw)

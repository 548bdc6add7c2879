"""Logit processing and the verification rules of speculative decoding.

Convention (Leviathan et al. 2023, "Fast Inference from Transformers via Speculative Decoding",
arXiv 2211.17192, Algorithm 1): ``p_target`` is the target model's processed next-token
distribution, ``q_draft`` the draft's. A step drafts ``k`` tokens ``x_1..x_k``; the target's
rows ``p_target[0..k]`` are its distributions *before* ``x_1`` .. *after* ``x_k``, so there is
always one more target row than drafted tokens: the last one gives the bonus token.

Both models' logits go through the same :func:`process` (repetition penalty, temperature,
top-k, top-p, min-p) and the target-only path uses it too, so speculation changes speed, never
the distribution that is sampled.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# defined with the other option groups, where each field's default, range and flag live
from .options import SamplingParams


def penalised(params: SamplingParams) -> bool:
    """Whether the repetition penalty changes any logit."""
    return params.repeat_penalty != 1.0 and params.repeat_last_n != 0


def apply_repeat_penalty(logits: np.ndarray, history: Sequence[int], params: SamplingParams) -> np.ndarray:
    """llama.cpp's penalty: positive logits of recent tokens are divided, negative multiplied."""
    if not penalised(params) or not history:
        return logits
    recent = np.unique(np.asarray(history[-params.repeat_last_n :], dtype=np.int64))
    out = np.array(logits, dtype=np.float32, copy=True)
    vals = out[recent]
    out[recent] = np.where(vals > 0, vals / params.repeat_penalty, vals * params.repeat_penalty)
    return out


def process(logits: np.ndarray, history: Sequence[int], params: SamplingParams) -> np.ndarray:
    """Dense probabilities (float64, zeros outside the kept set) for a sampling ``params``.

    Order as llama.cpp's default chain: penalties, top-k, top-p, min-p, temperature.
    """
    logits = apply_repeat_penalty(logits, history, params)
    n_vocab = logits.shape[0]
    k = params.top_k if 0 < params.top_k < n_vocab else n_vocab
    if k < n_vocab:
        ids = np.argpartition(logits, -k)[-k:]
    else:
        ids = np.arange(n_vocab)
    kept = logits[ids].astype(np.float64)
    order = np.argsort(-kept, kind="stable")
    ids, kept = ids[order], kept[order]
    # top-p and min-p are defined on the temperature-1 softmax, as in llama.cpp
    probs = np.exp(kept - kept[0])
    probs /= probs.sum()
    n_keep = len(ids)
    if params.top_p < 1.0:
        n_keep = min(n_keep, int(np.searchsorted(np.cumsum(probs), params.top_p)) + 1)
    if params.min_p > 0.0:
        n_keep = min(n_keep, max(1, int(np.count_nonzero(probs >= params.min_p * probs[0]))))
    ids, kept = ids[:n_keep], kept[:n_keep]
    scaled = np.exp((kept - kept[0]) / params.temperature)
    out = np.zeros(n_vocab, dtype=np.float64)
    out[ids] = scaled / scaled.sum()
    return out


def greedy_token(logits: np.ndarray, history: Sequence[int], params: SamplingParams) -> int:
    return int(np.argmax(apply_repeat_penalty(logits, history, params)))


def sample(probs: np.ndarray, rng: np.random.Generator) -> int:
    """Inverse-CDF draw: one uniform per token keeps seeded runs reproducible."""
    cdf = np.cumsum(probs)
    return int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), len(probs) - 1))


@dataclass(frozen=True)
class Verdict:
    """Outcome of verifying one draft: ``n_accepted`` draft tokens kept, then ``token``."""

    n_accepted: int
    token: int
    bonus: bool  # True when every drafted token was accepted and ``token`` came from p_target[k]


def verify_greedy(drafted: Sequence[int], target_choice: Sequence[int]) -> Verdict:
    """``target_choice[i]`` is the target's argmax after ``x_1..x_i`` (len k+1)."""
    for i, x in enumerate(drafted):
        if x != target_choice[i]:
            return Verdict(i, int(target_choice[i]), False)
    return Verdict(len(drafted), int(target_choice[len(drafted)]), True)


def verify_speculative(
    drafted: Sequence[int],
    p_target: Sequence[np.ndarray],
    q_draft: Sequence[np.ndarray | None] | None,
    rng: np.random.Generator,
) -> Verdict:
    """Leviathan et al. 2023, Algorithm 1.

    Accept ``x_i`` with probability min(1, p(x_i)/q(x_i)); on the first rejection draw the
    replacement from norm(max(0, p - q)); if all k are accepted draw the bonus from p_target[k].
    ``q_draft=None`` means a deterministic drafter (prompt lookup, greedy draft): q is one-hot;
    so does a None entry, for that token alone (a copy that a draft model extends).
    """
    for i, x in enumerate(drafted):
        p, q = p_target[i], None if q_draft is None else q_draft[i]
        q_x = 1.0 if q is None else float(q[x])
        if q_x > 0.0 and rng.random() < min(1.0, float(p[x]) / q_x):
            continue
        residual = p.copy()
        if q is None:
            residual[x] = 0.0
        else:
            residual = np.maximum(residual - q, 0.0)
        if residual.sum() <= 0.0:  # p == q up to rounding: any draw from p is exact
            residual = p
        return Verdict(i, sample(residual, rng), False)
    return Verdict(len(drafted), sample(p_target[len(drafted)], rng), True)


def verify_match(drafted: Sequence[int], p_target: Sequence[np.ndarray], rng: np.random.Generator) -> Verdict:
    """Token matching: sample the target at each position, keep drafts while they agree.

    Lossless too (every kept token is a draw from p_target), but accepts less often than
    :func:`verify_speculative` when temperature > 0. Kept for the comparison in ``bench``.
    """
    for i, x in enumerate(drafted):
        t = sample(p_target[i], rng)
        if t != x:
            return Verdict(i, t, False)
    return Verdict(len(drafted), sample(p_target[len(drafted)], rng), True)

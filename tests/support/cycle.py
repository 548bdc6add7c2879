"""The hand-set weights that make a tiny target's next token a function of its last hidden
state, and a drafter that reads that state say the same token.

The target recites the vocabulary's word pieces in a fixed, seeded order x_0, x_1, ... (a
cycle of all of them). Piece x_k has the code c(x_k) = (cos 2πjk/n, sin 2πjk/n) for j = 1 ..
``N_FREQ``: every frequency below n/2 for the tiny vocabulary's n = 42 pieces, so the codes of
two pieces are orthogonal (up to a sidelobe of 1 in 20), and the next piece's code is a
rotation of this one's, c(x_{k+1}) = R c(x_k). The target embeds a piece as its code, held in
a seeded subspace P of its width; its final norm's weights are random signs D, so its state h
is D times the normalised residual stream, no rescaled embedding; its output head is
F R Pᵀ D (F: every token's code, zeros off the cycle). Its logits are then the codes against
R Pᵀ D h: it says the successor of the piece whose code its state holds, and while its layers
add little to the embedding (their ``residual`` weight) it recites the cycle.

A drafter reading (x_p, h_{p-1}) gets the code of x_p from the state as ``reader`` h_{p-1}
and says the successor, x_{p+1}; the state it hands on holds that code as the target's would
(``writer``), so its next pass drafts on. It reads the token's embedding only weakly, so from
zeros, an earlier position's state or another layer's (the embedding, which D scrambles) it
drafts something else.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tests.support.tiny_gguf import vocab

N_FREQ = 20
DIM = 2 * N_FREQ  # the codes' width


@dataclass(frozen=True)
class Cycle:
    codes: np.ndarray  # (n_vocab, DIM): F, a piece's code; zeros for every other token
    rotation: np.ndarray  # (DIM, DIM): R, the next piece's code is R times this one's
    basis: np.ndarray  # (n_embd, DIM): P, orthonormal columns, where the target holds the codes
    signs: np.ndarray  # (n_embd,): D, the target's final-norm weights

    def embeddings(self, seed: int) -> np.ndarray:
        """The target's token embeddings, of RMS 1: a piece's code (in P); random off the cycle."""
        n_embd = len(self.signs)
        rng = np.random.default_rng([seed, 5])
        e = rng.standard_normal((len(self.codes), n_embd))
        on = self.codes.any(axis=1)
        e[on] = self.codes[on] @ self.basis.T * np.sqrt(n_embd / N_FREQ)
        return e.astype(np.float32)

    def head(self, scale: float) -> np.ndarray:
        """The target's output matrix, ``scale`` F R Pᵀ D: from a state of RMS 1 holding a code,
        the winning logit is ``scale`` x N_FREQ x sqrt(n_embd / N_FREQ), the others near 0."""
        return (scale * self.codes @ self.reader()).astype(np.float32)

    def reader(self) -> np.ndarray:
        """(DIM, n_embd): R Pᵀ D, the code of the token a state h says, from h."""
        return (self.rotation @ self.basis.T * self.signs).astype(np.float32)

    def writer(self) -> np.ndarray:
        """(n_embd, DIM): D P, a state that holds a code (the inverse of ``reader`` but for R)."""
        return (self.signs[:, None] * self.basis).astype(np.float32)


def cycle(seed: int, n_embd: int) -> Cycle:
    tokens, _, types = vocab()
    pieces = [i for i, t in enumerate(types) if t == 1]
    rng = np.random.default_rng([seed, 6])
    order = rng.permutation(pieces)
    k = np.arange(len(order))[:, None]
    j = np.arange(1, N_FREQ + 1)[None, :]
    angle = 2 * np.pi * j * k / len(order)
    codes = np.zeros((len(tokens), DIM))
    codes[order, 0::2], codes[order, 1::2] = np.cos(angle), np.sin(angle)
    rotation = np.zeros((DIM, DIM))
    for f in range(N_FREQ):  # (cos, sin)(a + t) from (cos, sin)(a), t the frequency's step
        t = 2 * np.pi * (f + 1) / len(order)
        rotation[2 * f : 2 * f + 2, 2 * f : 2 * f + 2] = [[np.cos(t), -np.sin(t)], [np.sin(t), np.cos(t)]]
    basis, _ = np.linalg.qr(rng.standard_normal((n_embd, DIM)))
    signs = rng.choice([-1.0, 1.0], n_embd)
    return Cycle(codes, rotation, basis, signs)

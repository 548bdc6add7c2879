"""A verify's greedy tokens taken by llama.cpp where it computed the logits: its backend
sampling (``llama_set_sampler`` with a greedy chain, what llama-server's ``--backend-sampling``
does). On a GPU the argmax runs on the device and 4 bytes a row cross to the host instead of the
row (0.6 MB at a 152k vocabulary, 10 MB for a verify of 17), and Python reads none of them.

While a backend sampler is attached llama.cpp copies no logits, so an evaluation that wants
rows detaches it, and a switch makes llama.cpp reserve its graphs again on the next decode: the
mode is kept until an evaluation wants the other (``backend.LlamaModel._decode_greedy``).
"""

from __future__ import annotations

import llama_cpp as L


def logits_on_gpu(model, gpu_layers: int | None) -> bool:
    """Whether llama.cpp computes the logits on a GPU: a build that offloads, with more layers
    offloaded than the model has (llama.cpp places the output layer after the last one). There
    picking saves copying the rows to the host and reading them in Python. On a CPU it saves
    nothing measurable (a 17-row verify of a 1.5B target takes the same time either way) and
    would cost llama.cpp's sampling buffers, three times the
    logits buffer (60 MB at a 152k vocabulary and 33 outputs)."""
    if not L.llama_supports_gpu_offload():
        return False
    return gpu_layers is None or gpu_layers < 0 or gpu_layers > int(L.llama_model_n_layer(model))


class GreedyPicker:
    """A greedy backend sampler on sequence 0 of one llama.cpp context, attached on demand."""

    def __init__(self, ctx) -> None:
        self._ctx = ctx
        self._chain = None
        self.refused = False  # llama.cpp refused one: this build or device cannot

    @property
    def on(self) -> bool:
        return self._chain is not None

    def set(self, on: bool) -> bool:
        """Attach (or detach) the sampler; whether it is attached now."""
        if on == self.on or (on and self.refused):
            return self.on
        if not on:
            L.llama_set_sampler(self._ctx, 0, None)
            self.free()
            return False
        chain = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
        L.llama_sampler_chain_add(chain, L.llama_sampler_init_greedy())
        if not L.llama_set_sampler(self._ctx, 0, chain):
            L.llama_sampler_free(chain)
            self.refused = True
            return False
        self._chain = chain
        return True

    def tokens(self, first_row: int, n: int) -> list[int]:
        """The tokens picked for output rows ``first_row..first_row + n - 1`` of the last decode."""
        ids = [int(L.llama_get_sampled_token_ith(self._ctx, first_row + j)) for j in range(n)]
        if min(ids) < 0:  # LLAMA_TOKEN_NULL: nothing was sampled
            raise RuntimeError("llama.cpp's backend sampling returned no token")
        return ids

    def free(self) -> None:
        """Free the chain (after the context that used it is freed, or once detached)."""
        if self._chain is not None:
            L.llama_sampler_free(self._chain)
            self._chain = None

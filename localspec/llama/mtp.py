"""A target's own next-token-prediction (MTP, "nextn") layer as its draft model.

Qwen3.5/3.6 GGUFs from the ``*-MTP`` repos carry one extra transformer block trained to predict
the token after next: given the target's final hidden state ``h_{p-1}`` after position p - 1
and the token ``x_p`` that followed, it gives logits for ``x_{p+1}`` and its own hidden state,
which feeds the next MTP pass. Drafting k tokens costs k passes of that one block and the
output layer, with no second model to download or load; llama.cpp calls it ``draft-mtp``
(``common/speculative.cpp``) and this follows it:

- the MTP block has a KV cache of its own, a llama.cpp context of type MTP on the target's
  weights; its entry at position p holds ``(x_p, h_{p-1})``. Entries made from the target's
  hidden states are exact; a draft's passes, made from the MTP block's own state, are not
  kept: the next draft drops them and reads those tokens again from the target's states,
  as llama.cpp re-reads every verified row (``process`` after each target batch);
- it reads the target's states lazily, when it drafts (``sync``, as a draft model catches
  up), from ``LlamaModel.hidden``, which keeps every position's state;
- drafting is greedy on the MTP logits (``ModelDrafter``, as for any draft model);
- one MTP block drafts every position. A file with several ("heads": step35, mimo2, hy_v3)
  drafts with its first, and says so (``heads_note``), where llama.cpp's draft-mtp runs head i
  at draft position i; where llama.cpp's MTP graph takes a single block (qwen35 and most
  others, which abort the process on more), such a file is refused, as is one that declares
  MTP layers without their tensors (``ggufinfo.mtp_layers``).

So ``MtpModel`` is a ``CachedModel`` and the core drafts with it exactly as with a separate
draft model: the same controller, marginal rule, costs, statistics and explanations.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Sequence
from pathlib import Path

import llama_cpp as L
import numpy as np
from llama_cpp import llama_cpp_ext as X

from ..core.protocol import CachedModel, ContextFull
from . import ggufinfo
from .backend import N_BATCH, BackendError, LlamaModel, ModelLoadError
from .log import llama_errors, llama_reason

log = logging.getLogger(__name__)

_LLAMA_DECODE = 1  # LLAMA_PROCESS_TYPE_DECODE
# Architectures whose MTP graph in llama.cpp runs any one of several MTP blocks ("heads",
# chosen by ``llama_set_nextn_layer_offset``; its draft-mtp runs head i at draft position i).
# Every other architecture's MTP graph asserts a single block and aborts the process on more.
SEVERAL_HEADS = frozenset({"step35", "mimo2", "hy_v3"})
# llama_batch_ext_add_token's errors (llama.h)
_ADD_ERRORS = {-1: "the batch is full", -2: "the token is invalid", -3: "the sequence id is invalid"}


class TargetVocab:
    """A draft that speaks its target's vocabulary: tokens are the target's business."""

    target: LlamaModel

    def tokenize(self, text: str, *, add_bos: bool = True, special: bool = True) -> list[int]:
        return self.target.tokenize(text, add_bos=add_bos, special=special)

    def token_bytes(self, token: int) -> bytes:
        return self.target.token_bytes(token)

    def is_eog(self, token: int) -> bool:
        return self.target.is_eog(token)


class MtpModel(TargetVocab, CachedModel):
    """The target's MTP block, drafting for it (see the module docstring)."""

    reads_ahead = False  # it drafts from the target's hidden states, which a copy's tokens lack

    def __init__(self, target: LlamaModel) -> None:
        super().__init__()
        if target.n_nextn < 1:
            raise ModelLoadError(
                f"{target.path}: this GGUF has no MTP layers (nextn_predict_layers = 0); "
                "use the model's MTP file (often a repo named *-MTP-GGUF) or a draft model"
            )
        # llama.cpp asserts (aborting the process) on a missing MTP tensor or a head count its
        # MTP graph does not take: both are refused here instead
        try:
            layers = ggufinfo.mtp_layers(target.path)
        except ggufinfo.GgufError as e:  # (llama.cpp read it: a key of a type we do not read)
            raise ModelLoadError(f"cannot check the MTP layers: {e}") from None
        if layers.problem:
            raise ModelLoadError(f"{target.path}: {layers.problem}")
        self.note = heads_note(target.path, layers.arch, target.n_nextn)
        if self.note:
            log.warning("%s", self.note)
        self.target = target
        self.path = target.path
        self.name = f"{target.name} (MTP)"
        self.n_vocab, self.n_ctx = target.n_vocab, target.n_ctx
        with llama_errors() as errors:
            self._ctx = L.llama_init_from_model(target.model, draft_context_params(target))
        if not self._ctx:
            raise ModelLoadError(
                f"{target.path}: llama.cpp could not create the MTP context for this architecture "
                f"({target.describe()}: {llama_reason(errors, 'no reason given')}); "
                "draft with a draft model or prompt lookup instead"
            )
        X.llama_set_embeddings_nextn(self._ctx, True, True)  # the MTP block's own state, output rows only
        self._mem = L.llama_get_memory(self._ctx)
        self.hidden = target.keep_hidden()
        self.n_embd = self.hidden.n_embd
        self._batch = L.llama_batch_ext_init(self._ctx)
        self._pos = (L.llama_pos * 4)()  # IMROPE models read pos[0] for a token entry
        self._own: tuple[int, np.ndarray] | None = None  # (position, the MTP's state there)
        self._exact = 0  # cache entries made from the target's states (the rest: a draft's)
        # passes fed zeros for a state the target never kept (a position it evaluated before
        # this MTP block was loaded): their drafts are guesses; the first is logged as a warning
        self.zero_states = 0

    # --- the two primitives --------------------------------------------------------------
    def _decode(self, tokens: Sequence[int], start: int, n_logits: int) -> list[np.ndarray]:
        if n_logits != 1:
            raise BackendError(f"{self.name}: an MTP evaluation gives one logits row, {n_logits} asked for")
        if start + len(tokens) > self.n_ctx:
            raise ContextFull(f"{self.name}: positions up to {start + len(tokens) - 1} exceed {self.n_ctx}")
        # llama.cpp copies an MTP batch's hidden-state rows from the front of the batch, so the
        # row whose state the next pass needs is evaluated on its own, as llama.cpp's draft does
        own = False
        last = start + len(tokens) - 1
        try:
            for lo in range(0, len(tokens) - 1, N_BATCH):
                chunk = tokens[lo : min(lo + N_BATCH, len(tokens) - 1)]
                own |= self._run(chunk, start + lo, output=False)
            own |= self._run(tokens[-1:], last, output=True)
        except BackendError:
            self._forget_failed(start)
            raise
        if not own and start == self._exact:
            self._exact = start + len(tokens)
        logits = L.llama_get_logits_ith(self._ctx, 0)
        state = X.llama_get_embeddings_nextn_ith(self._ctx, 0)
        if not logits or not state:
            raise BackendError(f"{self.name}: llama.cpp returned no logits or state from the MTP block")
        self._own = (last, np.ctypeslib.as_array(state, shape=(self.n_embd,)).copy())
        return [np.ctypeslib.as_array(logits, shape=(self.n_vocab,))]

    def _remove(self, start: int) -> None:
        if not L.llama_memory_seq_rm(self._mem, 0, max(0, start), -1):  # a KV cache: any tail goes
            raise BackendError(f"{self.name}: llama.cpp refused to drop MTP cache positions {start}..")
        self._exact = min(self._exact, start)

    def _forget_failed(self, start: int) -> None:
        """A failed evaluation may have left its earlier chunks in the cache, past ``cached``:
        drop them (or everything, if llama.cpp refuses that)."""
        if not L.llama_memory_seq_rm(self._mem, 0, start, -1):
            L.llama_memory_clear(self._mem, True)
            self.cached = []
        self._exact = min(self._exact, len(self.cached))
        self._own = None

    def sync(self, tokens: Sequence[int], n_logits: int = 0, known: int = 0) -> Sequence[np.ndarray] | None:
        """As ``CachedModel.sync``, but a draft's entries (made from the MTP block's own
        state) are read again from the target's, which it has by now for the kept ones."""
        self.truncate(min(len(self.cached), self._exact))
        return super().sync(tokens, n_logits, min(known, self._exact))

    def _run(self, tokens: Sequence[int], start: int, output: bool) -> bool:
        """One llama_process of ``tokens`` at ``start``; True if a row used the MTP's own state."""
        b, own = self._batch, False
        L.llama_batch_ext_clear(b)
        for i, token in enumerate(tokens):
            if not 0 <= token < self.n_vocab:
                raise BackendError(f"{self.name}: token id {token} is outside the vocabulary")
            h, mine = self._state_before(start + i)
            own |= mine
            add_entry(self.name, b, int(token), start + i, h, self._pos, output)
        rc = L.llama_process(self._ctx, _LLAMA_DECODE, b)
        if rc != 0:
            raise BackendError(f"{self.name}: the MTP evaluation failed ({rc}) at position {start}")
        return own

    def _state_before(self, pos: int) -> tuple[np.ndarray, bool]:
        """``h_{pos-1}``: the target's where it has evaluated that position, else the MTP
        block's own from its last pass (a draft's next token); and whether it is the latter."""
        if pos <= 0:  # nothing before the first position
            return np.zeros(self.n_embd, dtype=np.float32), False
        h = self.hidden.row(pos - 1, len(self.target.cached))
        if h is not None:
            return h, False
        if self._own is not None and self._own[0] == pos - 1:
            return self._own[1], True
        return zero_state(self, pos - 1, "the MTP layer"), True

    def describe(self) -> str:
        heads = f"first of {self.target.n_nextn} MTP layers" if self.target.n_nextn > 1 else "MTP layer"
        return f"{heads} of {self.target.describe()}"

    def close(self) -> None:
        if self._ctx:
            L.llama_batch_ext_free(self._batch)
            L.llama_free(self._ctx)
            self._ctx = None


def heads_note(path: Path | str, arch: str, n_heads: int) -> str | None:
    """None for one MTP block. For several, the line saying that every draft position uses the
    first (llama.cpp's draft-mtp runs head i at position i, each head rebuilding its own
    layer's cache over the draft; this drafts as for a single head); a ModelLoadError where
    llama.cpp's MTP graph takes a single block."""
    if n_heads <= 1:
        return None
    if arch not in SEVERAL_HEADS:
        raise ModelLoadError(
            f"{path}: this {arch} file has {n_heads} MTP layers; llama.cpp's {arch} MTP drafts with "
            "exactly one. Use the model's GGUF with one MTP layer, or a draft model"
        )
    return (
        f"{Path(path).name} has {n_heads} MTP layers (heads); localspec drafts every position with "
        f"the first, where llama.cpp's draft-mtp uses head i at draft position i"
    )


def zero_state(drafter, pos: int, what: str) -> np.ndarray:
    """Zeros in place of the target's hidden state at ``pos``, which it evaluated before it kept
    its states: counted in ``drafter.zero_states`` and logged once, since drafts from zeros are
    poor and nothing else would show it."""
    drafter.zero_states += 1
    if drafter.zero_states == 1:
        log.warning(
            "%s: no hidden state of the target at position %d (evaluated before %s was loaded?): "
            "drafting from zeros there",
            drafter.name,
            pos,
            what,
        )
    return np.zeros(drafter.n_embd, dtype=np.float32)


def add_entry(name: str, batch, token: int, pos: int, h: np.ndarray, pos_buf, output: bool) -> None:
    """Add ``token`` at ``pos`` with the hidden state ``h`` to an MTP batch, each llama.cpp call
    checked (a refused one would leave an entry without its position or state)."""
    j = L.llama_batch_ext_add_token(batch, 0, token)
    if j < 0:
        raise BackendError(f"{name}: llama.cpp refused token {token} at position {pos}: {_ADD_ERRORS.get(j, j)}")
    pos_buf[0] = pos
    if not L.llama_batch_ext_set_pos(batch, j, pos_buf):
        raise BackendError(f"{name}: llama.cpp refused position {pos} for a batch entry")
    row = L.llama_embd(h.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), 1, len(h))
    if not L.llama_batch_ext_set_embd_token(batch, j, row):  # llama.cpp copies the row
        raise BackendError(f"{name}: llama.cpp refused a hidden-state row of {len(h)}")
    if output and not L.llama_batch_ext_set_output_logits(batch, j, True):
        raise BackendError(f"{name}: llama.cpp refused to output logits for position {pos}")


def draft_context_params(target: LlamaModel):
    """llama.cpp's draft-mtp context (``common_speculative_init_result``): of type MTP against
    the target's context, whose size and threads it takes; one logits row per pass. A qwen35
    MTP block keeps a KV cache of its own; a Gemma 4 assistant's is a view of the target's."""
    p = L.llama_context_default_params()
    p.n_ctx = int(L.llama_n_ctx(target.ctx))
    p.n_batch = p.n_ubatch = N_BATCH
    p.n_seq_max = 1
    p.n_rs_seq = 0
    p.n_outputs_max = 1
    p.ctx_type = L.LLAMA_CONTEXT_TYPE_MTP
    p.ctx_other = target.ctx
    p.embeddings = False
    p.n_threads = p.n_threads_batch = int(L.llama_n_threads(target.ctx))
    p.no_perf = True
    return p

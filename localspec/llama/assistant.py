"""A Gemma 4 assistant (a ``gemma4-assistant`` GGUF) as the draft model of its Gemma 4 target.

Google ships a small drafter beside each Gemma 4 size. It is no model by itself: it reads the
target's final hidden state ``h`` (after the output norm) beside the token, and its layers
compute queries only, attending over the *target's* KV cache. llama.cpp runs it as
``draft-mtp`` in its shared-memory mode (``common/speculative.cpp``, ``is_mem_shared``), and
this follows it:

- its context is of type MTP with ``ctx_other`` = the target's context (mandatory): its cache
  is a view of the target's, and its own ``seq_rm`` and cache writes are no-ops, so it never
  catches up on anything and rolls nothing back: the target's rollback is its rollback;
- a draft of k tokens is k passes, all at the same position ``pos0``, the first position past
  the target's cache: the first reads the last token with the target's state at ``pos0 - 1``,
  each next one its own draft with the state the assistant's previous pass handed on (its
  ``h_nextn``, projected to the target's width);
- it reads the target's states from ``LlamaModel.hidden`` (``keep_hidden``), as ``MtpModel``;
- drafting is greedy on its logits (``ModelDrafter``, as for any draft model).

So ``AssistantModel`` is a ``CachedModel`` whose ``cached`` tokens are bookkeeping only: an
evaluation is one pass, for its last token, and the core drafts with it exactly as with a
separate draft model. Every pass is at ``pos0``: llama.cpp takes no other position in a batch
for that cache (``llama_batch_allocr::init``: Y = X + 1). A pass the engine makes elsewhere
than in a draft (a prefill, a timing pass) reads the target's last state too, and its logits
are no draft of anything.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from pathlib import Path

import llama_cpp as L
import numpy as np
from llama_cpp import llama_cpp_ext as X

from ..core.protocol import CachedModel
from .backend import BackendError, LlamaModel, ModelLoadError, load_model
from .log import llama_errors, llama_reason
from .mtp import TargetVocab, add_entry, draft_context_params, zero_state

ARCH = "gemma4-assistant"
TARGET_ARCH = "gemma4"


class AssistantModel(TargetVocab, CachedModel):
    """A Gemma 4 assistant file drafting for ``target`` (see the module docstring)."""

    reads_ahead = False  # it drafts from the target's hidden states, which a copy's tokens lack

    def __init__(self, path: Path | str, target: LlamaModel, gpu_layers: int | None = None) -> None:
        super().__init__()
        self.path = Path(path)
        self.name = self.path.name
        self.target = target
        if not self.path.is_file():
            raise ModelLoadError(f"{path}: {'not a regular file' if self.path.exists() else 'no such file'}")
        self._model = load_model(self.path, gpu_layers)
        self._ctx = None
        try:
            _check_fits(self.path, self._model, target)
            with llama_errors() as errors:
                self._ctx = L.llama_init_from_model(self._model, draft_context_params(target))
            if not self._ctx:
                raise ModelLoadError(
                    f"{self.path}: llama.cpp could not create the assistant's context against {target.name} "
                    f"({llama_reason(errors, 'out of memory?')})"
                )
        except BaseException:
            L.llama_model_free(self._model)
            raise
        X.llama_set_embeddings_nextn(self._ctx, True, True)  # its own state, output rows only
        self.hidden = target.keep_hidden()
        self.n_embd = self.hidden.n_embd
        self.n_vocab, self.n_ctx = int(L.llama_vocab_n_tokens(L.llama_model_get_vocab(self._model))), target.n_ctx
        self._batch = L.llama_batch_ext_init(self._ctx)
        self._pos = (L.llama_pos * 4)()  # (llama.cpp reads n_pos_per_embd of them: one here)
        # the last pass: its index in ``cached``, its position, the state it handed on
        self._last: tuple[int, int, np.ndarray] | None = None
        self.zero_states = 0  # passes fed zeros for a state the target never kept (as MtpModel's)

    # --- the two primitives --------------------------------------------------------------
    def _decode(self, tokens: Sequence[int], start: int, n_logits: int) -> list[np.ndarray]:
        if n_logits != 1:
            raise BackendError(f"{self.name}: an assistant pass gives one logits row, {n_logits} asked for")
        # the cache is the target's: only the last token needs a pass, at the one position
        # llama.cpp takes (the next after the target's cache: llama-batch.cpp asks Y = X + 1)
        q, pos0 = start + len(tokens) - 1, len(self.target.cached)
        last = self._last
        if q > pos0 and last is not None and last[:2] == (q - 1, pos0):
            h = last[2]  # a draft goes on from its previous pass
        else:
            h = self._target_state(pos0 - 1)
        logits, state = self._pass(tokens[-1], pos0, h)
        self._last = (q, pos0, state)
        return [logits]

    def _remove(self, start: int) -> None:
        # nothing to drop in llama.cpp (the cache is the target's; seq_rm here is a no-op),
        # but a dropped pass is no longer one to draft on from
        if self._last is not None and self._last[0] >= start:
            self._last = None

    def _pass(self, token: int, pos: int, h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One assistant pass of ``token`` at ``pos`` reading state ``h``: (a view of its logits,
        valid until the next pass; a copy of the state it hands on)."""
        if not 0 <= token < self.n_vocab:
            raise BackendError(f"{self.name}: token id {token} is outside the vocabulary")
        b = self._batch
        L.llama_batch_ext_clear(b)
        add_entry(self.name, b, int(token), pos, h, self._pos, output=True)
        rc = L.llama_process(self._ctx, L.LLAMA_PROCESS_TYPE_DECODE, b)
        if rc != 0:
            self._last = None
            raise BackendError(f"{self.name}: the assistant's pass failed ({rc}) at position {pos}")
        logits = L.llama_get_logits_ith(self._ctx, 0)
        state = X.llama_get_embeddings_nextn_ith(self._ctx, 0)
        if not logits or not state:
            raise BackendError(f"{self.name}: llama.cpp returned no logits or state from the assistant")
        return (
            np.ctypeslib.as_array(logits, shape=(self.n_vocab,)),
            np.ctypeslib.as_array(state, shape=(self.n_embd,)).copy(),
        )

    def _target_state(self, pos: int) -> np.ndarray:
        """The target's hidden state at ``pos``; zeros before the first position, and where the
        target evaluated ``pos`` before it kept its states (counted in ``zero_states``)."""
        h = self.hidden.row(pos, len(self.target.cached))
        if h is not None:
            return h
        if pos >= 0:
            return zero_state(self, pos, "the assistant")
        return np.zeros(self.n_embd, dtype=np.float32)

    def describe(self) -> str:
        buf = ctypes.create_string_buffer(256)
        L.llama_model_desc(self._model, buf, len(buf))
        return f"{buf.value.decode('utf-8', 'replace')}, drafting for {self.target.describe()}"

    def close(self) -> None:
        if self._ctx:
            L.llama_batch_ext_free(self._batch)
            L.llama_free(self._ctx)
            L.llama_model_free(self._model)
            self._ctx = self._model = None


def _check_fits(path: Path, model, target: LlamaModel) -> None:
    """What llama.cpp assumes and does not check (a mismatch reads past the target's tensors
    or aborts): an assistant, a gemma4 target, the target's hidden size and vocabulary, and
    its head sizes. (KV heads are per-layer arrays, which llama_model_meta_val_str does not
    read; the hidden size already tells every published Gemma 4 size apart.)"""
    arch, target_arch = _meta(model, "general.architecture"), _meta(target.model, "general.architecture")
    if arch != ARCH:
        raise ModelLoadError(
            f"{path}: not a Gemma 4 assistant (its architecture is {arch}, not {ARCH}); load it as a draft model"
        )
    if target_arch != TARGET_ARCH:
        raise ModelLoadError(
            f"{path}: a Gemma 4 assistant drafts for a Gemma 4 target ({TARGET_ARCH}); {target.name} is {target_arch}"
        )
    n_embd, n_embd_target = int(L.llama_model_n_embd_out(model)), int(L.llama_model_n_embd_out(target.model))
    if n_embd != n_embd_target:
        raise ModelLoadError(
            f"{path}: this assistant belongs to a Gemma 4 target of hidden size {n_embd}; "
            f"{target.name}'s is {n_embd_target}: use the assistant published with this target size"
        )
    n_vocab = int(L.llama_vocab_n_tokens(L.llama_model_get_vocab(model)))
    if n_vocab != target.n_vocab:
        raise ModelLoadError(
            f"{path}: this assistant's vocabulary has {n_vocab} tokens, {target.name}'s {target.n_vocab}; "
            "use the assistant published with this target"
        )
    # its layers read the target's K and V rows with their own head sizes (a view of the
    # target's tensors: other sizes read the wrong numbers, or past the end)
    pair = ((model, ARCH), (target.model, TARGET_ARCH))
    heads = [tuple(_meta(m, f"{arch}.attention.{k}") for k in _HEAD_SIZES) for m, arch in pair]
    if heads[0] != heads[1]:
        raise ModelLoadError(
            f"{path}: this assistant reads heads of {'/'.join(map(str, heads[0]))} (global/sliding-window) "
            f"from the target's cache; {target.name}'s are {'/'.join(map(str, heads[1]))}: "
            "use the assistant published with this target"
        )


_HEAD_SIZES = ("key_length", "key_length_swa")


def _meta(model, key: str) -> str | None:
    buf = ctypes.create_string_buffer(128)
    n = L.llama_model_meta_val_str(model, key.encode(), buf, len(buf))
    return buf.value.decode("utf-8", "replace") if n >= 0 else None

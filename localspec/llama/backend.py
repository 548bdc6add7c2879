"""A GGUF model in llama.cpp, through llama-cpp-python's low-level API.

Why low level: one ``llama_decode`` per verify with logits requested only on the rows the
verify needs (``batch.logits[i] = 1``), read as numpy views of llama.cpp's own buffer. The
high-level ``Llama(draft_model=...)`` path forces ``logits_all`` (n_ctx x n_vocab floats,
recomputed rows) and that is what makes it slower than no speculation at all.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import llama_cpp as L
import numpy as np
from llama_cpp import llama_cpp_ext as X

from ..core.options import MAX_DRAFT, clamp_threads
from ..core.protocol import CachedModel, ContextFull
from . import ggufinfo
from .compat import VocabInfo

# callers outside llama/ reach these as backend.*: re-exported
from .devices import backend_devices as backend_devices
from .devices import build_info as build_info
from .devices import device_report as device_report
from .devices import supports_gpu_offload
from .log import init_backend, llama_errors, llama_reason
from .picking import GreedyPicker, logits_on_gpu
from .recurrent import Rollback

_VOCAB_TYPES = {
    L.LLAMA_VOCAB_TYPE_NONE: "none",
    L.LLAMA_VOCAB_TYPE_SPM: "spm",
    L.LLAMA_VOCAB_TYPE_BPE: "bpe",
    L.LLAMA_VOCAB_TYPE_WPM: "wpm",
    L.LLAMA_VOCAB_TYPE_UGM: "ugm",
    L.LLAMA_VOCAB_TYPE_RWKV: "rwkv",
}
_SPECIAL_ATTRS = L.LLAMA_TOKEN_ATTR_CONTROL | L.LLAMA_TOKEN_ATTR_USER_DEFINED | L.LLAMA_TOKEN_ATTR_UNKNOWN
N_BATCH = 512  # tokens per llama_decode call; prompts longer than this go in chunks
# Most logits rows one evaluation may ask for: a verify of the longest draft (a free copy and
# a measured size included, both capped at MAX_DRAFT). llama.cpp sizes the output of its compute
# graph, and a backend sampler's buffers (3x the logits), by this, so it is no larger.
MAX_LOGIT_ROWS = MAX_DRAFT + 1
# llama.cpp allocates at least this many KV cells (GGML_PAD(n_ctx, 256)) and caps n_batch at
# the n_ctx it is *asked* for; asking for at least this much keeps n_batch >= 256, above any
# verify (options.MAX_DRAFT + 1 rows), while our own n_ctx stays the one the caller asked for
MIN_LLAMA_CTX = 256
# A model on a GPU runs a batch size at its steady cost from the third evaluation of it in a row:
# ggml-cuda re-captures its CUDA graph after a change of size, and the two evaluations after one
# run without it (CachedModel.settle). Elsewhere on a GPU the two untimed passes cost milliseconds.
GPU_SETTLE = 2


class ModelLoadError(Exception):
    pass


class BackendError(RuntimeError):
    """llama.cpp failed, or a call would have reached one of its asserts (which abort the
    process); the message names the model and what was wrong."""


class ChatTemplateError(ValueError):
    """The model's own chat template failed to render the conversation."""


def _chunks(n: int, n_logits: int, n_batch: int = N_BATCH) -> list[tuple[int, int]]:
    """Batches of at most n_batch tokens, the last one holding every row that needs logits
    (so n_logits <= n_batch: llama.cpp asserts n_tokens <= n_batch in llama_decode)."""
    bounds = list(range(0, n, n_batch)) + [n]
    if len(bounds) > 2 and n - bounds[-2] < n_logits:
        bounds[-2] = n - n_logits
    return list(zip(bounds[:-1], bounds[1:]))


class LlamaModel(CachedModel):
    """One GGUF model with one context (sequence 0)."""

    def __init__(self, path: Path, model, ctx, n_ctx: int) -> None:
        super().__init__()
        recurrent = bool(L.llama_model_is_recurrent(model) or L.llama_model_is_hybrid(model))
        # a recurrent state cannot drop a tail as KV cells do: see recurrent.py
        self._rollback = Rollback(ctx, int(L.llama_n_rs_seq(ctx))) if recurrent else None
        self.rollback_depth = self._rollback.snapshots if self._rollback else None
        self.path = Path(path)
        self.name = self.path.name
        self._model = model
        self._ctx = ctx
        self._vocab = L.llama_model_get_vocab(model)
        self._mem = L.llama_get_memory(ctx)
        self.n_vocab = int(L.llama_vocab_n_tokens(self._vocab))
        self.n_ctx = n_ctx
        self.n_ctx_train = int(L.llama_model_n_ctx_train(model))
        # what llama.cpp made of our request (it caps n_batch at the n_ctx asked for, and
        # asserts n_tokens <= n_batch in every llama_decode): each decode is chunked by this
        self.n_batch = min(int(L.llama_n_batch(ctx)), N_BATCH)
        self._batch = L.llama_batch_init(N_BATCH, 0, 1)
        self._piece = ctypes.create_string_buffer(256)
        self._eog = np.array([bool(L.llama_vocab_is_eog(self._vocab, i)) for i in range(self.n_vocab)])
        self.n_nextn = int(L.llama_model_n_layer_nextn(model))  # next-token-prediction layers (MTP)
        self.hidden: HiddenStates | None = None  # see keep_hidden
        self._picker = GreedyPicker(ctx)  # greedy verifies' argmax taken by llama.cpp
        self.can_pick = False  # ... asked for: set at load where it pays (picking.logits_on_gpu)

    @classmethod
    def load(
        cls,
        path: Path | str,
        n_ctx: int = 4096,
        threads: int | None = None,
        gpu_layers: int | None = None,
        verbose: bool = False,
        snapshots: int = 0,
        mtp: bool = False,
    ) -> LlamaModel:
        """``n_ctx`` is capped at the model's trained context; ``threads`` at this machine's
        CPUs (more make llama.cpp's workers spin-wait on each other). ``snapshots``: how many
        tokens of one evaluation a recurrent or hybrid model keeps states for (the longest
        draft a verify rolls back for free; llama.cpp's ``n_rs_seq``, 0 elsewhere). ``mtp``:
        load the file's next-token-prediction layers too (``mtp.MtpModel`` drafts with them)."""
        path = Path(path)
        if not path.is_file():  # also a device or a FIFO, which llama.cpp would block on
            why = "no such file" if not path.exists() else "not a regular file"
            raise ModelLoadError(f"{path}: {why}")
        if n_ctx < 1:
            raise ValueError(f"n_ctx must be at least 1 (got {n_ctx})")
        init_backend(verbose)
        model = load_model(path, gpu_layers, mtp)
        if L.llama_vocab_type(L.llama_model_get_vocab(model)) == L.LLAMA_VOCAB_TYPE_NONE:
            L.llama_model_free(model)  # tokenizing would abort in llama.cpp
            raise ModelLoadError(
                f"{path}: the file has no tokenizer (vocabulary); localspec needs a model with its tokenizer"
            )
        n_ctx = min(n_ctx, int(L.llama_model_n_ctx_train(model)) or n_ctx)
        with llama_errors() as errors:
            ctx = L.llama_init_from_model(model, _context_params(n_ctx, threads, snapshots))
        if not ctx:
            L.llama_model_free(model)
            why = llama_reason(errors, "out of memory?")
            raise ModelLoadError(f"{path}: llama.cpp could not create a context of {n_ctx} tokens ({why})")
        loaded = cls(path, model, ctx, min(n_ctx, int(L.llama_n_ctx(ctx))))
        loaded.can_pick = logits_on_gpu(model, gpu_layers)
        loaded.settle = GPU_SETTLE if supports_gpu_offload() and gpu_layers != 0 else 0
        return loaded

    # --- the two primitives --------------------------------------------------------------
    def _decode(self, tokens: Sequence[int], start: int, n_logits: int) -> list[np.ndarray]:
        self._picker.set(False)  # with a backend sampler on, llama.cpp copies no logits
        n = self._run(tokens, start, n_logits)
        return [self._logits(n - n_logits + j) for j in range(n_logits)]

    def _decode_greedy(self, tokens: Sequence[int], start: int, n_logits: int) -> Sequence[int]:
        """Each row's argmax, taken by llama.cpp where it computed the logits (picking.py),
        where that pays (``can_pick``); elsewhere the rows, each argmax taken as it is read."""
        self._picker.set(self.can_pick)
        if not self._picker.on:
            return super()._decode_greedy(tokens, start, n_logits)
        n = self._run(tokens, start, n_logits)
        try:
            return self._picker.tokens(n - n_logits, n_logits)
        except RuntimeError as e:
            raise BackendError(f"{self.name}: {e}") from None

    def _run(self, tokens: Sequence[int], start: int, n_logits: int) -> int:
        """Evaluate ``tokens`` at ``start``, in chunks; the last chunk's size (its last
        ``n_logits`` rows are the outputs)."""
        self._check_decode(tokens, start, n_logits)
        b = self._batch
        n = len(tokens)
        for lo, hi in _chunks(n, n_logits, self.n_batch):
            first_row = n - n_logits  # tokens from here on need logits
            for i, t in enumerate(tokens[lo:hi]):
                b.token[i] = t
                b.pos[i] = start + lo + i
                b.n_seq_id[i] = 1
                b.seq_id[i][0] = 0
                b.logits[i] = lo + i >= first_row
            b.n_tokens = hi - lo
            rc = L.llama_decode(self._ctx, b)
            if rc != 0:
                self._forget_failed(start)
                raise BackendError(f"{self.name}: llama_decode failed ({rc}) at position {start + lo}")
            if self._rollback:
                self._rollback.evaluated(start + lo, hi - lo)
            if self.hidden is not None:
                self.hidden.put(start + lo, X.llama_get_embeddings_nextn(self._ctx), hi - lo)
        return int(b.n_tokens)

    def _logits(self, row: int) -> np.ndarray:
        """A view of llama.cpp's logits buffer: valid until the next decode, no copy."""
        ptr = L.llama_get_logits_ith(self._ctx, row)
        if not ptr:  # an embedding-only model has no logits
            raise BackendError(f"{self.name}: llama.cpp returned no logits (not a text-generation model?)")
        return np.ctypeslib.as_array(ptr, shape=(self.n_vocab,))

    def _check_decode(self, tokens: Sequence[int], start: int, n_logits: int) -> None:
        """What llama_decode would assert on (or reject with a log line only), as exceptions:
        rows with logits within the batch and the reserved outputs, positions within the
        context, token ids within the vocabulary."""
        n = len(tokens)
        if not 1 <= n_logits <= min(n, self.n_batch, MAX_LOGIT_ROWS):
            raise BackendError(
                f"{self.name}: {n_logits} logit rows asked for {n} tokens; one "
                f"evaluation gives 1 to {min(self.n_batch, MAX_LOGIT_ROWS)}"
            )
        if start < 0 or start + n > self.n_ctx:
            raise ContextFull(
                f"{self.name}: positions {start}..{start + n - 1} are outside the context of {self.n_ctx} tokens"
            )
        ids = np.asarray(tokens, dtype=np.int64)
        bad = ids[(ids < 0) | (ids >= self.n_vocab)]
        if bad.size:
            raise BackendError(f"{self.name}: token id {int(bad[0])} is outside the vocabulary (0..{self.n_vocab - 1})")

    def _forget_failed(self, start: int) -> None:
        """A failed decode may leave part of its batch in the cache: drop it (a recurrent
        state cannot, so it starts over and the next evaluation reads everything again)."""
        if self._rollback is None and L.llama_memory_seq_rm(self._mem, 0, start, -1):
            return
        L.llama_memory_clear(self._mem, True)
        if self._rollback:
            self._rollback.dropped(0)
        self.cached = []

    def _remove(self, start: int) -> None:
        start = max(0, start)  # p0 < 0 would mean "from the first position" to llama.cpp too
        rollback = self._rollback
        if rollback is None or start == 0:  # a KV cache drops any tail; anything drops it all
            if not L.llama_memory_seq_rm(self._mem, 0, start, -1):
                raise BackendError(f"{self.name}: llama.cpp refused to drop cache positions {start}..")
            if rollback:
                rollback.dropped(0)
            return
        if rollback.by_snapshot(len(self.cached), start) and L.llama_memory_seq_rm(self._mem, 0, start, -1):
            rollback.dropped(start)
            return
        kept = self.cached[:start]
        checkpoint = rollback.latest(start)
        rollback.dropped(start)
        if checkpoint and rollback.restore(checkpoint, lambda n: L.llama_memory_seq_rm(self._mem, 0, n, -1)):
            self.cached = kept[: checkpoint.n_tokens]
        else:  # nothing to go back to: start over from the kept tokens
            L.llama_memory_clear(self._mem, True)
            rollback.dropped(0)
            rollback.prefills += 1
            self.cached = []
        if len(kept) > len(self.cached):  # outputs unused: in whichever mode (see picking.py)
            self._run(kept[len(self.cached) :], len(self.cached), 1)
        self.cached = kept

    def keep_hidden(self) -> HiddenStates:
        """From now on keep every position's final hidden state (after the output norm), which
        the MTP layer reads: llama.cpp hands it over for every token of an evaluation."""
        if self.hidden is None:
            X.llama_set_embeddings_nextn(self._ctx, True, False)
            self.hidden = HiddenStates(int(L.llama_model_n_embd_out(self._model)), self.n_ctx)
        return self.hidden

    @property
    def rollback(self) -> Rollback | None:
        """How a recurrent or hybrid cache rolls back, with its counts; None for a KV cache."""
        return self._rollback

    @property
    def ctx(self):
        """The llama.cpp context (None once closed), for what calls llama.cpp on it directly:
        a context built beside it (``mtp.draft_context_params``), a check of its settings."""
        return self._ctx

    @property
    def model(self):
        """The llama.cpp model (None once closed), for what reads its weights or metadata
        directly: an MTP context on its layers (``mtp.MtpModel``), an assistant's fit check."""
        return self._model

    def checkpoint(self, lasting: bool = False) -> None:
        if self._rollback:
            self._rollback.save(len(self.cached), lasting)

    # --- tokens ------------------------------------------------------------------------------
    def tokenize(self, text: str, *, add_bos: bool = True, special: bool = True) -> list[int]:
        data = text.encode("utf-8", errors="replace")  # lone surrogates from a bad paste
        if len(data) > _MAX_TEXT_BYTES:
            raise BackendError(
                f"the text is {len(data):,} bytes; llama.cpp tokenizes at most {_MAX_TEXT_BYTES:,} at once"
            )
        add_bos = add_bos and self._can_add_special()
        cap = len(data) + 16
        buf = (L.llama_token * cap)()
        n = L.llama_tokenize(self._vocab, data, len(data), buf, cap, add_bos, special)
        if n < 0:
            cap = -n
            buf = (L.llama_token * cap)()
            n = L.llama_tokenize(self._vocab, data, len(data), buf, cap, add_bos, special)
        return list(buf[:n])

    def _can_add_special(self) -> bool:
        """llama.cpp asserts when asked to add a BOS, EOS or SEP token the model asks for but
        does not have (an id out of its vocabulary is disabled at load): then add none."""
        v = self._vocab
        wanted = (
            (L.llama_vocab_get_add_bos, L.llama_vocab_bos),
            (L.llama_vocab_get_add_eos, L.llama_vocab_eos),
            (L.llama_vocab_get_add_sep, L.llama_vocab_sep),
        )
        return all(not add(v) or token(v) != L.LLAMA_TOKEN_NULL for add, token in wanted)

    def _check_id(self, token: int) -> None:
        # llama.cpp looks ids up with std::vector::at: out of range it throws through C and aborts
        if not 0 <= token < self.n_vocab:
            raise BackendError(f"{self.name}: token id {token} is outside the vocabulary (0..{self.n_vocab - 1})")

    def token_bytes(self, token: int) -> bytes:
        self._check_id(token)
        n = L.llama_token_to_piece(self._vocab, token, self._piece, len(self._piece), 0, False)
        if n < 0:
            big = ctypes.create_string_buffer(-n)
            n = L.llama_token_to_piece(self._vocab, token, big, -n, 0, False)
            return big.raw[:n]
        return self._piece.raw[:n]

    def is_eog(self, token: int) -> bool:
        return bool(self._eog[token]) if 0 <= token < self.n_vocab else False

    def is_special(self, token: int) -> bool:
        """A token llama.cpp makes from its text only when asked to parse special tokens
        (control, user-defined and unknown ones: its ``cache_special_tokens``)."""
        return bool(self._special[token]) if 0 <= token < self.n_vocab else False

    @functools.cached_property
    def _special(self) -> np.ndarray:
        v = self._vocab  # read once, on the first prompt or pair check
        return np.array([bool(L.llama_vocab_get_attr(v, i) & _SPECIAL_ATTRS) for i in range(self.n_vocab)])

    def token_text(self, token: int) -> bytes:
        self._check_id(token)
        return L.llama_vocab_get_text(self._vocab, token) or b""

    def vocab_info(self) -> VocabInfo:
        v = self._vocab
        special = frozenset(int(i) for i in np.flatnonzero(self._special))
        return VocabInfo(
            vocab_type=_VOCAB_TYPES.get(L.llama_vocab_type(v), str(L.llama_vocab_type(v))),
            n_vocab=self.n_vocab,
            bos=int(L.llama_vocab_bos(v)),
            eos=int(L.llama_vocab_eos(v)),
            add_bos=bool(L.llama_vocab_get_add_bos(v)),
            add_eos=bool(L.llama_vocab_get_add_eos(v)),
            tokens=[self.token_text(i) for i in range(self.n_vocab)],
            special=special,
        )

    # --- chat template -----------------------------------------------------------------------
    def chat_template(self) -> str | None:
        t = L.llama_model_chat_template(self._model, None)
        return t.decode("utf-8") if t else None

    def apply_chat_template(self, messages: Sequence[dict]) -> str:
        """The GGUF's own Jinja template (as transformers renders it); ChatML when it has none."""
        if not self.chat_template():
            out = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
            return out + "<|im_start|>assistant\n"
        try:
            return self._formatter(messages=list(messages)).prompt
        except Exception as e:  # the template is the file's code: any Jinja error, any exception
            raise ChatTemplateError(
                f"{self.name}: the model's chat template failed ({type(e).__name__}: {e}); "
                "use --raw to send the text as it is, or another GGUF of the model"
            ) from None

    @functools.cached_property
    def _formatter(self) -> Callable[..., Any]:
        """The template compiled once (a few ms each time: a prompt renders it twice)."""
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        piece = lambda tok: self.token_text(tok).decode("utf-8", "replace") if tok >= 0 else ""
        return Jinja2ChatFormatter(
            self.chat_template() or "",
            eos_token=piece(L.llama_vocab_eos(self._vocab)),
            bos_token=piece(L.llama_vocab_bos(self._vocab)),
        )

    def describe(self) -> str:
        buf = ctypes.create_string_buffer(256)
        L.llama_model_desc(self._model, buf, len(buf))
        return buf.value.decode("utf-8", "replace")

    def close(self) -> None:
        if self._ctx:
            L.llama_batch_free(self._batch)
            L.llama_free(self._ctx)
            self._picker.free()  # after the context that used it
            L.llama_model_free(self._model)
            self._ctx = self._model = None

    def __del__(self) -> None:  # best effort; close() is the real API
        with contextlib.suppress(Exception):
            self.close()


# llama_tokenize takes the text length as int32
_MAX_TEXT_BYTES = 2**31 - 1


class HiddenStates:
    """A model's final hidden state at each position it evaluated (rows past its cache are
    stale): what an MTP layer reads beside the next token. One row per position of the
    context, at most (``memory.hidden_state_bytes``)."""

    def __init__(self, n_embd: int, n_ctx: int) -> None:
        self.n_embd = n_embd
        # zeros from calloc: the pages of a large array take memory as rows are written, so a
        # chat's context fills it gradually, and it never grows past the context or is copied
        self.rows = np.zeros((n_ctx, n_embd), dtype=np.float32)
        self.kept = np.zeros(n_ctx, dtype=bool)  # positions evaluated since the states were kept

    def put(self, start: int, ptr, n: int) -> None:
        if not ptr:
            raise BackendError("llama.cpp returned no hidden states (is this a model with MTP layers?)")
        self.rows[start : start + n] = np.ctypeslib.as_array(ptr, shape=(n, self.n_embd))
        self.kept[start : start + n] = True

    def row(self, pos: int, n_cached: int) -> np.ndarray | None:
        """The state at ``pos`` of a model whose cache holds ``n_cached`` tokens; None where
        there is none: past the cache (a stale row), or evaluated before states were kept."""
        if 0 <= pos < min(n_cached, len(self.rows)) and self.kept[pos]:
            return self.rows[pos]
        return None


def load_model(path: Path, gpu_layers: int | None, mtp: bool = False):
    """llama.cpp's model from ``path`` (a checked regular file), or ModelLoadError quoting
    llama.cpp's own reason. ``gpu_layers`` None: all of them where the build can offload."""
    mparams = L.llama_model_default_params()
    mparams.load_mtp = mtp  # without it llama.cpp skips the nextn tensors
    if gpu_layers is None:
        gpu_layers = -1 if supports_gpu_offload() else 0
    mparams.n_gpu_layers = 999 if gpu_layers < 0 else min(gpu_layers, 2**31 - 1)
    # Read the weights instead of mmapping them: llama.cpp repacks Q4_K tensors into a
    # CPU-friendly layout, and with mmap the original pages stay resident as well (RSS was
    # file + 53 % for the Q4 1.5B target; read in, it is file + KV cache + 10 %).
    mparams.load_mode = L.LLAMA_LOAD_MODE_NONE
    with llama_errors() as errors:
        model = L.llama_model_load_from_file(str(path).encode(), mparams)
    if not model:
        why = llama_reason(errors, "not a GGUF it supports")
        raise ModelLoadError(f"{path}: llama.cpp could not load this file ({why}){_mtp_problem(path)}")
    return model


def _mtp_problem(path: Path) -> str:
    """What to add to a load failure's message when the file declares MTP layers without
    their tensors (llama.cpp names only the first tensor it missed); "" otherwise."""
    try:
        problem = ggufinfo.mtp_layers(path).problem
    except (ggufinfo.GgufError, OSError):
        return ""  # (llama.cpp's reason says it)
    return f". {problem}" if problem else ""


def _context_params(n_ctx: int, threads: int | None, snapshots: int = 0):
    cparams = L.llama_context_default_params()
    # llama.cpp keeps this many recurrent states per evaluation only for the architectures
    # that can roll back with them (and clamps it to 0 elsewhere); each is a copy of the state
    cparams.n_rs_seq = max(0, snapshots)
    # n_batch = min(n_ctx asked, n_batch) in llama.cpp: ask for the cells it allocates anyway
    cparams.n_ctx = max(n_ctx, MIN_LLAMA_CTX)
    cparams.n_batch = N_BATCH
    cparams.n_ubatch = N_BATCH
    cparams.n_seq_max = 1
    # logits rows per batch: a verify needs k+1 <= 33; the default (n_batch) makes
    # llama.cpp reserve n_batch x n_vocab floats (311 MB for a 152k vocabulary)
    cparams.n_outputs_max = MAX_LOGIT_ROWS
    cparams.n_outputs_max_per_seq = MAX_LOGIT_ROWS  # also what a backend sampler may pick (default 1)
    n_threads, _ = clamp_threads(threads)
    cparams.n_threads = n_threads
    cparams.n_threads_batch = n_threads
    cparams.no_perf = True
    return cparams


# --- quantizing ----------------------------------------------------------------------------
_QUANT_FTYPES = {
    "Q4_K_M": L.LLAMA_FTYPE_MOSTLY_Q4_K_M,
    "Q8_0": L.LLAMA_FTYPE_MOSTLY_Q8_0,
    "F16": L.LLAMA_FTYPE_MOSTLY_F16,
}


class QuantizeError(Exception):
    """llama.cpp's quantizer refused or failed; the message names both files."""


def quantize(src: Path, dst: Path, ftype: str = "Q4_K_M", threads: int | None = None) -> None:
    """Quantize a GGUF with llama.cpp's own quantizer (what ``llama-quantize`` runs), so a file
    made here has the same per-tensor types (Q4_K, Q6_K, fallbacks) as a published one."""
    if ftype.upper() not in _QUANT_FTYPES:
        raise ValueError(f"unknown quantization {ftype!r}; known: {', '.join(_QUANT_FTYPES)}")
    init_backend(False)
    params = L.llama_model_quantize_default_params()
    params.ftype = _QUANT_FTYPES[ftype.upper()]
    params.nthread = threads or 0  # 0: llama.cpp uses every hardware thread
    with llama_errors() as errors:
        rc = L.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    if rc != 0:
        why = llama_reason(errors, f"llama_model_quantize returned {rc}")
        raise QuantizeError(f"quantizing {src} to {ftype} as {dst} failed ({why})")

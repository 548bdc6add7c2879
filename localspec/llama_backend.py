"""llama.cpp through llama-cpp-python's low-level API: the only module that imports llama_cpp.

Why low level: one ``llama_decode`` per verify with logits requested only on the rows the
verify needs (``batch.logits[i] = 1``), read as numpy views of llama.cpp's own buffer. The
high-level ``Llama(draft_model=...)`` path forces ``logits_all`` (n_ctx x n_vocab floats,
recomputed rows) and that is what makes it slower than no speculation at all.
"""

from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path
from typing import Sequence

import numpy as np

import llama_cpp as L

from .compat import VocabInfo
from .offload import DEVICE_TYPES, Device
from .protocol import CachedModel

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
MAX_LOGIT_ROWS = 64  # most logits rows one evaluation may ask for (verify of k <= 63)
_backend_ready = False


class ModelLoadError(Exception):
    pass


def supports_gpu_offload() -> bool:
    return bool(L.llama_supports_gpu_offload())


# ggml's device API (ggml-backend.h), which llama-cpp-python does not bind: argument and
# result types for ctypes. ggml_backend_dev_t is an opaque pointer.
_GGML_SIGNATURES = {
    "ggml_backend_dev_count": ([], ctypes.c_size_t),
    "ggml_backend_dev_get": ([ctypes.c_size_t], ctypes.c_void_p),
    "ggml_backend_dev_name": ([ctypes.c_void_p], ctypes.c_char_p),
    "ggml_backend_dev_description": ([ctypes.c_void_p], ctypes.c_char_p),
    "ggml_backend_dev_memory": ([ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t),
                                 ctypes.POINTER(ctypes.c_size_t)], None),
    "ggml_backend_dev_type": ([ctypes.c_void_p], ctypes.c_int),
}
_GGML_NAMES = ("libggml.so", "libggml.dylib", "ggml.dll", "libggml.dll")


def backend_devices() -> list[Device]:
    """ggml's backend devices (CPU, CUDA0, Metal, ...) with free and total memory as llama.cpp
    sees them; [] where the ggml library or its device API cannot be reached."""
    return device_report()[0]


def device_report() -> tuple[list[Device], str | None]:
    """(devices, why the list is empty or incomplete, else None). Never raises."""
    try:
        _init_backend(_verbose)
        ggml, why = _ggml_device_api()
        if ggml is None:
            return [], why
        handles = [ggml.ggml_backend_dev_get(i) for i in range(ggml.ggml_backend_dev_count())]
        return [_device(ggml, h) for h in handles if h], None  # NULL: never dereference it
    except (OSError, AttributeError, ValueError) as e:  # ctypes' failures
        return [], f"reading ggml's devices failed: {e}"


def _ggml_device_api():
    """(the ggml library with its device functions typed, None) or (None, why)."""
    lib_dir = Path(getattr(L.llama_cpp, "_base_path", Path(L.__file__).parent / "lib"))
    found = [lib_dir / n for n in _GGML_NAMES if (lib_dir / n).exists()]
    candidates = [lambda p=p: ctypes.CDLL(str(p)) for p in found]
    # libllama links libggml: a symbol lookup on its handle searches ggml too (static builds)
    candidates.append(lambda: L.llama_cpp._lib)
    problems = [] if found else [f"no ggml library in {lib_dir}"]
    for load in candidates:
        try:
            lib = load()
            for fn, (args, res) in _GGML_SIGNATURES.items():
                f = getattr(lib, fn)
                f.argtypes, f.restype = args, res
            return lib, None
        except (OSError, AttributeError) as e:
            problems.append(str(e))
    return None, "ggml's device API is not reachable: " + "; ".join(problems)


def _device(ggml, dev) -> Device:
    free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
    ggml.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
    kind = int(ggml.ggml_backend_dev_type(dev))
    return Device(
        name=(ggml.ggml_backend_dev_name(dev) or b"").decode("utf-8", "replace"),
        description=(ggml.ggml_backend_dev_description(dev) or b"").decode("utf-8", "replace"),
        type=DEVICE_TYPES[kind] if 0 <= kind < len(DEVICE_TYPES) else f"type {kind}",
        free_bytes=int(free.value), total_bytes=int(total.value),
    )


def build_info() -> dict:
    """What this llama.cpp build is: version, GPU offload, CPU features, device limit.
    A field that cannot be read is None, with the reason under ``errors``."""
    info: dict = {"llama_cpp_python": getattr(L, "__version__", None), "errors": {}}
    fields = {
        "gpu_offload": supports_gpu_offload,
        "system_info": lambda: L.llama_print_system_info().decode("utf-8", "replace").strip(),
        "max_devices": lambda: int(L.llama_max_devices()),
    }
    for key, read in fields.items():
        try:
            info[key] = read()
        except (AttributeError, OSError, ValueError) as e:
            info[key] = None
            info["errors"][key] = str(e)
    return info


_recent_errors: list[str] = []  # llama.cpp's last error lines, quoted when a load fails
_verbose = False


@L.llama_log_callback
def _log(level: int, text: bytes, user_data) -> None:
    """llama.cpp logs to stderr by default; we keep its errors for our messages and print
    the rest only with verbose on (level 2 = warning, 3 = error)."""
    line = text.decode("utf-8", "replace")
    if level == 3:
        _recent_errors.append(line.strip())
        del _recent_errors[:-5]
    if _verbose:
        print(line, end="", file=sys.stderr)


def _init_backend(verbose: bool) -> None:
    global _backend_ready, _verbose
    _verbose = verbose
    L.llama_log_set(_log, ctypes.c_void_p(0))
    if not _backend_ready:
        L.llama_backend_init()
        _backend_ready = True


def _chunks(n: int, n_logits: int) -> list[tuple[int, int]]:
    """Batches of at most N_BATCH tokens, the last one holding every row that needs logits."""
    bounds = list(range(0, n, N_BATCH)) + [n]
    if len(bounds) > 2 and n - bounds[-2] < n_logits:
        bounds[-2] = n - n_logits
    return list(zip(bounds[:-1], bounds[1:]))


class LlamaModel(CachedModel):
    """One GGUF model with one context (sequence 0)."""

    def __init__(self, path: Path, model, ctx, n_ctx: int) -> None:
        super().__init__()
        self.path = Path(path)
        self.name = self.path.name
        self._model = model
        self._ctx = ctx
        self._vocab = L.llama_model_get_vocab(model)
        self._mem = L.llama_get_memory(ctx)
        self.n_vocab = int(L.llama_vocab_n_tokens(self._vocab))
        self.n_ctx = n_ctx
        self._batch = L.llama_batch_init(N_BATCH, 0, 1)
        self._piece = ctypes.create_string_buffer(256)
        self._eog = np.array([bool(L.llama_vocab_is_eog(self._vocab, i)) for i in range(self.n_vocab)])

    @classmethod
    def load(cls, path: Path | str, n_ctx: int = 4096, threads: int | None = None,
             gpu_layers: int | None = None, verbose: bool = False) -> "LlamaModel":
        path = Path(path)
        if not path.is_file():
            raise ModelLoadError(f"{path}: no such file")
        _init_backend(verbose)
        mparams = L.llama_model_default_params()
        if gpu_layers is None:
            gpu_layers = -1 if supports_gpu_offload() else 0
        mparams.n_gpu_layers = 999 if gpu_layers < 0 else gpu_layers
        # Read the weights instead of mmapping them: llama.cpp repacks Q4_K tensors into a
        # CPU-friendly layout, and with mmap the original pages stay resident as well (RSS was
        # file + 53 % for the Q4 1.5B target; read in, it is file + KV cache + 10 %).
        mparams.load_mode = L.LLAMA_LOAD_MODE_NONE
        _recent_errors.clear()
        model = L.llama_model_load_from_file(str(path).encode(), mparams)
        if not model:
            why = "; ".join(e for e in _recent_errors if e) or "not a GGUF it supports"
            raise ModelLoadError(f"{path}: llama.cpp could not load this file ({why})")
        n_ctx = min(n_ctx, int(L.llama_model_n_ctx_train(model)) or n_ctx)
        cparams = L.llama_context_default_params()
        cparams.n_ctx = n_ctx
        cparams.n_batch = N_BATCH
        cparams.n_ubatch = N_BATCH
        cparams.n_seq_max = 1
        # logits rows per batch: a verify needs k+1 <= 33; the default (n_batch) makes
        # llama.cpp reserve n_batch x n_vocab floats (311 MB for a 152k vocabulary)
        cparams.n_outputs_max = MAX_LOGIT_ROWS
        n_threads = threads or max(1, os.cpu_count() or 1)
        cparams.n_threads = n_threads
        cparams.n_threads_batch = n_threads
        cparams.no_perf = True
        ctx = L.llama_init_from_model(model, cparams)
        if not ctx:
            L.llama_model_free(model)
            raise ModelLoadError(f"{path}: could not create a context of {n_ctx} tokens (out of memory?)")
        return cls(path, model, ctx, int(L.llama_n_ctx(ctx)))

    # --- the two primitives --------------------------------------------------------------
    def _decode(self, tokens: Sequence[int], start: int, n_logits: int) -> list[np.ndarray]:
        b = self._batch
        n = len(tokens)
        for lo, hi in _chunks(n, n_logits):
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
                # a failed decode may leave part of the batch in the cache: drop it
                L.llama_memory_seq_rm(self._mem, 0, start, -1)
                raise RuntimeError(f"llama_decode failed ({rc}) at position {start + lo}")
        m = b.n_tokens
        # views of llama.cpp's logits buffer: valid until the next decode, no copies
        return [
            np.ctypeslib.as_array(L.llama_get_logits_ith(self._ctx, m - n_logits + j), shape=(self.n_vocab,))
            for j in range(n_logits)
        ]

    def _remove(self, start: int) -> None:
        if not L.llama_memory_seq_rm(self._mem, 0, start, -1):
            # recurrent/hybrid caches cannot drop a tail: start over from the kept tokens
            kept = self.cached[:start]
            L.llama_memory_clear(self._mem, True)
            self.cached = []
            if kept:
                self._decode(kept, 0, 1)
                self.cached = kept

    # --- tokens ------------------------------------------------------------------------------
    def tokenize(self, text: str, *, add_bos: bool = True, special: bool = True) -> list[int]:
        data = text.encode("utf-8")
        cap = len(data) + 16
        buf = (L.llama_token * cap)()
        n = L.llama_tokenize(self._vocab, data, len(data), buf, cap, add_bos, special)
        if n < 0:
            cap = -n
            buf = (L.llama_token * cap)()
            n = L.llama_tokenize(self._vocab, data, len(data), buf, cap, add_bos, special)
        return list(buf[:n])

    def token_bytes(self, token: int) -> bytes:
        n = L.llama_token_to_piece(self._vocab, token, self._piece, len(self._piece), 0, False)
        if n < 0:
            big = ctypes.create_string_buffer(-n)
            n = L.llama_token_to_piece(self._vocab, token, big, -n, 0, False)
            return big.raw[:n]
        return self._piece.raw[:n]

    def is_eog(self, token: int) -> bool:
        return bool(self._eog[token]) if 0 <= token < self.n_vocab else False

    def token_text(self, token: int) -> bytes:
        return L.llama_vocab_get_text(self._vocab, token) or b""

    def vocab_info(self) -> VocabInfo:
        v = self._vocab
        special = frozenset(
            i for i in range(self.n_vocab) if L.llama_vocab_get_attr(v, i) & _SPECIAL_ATTRS
        )
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
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        template = self.chat_template()
        if not template:
            out = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
            return out + "<|im_start|>assistant\n"
        piece = lambda tok: self.token_text(tok).decode("utf-8", "replace") if tok >= 0 else ""
        fmt = Jinja2ChatFormatter(
            template, eos_token=piece(L.llama_vocab_eos(self._vocab)),
            bos_token=piece(L.llama_vocab_bos(self._vocab)),
        )
        return fmt(messages=list(messages)).prompt

    def describe(self) -> str:
        buf = ctypes.create_string_buffer(256)
        L.llama_model_desc(self._model, buf, len(buf))
        return buf.value.decode("utf-8", "replace")

    @property
    def file_size(self) -> int:
        return self.path.stat().st_size

    def close(self) -> None:
        if self._ctx:
            L.llama_batch_free(self._batch)
            L.llama_free(self._ctx)
            L.llama_model_free(self._model)
            self._ctx = self._model = None

    def __del__(self) -> None:  # best effort; close() is the real API
        try:
            self.close()
        except Exception:
            pass


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
    _init_backend(False)
    params = L.llama_model_quantize_default_params()
    params.ftype = _QUANT_FTYPES[ftype.upper()]
    params.nthread = threads or 0  # 0: llama.cpp uses every hardware thread
    _recent_errors.clear()
    rc = L.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    if rc != 0:
        why = "; ".join(e for e in _recent_errors if e) or f"llama_model_quantize returned {rc}"
        raise QuantizeError(f"quantizing {src} to {ftype} as {dst} failed ({why})")

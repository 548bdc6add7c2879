"""What a GGUF file says about itself, without loading it: the one module that reads GGUF headers
(``tests/support/random_gguf.py`` is the one that writes GGUF files, for tests and benchmarks).

Two things are read: the metadata ``localspec models import/check`` show (architecture,
parameters, quantization, context length, vocab size, KV-cache bytes per token) and the
vocabulary as llama.cpp sees it (``vocab_info``), so ``compat.check_compatible`` can judge a
pair without loading either model. The tensor table gives the bytes per layer for the GPU
offload plan (``read_model_layout``) and whether the MTP layers a file declares are in it
(``mtp_layers``). The sizes of the KV cache and the other states are ``memory``'s formulas,
fed the metadata read here.

Why not ``gguf.GGUFReader``: it builds a numpy view per array element, which takes about 9 s
for a 151k-token vocabulary with its merges. We parse the header and key/value section
ourselves (the format is a flat list of typed values) with ``gguf``'s own type constants, and
stop before the tensor data. The tests check that both readers agree.
"""

from __future__ import annotations

import math
import mmap
import os
import re
import stat
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from ..core.options import MAX_DRAFT as MAX_SNAPSHOTS  # (the longest draft a verify drops)
from .compat import VocabInfo
from .memory import footprint, hidden_width, kv_bytes_per_token, nextn_layers_of, recurrent_state_bytes, snapshots_for
from .mtplayers import MtpLayers
from .offload import ModelLayout

T = gguf.GGUFValueType
_SCALARS: dict[int, str] = {
    T.UINT8: "<B",
    T.INT8: "<b",
    T.UINT16: "<H",
    T.INT16: "<h",
    T.UINT32: "<I",
    T.INT32: "<i",
    T.FLOAT32: "<f",
    T.BOOL: "<?",
    T.UINT64: "<Q",
    T.INT64: "<q",
    T.FLOAT64: "<d",
}
_NUMPY = {
    T.UINT8: "<u1",
    T.INT8: "<i1",
    T.UINT16: "<u2",
    T.INT16: "<i2",
    T.UINT32: "<u4",
    T.INT32: "<i4",
    T.FLOAT32: "<f4",
    T.BOOL: "?",
    T.UINT64: "<u8",
    T.INT64: "<i8",
    T.FLOAT64: "<f8",
}
# llama.cpp's LLAMA_TOKEN_NULL: what llama_vocab_bos/eos return when a model has none
TOKEN_NULL = -1
# tokenizer.ggml.model -> llama.cpp's vocab type, with the special ids and add-BOS/EOS flags
# llama.cpp assumes when the file does not set them (llama-vocab.cpp, load())
_VOCAB_DEFAULTS = {
    "llama": ("spm", 1, 2, True, False),
    "gpt2": ("bpe", 11, 11, False, False),
    "bert": ("wpm", 101, TOKEN_NULL, True, False),
    "t5": ("ugm", TOKEN_NULL, 1, False, True),
    "rwkv": ("rwkv", TOKEN_NULL, TOKEN_NULL, False, False),
    "no_vocab": ("none", TOKEN_NULL, TOKEN_NULL, False, False),
}
# BPE pre-tokenizers for which llama.cpp turns add-BOS on by default (Llama 3 and kin)
_BPE_ADD_BOS = {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral"}
# token types (gguf.TokenType): unknown, control, user-defined count as special, like
# LLAMA_TOKEN_ATTR_UNKNOWN | CONTROL | USER_DEFINED in the backend
_SPECIAL_TYPES = {gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.USER_DEFINED}
# end-of-generation and fill-in-the-middle texts llama.cpp forces to control type when a file
# marks them normal (it warns "control-looking token ... will be overridden"); the special set
# only changes a verdict where target and draft differ on such a token's text
_CONTROL_LOOKING = {
    b"<|eot_id|>",
    b"<|im_end|>",
    b"<|end|>",
    b"<end_of_turn>",
    b"<|endoftext|>",
    b"<|eom_id|>",
    b"<EOT>",
    b"_<EOT>",
    b"<|end_of_text|>",
    b"<end_of_utterance>",
    b"<|return|>",
    b"<|call|>",
    b"</s>",
    "<｜end▁of▁sentence｜>".encode(),
    b"<|fim_prefix|>",
    b"<|fim_suffix|>",
    b"<|fim_middle|>",
    b"<|fim_pad|>",
    b"<|repo_name|>",
    b"<|file_sep|>",
    b"<fim_prefix>",
    b"<fim_suffix>",
    b"<fim_middle>",
    b"<fim_pad>",
    b"<fim-prefix>",
    b"<fim-suffix>",
    b"<fim-middle>",
    b"<PRE>",
    b"<SUF>",
    b"<MID>",
    b"<reponame>",
    b"<filename>",
}


class GgufError(Exception):
    """Not a GGUF file, or one we cannot read; the message names the file."""


class GgufTruncated(GgufError):
    """The file ends inside its own header."""


@dataclass(frozen=True)
class GgufInfo:
    path: Path
    arch: str
    name: str
    params: str  # "1.5B": the file's size label, else counted from the tensors
    n_params: int
    quant: str  # "Q4_K_M", "F16", ...
    context_length: int | None
    n_vocab: int
    size_bytes: int
    kv_bytes_per_token: int  # K and V in F16 for every layer with a cache (memory.kv_bytes_per_token)
    nextn_layers: int = 0  # next-token-prediction (MTP) layers: the model can draft for itself
    state_bytes: int = 0  # one copy of a recurrent or hybrid model's state (memory.recurrent_state_bytes)
    n_embd: int = 0  # the hidden states' width an MTP layer or an assistant reads (memory.hidden_width)


def read_metadata(path: Path | str) -> tuple[dict[str, Any], int]:
    """(key -> value, parameter count). String arrays come back as lists of bytes."""
    meta, n_params, _ = _read(Path(path))
    return meta, n_params


def read_layout(path: Path | str) -> tuple[dict[str, Any], int]:
    """(metadata, the file length its header implies: the aligned start of the tensor data
    plus the furthest tensor's offset and size). A shorter file is truncated."""
    meta, _, data_end = _read(Path(path))
    return meta, data_end


def read_model_layout(path: Path | str, draft_max: int = MAX_SNAPSHOTS) -> ModelLayout:
    """Bytes per llama.cpp layer, for the GPU offload plan: the ``blk.N.*`` tensors of each
    block, and the output layer (``output*``; a model with tied embeddings has no
    ``output.weight`` and llama.cpp puts a copy of ``token_embd.weight`` there instead).
    Other tensors (token embeddings, rope factors) stay on the CPU or are too small to count.
    A split model (NAME-00001-of-0000N.gguf) has tensors in every part: all are read.
    ``draft_max``: the longest draft a target's snapshots cover (at most: ``snapshots_for``
    caps them); 0 for a draft model, which keeps none."""
    meta, sizes = _tensor_sizes(Path(path))
    arch = _text(meta.get("general.architecture", b""))
    n_layer = int(meta.get(f"{arch}.block_count", 0) or 0)
    blocks = [0] * n_layer
    output = 0
    for name, n in sizes.items():
        found = _BLOCK.match(name)
        if found and int(found.group(1)) < n_layer:
            blocks[int(found.group(1))] += n
        elif name.startswith("output"):
            output += n
    if "output.weight" not in sizes:
        output += sizes.get("token_embd.weight", 0)
    ctx = meta.get(f"{arch}.context_length")
    kv, state = kv_bytes_per_token(meta, arch), recurrent_state_bytes(meta, arch)
    copies = footprint(kv, state, 0, snapshots=snapshots_for(state, draft_max)).state
    return ModelLayout(n_layer, tuple(blocks), output, kv, int(ctx) if ctx else None, state_bytes=copies)


_BLOCK = re.compile(r"blk\.(\d+)\.")


def _tensor_sizes(path: Path) -> tuple[dict[str, Any], dict[str, int]]:
    """(metadata, every tensor's name -> bytes), from every part of a split model."""
    sizes: dict[str, int] = {}
    meta, _, _ = _read(path, sizes)
    for part in split_parts(path, meta):
        if part != path:
            _read(part, sizes)
    return meta, sizes


def split_parts(path: Path, meta: dict) -> list[Path]:
    """Every file of a split model (NAME-00001-of-0000N.gguf), or just ``path``."""
    if int(meta.get("split.count", 1) or 1) <= 1:
        return [path]
    pattern = re.sub(r"-\d{5}-of-(\d{5})\.gguf$", r"-*-of-\1.gguf", path.name)
    return sorted(path.parent.glob(pattern)) or [path]


def _read(path: Path, sizes: dict[str, int] | None = None) -> tuple[dict[str, Any], int, int]:
    not_file = not_a_file(path)  # before open(): opening a FIFO blocks until a writer comes
    if not_file:
        raise GgufError(f"{path}: {not_file}")
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size >= 4 and f.read(4) != b"GGUF":
                raise GgufError(f"{path}: not a GGUF file (it does not start with 'GGUF')")
            if size < 24:  # mmap refuses empty files; a header is at least 24 bytes
                raise GgufTruncated(f"{path}: cannot read it as GGUF: it has only {size} bytes")
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                try:
                    meta, n_params, data_end = _parse(m, path, sizes)
                except _Damaged as e:
                    raise GgufError(f"{path}: cannot read it as GGUF: {e}: the file is damaged") from None
                except (ValueError, struct.error, IndexError) as e:
                    raise GgufTruncated(f"{path}: cannot read it as GGUF: it ends inside its header ({e})") from None
    except OSError as e:
        raise GgufError(f"{path}: cannot read it as GGUF ({e.strerror or e})") from None
    check_metadata(meta, path)
    return meta, n_params, data_end


def not_a_file(path: Path) -> str | None:
    """Why ``path`` is not a model file we can read ('no such file', 'is a directory', 'is a
    character device, ...'), or None for a regular file (symlinks followed)."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return "no such file"
    except OSError as e:
        return f"cannot be read ({e.strerror or e})"
    if stat.S_ISREG(mode):
        return None
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a named pipe (FIFO)"),
        (stat.S_ISSOCK, "a socket"),
    )
    kind = next((name for test, name in kinds if test(mode)), "not a regular file")
    return f"is {kind}, not a GGUF file"


# llama.cpp's limits (gguf.cpp, llama-hparams.h): a header beyond them is damaged, and
# reading it as asked (a 2^60-element array, 2^60 layers) would exhaust memory
GGML_MAX_DIMS = 4
LLAMA_MAX_LAYERS = 512
# Tuning choice: the largest string array we read (Gemma 3 has 262k tokens, merges are of the
# same order); 2^24 empty strings are ~0.7 GB of Python objects, the worst a crafted file gets
MAX_ARRAY_STRINGS = 2**24


def _parse(buf, path: Path, sizes: dict[str, int] | None = None) -> tuple[dict[str, Any], int, int]:
    """(metadata, parameter count, data end); ``sizes`` gets each tensor's name -> bytes."""
    if buf[:4] != b"GGUF":
        raise GgufError(f"{path}: not a GGUF file (it does not start with 'GGUF')")
    version, n_tensors, n_kv = struct.unpack_from("<IQQ", buf, 4)
    if version not in (2, 3):
        raise GgufError(f"{path}: unsupported GGUF version {version} (or a big-endian file)")
    # each entry takes at least 13 bytes (key length, type, a 1-byte value) and each tensor
    # 24; counts the file cannot hold would only run the loops below to the end of it
    if n_kv * 13 + n_tensors * 24 > len(buf):
        raise ValueError(
            f"its header lists {n_kv:,} metadata entries and {n_tensors:,} tensors, "
            f"more than {len(buf):,} bytes can hold"
        )
    reader = _Cursor(buf, 24)
    meta = {}
    for _ in range(n_kv):
        key = reader.string().decode("utf-8", "replace")
        meta[key] = reader.value(reader.unpack("<I"), key)
    n_params = end = 0
    for i in range(n_tensors):
        name = reader.string()
        n_dims = reader.unpack("<I")
        if n_dims > GGML_MAX_DIMS:
            raise GgufError(
                f"{path}: tensor {i} has {n_dims} dimensions; GGUF allows at most {GGML_MAX_DIMS}: the file is damaged"
            )
        dims = struct.unpack_from(f"<{n_dims}Q", buf, reader.pos)
        reader.pos += 8 * n_dims
        ggml_type, offset = reader.unpack("<I"), reader.unpack("<Q")
        n_params += math.prod(dims)
        end = max(end, offset + _tensor_bytes(ggml_type, dims))
        if sizes is not None:
            sizes[name.decode("utf-8", "replace")] = _tensor_bytes(ggml_type, dims)
    align = meta.get("general.alignment", gguf.GGUF_DEFAULT_ALIGNMENT)
    if not _is_int(align) or align <= 0 or align & (align - 1):
        raise GgufError(f"{path}: general.alignment is {align!r}, not a power of two: the file is damaged")
    return meta, n_params, -(-reader.pos // align) * align + end


def _tensor_bytes(ggml_type: int, dims) -> int:
    """Bytes of one tensor; 0 for a type newer than this gguf knows (its offset still counts)."""
    try:
        block, type_size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(ggml_type)]
    except (ValueError, KeyError):
        return 0
    n = 1
    for d in dims:
        n *= int(d)
    return n // block * type_size


class _Damaged(ValueError):
    """A header value no GGUF writer produces (as opposed to one cut short)."""


class _Cursor:
    def __init__(self, buf, pos: int) -> None:
        self.buf, self.pos = buf, pos

    def unpack(self, fmt: str):
        (v,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += struct.calcsize(fmt)
        return v

    def string(self) -> bytes:
        n = self.unpack("<Q")
        if self.pos + n > len(self.buf):
            raise ValueError(f"a string at byte {self.pos} runs past the end of the file")
        s = self.buf[self.pos : self.pos + n]
        self.pos += n
        return s

    def value(self, vtype: int, key: str):
        if vtype == T.STRING:
            return self.string()
        if vtype in _SCALARS:
            return self.unpack(_SCALARS[vtype])
        if vtype != T.ARRAY:
            raise _Damaged(f"{key!r} has an unknown value type {vtype}")
        etype, n = self.unpack("<I"), self.unpack("<Q")
        if etype in _NUMPY:
            arr = np.frombuffer(self.buf, dtype=_NUMPY[etype], count=n, offset=self.pos)
            self.pos += arr.nbytes
            return arr.copy()
        if etype != T.STRING:  # llama.cpp reads no arrays of arrays either
            raise _Damaged(f"{key!r} is an array of {'arrays' if etype == T.ARRAY else f'type {etype}'}")
        if n > min(MAX_ARRAY_STRINGS, (len(self.buf) - self.pos) // 8):
            raise ValueError(f"{key!r} lists {n:,} strings, more than the file holds")
        return [self.string() for _ in range(n)]


# The keys this module and preflight interpret, and what llama.cpp accepts in them ("{arch}"
# is the file's architecture). A value of another type would make the readers here fail with
# a TypeError instead of a message; llama.cpp refuses such files at load ("wrong type").
_UINT, _UINTS, _TEXT, _TEXTS, _FLAG = "a whole number ≥ 0", "whole numbers", "text", "a list of texts", "true/false"
_UINT_LIST = "a list of whole numbers"
_SCHEMA = {
    "general.architecture": _TEXT,
    "general.name": _TEXT,
    "general.size_label": _TEXT,
    "general.file_type": _UINT,
    "split.count": _UINT,
    "{arch}.context_length": _UINT,
    "{arch}.block_count": _UINT,
    "{arch}.embedding_length": _UINT,
    "{arch}.attention.head_count": _UINTS,
    "{arch}.attention.head_count_kv": _UINTS,
    "{arch}.attention.key_length": _UINT,
    "{arch}.attention.value_length": _UINT,
    "{arch}.attention.key_length_swa": _UINT,
    "{arch}.attention.value_length_swa": _UINT,
    "{arch}.attention.shared_kv_layers": _UINT,
    "{arch}.embedding_length_out": _UINT,
    "tokenizer.ggml.model": _TEXT,
    "tokenizer.ggml.pre": _TEXT,
    "tokenizer.ggml.tokens": _TEXTS,
    "tokenizer.ggml.token_type": _UINT_LIST,
    "tokenizer.ggml.bos_token_id": _UINT,
    "tokenizer.ggml.eos_token_id": _UINT,
    "tokenizer.ggml.add_bos_token": _FLAG,
    "tokenizer.ggml.add_eos_token": _FLAG,
}


def check_metadata(meta: dict[str, Any], path: Path) -> None:
    """GgufError naming the first key whose value is not of the kind llama.cpp reads there,
    or outside llama.cpp's limits (more than 512 layers)."""
    arch = meta.get("general.architecture", b"")
    arch = arch.decode("utf-8", "replace") if isinstance(arch, bytes) else ""
    for pattern, kind in _SCHEMA.items():
        key = pattern.replace("{arch}", arch)
        if key in meta and not _is_kind(meta[key], kind):
            raise GgufError(
                f"{path}: metadata {key} should be {kind}, not {_describe(meta[key])}: "
                "the file is damaged or was written by a broken converter"
            )
    n_layer = meta.get(f"{arch}.block_count", 0)
    if n_layer > LLAMA_MAX_LAYERS:  # read_model_layout makes a list of this length
        raise GgufError(
            f"{path}: metadata {arch}.block_count gives {n_layer:,} layers; llama.cpp "
            f"supports at most {LLAMA_MAX_LAYERS}: the file is damaged"
        )


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_kind(v, kind: str) -> bool:
    if kind == _UINT:
        return _is_int(v) and v >= 0
    if kind in (_UINTS, _UINT_LIST):
        if not isinstance(v, np.ndarray):  # _UINTS: one per layer, or one for all
            return kind == _UINTS and _is_int(v) and v >= 0
        if v.size == 0:  # nothing to take the largest of
            return kind == _UINT_LIST
        return v.dtype.kind in "iu" and int(v.min()) >= 0
    if kind == _TEXT:
        return isinstance(v, bytes)
    if kind == _TEXTS:
        return isinstance(v, list) and all(isinstance(t, bytes) for t in v)
    return isinstance(v, (bool, int))  # _FLAG: llama.cpp reads a bool; 0/1 from old writers


def _describe(v) -> str:
    if isinstance(v, np.ndarray):
        return f"an array of {v.size} {v.dtype}"
    if isinstance(v, list):
        return f"a list of {len(v)} values"
    return f"{type(v).__name__} {v!r}"[:80]


def read_info(path: Path | str) -> GgufInfo:
    path = Path(path)
    meta, n_params = read_metadata(path)
    arch = _text(meta.get("general.architecture", b"?"))
    ftype: Any = meta.get("general.file_type")
    try:
        quant = gguf.LlamaFileType(int(ftype)).name.removeprefix("MOSTLY_").removeprefix("ALL_")
    except (TypeError, ValueError):  # absent (None) or a type this gguf package does not know
        quant = "?" if ftype is None else f"file type {ftype}"
    ctx = meta.get(f"{arch}.context_length")
    return GgufInfo(
        path=path,
        arch=arch,
        name=_text(meta.get("general.name", path.stem.encode())),
        params=_text(meta["general.size_label"]) if "general.size_label" in meta else _size_label(n_params),
        n_params=n_params,
        quant=quant,
        context_length=int(ctx) if ctx is not None else None,
        n_vocab=len(meta.get("tokenizer.ggml.tokens", ())),
        size_bytes=path.stat().st_size,
        kv_bytes_per_token=kv_bytes_per_token(meta, arch),
        nextn_layers=nextn_layers_of(meta, arch),
        state_bytes=recurrent_state_bytes(meta, arch),
        n_embd=hidden_width(meta, arch),
    )


def nextn_layers(path: Path | str) -> int:
    """How many next-token-prediction (MTP) layers the file carries: those its metadata
    declares (``<arch>.nextn_predict_layers``) when their tensors are there too (``mtp_layers``);
    0 for a model without them, or a file that cannot be read (its load says why)."""
    try:
        layers = mtp_layers(path)
    except (GgufError, OSError):
        return 0
    return layers.declared if layers.usable else 0


def mtp_layers(path: Path | str) -> MtpLayers:
    """What ``path`` says about its MTP layers and whether their tensors are in it (every part
    of a split model is read), or GgufError for a file that cannot be read. A header read: no
    tensor data. Automatic MTP is for a file whose layers are ``usable``."""
    path = Path(path)
    meta, sizes = _tensor_sizes(path)
    arch = _text(meta.get("general.architecture", b""))
    n_layer = meta.get(f"{arch}.block_count", 0)
    n_layer = int(n_layer) if _is_int(n_layer) else 0
    return MtpLayers.check(path, arch, nextn_layers_of(meta, arch), n_layer, sizes)


def state_bytes(path: Path | str) -> int:
    """``recurrent_state_bytes`` of a file (0 for one that cannot be read: its load says why)."""
    try:
        meta, _ = read_metadata(path)
    except (GgufError, OSError):
        return 0
    return recurrent_state_bytes(meta, _text(meta.get("general.architecture", b"")))


def _size_label(n: int) -> str:
    if n >= 1e9:
        return f"{n / 1e9:.1f}B"
    return f"{n / 1e6:.0f}M" if n >= 1e6 else f"{n / 1e3:.0f}K"


def _text(v) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def vocab_info(path: Path | str) -> VocabInfo:
    """The vocabulary as llama.cpp builds it from this file (same defaults and overrides)."""
    meta, _ = read_metadata(path)
    model = _text(meta.get("tokenizer.ggml.model", b"no_vocab"))
    if model not in _VOCAB_DEFAULTS:
        raise GgufError(f"{path}: unknown tokenizer model {model!r}")
    vocab_type, bos, eos, add_bos, add_eos = _VOCAB_DEFAULTS[model]
    if model == "gpt2" and _text(meta.get("tokenizer.ggml.pre", b"")) in _BPE_ADD_BOS:
        add_bos = True
    tokens = [bytes(t) for t in meta.get("tokenizer.ggml.tokens", [])]
    types = meta.get("tokenizer.ggml.token_type")
    special = {i for i, t in enumerate(types if types is not None else ()) if t in _SPECIAL_TYPES}
    special |= {i for i, t in enumerate(tokens) if t in _CONTROL_LOOKING}
    return VocabInfo(
        vocab_type=vocab_type,
        n_vocab=len(tokens),
        bos=int(meta.get("tokenizer.ggml.bos_token_id", bos)),
        eos=int(meta.get("tokenizer.ggml.eos_token_id", eos)),
        add_bos=bool(meta.get("tokenizer.ggml.add_bos_token", add_bos)),
        add_eos=bool(meta.get("tokenizer.ggml.add_eos_token", add_eos)),
        tokens=tokens,
        special=frozenset(special),
    )

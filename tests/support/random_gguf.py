"""Random-weight GGUF models of the real Qwen2.5 shapes, written in seconds, for GPU benchmarks.

Why: a benchmark machine may have no network, and a model's speed depends on its shapes and
types, not on what its weights say. Files made here have Qwen2.5-0.5B/1.5B/7B's architecture,
layer sizes, tied or untied output and q/k/v biases, and all share one synthetic 151936-token
SPM vocabulary, so any two of them make a compatible target/draft pair. (They agree on nothing:
a draft model's acceptance rate on them says nothing; its cost per token does. Greedy output
repeats one token (see BLOCK_GAIN), so prompt lookup would be accepted far too often.)

Fast and small: every weight matrix is a *view* into one buffer of random float16 sized for the
largest matrix plus some slack, taken at a different offset per tensor. GGUFWriter writes each
view straight to the file, so nothing is copied and the 15 GB 7B F16 file needs a 1.1 GB buffer.
Q4_K_M and Q8_0 files are quantized from the F16 file by llama.cpp itself.

Shape convention: numpy shapes are (rows, cols), the reverse of ggml's ``ne``; llama.cpp's
``{n_embd, n_vocab}`` token_embd is a (n_vocab, n_embd) array here.
"""

from __future__ import annotations

import argparse
import itertools
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

from localspec.llama.ggufinfo import GgufError, read_layout
from tests.support.hybrid_gguf import HybridShape, add_qwen35_metadata, tensor_specs
from tests.support.tiny_gguf import CHATML, add_spm_vocab

N_VOCAB = 151936  # Qwen2.5-0.5B/1.5B's embedding rows (the 7B pads to 152064; one vocab for all here)
FTYPES = {
    "F16": gguf.LlamaFileType.MOSTLY_F16,
    "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
    "Q4_K_M": gguf.LlamaFileType.MOSTLY_Q4_K_M,
}
# Random float16 from random bits: keep the sign, the mantissa and the lowest exponent bit and
# set the exponent's upper bits to 8, so the exponent is 8 or 9, |w| is in [2^-7, 2^-5) and
# std(w) = 0.0189, close to a trained matrix's ~0.02. Several times faster than normals (20 ns
# each on the 2-core dev box, 2-6 ns this way), and only the values' spread matters here.
_KEEP_BITS = 0x87FF
_EXPONENT_8 = 8 << 10
WEIGHT_STD = 0.0189
# Logits are output rows . (gain x RMS-normed state), std = WEIGHT_STD x sqrt(n_embd) x gain.
# output_norm's gain is set so that std is LOGIT_STD whatever the width: the top-1/top-2 gap
# of ~150k independent such logits would average ~LOGIT_STD / 4.9; with BLOCK_GAIN the state
# is close to the token's own embedding, and the gap is several times that.
LOGIT_STD = 8.0
# Each block's input norms (attn_norm, ffn_norm) have this gain instead of 1. At gain 1 the
# residual stream is the sum of 28 random blocks' outputs, each tens of times the token's own
# embedding, and such a random network is chaotic: the rounding differences between llama.cpp's
# one-token and batched kernels grow, layer by layer, to logit differences of the order of the
# top-1/top-2 gap, so a verify's argmax differs from the target alone's and an oracle's replay
# parts from the text it replays. At this gain each block adds a little to the embedding, the
# differences stay far below the gap, and greedy output repeats one token: good for timing
# (cost depends only on shapes and types), useless as text.
BLOCK_GAIN = 0.3
SLACK = (1 << 20) + 4099  # buffer elements beyond the largest matrix: room for distinct offsets
_OFFSET_STRIDE = 2654435761  # Knuth's golden-ratio multiplier spreads tensor offsets over the buffer


@dataclass(frozen=True)
class Shape:
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int
    tied: bool  # no output.weight: llama.cpp reuses token_embd as the output matrix
    size_label: str
    n_vocab: int = N_VOCAB
    hybrid: HybridShape | None = None  # a qwen35 model (gated delta-net + attention), else qwen2
    mtp: bool = False  # ... with one next-token-prediction layer

    @property
    def arch(self) -> str:
        return "qwen35" if self.hybrid else "qwen2"

    @property
    def n_embd_kv(self) -> int:
        return self.n_head_kv * (self.n_embd // self.n_head)


SHAPES = {
    "tiny": Shape(64, 2, 4, 2, 128, tied=True, size_label="tiny", n_vocab=512),
    "0.5b": Shape(896, 24, 14, 2, 4864, tied=True, size_label="0.5B"),
    "1.5b": Shape(1536, 28, 12, 2, 8960, tied=True, size_label="1.5B"),
    "7b": Shape(3584, 28, 28, 4, 18944, tied=False, size_label="7B"),
}
# Qwen3.5 shapes with their MTP layer, vocabulary 248,320, tied embeddings, one full-attention
# layer in four (head size 256, a quarter of it rotated, IMROPE sections 11/11/10). The 2B's
# width (2048) and the 0.8B's delta-net heads (16 key and 16 value heads of 128) are published
# (the 0.8B's config.json); its 24 layers, 8/2 attention heads and FFN of 6144 follow the 0.8B's
# ratios. The 9B (4096 wide, 32 layers, 32 value heads) is the GPU check's 7B-class model.
QWEN35_VOCAB = 248320
_Q35 = dict(head_dim=256, d_conv=4, d_state=128, full_every=4, n_rot=64, sections=(11, 11, 10, 0))
SHAPES |= {
    "qwen3.5-tiny": Shape(64, 4, 4, 2, 128, tied=True, size_label="tiny", n_vocab=512, mtp=True, hybrid=HybridShape()),
    "qwen3.5-2b": Shape(
        2048, 24, 8, 2, 6144, tied=True, size_label="2B", n_vocab=QWEN35_VOCAB, mtp=True,
        hybrid=HybridShape(n_embd=2048, n_layer=24, n_head=8, n_head_kv=2, n_ff=6144, n_group=16, dt_rank=16, **_Q35),
    ),
    "qwen3.5-9b": Shape(
        4096, 32, 16, 4, 12288, tied=False, size_label="9B", n_vocab=QWEN35_VOCAB, mtp=True,
        hybrid=HybridShape(n_embd=4096, n_layer=32, n_head=16, n_head_kv=4, n_ff=12288, n_group=16, dt_rank=32, **_Q35),
    ),
}  # fmt: skip


@dataclass(frozen=True)
class Made:
    """One file of a ``make_models`` run."""

    path: Path
    size_bytes: int
    seconds: float
    kept: bool  # it was already there, complete, and was not rewritten


def file_name(shape: str, ftype: str) -> str:
    return f"random-{shape}-{ftype.lower()}.gguf"


def model_name(shape: str, seed: int) -> str:
    """general.name: it carries the seed (and a qwen2 shape's BLOCK_GAIN), so a rerun with
    another rewrites the file."""
    gain = "" if SHAPES[shape].hybrid else f"-gain{BLOCK_GAIN:g}"
    return f"random-{shape}-seed{seed}{gain}"


# --- writing one F16 file -------------------------------------------------------------------
def random_f16(n: int, seed: int) -> np.ndarray:
    """n random float16 of std WEIGHT_STD, symmetric, none zero (see _KEEP_BITS)."""
    bits = np.random.default_rng(seed).integers(0, 1 << 16, size=n, dtype=np.uint16)
    bits &= _KEEP_BITS
    bits |= _EXPONENT_8
    return bits.view(np.float16)


def buffer_len(shape: Shape) -> int:
    largest = max(shape.n_vocab * shape.n_embd, shape.n_ff * shape.n_embd)
    return largest + SLACK


def hybrid_tensors(shape: Shape, buf: np.ndarray) -> Iterator[tuple[str, np.ndarray]]:
    """A qwen35 model's tensors (``hybrid_gguf.tensor_specs`` names and shapes them): matrices
    are views of ``buf``, F16; norms ones and the delta-net's vectors small F32 arrays."""
    assert shape.hybrid is not None
    slot = itertools.count()
    for name, np_shape, scale in tensor_specs(shape.hybrid, shape.n_vocab, shape.mtp, tied=shape.tied):
        n = int(np.prod(np_shape))
        if scale is None:
            data = np.ones(np_shape, dtype=np.float32)
        elif len(np_shape) == 1 or "ssm_conv1d" in name:  # llama.cpp's ssm ops read these as F32
            data = _view(buf, next(slot), n).astype(np.float32).reshape(np_shape) * (-1 if scale < 0 else 1)
        else:
            data = _view(buf, next(slot), n).reshape(np_shape)
        yield name, data
    # (output_norm is a norm like the rest: ones; LOGIT_STD is for qwen2's shapes, which the
    # bench's oracle reads; a cost measurement needs only the shapes)


def tensors(shape: Shape, buf: np.ndarray) -> Iterator[tuple[str, np.ndarray]]:
    """Name and data of every tensor llama.cpp's qwen2 loader wants (llama-model.cpp);
    matrices are views of ``buf``, F16; norms and biases are small F32 arrays."""
    d, d_kv, ff, n_vocab = shape.n_embd, shape.n_embd_kv, shape.n_ff, shape.n_vocab
    slot = itertools.count()
    matrix = lambda rows, cols: _view(buf, next(slot), rows * cols).reshape(rows, cols)
    bias = lambda n: _view(buf, next(slot), n).astype(np.float32)
    gain = lambda n: np.full(n, BLOCK_GAIN, dtype=np.float32)
    yield "token_embd.weight", matrix(n_vocab, d)
    yield "output_norm.weight", np.full(d, LOGIT_STD / (WEIGHT_STD * np.sqrt(d)), dtype=np.float32)
    if not shape.tied:
        yield "output.weight", matrix(n_vocab, d)
    for i in range(shape.n_layer):
        yield f"blk.{i}.attn_norm.weight", gain(d)
        for name, rows in (("attn_q", d), ("attn_k", d_kv), ("attn_v", d_kv)):
            yield f"blk.{i}.{name}.weight", matrix(rows, d)
            yield f"blk.{i}.{name}.bias", bias(rows)
        yield f"blk.{i}.attn_output.weight", matrix(d, d)
        yield f"blk.{i}.ffn_norm.weight", gain(d)
        yield f"blk.{i}.ffn_gate.weight", matrix(ff, d)
        yield f"blk.{i}.ffn_up.weight", matrix(ff, d)
        yield f"blk.{i}.ffn_down.weight", matrix(d, ff)


def _view(buf: np.ndarray, slot: int, n: int) -> np.ndarray:
    """n contiguous elements of buf at an offset that differs per slot (token_embd: 0)."""
    start = slot * _OFFSET_STRIDE % (len(buf) - n + 1)
    return buf[start : start + n]


def vocab(n_vocab: int) -> tuple[list[str], list[float], list[int]]:
    """SPM pieces like the tests' tiny models: <unk>, <s>, </s>, 256 byte tokens, then fillers."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    n_words = n_vocab - len(tokens)
    tokens += [f"▁w{i}" for i in range(n_words)]
    types = [2, 3, 3] + [6] * 256 + [1] * n_words  # unknown, control, control, byte, normal
    scores = [0.0, 0.0, 0.0] + [-1000.0] * 256 + [-float(i) for i in range(n_words)]
    return tokens, scores, types


def _add_metadata(w: gguf.GGUFWriter, shape_name: str, shape: Shape, seed: int) -> None:
    w.add_name(model_name(shape_name, seed))
    w.add_size_label(shape.size_label)
    w.add_file_type(FTYPES["F16"])
    if shape.hybrid:
        add_qwen35_metadata(w, shape.hybrid, shape.mtp, 32768)
    else:
        w.add_context_length(32768)
        w.add_embedding_length(shape.n_embd)
        w.add_block_count(shape.n_layer)
        w.add_feed_forward_length(shape.n_ff)
        w.add_head_count(shape.n_head)
        w.add_head_count_kv(shape.n_head_kv)
        w.add_rope_freq_base(1e6)
        w.add_layer_norm_rms_eps(1e-6)
    tokens, scores, types = vocab(shape.n_vocab)
    add_spm_vocab(w, tokens, scores, types)
    w.add_chat_template(CHATML)


def write_f16(path: Path, shape_name: str, seed: int, shape: Shape | None = None) -> Path:
    """Write the F16 file under a temporary name and rename it when complete, so a killed
    run never leaves a file that looks finished. ``shape`` overrides the table (tests)."""
    shape = shape or SHAPES[shape_name]
    buf = random_f16(buffer_len(shape), seed)
    part = path.with_name(path.name + ".part")
    w = gguf.GGUFWriter(str(part), shape.arch)
    try:
        _add_metadata(w, shape_name, shape, seed)
        for name, data in (hybrid_tensors if shape.hybrid else tensors)(shape, buf):
            w.add_tensor(name, data)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        os.replace(part, path)
    finally:
        w.close()
        part.unlink(missing_ok=True)
    return path


# --- quantized files, reruns ----------------------------------------------------------------
def is_complete(path: Path, shape: str, ftype: str, seed: int) -> bool:
    """The file is there, as long as its header says, and is this shape, seed and type."""
    try:
        meta, data_end = read_layout(path)
    except GgufError:
        return False
    return (
        path.stat().st_size >= data_end
        and meta.get("general.name") == model_name(shape, seed).encode()
        and meta.get("general.file_type") == FTYPES[ftype]
    )


def write_random_gguf(
    path: Path | str, shape: str, ftype: str = "F16", seed: int = 0, threads: int | None = None
) -> Path:
    """Write one model. A quantized one is made from the F16 file of that shape and seed
    next to it when there is one; otherwise from a temporary F16 file, deleted afterwards."""
    path, ftype = Path(path), ftype.upper()
    if shape not in SHAPES or ftype not in FTYPES:
        raise ValueError(f"unknown shape {shape!r} or type {ftype!r}: shapes {list(SHAPES)}, types {list(FTYPES)}")
    if ftype == "F16":
        return write_f16(path, shape, seed)
    f16 = path.with_name(file_name(shape, "F16"))
    reuse = is_complete(f16, shape, "F16", seed)
    src = f16 if reuse else path.with_name(path.name + ".f16.tmp")
    try:
        if not reuse:
            write_f16(src, shape, seed)
        _quantize(src, path, ftype, threads)
    finally:
        if not reuse:
            src.unlink(missing_ok=True)
    return path


def _quantize(src: Path, dst: Path, ftype: str, threads: int | None) -> None:
    from localspec.llama.backend import quantize  # loads llama.cpp only when a quantized file is asked for

    part = dst.with_name(dst.name + ".part")
    try:
        quantize(src, part, ftype, threads)
        os.replace(part, dst)
    finally:
        part.unlink(missing_ok=True)


def make_models(
    out_dir: Path | str, specs: Iterable[tuple[str, str]], threads: int | None = None, seed: int = 0
) -> Iterator[Made]:
    """Make each (shape, ftype) file in out_dir, yielding one ``Made`` per file as it is done.
    Each shape's F16 file is written once and every quantized file made from it; it is kept
    only if it was asked for or was already there. Complete files are kept, not rewritten."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    by_shape: dict[str, list[str]] = {}
    for shape, ftype in specs:
        by_shape.setdefault(shape, []).append(ftype.upper())
    for shape, ftypes in by_shape.items():
        yield from _make_shape(out_dir, shape, list(dict.fromkeys(ftypes)), threads, seed)


def _make_shape(out_dir: Path, shape: str, ftypes: list[str], threads: int | None, seed: int) -> Iterator[Made]:
    f16 = out_dir / file_name(shape, "F16")
    keep_f16 = "F16" in ftypes or is_complete(f16, shape, "F16", seed)
    try:
        # F16 first: the quantized files are made from it
        for ftype in sorted(ftypes, key=lambda f: f != "F16"):
            path = out_dir / file_name(shape, ftype)
            start = time.perf_counter()
            kept = is_complete(path, shape, ftype, seed)
            if not kept:
                if ftype != "F16" and not is_complete(f16, shape, "F16", seed):
                    write_f16(f16, shape, seed)
                write_random_gguf(path, shape, ftype, seed, threads)
            yield Made(path, path.stat().st_size, time.perf_counter() - start, kept)
    finally:
        if not keep_f16:
            f16.unlink(missing_ok=True)


# --- command line ---------------------------------------------------------------------------
DEFAULT_MODELS = "0.5b:q4_k_m,1.5b:f16,1.5b:q4_k_m,7b:f16,7b:q4_k_m"


def parse_specs(text: str) -> list[tuple[str, str]]:
    specs = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        shape, _, ftype = item.partition(":")
        ftype = (ftype or "F16").upper()
        if shape not in SHAPES or ftype not in FTYPES:
            raise argparse.ArgumentTypeError(
                f"{item!r}: want SHAPE:TYPE with SHAPE in {list(SHAPES)}, TYPE in {[f.lower() for f in FTYPES]}"
            )
        specs.append((shape, ftype))
    return specs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.support.random_gguf", description=__doc__.split("\n")[0])
    p.add_argument("out_dir", type=Path)
    p.add_argument(
        "--models",
        type=parse_specs,
        default=parse_specs(DEFAULT_MODELS),
        help=f"comma-separated SHAPE:TYPE (default {DEFAULT_MODELS})",
    )
    p.add_argument("--threads", type=int, default=None, help="quantizer threads (default: all)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    for made in make_models(args.out_dir, args.models, args.threads, args.seed):
        note = "  (already there)" if made.kept else ""
        print(f"{made.path}  {made.size_bytes / 1e9:.2f} GB  {made.seconds:.1f} s{note}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

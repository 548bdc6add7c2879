"""Write tiny llama-architecture GGUF models (random F32 weights) for tests of the real backend.

SPM tokenizer: <unk>, <s>, </s>, the 256 byte tokens <0x00>..<0xFF>, then a few dozen word
pieces, so any UTF-8 text tokenizes (falling back to bytes). 2 layers, 64 dims, ~0.5 MB.
Two files with different seeds make a compatible target/draft pair; ``noise`` makes a draft
that is the target plus noise, so it agrees with the target often but not always.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

# the one ChatML template the fixtures write (random_gguf's models too)
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

PIECES = [
    "▁the",
    "▁a",
    "▁of",
    "▁and",
    "▁to",
    "▁in",
    "▁is",
    "▁def",
    "▁return",
    "▁print",
    "▁for",
    "▁if",
    "▁else",
    "▁x",
    "▁y",
    "(",
    ")",
    ":",
    "▁=",
    "▁+",
    "▁1",
    "▁2",
    "▁0",
    "▁hello",
    "▁world",
    "▁code",
    "▁fast",
    "▁slow",
    "▁model",
    "▁token",
    "▁draft",
    "▁target",
    "▁안녕",
    "▁세계",
    "▁😀",
    "ing",
    "ed",
    "er",
    "s",
    ".",
    ",",
    "▁",
]


def vocab(extra_pieces: int = 0, rename: dict[int, str] | None = None, control: Sequence[str] = ()):
    """``control``: control tokens appended after the pieces (e.g. ChatML's markup), which
    llama.cpp makes from their text only when it parses special tokens."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + PIECES
    tokens += [f"▁w{i}" for i in range(extra_pieces)]
    for i, text in (rename or {}).items():
        tokens[i] = text
    n_normal = len(tokens) - 259
    tokens += list(control)
    types = [2, 3, 3] + [6] * 256 + [1] * n_normal + [3] * len(control)  # unknown, control, byte, normal
    scores = [0.0, 0.0, 0.0] + [-1000.0] * 256 + [-float(i) for i in range(n_normal)] + [0.0] * len(control)
    return tokens, scores, types


def add_spm_vocab(w, tokens, scores, types, eos: int = 2) -> None:
    """The SPM tokenizer keys every fixture writes: <unk> 0, <s> 1 (added), </s> 2 (``eos``)."""
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(eos)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)


def write_tiny_gguf(
    path: Path | str,
    seed: int = 0,
    *,
    n_embd: int = 64,
    n_layer: int = 2,
    n_head: int = 4,
    n_ff: int = 128,
    n_ctx: int = 512,
    extra_pieces: int = 0,
    rename: dict[int, str] | None = None,
    eos: int = 2,
    noise_of: int | None = None,
    noise: float = 0.0,
    arch: str = "llama",
    chat_template: str | None = CHATML,
    control: Sequence[str] = (),
) -> Path:
    """Write the model; with ``noise_of=S`` the weights are seed S's plus ``noise`` x N(0,1)."""
    import gguf

    path = Path(path)
    tokens, scores, types = vocab(extra_pieces, rename, control)
    n_vocab = len(tokens)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(f"tiny-{seed}")
    w.add_context_length(n_ctx)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head)
    w.add_rope_dimension_count(n_embd // n_head)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(0)  # ALL_F32
    add_spm_vocab(w, tokens, scores, types, eos=eos)
    if chat_template:
        w.add_chat_template(chat_template)
    for name, shape, scale in _tensor_shapes(n_vocab, n_embd, n_layer, n_ff):
        data = _weights(seed, name, shape, scale)
        if noise_of is not None and scale is not None:
            data = _weights(noise_of, name, shape, scale) + noise * scale * _weights(seed + 10_000, name, shape, 1.0)
        w.add_tensor(name, data.astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _tensor_shapes(n_vocab, n_embd, n_layer, n_ff):
    # numpy shapes are (rows, cols) = reversed ggml ne; scales keep activations O(1) and
    # give logits a spread of a few units, so argmax ties are practically impossible
    yield "token_embd.weight", (n_vocab, n_embd), 1.0
    yield "output_norm.weight", (n_embd,), None
    yield "output.weight", (n_vocab, n_embd), 3.0 / np.sqrt(n_embd)
    for i in range(n_layer):
        yield f"blk.{i}.attn_norm.weight", (n_embd,), None
        for t in ("attn_q", "attn_k", "attn_v", "attn_output"):
            yield f"blk.{i}.{t}.weight", (n_embd, n_embd), 1.0 / np.sqrt(n_embd)
        yield f"blk.{i}.ffn_norm.weight", (n_embd,), None
        yield f"blk.{i}.ffn_gate.weight", (n_ff, n_embd), 1.0 / np.sqrt(n_embd)
        yield f"blk.{i}.ffn_up.weight", (n_ff, n_embd), 1.0 / np.sqrt(n_embd)
        yield f"blk.{i}.ffn_down.weight", (n_embd, n_ff), 1.0 / np.sqrt(n_ff)


def _weights(seed: int, name: str, shape, scale) -> np.ndarray:
    if scale is None:  # norms: ones
        return np.ones(shape, dtype=np.float32)
    rng = np.random.default_rng([seed, sum(map(ord, name)), len(name)])
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def write_no_vocab_gguf(path: Path | str) -> Path:
    """A model whose tokenizer is 'no_vocab': llama.cpp loads it, then aborts on a tokenize."""
    import gguf

    path = Path(path)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(64)
    w.add_embedding_length(8)
    w.add_block_count(1)
    w.add_feed_forward_length(8)
    w.add_head_count(1)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("no_vocab")
    w.add_vocab_size(16)
    for name, shape in (
        ("token_embd.weight", (16, 8)),
        ("output_norm.weight", (8,)),
        ("output.weight", (16, 8)),
        ("blk.0.attn_norm.weight", (8,)),
        ("blk.0.ffn_norm.weight", (8,)),
    ):
        w.add_tensor(name, np.ones(shape, dtype=np.float32))
    for t in ("attn_q", "attn_k", "attn_v", "attn_output"):
        w.add_tensor(f"blk.0.{t}.weight", np.ones((8, 8), dtype=np.float32))
    for t, shape in (("ffn_gate", (8, 8)), ("ffn_up", (8, 8)), ("ffn_down", (8, 8))):
        w.add_tensor(f"blk.0.{t}.weight", np.ones(shape, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path

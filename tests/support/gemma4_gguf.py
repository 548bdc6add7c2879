"""Write a tiny ``gemma4`` target and a tiny ``gemma4-assistant`` drafter for it (F32 weights,
random but for ``cycle``'s).

Gemma 4 interleaves sliding-window (SWA) attention layers with global ones; the E-sizes' last
layers keep no KV cache of their own but reuse an earlier layer's ("shared KV layers"). Its
assistant is a separate, smaller model that drafts for one target size only: it reads the
target's final hidden state beside the token, attends over the *target's* KV cache (its
layers compute queries only: a SWA layer reads the target's last SWA layer, a global one its
last global layer), and hands its own state, projected back to the target's width, to its next
pass. Hence ``embedding_length_out``: the target's hidden size, which must differ from the
assistant's own ``embedding_length``.

Keys and shapes are llama.cpp's (``src/models/gemma4.cpp``, ``src/models/gemma4-assistant.cpp``,
``llama_model::create_memory``); numpy shapes are ggml's ``ne`` reversed, and every tensor written
is one the loader takes. The vocabulary is ``tiny_gguf``'s SPM one.

Random weights would make the assistant agree with the target by chance only, and one that
predicts from the token alone would agree as well from any hidden state; so both are built by
``cycle``: the target recites a cycle of pieces, its next token a function of its hidden state,
and the assistant's input projection reads the code of the next token from that state (and the
token's embedding weakly, at random), so it drafts what the target says only from the right
state. ``residual`` (what the layers add to the residual stream) makes the target leave its
cycle now and then where it adds enough (past about 4), and the assistant's drafts are rejected
there.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tests.support.cycle import DIM, cycle
from tests.support.hybrid_gguf import _weights
from tests.support.tiny_gguf import CHATML, add_spm_vocab, vocab


@dataclass(frozen=True)
class Gemma4Shape:
    n_embd: int = 64
    n_layer: int = 4
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 32  # global layers
    head_dim_swa: int = 16  # sliding-window layers (Gemma 4's are half the global ones too)
    n_ff: int = 128
    n_swa: int = 16  # the sliding window, in tokens: short enough that the tests' replies pass it
    # per layer: True for a sliding-window layer. The assistant's layers read the target's last
    # SWA and last global layer (n_layer - 2 and n_layer - 1), so a target ends with (SWA, global)
    swa: tuple[bool, ...] = (True, False, True, False)
    shared_kv: int = 2  # the last layers, which reuse the KV of the last earlier layer of their kind

    def head(self, il: int) -> int:
        return self.head_dim_swa if self.swa[il] else self.head_dim


@dataclass(frozen=True)
class AssistantShape:
    n_embd: int = DIM  # it holds a piece's code (``cycle``): at least DIM
    n_head: int = 4
    n_ff: int = 64
    swa: tuple[bool, ...] = (True, False)


TINY = Gemma4Shape()
TINY_ASSISTANT = AssistantShape()


def write_tiny_gemma4(
    path: Path | str,
    seed: int = 0,
    *,
    shape: Gemma4Shape = TINY,
    n_ctx: int = 2048,
    residual: float = 1.0,
) -> Path:
    """The target. ``residual`` is the weight of every post-attention and post-FFN norm: how
    much each layer adds to the scaled embedding (RMS sqrt(n_embd)) it starts from."""
    s = shape
    w = _writer(path, "gemma4", f"tiny-gemma4-{seed}", n_ctx)
    _add_attention(w, s, s.swa, s.n_embd, s.n_head, s.n_ff)
    w.add_block_count(s.n_layer)
    w.add_shared_kv_layers(s.shared_kv)
    w.add_embedding_length_per_layer_input(0)  # no per-layer embeddings (the E-sizes have them)
    cyc = cycle(seed, s.n_embd)
    for name, np_shape, scale in _target_tensors(s):
        data = _weights(seed, name, np_shape, scale)
        if name == "token_embd.weight":
            data = cyc.embeddings(seed)
        elif name == "output.weight":
            data = cyc.head(0.2)  # a winning logit of about 7
        elif name == "output_norm.weight":
            data = cyc.signs
        elif name.endswith(_POST_NORMS):
            data *= residual
        w.add_tensor(name, data.astype(np.float32))
    return _finish(w, path)


def write_tiny_assistant(
    path: Path | str,
    target_seed: int = 0,
    *,
    target: Gemma4Shape = TINY,
    shape: AssistantShape = TINY_ASSISTANT,
    n_ctx: int = 2048,
    residual: float = 0.5,
    state: float = 1.0,
) -> Path:
    """The assistant of the target written with ``target_seed`` and shape ``target``.
    ``state``: the RMS of the code it reads from the hidden state, in units of the target's
    scaled embedding (RMS sqrt of its n_embd); what its layers add is ``residual`` each."""
    s, t = shape, target
    w = _writer(path, "gemma4-assistant", f"tiny-gemma4-assistant-{target_seed}", n_ctx)
    _add_attention(w, t, s.swa, s.n_embd, s.n_head, s.n_ff)
    w.add_block_count(len(s.swa))
    w.add_nextn_predict_layers(len(s.swa))  # every layer is a draft layer: no trunk
    w.add_embedding_length_out(t.n_embd)
    cyc = cycle(target_seed, t.n_embd)
    # a state of RMS 1 holding a code is read as the next one with RMS sqrt(t.n_embd / s.n_embd)
    # (its width in ``cycle``): these bring that to the scaled embedding's, and back
    gain = np.sqrt(s.n_embd / t.n_embd)
    for name, np_shape, scale in _assistant_tensors(s, t):
        data = _weights(target_seed + 1000, name, np_shape, scale)
        if name == "token_embd.weight":  # tied, the output F R: the successor of the code it holds
            data = np.zeros(np_shape)
            data[:, :DIM] = 0.2 / gain * cyc.codes @ cyc.rotation  # a winning logit of about 7, as the target's
        elif name == "nextn.pre_projection.weight":  # [embedding ; state] -> the next code
            data[:, : t.n_embd] *= 0.05  # the embedding, weakly: a draft from it alone is a guess
            data[:, t.n_embd :] = 0.0
            data[:DIM, t.n_embd :] = cyc.reader() * state * np.sqrt(t.n_embd) * gain
        elif name == "nextn.post_projection.weight":  # the code it holds -> the target's state for it
            data = np.zeros(np_shape)
            data[:, :DIM] = cyc.writer() / gain
        elif name.endswith(_POST_NORMS):
            data *= residual
        w.add_tensor(name, data.astype(np.float32))
    return _finish(w, path)


_POST_NORMS = ("post_attention_norm.weight", "post_ffw_norm.weight")


def _writer(path, arch: str, name: str, n_ctx: int):
    import gguf

    tokens, scores, types = vocab()
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(name)
    w.add_context_length(n_ctx)
    w.add_file_type(0)  # ALL_F32
    add_spm_vocab(w, tokens, scores, types)
    w.add_chat_template(CHATML)
    return w


def _add_attention(w, t: Gemma4Shape, swa: tuple[bool, ...], n_embd: int, n_head: int, n_ff: int) -> None:
    """Sizes, and the attention keys an assistant must share with its target: its layers read
    the target's cache, so KV heads, head sizes, window and rope are the target's."""
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(t.n_head_kv)
    w.add_key_length(t.head_dim)
    w.add_value_length(t.head_dim)
    w.add_key_length_swa(t.head_dim_swa)
    w.add_value_length_swa(t.head_dim_swa)
    w.add_rope_dimension_count(t.head_dim)
    w.add_rope_dimension_count_swa(t.head_dim_swa)  # (defaults to the global one: too long)
    w.add_rope_freq_base(1e6)
    w.add_rope_freq_base_swa(1e4)
    w.add_sliding_window(t.n_swa)
    w.add_sliding_window_pattern(list(swa))
    w.add_layer_norm_rms_eps(1e-6)


def _finish(w, path) -> Path:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(path)


def _target_tensors(s: Gemma4Shape) -> Iterator[tuple[str, tuple[int, ...], float | None]]:
    """(name, numpy shape, scale) as ``hybrid_gguf.tensor_specs``: scale None is a norm (ones)."""
    e, n_vocab = s.n_embd, len(vocab()[0])
    yield "token_embd.weight", (n_vocab, e), 1.0
    yield "output.weight", (n_vocab, e), 1.0  # (set by ``cycle``, see write_tiny_gemma4)
    yield "output_norm.weight", (e,), None
    yield "rope_freqs.weight", (s.head_dim // 2,), None  # the global layers' (one for all)
    kv_from = s.n_layer - s.shared_kv
    for il in range(s.n_layer):
        hd = s.head(il)
        yield f"blk.{il}.attn_norm.weight", (e,), None
        yield f"blk.{il}.attn_q.weight", (hd * s.n_head, e), 1.0 / np.sqrt(e)
        if il < kv_from:  # a layer with a cache of its own
            yield f"blk.{il}.attn_k.weight", (hd * s.n_head_kv, e), 1.0 / np.sqrt(e)
            yield f"blk.{il}.attn_v.weight", (hd * s.n_head_kv, e), 1.0 / np.sqrt(e)
            yield f"blk.{il}.attn_k_norm.weight", (hd,), None
        yield f"blk.{il}.attn_q_norm.weight", (hd,), None
        yield f"blk.{il}.attn_output.weight", (e, hd * s.n_head), 1.0 / np.sqrt(hd * s.n_head)
        yield f"blk.{il}.post_attention_norm.weight", (e,), None
        yield from _ffn(il, e, s.n_ff)


def _assistant_tensors(s: AssistantShape, t: Gemma4Shape) -> Iterator[tuple[str, tuple[int, ...], float | None]]:
    e, n_vocab = s.n_embd, len(vocab()[0])
    yield "token_embd.weight", (n_vocab, e), 1.0  # tied: also the output
    yield "output_norm.weight", (e,), None
    yield "nextn.pre_projection.weight", (e, 2 * t.n_embd), 1.0 / np.sqrt(t.n_embd)
    yield "nextn.post_projection.weight", (t.n_embd, e), 1.0 / np.sqrt(e)
    yield "rope_freqs.weight", (t.head_dim // 2,), None
    for il, swa in enumerate(s.swa):
        hd = t.head_dim_swa if swa else t.head_dim
        yield f"blk.{il}.attn_norm.weight", (e,), None
        yield f"blk.{il}.attn_q.weight", (hd * s.n_head, e), 1.0 / np.sqrt(e)  # queries only
        yield f"blk.{il}.attn_q_norm.weight", (hd,), None
        yield f"blk.{il}.attn_output.weight", (e, hd * s.n_head), 1.0 / np.sqrt(hd * s.n_head)
        yield f"blk.{il}.post_attention_norm.weight", (e,), None
        yield f"blk.{il}.layer_output_scale.weight", (1,), None
        yield from _ffn(il, e, s.n_ff)


def _ffn(il: int, e: int, n_ff: int):
    yield f"blk.{il}.ffn_norm.weight", (e,), None
    yield f"blk.{il}.ffn_gate.weight", (n_ff, e), 1.0 / np.sqrt(e)
    yield f"blk.{il}.ffn_up.weight", (n_ff, e), 1.0 / np.sqrt(e)
    yield f"blk.{il}.ffn_down.weight", (e, n_ff), 1.0 / np.sqrt(n_ff)
    yield f"blk.{il}.post_ffw_norm.weight", (e,), None

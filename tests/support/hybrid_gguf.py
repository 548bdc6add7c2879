"""Write tiny ``qwen35``-architecture GGUF models (F32 weights, random but for ``cycle``'s in a file
with MTP blocks) for tests of the real backend.

Qwen3.5/3.6 are hybrids: three gated delta-net layers (a recurrent state, no KV cache) to one
full-attention layer. Such a cache cannot drop a tail the way a KV cache does, which is what
these files exercise: rollback after rejected drafts (``llama.backend``) and drafting with the
model's own next-token-prediction layer (``mtp=True`` appends one, as Qwen3.5-*-MTP GGUFs do).

Shapes and keys are llama.cpp's (``vendor/llama.cpp/src/models/qwen35.cpp``): the recurrent
state is ``d_state x d_inner`` per delta-net layer and ``d_inner`` must be ``d_state x
dt_rank``. numpy shapes are ggml's ``ne`` reversed. The vocabulary is ``tiny_gguf``'s SPM one,
so a tiny qwen35 model and a tiny llama model make a compatible pair.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tests.support.cycle import Cycle, cycle
from tests.support.tiny_gguf import CHATML, add_spm_vocab, vocab


@dataclass(frozen=True)
class HybridShape:
    n_embd: int = 64
    n_layer: int = 4  # trunk layers; every FULL_EVERY-th is full attention, the rest delta-net
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 16
    n_ff: int = 128
    d_conv: int = 4
    d_state: int = 16  # key/value head size of the delta-net layers
    n_group: int = 2  # delta-net key heads
    dt_rank: int = 4  # delta-net value heads
    full_every: int = 4
    n_rot: int = 8
    sections: tuple[int, int, int, int] = (2, 1, 1, 0)  # IMROPE sections; they sum to n_rot / 2

    @property
    def d_inner(self) -> int:
        return self.d_state * self.dt_rank

    @property
    def conv_dim(self) -> int:
        return 2 * self.d_state * self.n_group + self.d_inner

    def is_recurrent(self, il: int) -> bool:
        return (il + 1) % self.full_every != 0


TINY = HybridShape()


def write_tiny_qwen35(
    path: Path | str,
    seed: int = 0,
    *,
    shape: HybridShape = TINY,
    mtp: int = 0,
    mtp_tensors: bool = True,
    n_ctx: int = 2048,
    noise_of: int | None = None,
    noise: float = 0.0,
    residual: float = 1.0,
    control: Sequence[str] = (),
    chat_template: str | None = CHATML,
) -> Path:
    """Write the model; with ``noise_of=S`` the weights are seed S's plus ``noise`` x N(0,1)
    (a draft that agrees with that target often but not always).

    ``mtp`` appends that many next-token-prediction blocks (``nextn``; True: one) after the
    trunk; ``mtp_tensors=False`` declares them without writing their tensors, as a conversion
    that dropped them (llama.cpp then refuses the file, naming the first). Random weights
    would make it agree with the target by chance only (1 in ~300), and an MTP block that
    predicts from the token alone would agree as well from any hidden state; so a file with MTP
    blocks is built by ``cycle``: the target recites a cycle of pieces, its next token a
    function of its hidden state, and the block's input projection reads the code of the next
    token from the state (and the token's embedding weakly, at random), so it drafts what the
    target says only from the right state. ``residual`` scales what the trunk's layers add to
    the embedding: up to about 1 the target keeps to its cycle; past that it leaves it now and
    then, more often as ``residual`` grows, and the block's drafts are rejected there."""
    import gguf

    path = Path(path)
    tokens, scores, types = vocab(control=control)
    s = shape
    w = gguf.GGUFWriter(str(path), "qwen35")
    w.add_name(f"tiny-qwen35-{seed}")
    add_qwen35_metadata(w, s, mtp, n_ctx)
    w.add_file_type(0)  # ALL_F32
    add_spm_vocab(w, tokens, scores, types)
    if chat_template:
        w.add_chat_template(chat_template)
    cyc = cycle(seed, s.n_embd) if mtp else None
    for name, np_shape, scale in tensor_specs(s, len(tokens), mtp if mtp_tensors else 0, residual):
        data = _weights(seed, name, np_shape, scale)
        if noise_of is not None and scale is not None:
            data = _weights(noise_of, name, np_shape, scale) + noise * abs(scale) * _weights(
                seed + 10_000, name, np_shape, 1.0
            )
        if cyc is not None:
            data = _recites(cyc, seed, name, data)
        w.add_tensor(name, data.astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _recites(cyc: Cycle, seed: int, name: str, data: np.ndarray) -> np.ndarray:
    """A target's tensor as ``cycle`` sets it, for a file with MTP blocks; else ``data``."""
    if name == "token_embd.weight":
        return cyc.embeddings(seed)
    if name == "output.weight":
        return cyc.head(0.2)  # a winning logit of about 7
    if name == "output_norm.weight":
        return cyc.signs
    if name.endswith("nextn.eh_proj.weight"):  # [embedding ; state]: the state's next code, in P
        data[:, data.shape[1] // 2 :] = cyc.basis @ cyc.reader()
    return data


def add_qwen35_metadata(w, s: HybridShape, mtp: int, n_ctx: int) -> None:
    """The architecture's keys (``qwen35.*``): sizes, the IMROPE sections, the delta-net's;
    ``mtp`` next-token-prediction blocks after the trunk."""
    w.add_context_length(n_ctx)
    w.add_embedding_length(s.n_embd)
    w.add_block_count(s.n_layer + int(mtp))
    w.add_feed_forward_length(s.n_ff)
    w.add_head_count(s.n_head)
    w.add_head_count_kv(s.n_head_kv)
    w.add_key_length(s.head_dim)
    w.add_value_length(s.head_dim)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_dimension_count(s.n_rot)
    w.add_rope_dimension_sections(list(s.sections))
    w.add_rope_freq_base(1e7)
    w.add_ssm_conv_kernel(s.d_conv)
    w.add_ssm_inner_size(s.d_inner)
    w.add_ssm_state_size(s.d_state)
    w.add_ssm_time_step_rank(s.dt_rank)
    w.add_ssm_group_count(s.n_group)
    w.add_full_attention_interval(s.full_every)
    if mtp:
        w.add_nextn_predict_layers(int(mtp))


def tensor_specs(
    s: HybridShape, n_vocab: int, mtp: int, residual: float = 1.0, tied: bool = False
) -> Iterator[tuple[str, tuple[int, ...], float | None]]:
    """(name, numpy shape, scale) of every tensor; scale None: a norm (ones); scales keep
    activations O(1) and give logits a spread of a few units, so greedy ties are unlikely.
    ``residual`` scales the matrices that write into the residual stream."""
    e = s.n_embd
    yield "token_embd.weight", (n_vocab, e), 1.0
    yield "output_norm.weight", (e,), None
    if not tied:  # (tied: llama.cpp reuses token_embd as the output matrix)
        yield "output.weight", (n_vocab, e), 3.0 / np.sqrt(e)
    for il in range(s.n_layer):
        yield from _scaled(_common(il, s), residual)
        yield from _scaled(_delta_net(il, s) if s.is_recurrent(il) else _attention(il, s), residual)
    for il in range(s.n_layer, s.n_layer + int(mtp)):  # the MTP blocks
        yield from _scaled(_common(il, s), 0.1)
        yield from _scaled(_attention(il, s), 0.1)
        yield f"blk.{il}.nextn.eh_proj.weight", (e, 2 * e), 0.1 / np.sqrt(2 * e)
        yield f"blk.{il}.nextn.enorm.weight", (e,), None
        yield f"blk.{il}.nextn.hnorm.weight", (e,), None


_WRITES_RESIDUAL = ("attn_output.weight", "ssm_out.weight", "ffn_down.weight")


def _scaled(tensors, factor: float):
    for name, shape, scale in tensors:
        yield name, shape, scale * factor if scale is not None and name.endswith(_WRITES_RESIDUAL) else scale


def _common(il: int, s: HybridShape):
    e = s.n_embd
    yield f"blk.{il}.attn_norm.weight", (e,), None
    yield f"blk.{il}.post_attention_norm.weight", (e,), None
    yield f"blk.{il}.ffn_gate.weight", (s.n_ff, e), 1.0 / np.sqrt(e)
    yield f"blk.{il}.ffn_up.weight", (s.n_ff, e), 1.0 / np.sqrt(e)
    yield f"blk.{il}.ffn_down.weight", (e, s.n_ff), 1.0 / np.sqrt(s.n_ff)


def _attention(il: int, s: HybridShape):
    e, hd = s.n_embd, s.head_dim
    yield f"blk.{il}.attn_q.weight", (2 * hd * s.n_head, e), 1.0 / np.sqrt(e)  # query and gate per head
    yield f"blk.{il}.attn_k.weight", (hd * s.n_head_kv, e), 1.0 / np.sqrt(e)
    yield f"blk.{il}.attn_v.weight", (hd * s.n_head_kv, e), 1.0 / np.sqrt(e)
    yield f"blk.{il}.attn_output.weight", (e, hd * s.n_head), 1.0 / np.sqrt(hd * s.n_head)
    yield f"blk.{il}.attn_q_norm.weight", (hd,), None
    yield f"blk.{il}.attn_k_norm.weight", (hd,), None


def _delta_net(il: int, s: HybridShape):
    e = s.n_embd
    yield f"blk.{il}.attn_qkv.weight", (s.conv_dim, e), 1.0 / np.sqrt(e)
    yield f"blk.{il}.attn_gate.weight", (s.d_inner, e), 1.0 / np.sqrt(e)
    yield f"blk.{il}.ssm_conv1d.weight", (s.conv_dim, s.d_conv), 0.5
    yield f"blk.{il}.ssm_dt.bias", (s.dt_rank,), 0.5
    yield f"blk.{il}.ssm_a", (s.dt_rank,), -1.0  # A = -exp(A_log) < 0: a decaying state
    yield f"blk.{il}.ssm_beta.weight", (s.dt_rank, e), 1.0 / np.sqrt(e)
    yield f"blk.{il}.ssm_alpha.weight", (s.dt_rank, e), 1.0 / np.sqrt(e)
    yield f"blk.{il}.ssm_norm.weight", (s.d_state,), None
    yield f"blk.{il}.ssm_out.weight", (e, s.d_inner), 1.0 / np.sqrt(s.d_inner)


def _weights(seed: int, name: str, shape, scale) -> np.ndarray:
    if scale is None:  # norms: ones
        return np.ones(shape, dtype=np.float32)
    rng = np.random.default_rng([seed, sum(map(ord, name)), len(name)])
    data = rng.standard_normal(shape) * abs(scale)
    return (-np.abs(data) if scale < 0 else data).astype(np.float32)

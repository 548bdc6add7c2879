"""What a model holds in memory besides its weights, one function per kind of state, from its
GGUF metadata and the context size: the one home of these formulas. The preflight memory check
(``preflight``), the GPU offload plan's layer sizes (``ggufinfo.read_model_layout``) and the pair
menu's figure (``models.catalog.memory_estimate``) all add them up with ``footprint``; each is
tested against llama.cpp's own size on a tiny model (``tests/llama/test_memory.py``).

- **KV cache** (``kv_bytes_per_token``): F16 K and V for every layer with a cache of its own,
  with that layer's KV heads and head sizes. A sliding-window layer (Gemma 4's five in six) is
  cached at full size too: localspec leaves llama.cpp's ``swa_full`` on, its default, so such a
  layer costs per token what a global one does (with its own, smaller, head size). Layers that
  reuse an earlier layer's cache (Gemma 4's ``shared_kv_layers``) and a hybrid's recurrent
  layers have none.
- **Recurrent state** (``recurrent_state_bytes``): one copy of a hybrid's (Qwen3.5's delta-net
  layers) or a recurrent model's state, whatever the context.
- **Snapshots**: a target keeps ``snapshots_for`` more copies of that state in llama.cpp's own
  buffer (``n_rs_seq``), beside each layer, on the GPU where the layer is offloaded.
- **Checkpoints** (``checkpoint_bytes``): the copies ``recurrent.Rollback`` keeps on the host for
  a rollback past the snapshots, at most ``CHECKPOINTS_KEPT``.
- **Hidden states** (``hidden_state_bytes``): the target's final hidden state at every position
  (``backend.HiddenStates``, on the host), which an MTP layer or a Gemma 4 assistant reads.

Nothing here imports llama_cpp: a figure costs a header read, not a model load.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

F16_BYTES = 2  # llama.cpp's default K and V type (type_k, type_v), which localspec keeps
F32_BYTES = 4  # a recurrent state's type, and a hidden state's

# Tuning choice: llama.cpp keeps n_rs_seq copies of a hybrid model's recurrent state so that a
# verify rolls back for free (llama/recurrent.py). Each copy is the whole state (about 20 MB for
# Qwen3.5-0.8B's shape, 157 MB for a 27B) and every evaluation, a single token's too, writes
# n_rs_seq + 1 convolution states per delta-net layer. A verify longer than the copies takes a
# checkpoint first (a host copy of the state); only a rejection that drops more tokens than
# there are copies pays more: about one T(1), to evaluate the kept tokens again. SNAPSHOTS
# copies at most: in the adaptive controller's replays 1.5 % of the verifies drop more than 8
# tokens (`localspec bench --replay` prints it), and 8 cost a single-token step within 2 % of
# none, where 16 cost 2-4 % (scripts/snapshot_cost.py, docs/benchmarks.md). SNAPSHOT_BUDGET
# bounds their memory: 8 up to a Qwen3.5-9B (53 MB each), 6 for a 27B beside 17 GB of weights.
SNAPSHOTS = 8
SNAPSHOT_BUDGET = 1 << 30
# recurrent.Rollback.save keeps the latest lasting checkpoint (a reply's prompt) and the latest
# other one (a verify's or a draft model's step), each a whole copy of the recurrent state
CHECKPOINTS_KEPT = 2
# draft architectures that read their target's hidden states, as its own MTP layers do
READS_HIDDEN = frozenset({"gemma4-assistant"})


@dataclass(frozen=True)
class Footprint:
    """What one model holds besides its weights, in bytes, by kind of state."""

    kv: int  # KV cache, global and sliding-window layers
    state: int  # recurrent state and its snapshots: llama.cpp's, beside each layer
    checkpoints: int  # recurrent-state checkpoints, on the host
    hidden: int  # the target's hidden states for an MTP layer or assistant, on the host

    @property
    def with_layers(self) -> int:
        """What is split with the layers: on the GPU for the offloaded ones, else the host."""
        return self.kv + self.state

    @property
    def on_host(self) -> int:
        """What stays in host memory however many layers are offloaded."""
        return self.checkpoints + self.hidden


def footprint(kv_per_token: int, state: int, n_ctx: int, *, snapshots: int = 0, hidden_width: int = 0) -> Footprint:
    """One model's ``Footprint`` at ``n_ctx`` tokens: ``kv_per_token`` and ``state`` as this
    module's functions give them (or the catalog lists them); ``snapshots``: the copies of the
    state llama.cpp keeps (a target's ``snapshots_for``, 0 for a draft model); ``hidden_width``:
    the target's ``hidden_width`` when an MTP layer or an assistant drafts for it, else 0."""
    return Footprint(
        kv=kv_per_token * n_ctx,
        state=state * (1 + snapshots),
        checkpoints=checkpoint_bytes(state),
        hidden=hidden_state_bytes(hidden_width, n_ctx),
    )


# --- the KV cache -----------------------------------------------------------------------------
def kv_bytes_per_token(meta: dict, arch: str, window: bool | None = None) -> int:
    """Bytes of F16 K and V one token takes in the cache, every layer with a cache of its own
    (see the module docstring). ``window`` True: the sliding-window layers alone, False: the
    global ones alone; a layer is sliding-window where the file's per-layer
    ``sliding_window_pattern`` says so (as Gemma 4's does; Gemma 3's pattern is llama.cpp's
    code, and its layers share one head size, so its total is right and its split all global)."""
    return sum(b for sliding, b in cache_layers(meta, arch) if window is None or sliding == window)


def cache_layers(meta: dict, arch: str) -> list[tuple[bool, int]]:
    """(sliding-window, K and V bytes per token) of each layer with a KV cache of its own."""

    def get(key: str, default: Any = None) -> Any:
        return meta.get(f"{arch}.{key}", default)

    n_layer, n_embd = _uint(get("block_count")), _uint(get("embedding_length"))
    n_head = _largest(get("attention.head_count", 1)) or 1
    n_kv = get("attention.head_count_kv", n_head)  # one per layer, or one for all
    k_full = _uint(get("attention.key_length"), n_embd // n_head)
    v_full = _uint(get("attention.value_length"), k_full)
    k_swa, v_swa = _uint(get("attention.key_length_swa"), k_full), _uint(get("attention.value_length_swa"), v_full)
    pattern = get("attention.sliding_window_pattern", None)
    own = n_layer - _uint(get("attention.shared_kv_layers"))  # the rest reuse an earlier layer's
    layers = []
    for il in range(max(own, 0)):
        if not _attends(meta, arch, il, n_layer):
            continue
        sliding = isinstance(pattern, np.ndarray) and il < pattern.size and bool(pattern[il])
        k, v = (k_swa, v_swa) if sliding else (k_full, v_full)
        layers.append((sliding, _at(n_kv, il) * (k + v) * F16_BYTES))
    return layers


def attention_layers(meta: dict, arch: str, n_layer: int) -> int:
    """Layers with a KV cache: in a hybrid (Qwen3.5: every ``full_attention_interval``-th trunk
    layer, the rest gated delta-net with a fixed-size state) only those, plus MTP layers."""
    return sum(_attends(meta, arch, il, n_layer) for il in range(n_layer))


def _attends(meta: dict, arch: str, il: int, n_layer: int) -> bool:
    """Whether layer ``il`` attends (a hybrid's others are recurrent): llama.cpp's qwen35 rule."""
    every = _uint(meta.get(f"{arch}.full_attention_interval", 0))
    if every < 1:
        return True
    return il >= n_layer - nextn_layers_of(meta, arch) or (il + 1) % every == 0


def nextn_layers_of(meta: dict, arch: str) -> int:
    return _uint(meta.get(f"{arch}.nextn_predict_layers", 0))


# --- the recurrent state, its snapshots and checkpoints --------------------------------------
def recurrent_state_bytes(meta: dict, arch: str) -> int:
    """One copy of a recurrent model's state, all its recurrent layers (F32, as llama.cpp keeps
    it): for the gated delta-net and Mamba-2 layers the ``ssm`` keys describe, a convolution
    state of ``(d_conv - 1) x (d_inner + 2 n_group d_state)`` and a state of ``d_state x d_inner``
    (llama.cpp's n_embd_r and n_embd_s); 0 for a model without them."""

    def get(key: str) -> int:
        return _uint(meta.get(f"{arch}.ssm.{key}", 0))

    d_conv, d_inner, d_state, n_group = get("conv_kernel"), get("inner_size"), get("state_size"), get("group_count")
    if not (d_conv and d_inner and d_state):
        return 0
    n_layer = _uint(meta.get(f"{arch}.block_count", 0))
    # a hybrid's trunk: every full_attention_interval-th layer attends, the rest are recurrent
    hybrid = f"{arch}.full_attention_interval" in meta
    recurrent = n_layer - attention_layers(meta, arch, n_layer) if hybrid else n_layer
    per_layer = (d_conv - 1) * (d_inner + 2 * n_group * d_state) + d_state * d_inner
    return F32_BYTES * per_layer * max(recurrent, 0)


def snapshots_for(state_bytes: int, draft_max: int) -> int:
    """How many recurrent-state copies a target keeps (llama.cpp's n_rs_seq): one per token of
    the longest draft, at most SNAPSHOTS and within SNAPSHOT_BUDGET (any state size where the
    header gives none; llama.cpp keeps none for an architecture without rollback)."""
    count = min(draft_max, SNAPSHOTS)
    return count if state_bytes <= 0 else max(0, min(count, SNAPSHOT_BUDGET // state_bytes))


def checkpoint_bytes(state_bytes: int) -> int:
    """The host copies of the recurrent state ``recurrent.Rollback`` keeps, at most."""
    return CHECKPOINTS_KEPT * state_bytes


# --- the hidden states ------------------------------------------------------------------------
def hidden_width(meta: dict, arch: str) -> int:
    """The width of the hidden state a target hands an MTP layer or an assistant: llama.cpp's
    n_embd_out, ``embedding_length_out`` where the file gives one, else ``embedding_length``."""
    return _uint(meta.get(f"{arch}.embedding_length_out")) or _uint(meta.get(f"{arch}.embedding_length"))


def hidden_state_bytes(width: int, n_ctx: int) -> int:
    """The target's hidden states for a full context: one F32 row of ``width`` per position."""
    return n_ctx * width * F32_BYTES


def _uint(v: Any, default: int = 0) -> int:
    """A whole number from the header, ``default`` for none or another type (a file's types
    are ``ggufinfo.check_metadata``'s business)."""
    return int(v) if isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 0 else default


def _largest(v: Any) -> int:
    """A per-layer key's largest value, or the one value for every layer."""
    if isinstance(v, np.ndarray):
        return int(v.max()) if v.size and v.dtype.kind in "iu" else 0
    return _uint(v)


def _at(v: Any, il: int) -> int:
    """Layer ``il``'s value of a per-layer key (an array), or the one value for every layer."""
    if isinstance(v, np.ndarray):
        return int(v[il]) if il < v.size and v.dtype.kind in "iu" else _largest(v)
    return _uint(v)

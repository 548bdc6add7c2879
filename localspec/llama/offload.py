"""Which layers of the target and of the draft go to the GPU: a plan made from the files'
layer sizes and the GPU's free memory. Pure: the facts come in from ``ggufinfo`` (layer sizes)
and ``llama.devices`` (devices); nothing here imports llama_cpp.

llama.cpp's ``n_gpu_layers`` (src/llama-model.cpp, ``load_tensors``) counts n_layer + 1
layers: the repeating blocks ``blk.0`` .. ``blk.{n_layer-1}`` and the output layer (output norm
and output matrix) as layer n_layer. The LAST N of those go to the GPU
(``i_gpu_start = n_layer + 1 - N``), so the output layer is the first to go: N = 1 offloads the
output layer alone, N = n_layer + 1 (or -1) everything. The input layer (token embeddings)
always stays on the CPU. An offloaded block keeps its KV cache on the GPU (``offload_kqv`` is
on by default), and a recurrent state with its snapshots, so a block costs its weights plus its
share of those (``memory``: sliding-window layers at full size). A recurrent state's checkpoints
and a target's hidden states are copied to the host, never the GPU: the preflight counts them.

Policy: both models wholly on the GPU when they fit. When they do not, the draft goes first,
all of it: per step the draft runs k times and the target once, so a byte of draft weights on
the GPU saves about k times what a byte of target weights would. Then as many target layers
as fit beside it. When even the draft does not fit, as many draft layers as fit and no target
layer. ``--gpu-layers`` / ``--draft-gpu-layers`` fix a model's count (-1 = all); the other
model's automatic count then fills what is left.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from ..units import MiB, gib

# Tuning choice: the free memory llama.cpp reports is measured before anything of ours is on
# the GPU, and the layer sizes count weights and KV cache only. Not counted: each context's
# compute buffer (a few hundred MiB at 4k context and 512-token batches, more with the
# vocabulary's logits), the runtime's own allocations (cuBLAS workspace, Metal command
# buffers), and whatever else grows on the GPU meanwhile (a desktop, a browser). 5 % of the
# free memory plus 256 MiB per model on the GPU keeps a 6-8 GiB laptop card clear of
# out-of-memory failures while giving away only a layer or two.
GPU_MARGIN_FRACTION = 0.05
COMPUTE_RESERVE_BYTES = 256 * MiB  # per model with any layer on the GPU

# enum ggml_backend_dev_type (ggml/include/ggml-backend.h), in order: CPU = 0, GPU = 1, ...
DEVICE_TYPES = ("cpu", "gpu", "igpu", "accel", "meta")

CPU_BUILD = "this llama.cpp build has no GPU offload"


@dataclass(frozen=True)
class Device:
    """One ggml backend device as llama.cpp reports it."""

    name: str  # "CUDA0", "Metal", "CPU"
    description: str  # "NVIDIA GeForce RTX 4060 Laptop GPU"
    type: str  # one of DEVICE_TYPES, or "type N" for one this code does not know
    free_bytes: int
    total_bytes: int


@dataclass(frozen=True)
class ModelLayout:
    """What one model puts on a GPU, layer by layer, in llama.cpp's numbering."""

    n_layer: int
    block_bytes: tuple[int, ...]  # weights of blk.i.*, i = 0 .. n_layer-1
    output_bytes: int  # output norm + output matrix (the token embeddings again when tied)
    kv_bytes_per_token: int  # F16 K and V per context token, all layers (memory.kv_bytes_per_token)
    context_length: int | None = None  # the model's own; llama.cpp caps n_ctx at it
    state_bytes: int = 0  # a recurrent model's state and its snapshot copies, all layers

    @property
    def total(self) -> int:
        """n_gpu_layers that offloads everything: the blocks and the output layer."""
        return self.n_layer + 1

    def layers(self, requested: int) -> int:
        """A requested n_gpu_layers as the count llama.cpp uses (-1 or too many: all)."""
        return self.total if requested < 0 else min(requested, self.total)

    def gpu_bytes(self, n_gpu: int, n_ctx: int) -> int:
        """Weights and KV cache on the GPU with ``n_gpu`` layers offloaded."""
        n = self.layers(n_gpu)
        if n == 0:
            return 0
        blocks = n - 1  # the output layer goes first, then the blocks from the top down
        ctx = min(n_ctx, self.context_length) if self.context_length else n_ctx
        kv = (self.kv_bytes_per_token * ctx + self.state_bytes) * blocks // max(self.n_layer, 1)
        return self.output_bytes + sum(self.block_bytes[self.n_layer - blocks :]) + kv


@dataclass(frozen=True)
class OffloadPlan:
    """n_gpu_layers for each model (0 .. total) and why."""

    target_layers: int
    target_total: int  # n_layer + 1 (0 when not known: a CPU-only plan reads no file)
    draft_layers: int = 0
    draft_total: int = 0  # 0: no draft model
    gpu_name: str | None = None  # None: no GPU was considered
    gpu_free_bytes: int | None = None
    gpu_bytes: int = 0  # estimated weights + KV + reserves the plan puts on the GPU
    reason: str = ""
    has_draft: bool = False

    @property
    def on_gpu(self) -> bool:
        return self.gpu_name is not None

    @property
    def split(self) -> str:
        """'draft 25/25 · target 20/29' (no draft model: 'target 29/29')."""
        parts = [f"target {self.target_layers}/{self.target_total}"]
        if self.has_draft:
            parts.insert(0, f"draft {self.draft_layers}/{self.draft_total}")
        return " · ".join(parts)

    @property
    def short(self) -> str:
        """One line for the stats panel: 'GPU  draft 25/25 · target 20/29' or 'CPU only'."""
        return f"GPU  {self.split}" if self.on_gpu else "CPU only"

    @property
    def summary(self) -> str:
        """'GPU NVIDIA RTX 4060 (7.6 GiB free): draft 25/25 layers, target 20/29 layers'."""
        if not self.on_gpu:
            return f"CPU only: {self.reason}"
        free = f" ({gib(self.gpu_free_bytes)} free)" if self.gpu_free_bytes else ""
        layers = self.split.replace(" · ", " layers, ") + " layers"
        return f"GPU {self.gpu_name}{free}: {layers}"

    def as_dict(self) -> dict:
        return {**asdict(self), "summary": self.summary}


def offload_devices(devices: Sequence[Device]) -> list[Device]:
    """The devices llama.cpp offloads to: the discrete GPUs, else the integrated ones."""
    return [d for d in devices if d.type == "gpu"] or [d for d in devices if d.type == "igpu"]


def usable_gpu_bytes(free_bytes: int) -> int:
    """Free GPU memory less the safety margin (the per-model reserve is counted apart)."""
    return int(free_bytes * (1 - GPU_MARGIN_FRACTION))


def model_cost(m: ModelLayout, n_gpu: int, n_ctx: int) -> int:
    """GPU bytes of ``n_gpu`` offloaded layers, with the model's compute reserve."""
    return m.gpu_bytes(n_gpu, n_ctx) + COMPUTE_RESERVE_BYTES if m.layers(n_gpu) else 0


def pair_cost(target: ModelLayout, t: int, draft: ModelLayout | None, d: int, n_ctx: int) -> int:
    return model_cost(target, t, n_ctx) + (model_cost(draft, d, n_ctx) if draft is not None else 0)


def most_layers(m: ModelLayout, n_ctx: int, budget: int) -> int:
    """The largest n_gpu_layers whose cost fits ``budget`` (costs grow with each layer)."""
    for n in range(m.total, 0, -1):
        if model_cost(m, n, n_ctx) <= budget:
            return n
    return 0


def cpu_plan(
    target: ModelLayout | None, draft: ModelLayout | None, reason: str, has_draft: bool | None = None
) -> OffloadPlan:
    return OffloadPlan(
        0,
        target.total if target else 0,
        0,
        draft.total if draft else 0,
        reason=reason,
        has_draft=draft is not None if has_draft is None else has_draft,
    )


def plan_offload(
    target: ModelLayout,
    draft: ModelLayout | None,
    n_ctx: int,
    devices: Sequence[Device],
    *,
    gpu_offload: bool = True,
    target_layers: int | None = None,
    draft_layers: int | None = None,
) -> OffloadPlan:
    """The plan for a pair (``draft`` None: the target alone). ``target_layers`` /
    ``draft_layers``: the user's counts (-1 = all), None = chosen here."""
    if not gpu_offload:
        return cpu_plan(target, draft, CPU_BUILD)
    gpus = offload_devices(devices)
    if not gpus:
        return cpu_plan(target, draft, "llama.cpp found no GPU device")
    free = sum(d.free_bytes for d in gpus)
    name = gpus[0].description or gpus[0].name
    if len(gpus) > 1:
        name = f"{len(gpus)} GPUs ({', '.join(d.description or d.name for d in gpus)})"
    t, d, used, reason = choose_layers(target, draft, n_ctx, free, target_layers, draft_layers)
    return OffloadPlan(t, target.total, d, draft.total if draft else 0, name, free, used, reason, draft is not None)


def choose_layers(
    target: ModelLayout, draft: ModelLayout | None, n_ctx: int, free: int, t_fixed: int | None, d_fixed: int | None
) -> tuple[int, int, int, str]:
    """(target layers, draft layers, GPU bytes they take, reason) by the module's policy."""
    if free <= 0:  # the device reports no figure: llama.cpp's own default, everything
        t_all = target.total if t_fixed is None else target.layers(t_fixed)
        d_all = 0 if draft is None else draft.total if d_fixed is None else draft.layers(d_fixed)
        why = "the GPU reports no free-memory figure: all layers offloaded"
        return t_all, d_all, pair_cost(target, t_all, draft, d_all, n_ctx), why
    budget = usable_gpu_bytes(free)
    t = None if t_fixed is None else target.layers(t_fixed)
    d = None if draft is None or d_fixed is None else draft.layers(d_fixed)
    left = budget - (model_cost(target, t, n_ctx) if t is not None else 0)
    left -= model_cost(draft, d, n_ctx) if draft is not None and d is not None else 0
    draft_partial = False
    if draft is not None and d is None:
        d = most_layers(draft, n_ctx, left)
        left -= model_cost(draft, d, n_ctx)
        draft_partial = d < draft.total
    if t is None:
        t = 0 if draft_partial else most_layers(target, n_ctx, left)
    d = d or 0
    used = pair_cost(target, t, draft, d, n_ctx)
    return t, d, used, _reason(target, draft, t, d, t_fixed, d_fixed, budget, used)


def _reason(
    target: ModelLayout,
    draft: ModelLayout | None,
    t: int,
    d: int,
    t_fixed: int | None,
    d_fixed: int | None,
    budget: int,
    used: int,
) -> str:
    fixed = [
        f"{who} layers set by {flag}"
        for who, flag, v in (("target", "--gpu-layers", t_fixed), ("draft", "--draft-gpu-layers", d_fixed))
        if v is not None
    ]
    if used > budget:
        why = (
            f"the layers asked for need about {gib(used)}, more than the {gib(budget)} usable: "
            "llama.cpp may run out of GPU memory"
        )
    elif draft is not None and d < draft.total and d_fixed is None:
        why = f"even the draft does not fit in {gib(budget)} usable: {d} of its {draft.total} layers, target on the CPU"
    elif t < target.total and t_fixed is None:
        first = "beside the draft " if draft is not None else ""
        why = f"the target does not fit {first}in {gib(budget)} usable: {t} of its {target.total} layers"
    else:
        why = f"{gib(used)} of {gib(budget)} usable"
    return "; ".join([why, *fixed])

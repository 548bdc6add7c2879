"""Checks on a model file before llama.cpp sees it, so each way a file can be wrong gets one
clear message instead of llama.cpp's "failed to load model" (or the kernel's OOM killer).

In order: the path exists and is a regular file (not a directory, a device or a FIFO); it
starts with the GGUF magic; its header reads, with values of the types llama.cpp expects; the
file is as long as its header says (a download cut short is the usual cause of a truncated
file); the architecture is one this build of llama.cpp knows; it has a tokenizer; and the
model fits in memory.

Memory estimate, per model, compared with MemAvailable from /proc/meminfo (the check is
skipped where that is unknown):
    (weights (file size) + KV cache + recurrent state and its snapshots) x the share of layers
    not offloaded to a GPU x 1.1 (compute buffers) + checkpoints + hidden states,
each kind of state as ``memory`` gives it: the KV cache of every layer with one, Gemma 4's
sliding-window layers at full size; the target's snapshots (a draft model keeps none); the
checkpoints and the target's hidden states (for an MTP layer or a Gemma 4 assistant) stay on
the host whatever is offloaded. The header is read with ``ggufinfo``'s cursor and ``gguf``'s
type-size table; nothing here imports llama_cpp, so a check costs a header read, not a model load.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ..units import gb, memory_available
from . import ggufinfo
from .ggufinfo import MAX_SNAPSHOTS
from .memory import (
    READS_HIDDEN,
    Footprint,
    footprint,
    hidden_width,
    kv_bytes_per_token,
    recurrent_state_bytes,
    snapshots_for,
)

# Tuning choice: llama.cpp's compute buffers are a few hundred MB for 1-8B models at 4k
# context; 10% of weights + KV is a round figure that covers them without refusing models
# that would load.
COMPUTE_OVERHEAD = 0.10
# A header describing tensors past this is damaged, not cut short: the largest published GGUFs
# are under 1 TB, and no disk holds 2^50 bytes (1 PiB) in one file
MAX_MODEL_BYTES = 2**50

# LLM_ARCH_NAMES from vendor/llama.cpp/src/llama-arch.cpp in llama-cpp-python 0.3.36 (the
# version pyproject pins), less "clip" (a dummy for llama-quantize: mmproj files) and
# "(unknown)". Update it with the pin.
SUPPORTED_ARCHITECTURES = (
    "llama",
    "llama4",
    "deci",
    "falcon",
    "grok",
    "gpt2",
    "gptj",
    "gptneox",
    "mpt",
    "baichuan",
    "starcoder",
    "refact",
    "bert",
    "modern-bert",
    "nomic-bert",
    "nomic-bert-moe",
    "neo-bert",
    "jina-bert-v2",
    "jina-bert-v3",
    "eurobert",
    "bloom",
    "stablelm",
    "qwen",
    "qwen2",
    "qwen2moe",
    "qwen2vl",
    "qwen3",
    "qwen3moe",
    "qwen3next",
    "qwen3vl",
    "qwen3vlmoe",
    "qwen35",
    "qwen35moe",
    "qwen4exp",
    "phi2",
    "phi3",
    "phimoe",
    "plamo",
    "plamo2",
    "plamo3",
    "codeshell",
    "orion",
    "internlm2",
    "minicpm",
    "minicpm3",
    "gemma",
    "gemma2",
    "gemma3",
    "gemma3n",
    "gemma4",
    "gemma4-assistant",
    "gemma-embedding",
    "starcoder2",
    "mamba",
    "mamba2",
    "maple",
    "jamba",
    "falcon-h1",
    "xverse",
    "command-r",
    "cohere2",
    "cohere2moe",
    "dbrx",
    "olmo",
    "olmo2",
    "olmoe",
    "muse-glimmer",
    "openelm",
    "arctic",
    "deepseek",
    "deepseek2",
    "deepseek2-ocr",
    "deepseek32",
    "deepseek4",
    "chatglm",
    "glm4",
    "glm4moe",
    "glm-dsa",
    "bitnet",
    "t5",
    "t5encoder",
    "jais",
    "jais2",
    "nemotron",
    "nemotron_h",
    "nemotron_h_moe",
    "exaone",
    "exaone4",
    "exaone-moe",
    "rwkv6",
    "rwkv6qwen2",
    "rwkv7",
    "arwkv7",
    "granite",
    "granitemoe",
    "granitehybrid",
    "graniteswitch",
    "granite_swa",
    "chameleon",
    "wavtokenizer-dec",
    "plm",
    "bailingmoe",
    "bailingmoe2",
    "bailingmoe3",
    "dots1",
    "dots3note",
    "arcee",
    "afmoe",
    "laguna",
    "ernie4_5",
    "ernie4_5-moe",
    "hunyuan-moe",
    "hunyuan-dense",
    "hunyuan_vl",
    "hy_v3",
    "hy_v4",
    "smollm3",
    "gpt-oss",
    "lfm2",
    "lfm2moe",
    "dream",
    "smallthinker",
    "llada",
    "llada-moe",
    "seed_oss",
    "grovemoe",
    "apertus",
    "minimax-01",
    "hrm_text",
    "minimax-m2",
    "minimax-m3",
    "cogvlm",
    "rnd1",
    "pangu-embedded",
    "mistral3",
    "eagle3",
    "dflash",
    "mistral4",
    "paddleocr",
    "mimo2",
    "step35",
    "spark2_5",
    "llama-embed",
    "maincoder",
    "kimi-linear",
    "kimi-k3",
    "glm5-next",
    "talkie",
    "mellum",
    "nanbeige",
    "qwen3tts",
    "pockettts",
)


class ModelFileError(Exception):
    """One model file (or pair) that cannot be used; the message names it and says what to do."""


@dataclass(frozen=True)
class ModelFileInfo:
    path: Path
    arch: str
    file_bytes: int  # every part of a split model
    n_ctx: int  # the context the estimate used: the requested one, capped at the model's own
    host_fraction: float  # share of the layers that stay in host memory (not offloaded)
    kv_per_token: int = 0  # memory.kv_bytes_per_token
    state_bytes: int = 0  # one copy of a recurrent state (memory.recurrent_state_bytes)
    snapshots: int = 0  # copies of it llama.cpp keeps (a target's; a draft model keeps none)
    n_embd: int = 0  # the hidden states' width (memory.hidden_width)
    keeps_hidden: bool = False  # the target keeps them, for its MTP layers or an assistant

    @property
    def states(self) -> Footprint:
        """The KV cache and the other states at n_ctx tokens."""
        width = self.n_embd if self.keeps_hidden else 0
        return footprint(self.kv_per_token, self.state_bytes, self.n_ctx, snapshots=self.snapshots, hidden_width=width)

    @property
    def kv_bytes(self) -> int:
        """The KV cache and the recurrent state with its snapshots: split with the layers."""
        return self.states.with_layers

    @property
    def memory_bytes(self) -> int:
        """Host memory this model needs: weights, KV cache and states of the layers on the CPU
        with their compute buffers, and what stays on the host whatever is offloaded."""
        on_cpu = (self.file_bytes + self.kv_bytes) * self.host_fraction * (1 + COMPUTE_OVERHEAD)
        return int(on_cpu) + self.states.on_host


def check_model_files(
    paths: Sequence[Path | str],
    n_ctx: int,
    gpu_layers: int | None | Sequence[int | None] = 0,
    available_bytes: int | None = None,
    *,
    mtp: bool | None = None,
    draft_max: int = MAX_SNAPSHOTS,
) -> list[ModelFileInfo]:
    """Each file checked on its own, then the memory of all of them together: the target
    (the first file) and its draft are loaded side by side. ``gpu_layers``: one count for
    every file, or one per file (the offload plan gives the target and the draft their own).
    ``mtp``: whether the target drafts with its own MTP layers; None: when it has them, as a
    target with MTP layers does by default. The target keeps its hidden states for those,
    and for a Gemma 4 assistant. ``draft_max``: the longest draft, which a recurrent target
    keeps a snapshot of its state for each token of (within ``memory.SNAPSHOT_BUDGET``)."""
    per_file = list(gpu_layers) if isinstance(gpu_layers, Sequence) else [gpu_layers] * len(paths)
    infos = [
        inspect(Path(p), n_ctx, n, draft_max=draft_max if i == 0 else 0)
        for i, (p, n) in enumerate(zip(paths, per_file, strict=True))
    ]
    if infos and _keeps_hidden(infos, mtp):
        infos[0] = replace(infos[0], keeps_hidden=True)
    check_memory(infos, memory_available() if available_bytes is None else available_bytes)
    return infos


def _keeps_hidden(infos: Sequence[ModelFileInfo], mtp: bool | None) -> bool:
    """Whether the target keeps its hidden states: for its MTP layers, or a Gemma 4 assistant."""
    if any(i.arch in READS_HIDDEN for i in infos[1:]):
        return True
    if mtp is None:
        return len(infos) == 1 and ggufinfo.nextn_layers(infos[0].path) > 0
    return mtp


def inspect(path: Path, n_ctx: int, gpu_layers: int | None = 0, *, draft_max: int = MAX_SNAPSHOTS) -> ModelFileInfo:
    """Every check but memory. ``draft_max``: the longest draft a recurrent target keeps
    snapshots for (``memory.snapshots_for``); 0 for a draft model, which keeps none."""
    not_file = ggufinfo.not_a_file(path)
    if not_file == "no such file":
        raise ModelFileError(f"{path}: no such file. Check the path; `localspec models list` shows the models on disk.")
    if not_file:  # a directory, a device, a FIFO: reading one could block or never end
        raise ModelFileError(f"{path}: {not_file.replace('GGUF file', 'GGUF model file')}.")
    meta, needed = read_layout(path)
    size = path.stat().st_size
    if size < needed and needed > MAX_MODEL_BYTES:
        raise ModelFileError(
            f"{path}: the header is damaged: its tensors would take {needed:,} bytes, more than any "
            "model. Download the file again, or a GGUF build from another source."
        )
    if size < needed:
        raise ModelFileError(
            f"{path}: the file is truncated: it has {size:,} bytes but its header describes "
            f"{needed:,} ({size / needed:.0%} there). The download was probably interrupted: "
            "download it again (`localspec models pull` resumes) or copy it again."
        )
    arch = _text(meta.get("general.architecture", b""))
    check_architecture(path, arch)
    check_tokenizer(path, meta)
    n_layer = int(meta.get(f"{arch}.block_count", 0) or 0)
    model_ctx = int(meta.get(f"{arch}.context_length", 0) or 0)
    n_ctx = min(n_ctx, model_ctx) if model_ctx else n_ctx  # llama.cpp caps it the same way
    state = recurrent_state_bytes(meta, arch)
    return ModelFileInfo(
        path=path,
        arch=arch,
        file_bytes=_split_total(path, meta, size),
        n_ctx=n_ctx,
        host_fraction=_host_fraction(n_layer, gpu_layers),
        kv_per_token=kv_bytes_per_token(meta, arch),
        state_bytes=state,
        snapshots=snapshots_for(state, draft_max),
        n_embd=hidden_width(meta, arch),
    )


def check_architecture(path: Path, arch: str) -> None:
    if arch == "clip":
        raise ModelFileError(
            f"{path}: this is a vision projector (mmproj / CLIP) file, not a "
            "language model. Pick the model's main GGUF file."
        )
    if arch not in SUPPORTED_ARCHITECTURES:
        raise ModelFileError(
            f"{path}: architecture {arch or '(none)'!r} is not supported by the llama.cpp in this "
            "build (llama-cpp-python 0.3.36). Use a model of a supported architecture (llama, "
            "qwen2, qwen3, gemma3, phi3, mistral3, ...), or a newer localspec."
        )


def check_tokenizer(path: Path, meta: dict) -> None:
    """llama.cpp loads a file without a vocabulary (tokenizer model 'no_vocab') and then
    aborts on the first tokenize: refuse it here. No tokenizer model at all fails its load."""
    model = _text(meta.get("tokenizer.ggml.model", b""))
    if model in ("", "no_vocab", "none") or not meta.get("tokenizer.ggml.tokens"):
        raise ModelFileError(
            f"{path}: the file has no tokenizer (vocabulary), so it cannot read "
            "or write text. Pick a GGUF of the model that includes its tokenizer."
        )


def check_memory(infos: Sequence[ModelFileInfo], available_bytes: int | None) -> None:
    needed = sum(i.memory_bytes for i in infos)
    if available_bytes is None or needed <= available_bytes:
        return
    names = " + ".join(i.path.name for i in infos)
    weights = sum(i.file_bytes * i.host_fraction for i in infos)
    kv = sum(i.kv_bytes * i.host_fraction for i in infos)
    host = sum(i.states.on_host for i in infos)
    kept = f" + {gb(host)} of checkpoints and hidden states" if host else ""
    raise ModelFileError(
        f"{names}: not enough memory: needs about {gb(needed)} (weights "
        f"{gb(weights)} + KV cache {gb(kv)} at {infos[0].n_ctx} tokens of context "
        f"+ {COMPUTE_OVERHEAD:.0%} compute buffers{kept}), {gb(available_bytes)} available; try "
        "fewer GPU layers (--gpu-layers), a smaller quantization, or a smaller --ctx. "
        "Close other programs to free memory."
    )


def _host_fraction(n_layer: int, gpu_layers: int | None) -> float:
    """Layers llama.cpp keeps on the CPU, as a share: weights and KV split by layer."""
    if not gpu_layers or n_layer <= 0:
        return 1.0
    if gpu_layers < 0:
        return 0.0
    return max(n_layer - gpu_layers, 0) / n_layer


# --- the header -----------------------------------------------------------------------------
def read_layout(path: Path) -> tuple[dict, int]:
    """(metadata, the file length its header implies), with this module's messages."""
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise ModelFileError(f"{path}: cannot be read ({e.strerror or e}). Check its permissions.") from None
    if magic != b"GGUF":
        raise ModelFileError(
            f"{path}: not a GGUF model file (it starts with {magic!r}, a GGUF file with "
            "'GGUF'). localspec runs GGUF models only: download a GGUF build of the model, or "
            "convert it with llama.cpp's convert_hf_to_gguf.py."
        )
    try:
        return ggufinfo.read_layout(path)
    except ggufinfo.GgufTruncated:
        raise ModelFileError(
            f"{path}: the file is truncated: it ends inside its header, after "
            f"{path.stat().st_size:,} bytes. The download was probably interrupted: download it "
            "again (`localspec models pull` resumes) or copy it again."
        ) from None
    except ggufinfo.GgufError as e:
        raise ModelFileError(f"{e}; download a current GGUF build of the model.") from None


def _split_total(path: Path, meta: dict, size: int) -> int:
    """A split model (NAME-00001-of-00003.gguf) loads every part: their sizes add up."""
    if int(meta.get("split.count", 1) or 1) <= 1:
        return size
    return sum(p.stat().st_size for p in ggufinfo.split_parts(path, meta)) or size


def _text(v) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)

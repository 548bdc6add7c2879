"""Whether the next-token-prediction (MTP) layers a GGUF declares are whole: every tensor
llama.cpp requires of each MTP block is in the file. ``ggufinfo.mtp_layers`` reads a file's
header (no tensor data) into an ``MtpLayers``; automatic MTP is for a file whose layers are
``usable``, and a load that fails on a file whose layers are not says why (``problem``).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

# The tensors llama.cpp requires of every MTP block, in every architecture that has them
# (qwen35, qwen35moe, qwen3next, glm4-moe, deepseek2, step35, mimo2, ...: ``load_arch_tensors``
# in src/models/, created without TENSOR_NOT_REQUIRED); the blocks are the last
# ``nextn_predict_layers`` of ``block_count``. (llama.cpp's own test for an MTP file,
# common/speculative.cpp, looks for ``nextn.eh_proj`` of the last block.)
MTP_BLOCK_TENSORS = ("attn_norm.weight", "nextn.eh_proj.weight", "nextn.enorm.weight", "nextn.hnorm.weight")


@dataclass(frozen=True)
class MtpLayers:
    """A file's next-token-prediction (MTP) layers: how many its metadata declares, and the
    tensors llama.cpp requires of them that the file lacks."""

    path: Path
    arch: str
    declared: int  # <arch>.nextn_predict_layers
    missing: tuple[str, ...] = ()  # "blk.4.attn_norm.weight", ... block by block

    @classmethod
    def check(cls, path: Path, arch: str, declared: int, n_layer: int, tensors: Collection[str]) -> MtpLayers:
        """The ``declared`` MTP layers of a file of ``n_layer`` blocks whose tensors are named
        ``tensors``: the MTP blocks are the last ``declared``."""
        wanted = [f"blk.{il}.{t}" for il in range(max(n_layer - declared, 0), n_layer) for t in MTP_BLOCK_TENSORS]
        return cls(path, arch, declared, tuple(name for name in wanted if name not in tensors))

    @property
    def usable(self) -> bool:
        """Whether an MTP draft can run: layers declared and every required tensor there."""
        return self.declared > 0 and not self.missing

    @property
    def problem(self) -> str | None:
        """Why the declared layers cannot be used (naming the missing tensors), or None."""
        if not self.missing:
            return None
        n, missing = self.declared, self.missing
        shown = ", ".join(missing) if len(missing) <= 4 else ", ".join(missing[:3]) + f" and {len(missing) - 3} more"
        layers = "1 MTP layer" if n == 1 else f"{n} MTP layers"
        return (
            f"{self.path.name} declares {layers} ({self.arch}.nextn_predict_layers = {n}) but lacks "
            f"{'its' if n == 1 else 'their'} tensors ({shown}): it was converted without them. Use a GGUF "
            "of this model without MTP layers, or one with them whole (often a repo named *-MTP-GGUF)"
        )

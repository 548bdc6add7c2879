"""What each kind of state takes (``llama/memory.py``): against llama.cpp's own sizes on tiny
models the tests write, and counted in the preflight memory check, the GPU offload plan and
the pair menu's figure (the catalog's side is in ``tests/models/test_catalog_mtp.py``).

llama.cpp's sizes are those it logs as it creates a context (``llama_kv_cache: size = X MiB``
per cache, ``llama_memory_recurrent: size = X MiB``), to 0.01 MiB; the contexts here are large
enough that every cache is half a MiB or more, so the rounding stays under 1 %."""

from __future__ import annotations

import re

import pytest

from localspec.llama import ggufinfo
from localspec.llama.backend import LlamaModel
from localspec.llama.log import init_backend
from localspec.llama.memory import (
    CHECKPOINTS_KEPT,
    SNAPSHOT_BUDGET,
    checkpoint_bytes,
    footprint,
    hidden_state_bytes,
    hidden_width,
    kv_bytes_per_token,
    recurrent_state_bytes,
    snapshots_for,
)
from localspec.llama.memory import (
    SNAPSHOTS as MOST_SNAPSHOTS,
)
from localspec.llama.mtp import MtpModel
from localspec.llama.preflight import check_model_files
from localspec.units import MiB
from tests.support.gemma4_gguf import write_tiny_assistant, write_tiny_gemma4
from tests.support.hybrid_gguf import HybridShape, write_tiny_qwen35
from tests.support.tiny_gguf import write_tiny_gguf

TEXT = "the model is fast and the draft is slow; def x = 1 + 2 hello world"
TOLERANCE = 0.05  # the target: within 5 % of llama.cpp's own figure
N_CTX = 4096  # every cache here a MiB or so: llama.cpp's log rounds to 0.01 MiB
SNAPSHOTS = 16  # --draft-max's default
# a state of 219 KiB, so that its 17 copies (3.6 MiB) are well above the log's rounding
STATE_SHAPE = HybridShape(n_layer=8, d_state=32, dt_rank=8)
STATE = 6 * 4 * (3 * (256 + 2 * 2 * 32) + 32 * 256)  # 6 delta-net layers, F32: conv and state
# the tiny Gemma 4: blk.0 sliding-window, blk.1 global, blk.2-3 reuse their caches; 2 KV heads
GLOBAL, SLIDING = 2 * (32 + 32) * 2, 2 * (16 + 16) * 2  # K and V, F16, per token


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("memory")
    return {
        "llama": write_tiny_gguf(d / "llama.gguf", seed=0, n_ctx=N_CTX),
        "gemma4": write_tiny_gemma4(d / "gemma4.gguf", seed=1, n_ctx=N_CTX),
        "assistant": write_tiny_assistant(d / "assistant.gguf", target_seed=1, n_ctx=N_CTX),
        "hybrid": write_tiny_qwen35(d / "hybrid.gguf", seed=2, shape=STATE_SHAPE, n_ctx=N_CTX),
        "mtp": write_tiny_qwen35(d / "mtp.gguf", seed=3, mtp=True, n_ctx=N_CTX),
    }


def meta_of(path) -> tuple[dict, str]:
    meta, _ = ggufinfo.read_metadata(path)
    return meta, meta["general.architecture"].decode()


def logged_caches(capsys, path, *, mtp: bool = False, **load) -> list[tuple[str, int, int]]:
    """(which memory, bytes, cells) of each cache llama.cpp made for ``path`` at N_CTX tokens,
    as it logged them; with ``mtp``, the MTP layer's context too."""
    capsys.readouterr()
    try:
        model = LlamaModel.load(path, n_ctx=N_CTX, threads=1, verbose=True, mtp=mtp, **load)
        if mtp:
            MtpModel(model).close()
        model.close()
    finally:
        init_backend(verbose=False)
    found = re.findall(r"^(\w+): size = +([\d.]+) MiB \( *(\d+) cells", capsys.readouterr().err, re.M)
    return [(who, round(float(mib) * MiB), int(cells)) for who, mib, cells in found]


class TestKvCache:
    @pytest.mark.parametrize("name", ["llama", "gemma4", "hybrid", "mtp"])
    def test_the_header_gives_llama_cpps_kv_cache(self, files, capsys, name):
        caches = logged_caches(capsys, files[name], mtp=name == "mtp")
        kv = [size for who, size, _ in caches if who == "llama_kv_cache"]
        meta, arch = meta_of(files[name])
        assert kv_bytes_per_token(meta, arch) * N_CTX == pytest.approx(sum(kv), rel=TOLERANCE)

    def test_gemma4s_sliding_window_layers_are_cached_at_full_size(self, files, capsys):
        (_, global_size, global_cells), (_, sliding_size, sliding_cells) = logged_caches(capsys, files["gemma4"])
        assert global_cells == sliding_cells == N_CTX  # llama.cpp's swa_full: not n_swa + a batch
        meta, arch = meta_of(files["gemma4"])
        ours = kv_bytes_per_token(meta, arch, window=False), kv_bytes_per_token(meta, arch, window=True)
        assert ours == (GLOBAL, SLIDING)
        assert ours[0] * N_CTX == pytest.approx(global_size, rel=TOLERANCE)
        assert ours[1] * N_CTX == pytest.approx(sliding_size, rel=TOLERANCE)


class TestRecurrentState:
    def test_snapshots_stay_within_their_count_and_budget(self):
        assert snapshots_for(0, 16) == MOST_SNAPSHOTS == 8  # no recurrent state: nothing to budget
        assert snapshots_for(20 * 2**20, 16) == 8  # a Qwen3.5-0.8B: the count, not --draft-max
        assert snapshots_for(20 * 2**20, 5) == 5  # ... nor more than the longest draft
        assert snapshots_for(150 * 2**20, 16) == SNAPSHOT_BUDGET // (150 * 2**20) == 6  # a 27B
        assert snapshots_for(2 * SNAPSHOT_BUDGET, 16) == 0  # then every rollback is a checkpoint's

    def test_the_snapshots_are_llama_cpps_state_buffer(self, files, capsys):
        caches = logged_caches(capsys, files["hybrid"], snapshots=SNAPSHOTS)
        [size] = [size for who, size, _ in caches if who == "llama_memory_recurrent"]
        meta, arch = meta_of(files["hybrid"])
        assert recurrent_state_bytes(meta, arch) == STATE
        copies = footprint(0, STATE, N_CTX, snapshots=SNAPSHOTS).state  # the state and 16 copies
        assert copies == 17 * STATE and copies == pytest.approx(size, rel=TOLERANCE)

    def test_the_checkpoints_are_what_a_rollback_keeps(self, files):
        model = LlamaModel.load(files["hybrid"], n_ctx=512, threads=1)
        try:
            ids = model.tokenize(TEXT)
            model.evaluate(ids, 1)
            model.checkpoint(lasting=True)  # a reply's prompt
            for _ in range(3):  # steps, each replacing the last step's
                model.evaluate(ids[:4], 1)
                model.checkpoint()
            kept = model.rollback.checkpoints
            # each sized by llama_state_seq_get_size_ext (the recurrent part): llama.cpp's own
            assert len(kept) == CHECKPOINTS_KEPT
            assert checkpoint_bytes(STATE) == pytest.approx(sum(len(c.data) for c in kept), rel=TOLERANCE)
        finally:
            model.close()


class TestHiddenStates:
    @pytest.mark.parametrize("name", ["gemma4", "mtp"])  # what a Gemma 4 assistant, an MTP layer reads
    def test_a_full_context_of_hidden_states(self, files, name):
        n_ctx = 300  # not a power of two times 256: a buffer that grows by doubling overshoots
        model = LlamaModel.load(files[name], n_ctx=n_ctx, threads=1, mtp=name == "mtp")
        try:
            hidden = model.keep_hidden()
            ids = model.tokenize(TEXT)
            model.evaluate((ids * n_ctx)[:n_ctx], 1)
            meta, arch = meta_of(files[name])
            assert hidden.n_embd == hidden_width(meta, arch) == 64  # llama.cpp's n_embd_out
            assert hidden.rows.nbytes == pytest.approx(hidden_state_bytes(64, n_ctx), rel=TOLERANCE)
            assert hidden.rows.nbytes <= hidden_state_bytes(64, n_ctx)
        finally:
            model.close()


class TestCounted:
    """Each kind of state in the preflight's total and the offload plan's layer sizes."""

    def test_the_sliding_window_cache(self, files):
        [info] = check_model_files([files["gemma4"]], N_CTX, available_bytes=10**12)
        assert info.kv_bytes == (GLOBAL + SLIDING) * N_CTX
        size = files["gemma4"].stat().st_size
        assert info.memory_bytes == int((size + (GLOBAL + SLIDING) * N_CTX) * 1.1)
        assert ggufinfo.read_model_layout(files["gemma4"]).kv_bytes_per_token == GLOBAL + SLIDING
        # what `models import` writes to the catalog, for the pair menu
        assert ggufinfo.read_info(files["gemma4"]).kv_bytes_per_token == GLOBAL + SLIDING

    def test_the_snapshots_and_checkpoints(self, files):
        hybrid, meta = files["hybrid"], meta_of(files["hybrid"])
        kv = kv_bytes_per_token(*meta) * N_CTX
        kept = 1 + MOST_SNAPSHOTS  # at --draft-max 16
        target, draft = check_model_files([hybrid, hybrid], N_CTX, available_bytes=10**12, draft_max=SNAPSHOTS)
        assert target.kv_bytes == kv + kept * STATE  # the state and its snapshots (memory.SNAPSHOTS of them)
        assert draft.kv_bytes == kv + STATE  # a draft model keeps no snapshots
        size = hybrid.stat().st_size
        # checkpoints stay on the host, however many layers are offloaded
        assert target.memory_bytes == int((size + kv + kept * STATE) * 1.1) + 2 * STATE
        [offloaded] = check_model_files([hybrid], N_CTX, -1, available_bytes=10**12, draft_max=SNAPSHOTS)
        assert offloaded.memory_bytes == 2 * STATE
        assert ggufinfo.read_model_layout(hybrid, SNAPSHOTS).state_bytes == kept * STATE  # on the GPU with its layers
        assert ggufinfo.read_model_layout(hybrid, 0).state_bytes == STATE

    def test_the_hidden_states(self, files):
        hidden = N_CTX * 64 * 4  # one F32 row of the target's 64 per token
        target, _ = check_model_files([files["gemma4"], files["assistant"]], N_CTX, -1, available_bytes=10**12)
        assert target.memory_bytes == hidden  # on the host, however many layers are offloaded
        [alone] = check_model_files([files["gemma4"]], N_CTX, -1, available_bytes=10**12)
        assert alone.memory_bytes == 0
        # a target with MTP layers drafts with them by default, and may be told it does not
        [mtp] = check_model_files([files["mtp"]], N_CTX, -1, available_bytes=10**12)
        [lookup] = check_model_files([files["mtp"]], N_CTX, -1, available_bytes=10**12, mtp=False)
        assert mtp.memory_bytes - lookup.memory_bytes == hidden

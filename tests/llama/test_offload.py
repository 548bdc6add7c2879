"""The GPU offload plan (localspec.llama.offload), the layer sizes read from GGUF headers
(ggufinfo.read_model_layout), ggml's device list (llama_backend) and the wiring into
Session.load and `localspec run`. Sizes are written out by hand in MiB."""

from __future__ import annotations

import json

import gguf
import numpy as np
import pytest

from localspec.llama import offload
from localspec.llama.ggufinfo import read_model_layout
from localspec.llama.offload import (
    CPU_BUILD,
    Device,
    ModelLayout,
    OffloadPlan,
    cpu_plan,
    offload_devices,
    plan_offload,
    usable_gpu_bytes,
)
from localspec.units import GiB, MiB
from tests.support.tiny_gguf import vocab, write_tiny_gguf

CPU = Device("CPU", "Intel(R) Xeon(R)", "cpu", 16 * GiB, 16 * GiB)


def gpu(free_mib: int, name="CUDA0", description="NVIDIA GeForce RTX 4060 Laptop GPU", kind="gpu") -> Device:
    return Device(name, description, kind, free_mib * MiB, 8 * GiB)


# Draft: 24 blocks of 10 MiB, output layer 100 MiB, KV 1 KiB per layer per token, so 4 MiB per
# block at 4096 tokens: a block costs 14 MiB, the whole draft 100 + 24 x 14 = 436 MiB.
DRAFT = ModelLayout(24, (10 * MiB,) * 24, 100 * MiB, 24 * 1024)
# Target: 28 blocks of 30 MiB, output 200 MiB, KV 2 KiB per layer per token (8 MiB per block at
# 4096): a block costs 38 MiB, the whole target 200 + 28 x 38 = 1264 MiB.
TARGET = ModelLayout(28, (30 * MiB,) * 28, 200 * MiB, 28 * 2048)
CTX = 4096


@pytest.fixture(autouse=True)
def fixed_margins(monkeypatch):
    """Hand numbers: no percentage margin, 256 MiB reserve per model on the GPU.
    So the whole draft costs 436 + 256 = 692 MiB and the whole target 1264 + 256 = 1520 MiB."""
    monkeypatch.setattr(offload, "GPU_MARGIN_FRACTION", 0.0)
    monkeypatch.setattr(offload, "COMPUTE_RESERVE_BYTES", 256 * MiB)


class TestLayerCounting:
    # 3 blocks of 10, 20, 30 bytes, output layer 5 bytes, no KV
    SMALL = ModelLayout(3, (10, 20, 30), 5, 0)

    @pytest.mark.parametrize(
        "n, expected",
        [
            (0, 0),
            (1, 5),  # the output layer goes first
            (2, 5 + 30),  # then the blocks from the top: blk.2
            (3, 5 + 30 + 20),  # blk.1
            (4, 5 + 30 + 20 + 10),  # n_layer + 1: everything
            (-1, 65),
            (99, 65),  # -1 and too many: all
        ],
    )
    def test_last_layers_go_first_output_before_blocks(self, n, expected):
        assert self.SMALL.gpu_bytes(n, 100) == expected

    @pytest.mark.parametrize("requested, used", [(-1, 4), (0, 0), (2, 2), (4, 4), (7, 4)])
    def test_requested_counts_as_llama_cpp_uses_them(self, requested, used):
        assert self.SMALL.total == 4 and self.SMALL.layers(requested) == used

    def test_kv_cache_of_offloaded_blocks_only(self):
        m = ModelLayout(3, (10, 20, 30), 5, kv_bytes_per_token=6)  # 2 bytes per layer per token
        assert m.gpu_bytes(1, 10) == 5  # the output layer has no KV
        assert m.gpu_bytes(2, 10) == 5 + 30 + 20  # blk.2 and its 10 tokens x 2 bytes
        assert m.gpu_bytes(4, 10) == 65 + 60

    def test_context_capped_at_the_models_own(self):
        m = ModelLayout(3, (10, 20, 30), 5, kv_bytes_per_token=6, context_length=5)
        assert m.gpu_bytes(4, 10) == 65 + 30  # 5 tokens, not 10

    def test_hand_numbers_of_the_fixtures(self):
        assert DRAFT.gpu_bytes(-1, CTX) == 436 * MiB
        assert TARGET.gpu_bytes(-1, CTX) == 1264 * MiB


class TestPolicy:
    def test_everything_fits(self):
        plan = plan_offload(TARGET, DRAFT, CTX, [CPU, gpu(4096)])
        assert (plan.draft_layers, plan.draft_total, plan.target_layers, plan.target_total) == (25, 25, 29, 29)
        assert plan.gpu_bytes == (692 + 1520) * MiB
        assert plan.summary == (
            "GPU NVIDIA GeForce RTX 4060 Laptop GPU (4.0 GiB free): draft 25/25 layers, target 29/29 layers"
        )
        assert plan.short == "GPU  draft 25/25 · target 29/29"

    def test_target_too_big_draft_first_then_what_fits(self):
        # 1880 MiB: the draft takes 692, 1188 are left; the target's output layer and reserve
        # take 456, each block 38 more: 19 blocks (1178) fit, 20 (1216) do not -> 20 layers
        plan = plan_offload(TARGET, DRAFT, CTX, [CPU, gpu(1880)])
        assert (plan.draft_layers, plan.target_layers) == (25, 20)
        assert plan.summary.endswith(": draft 25/25 layers, target 20/29 layers")
        assert "the target does not fit beside the draft" in plan.reason

    def test_draft_too_big_as_many_draft_layers_as_fit_and_no_target(self):
        # 500 MiB: reserve 256 + output 100 leave 144, 10 blocks of 14 -> 11 layers
        plan = plan_offload(TARGET, DRAFT, CTX, [gpu(500)])
        assert (plan.draft_layers, plan.target_layers) == (11, 0)
        assert "even the draft does not fit" in plan.reason

    def test_nothing_fits(self):
        # 300 MiB < 256 + 100 for the draft's output layer alone
        plan = plan_offload(TARGET, DRAFT, CTX, [gpu(300)])
        assert (plan.draft_layers, plan.target_layers, plan.gpu_bytes) == (0, 0, 0)
        assert plan.short == "GPU  draft 0/25 · target 0/29"

    def test_target_alone(self):
        # 1000 MiB: 256 + 200 leave 544, 14 blocks of 38 (532) -> 15 layers
        plan = plan_offload(TARGET, None, CTX, [gpu(1000)])
        assert (plan.target_layers, plan.draft_layers, plan.draft_total) == (15, 0, 0)
        assert plan.short == "GPU  target 15/29"
        assert plan.summary.endswith(": target 15/29 layers")

    def test_margin_is_taken_off_free_memory(self, monkeypatch):
        monkeypatch.setattr(offload, "GPU_MARGIN_FRACTION", 0.05)
        assert usable_gpu_bytes(1000 * MiB) == 950 * MiB
        # 2212 MiB would fit both wholly; with 5 % off (2101.4) the target loses 3 blocks
        plan = plan_offload(TARGET, DRAFT, CTX, [gpu(2212)])
        assert (plan.draft_layers, plan.target_layers) == (25, 26)


class TestOverrides:
    def test_target_fixed_draft_fills_what_is_left(self):
        # all 1520 MiB of target at the user's word; 360 left: the draft's output layer (356)
        plan = plan_offload(TARGET, DRAFT, CTX, [gpu(1880)], target_layers=-1)
        assert (plan.target_layers, plan.draft_layers) == (29, 1)
        assert "target layers set by --gpu-layers" in plan.reason

    def test_draft_kept_off_the_gpu_target_takes_it_all(self):
        plan = plan_offload(TARGET, DRAFT, CTX, [gpu(1880)], draft_layers=0)
        assert (plan.draft_layers, plan.target_layers) == (0, 29)
        assert "draft layers set by --draft-gpu-layers" in plan.reason

    def test_too_many_means_all(self):
        plan = plan_offload(TARGET, DRAFT, CTX, [gpu(8192)], target_layers=100, draft_layers=7)
        assert (plan.target_layers, plan.draft_layers) == (29, 7)

    def test_more_than_fits_is_obeyed_with_a_warning(self):
        plan = plan_offload(TARGET, DRAFT, CTX, [gpu(1000)], target_layers=-1, draft_layers=-1)
        assert (plan.target_layers, plan.draft_layers) == (29, 25)
        assert "may run out of GPU memory" in plan.reason


class TestDevices:
    def test_cpu_only_build_is_all_zeros(self):
        plan = plan_offload(TARGET, DRAFT, CTX, [CPU], gpu_offload=False)
        assert (plan.target_layers, plan.draft_layers, plan.on_gpu) == (0, 0, False)
        assert (plan.target_total, plan.draft_total) == (29, 25)
        assert plan.summary == "CPU only: this llama.cpp build has no GPU offload"
        assert plan.short == "CPU only"

    def test_cpu_plan_without_reading_files(self):
        plan = cpu_plan(None, None, CPU_BUILD, has_draft=True)
        assert (plan.target_layers, plan.target_total, plan.has_draft) == (0, 0, True)
        assert plan.as_dict()["summary"] == "CPU only: this llama.cpp build has no GPU offload"

    def test_offload_build_without_a_gpu_device(self):
        plan = plan_offload(TARGET, DRAFT, CTX, [CPU])
        assert plan.short == "CPU only" and "no GPU device" in plan.summary

    def test_discrete_gpus_before_integrated_ones_as_llama_cpp(self):
        igpu = gpu(2000, "Vulkan1", "Intel Iris Xe", "igpu")
        assert offload_devices([CPU, igpu]) == [igpu]
        assert offload_devices([CPU, igpu, gpu(1000)]) == [gpu(1000)]

    def test_two_gpus_share_the_layers(self):
        plan = plan_offload(TARGET, DRAFT, CTX, [gpu(1200, "CUDA0", "A"), gpu(1200, "CUDA1", "B")])
        assert (plan.draft_layers, plan.target_layers) == (25, 29)  # 2212 of 2400 MiB
        assert plan.gpu_name == "2 GPUs (A, B)" and plan.gpu_free_bytes == 2400 * MiB

    def test_no_memory_figure_means_llama_cpps_default_all(self):
        plan = plan_offload(TARGET, DRAFT, CTX, [Device("Metal", "Apple M2", "gpu", 0, 0)])
        assert (plan.target_layers, plan.draft_layers) == (29, 25)
        assert "no free-memory figure" in plan.reason
        assert plan.summary.startswith("GPU Apple M2: ")

    def test_backend_reports_this_machines_devices(self):
        from localspec.llama import backend as llama_backend

        devices, why = llama_backend.device_report()
        assert why is None and any(d.type == "cpu" for d in devices)
        assert all(d.total_bytes >= d.free_bytes >= 0 for d in devices)
        info = llama_backend.build_info()
        assert info["gpu_offload"] == llama_backend.supports_gpu_offload()
        assert info["llama_cpp_python"] and info["max_devices"] >= 1 and info["system_info"]

    def test_backend_says_why_when_ggml_is_unreachable(self, monkeypatch, tmp_path):
        from localspec.llama import devices as llama_devices

        class NoSymbols:  # a library without ggml's device API
            pass

        monkeypatch.setattr(llama_devices, "_GGML_NAMES", ())
        monkeypatch.setattr(llama_devices.L.llama_cpp, "_lib", NoSymbols())
        devices, why = llama_devices.device_report()
        assert devices == [] and "device API is not reachable" in why
        assert llama_devices.backend_devices() == []


# --- layer sizes from real GGUF headers -------------------------------------------------------
def _write(path, tensors: dict[str, tuple[int, ...]], meta=()):
    """A header-only-valid GGUF with F32 tensors of these numpy shapes (not loadable)."""
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(2)
    w.add_context_length(256)
    for key, value in meta:
        w.add_uint16(key, value)
    for name, shape in tensors.items():
        w.add_tensor(name, np.zeros(shape, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


class TestReadLayout:
    def test_tiny_llama(self, tmp_path):
        path = write_tiny_gguf(tmp_path / "t.gguf", n_embd=64, n_layer=2, n_head=4, n_ff=128, n_ctx=512)
        layout = read_model_layout(path)
        n_vocab = len(vocab()[0])
        # per block, F32: 2 norms of 64, q/k/v/o 64x64, gate/up 128x64, down 64x128
        block = 4 * (2 * 64 + 4 * 64 * 64 + 3 * 128 * 64)
        assert layout.block_bytes == (block, block) and layout.n_layer == 2 and layout.total == 3
        assert layout.output_bytes == 4 * (64 + n_vocab * 64)  # output_norm + output.weight
        assert layout.kv_bytes_per_token == 2 * 4 * (16 + 16) * 2  # 2 layers, 4 KV heads of 16
        assert layout.context_length == 512

    def test_tied_embeddings_copy_token_embd_to_the_output_layer(self, tmp_path):
        path = _write(
            tmp_path / "tied.gguf",
            {
                "token_embd.weight": (100, 8),
                "output_norm.weight": (8,),
                "blk.0.attn_q.weight": (8, 8),
                "blk.1.attn_q.weight": (8, 8),
                "rope_freqs.weight": (4,),
            },
        )
        layout = read_model_layout(path)
        assert layout.output_bytes == 4 * (8 + 100 * 8)
        assert layout.block_bytes == (4 * 64, 4 * 64)

    def test_split_model_reads_every_part(self, tmp_path):
        first = _write(
            tmp_path / "m-00001-of-00002.gguf",
            {"token_embd.weight": (10, 8), "blk.0.attn_q.weight": (8, 8)},
            [("split.count", 2)],
        )
        _write(
            tmp_path / "m-00002-of-00002.gguf",
            {"blk.1.attn_q.weight": (8, 8), "output.weight": (10, 8)},
            [("split.count", 2)],
        )
        layout = read_model_layout(first)
        assert layout.block_bytes == (256, 256) and layout.output_bytes == 320


# --- wiring: Session.load and `localspec run` ----------------------------------------------------
@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    d = tmp_path_factory.mktemp("offload")
    return (
        write_tiny_gguf(d / "target.gguf", seed=0, n_ctx=512),
        write_tiny_gguf(d / "draft.gguf", seed=1, noise_of=0, noise=0.6, n_ctx=512),
    )


@pytest.fixture
def fake_gpu(monkeypatch, pair):
    """This CPU-only build pretends to offload to one GPU with room for the whole draft and
    two of the target's three layers (output + blk.1); llama.cpp itself ignores the counts."""
    from localspec.llama import backend as llama_backend
    from localspec.llama import preflight

    monkeypatch.setattr(offload, "COMPUTE_RESERVE_BYTES", 0)
    target, draft = (read_model_layout(p) for p in pair)
    free = draft.gpu_bytes(-1, 256) + target.gpu_bytes(2, 256)
    monkeypatch.setattr(llama_backend, "supports_gpu_offload", lambda: True)
    monkeypatch.setattr(llama_backend, "backend_devices", lambda: [CPU, Device("CUDA0", "Fake GPU", "gpu", free, free)])
    loads, checks = [], []
    real_load, real_check = llama_backend.LlamaModel.load.__func__, preflight.check_model_files
    monkeypatch.setattr(
        llama_backend.LlamaModel,
        "load",
        classmethod(lambda cls, path, *a, **kw: loads.append((path.name, a[2])) or real_load(cls, path, *a, **kw)),
    )
    monkeypatch.setattr(
        preflight,
        "check_model_files",
        lambda files, n_ctx, layers=0, *a, **kw: (checks.append(layers), real_check(files, n_ctx, layers, *a, **kw))[1],
    )
    return loads, checks


class TestWiring:
    def test_session_loads_each_model_with_its_own_layers(self, pair, fake_gpu):
        from localspec.chat.session import LoadOptions, PairSpec, Session

        loads, checks = fake_gpu
        s = Session.load(PairSpec(*pair), LoadOptions(n_ctx=256, threads=1))
        try:
            assert loads == [("target.gguf", 2), ("draft.gguf", 3)]
            assert checks == [[2, 3]]
            assert s.offload.short == "GPU  draft 3/3 · target 2/3"
            assert s.offload.summary.startswith("GPU Fake GPU (")
        finally:
            s.close()

    def test_user_counts_reach_the_models(self, pair, fake_gpu):
        from localspec.chat.session import LoadOptions, PairSpec, Session

        loads, _ = fake_gpu
        s = Session.load(PairSpec(*pair), LoadOptions(n_ctx=256, threads=1, gpu_layers=-1, draft_gpu_layers=0))
        s.close()
        assert loads == [("target.gguf", 3), ("draft.gguf", 0)]

    def test_cpu_only_build_loads_no_layer_on_a_gpu(self, pair):
        from localspec.chat.session import LoadOptions, PairSpec, Session

        s = Session.load(PairSpec(pair[0], lookup=True), LoadOptions(n_ctx=256, threads=1, gpu_layers=5))
        s.close()
        assert s.offload == cpu_plan(None, None, CPU_BUILD, has_draft=False)

    def test_run_json_and_stats_line_show_the_split(self, pair, fake_gpu, capsys):
        from localspec.cli import main

        args = [
            "run",
            "--target",
            str(pair[0]),
            "--draft",
            str(pair[1]),
            "--threads",
            "1",
            "--ctx",
            "256",
            "--max-tokens",
            "4",
            "--raw",
            "--draft-gpu-layers",
            "1",
        ]
        assert main(args + ["--json", "hello"]) == 0
        out = json.loads(capsys.readouterr().out)["offload"]
        # the draft held to 1 layer at the user's word; the target fills the rest: all 3
        assert (out["draft_layers"], out["draft_total"], out["target_layers"], out["target_total"]) == (1, 3, 3, 3)
        assert out["summary"].startswith("GPU Fake GPU")
        assert main(args + ["hello"]) == 0
        stats = next(line for line in capsys.readouterr().err.splitlines() if line.startswith("[draft]"))
        assert stats.endswith("| GPU  draft 1/3 · target 3/3")

    def test_plan_equals_what_a_hand_made_one_says(self):
        plan = OffloadPlan(20, 29, 25, 25, "NVIDIA GeForce RTX 4060", int(7.6 * GiB), has_draft=True)
        assert plan.summary == "GPU NVIDIA GeForce RTX 4060 (7.6 GiB free): draft 25/25 layers, target 20/29 layers"

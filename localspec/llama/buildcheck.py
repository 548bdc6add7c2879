"""Can this llama.cpp build run at all? One batched decode of a tiny model, in a child process.

Some virtual machines advertise AMX on their Xeon CPUs without letting programs use it. A
llama.cpp built natively there picks ggml's AMX kernels, and the first decode of more than one
token (a single token runs ggml's AVX512-VNNI kernel instead) dies by a signal, taking the process
with it. So the check runs where a crash cannot kill its caller: a fresh Python decodes one batch
of a tiny model that this module writes, whose matrices are Q8_0 and 32-aligned, as ggml's AMX
kernels require. A child that dies by a signal, exits non-zero or hangs names a build that cannot
run; the fix is the build ``./dev`` makes on such CPUs (``AVX2_CMAKE_ARGS``).

``localspec doctor`` runs the check every time (``check_now``). A command that loads a model runs
it once per build (``require_runnable``): the answer is kept under the build's key (llama-cpp-python's
version and its library's path, size and mtime), and a build whose check failed stops there with
the message and the reinstall line instead of crashing. ``LOCALSPEC_SKIP_BUILD_CHECK`` set to
anything skips both (the test suite sets it: a load does not pay for a child process).

This module does not import llama_cpp until it is asked for the build's key or runs as the child:
``localspec.doctor`` reads its constants where llama-cpp-python cannot be loaded.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

LLAMA_CPP_PIN = "0.3.36"  # the llama-cpp-python version pyproject.toml pins
PIP_REINSTALL = f"pip install --force-reinstall --no-cache-dir llama-cpp-python=={LLAMA_CPP_PIN}"
# what ./dev builds with on a CPU that advertises AMX (tests/llama/test_buildcheck.py checks that
# the two are the same): AVX2 kernels, none of AVX512's or AMX's
AVX2_CMAKE_ARGS = (
    "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON "
    "-DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
)
REINSTALL_AVX2 = f'CMAKE_ARGS="{AVX2_CMAKE_ARGS}" {PIP_REINSTALL}'
ADVICE = (
    "rebuild llama-cpp-python for AVX2 (what ./dev builds on CPUs that advertise AMX) in the environment "
    f"localspec runs from:\n    {REINSTALL_AVX2}"
)
CHECK_FILE = "llama-build-check.json"  # in the data dir
SKIP_ENV = "LOCALSPEC_SKIP_BUILD_CHECK"
# a healthy check takes about half a second; this only ends a child that hangs
CHECK_TIMEOUT_S = 60.0
# more than one token takes ggml's AMX path; fewer than 32 keeps a GPU build from sending the
# batch to the GPU (ggml-cuda takes CPU-held weights' batches of 32 and more)
N_TOKENS = 8


@dataclass(frozen=True)
class BuildCheck:
    """What one batched decode of the tiny model did in a child process, with this build."""

    build: str  # build_key(): llama-cpp-python's version and its library's path, size and mtime
    failure: str | None = None  # what failed, e.g. "llama.cpp crashed (SIGSEGV) on ..."; None: it ran

    @property
    def ok(self) -> bool:
        return self.failure is None

    @property
    def message(self) -> str:
        """Why a model cannot be loaded with this build, and the fix."""
        return (
            f"{self.failure}: this llama-cpp-python build cannot run on this machine, and every model would "
            f"crash the same way.\nFix: {ADVICE}\n(checked once for this build; `localspec doctor` checks again)"
        )


def skipped() -> bool:
    return bool(os.environ.get(SKIP_ENV))


def require_runnable(cache: Path, progress: Callable[[str], None] | None = None) -> None:
    """Raise ModelLoadError with the message and the fix where this build's check failed; run
    the check first when this build has none in ``cache`` (a JSON file in the data dir)."""
    if skipped():
        return
    key = build_key()
    check = recall(cache)
    if check is None or check.build != key:
        if progress:
            progress("checking this llama.cpp build (once per build): one batched decode in a child process")
        check = check_now(cache, key)
    if not check.ok:
        from .backend import ModelLoadError

        raise ModelLoadError(check.message)


def check_now(cache: Path, key: str | None = None) -> BuildCheck:
    """Run the check and remember its answer in ``cache``."""
    check = BuildCheck(key or build_key(), run_child())
    remember(cache, check)
    return check


def build_key() -> str:
    """A new build of llama-cpp-python (a reinstall, another version) has another key."""
    import llama_cpp as L

    lib = Path(L.llama_cpp._lib._name)
    stat = lib.stat()
    return f"{L.__version__}|{lib}|{stat.st_size}|{stat.st_mtime_ns}"


def recall(cache: Path) -> BuildCheck | None:
    try:
        return BuildCheck(**json.loads(cache.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):  # none yet, or not ours: check again
        return None


def remember(cache: Path, check: BuildCheck) -> None:
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        part = cache.with_name(f"{cache.name}.{os.getpid()}.part")
        part.write_text(json.dumps(asdict(check)), encoding="utf-8")
        os.replace(part, cache)  # whole or not at all, for a command starting beside this one
    except OSError:  # a data dir that cannot be written: the next command checks again
        pass


# --- the child -------------------------------------------------------------------------------
def child_command(model: Path) -> list[str]:
    return [sys.executable, "-m", __name__, str(model)]


def run_child(command: Sequence[str] | None = None, timeout: float = CHECK_TIMEOUT_S) -> str | None:
    """What failed in the child (None: it decoded its batch and exited 0). ``command``: the
    child's argv in place of ``child_command(model)`` (tests)."""
    with tempfile.TemporaryDirectory(prefix="localspec-buildcheck-") as folder:
        argv = list(command) if command is not None else child_command(write_check_model(Path(folder) / "m.gguf"))
        try:
            done = subprocess.run(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=timeout
            )
        except subprocess.TimeoutExpired:
            return f"llama.cpp did not finish its first batched decode in {timeout:g} s (the check was stopped)"
    return describe_exit(done.returncode, done.stderr.decode("utf-8", "replace"))


def describe_exit(returncode: int, stderr: str) -> str | None:
    if returncode == 0:
        return None
    if returncode < 0:  # POSIX: killed by signal -returncode
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"llama.cpp crashed ({name}) on its first batched decode"
    said = [line.strip() for line in stderr.splitlines() if line.strip()]
    return f"llama.cpp's first batched decode failed (exit {returncode}{': ' + said[-1] if said else ''})"


def write_check_model(path: Path) -> Path:
    """One llama layer, 64 wide, with Q8_0 matrices (ggml's AMX kernels take Q8_0 with 32-aligned
    rows and columns); an SPM vocabulary of 288 tokens: <unk> <s> </s>, the 256 byte tokens
    llama.cpp looks up when it loads one, and 29 pieces, to make the output rows 32-aligned."""
    import gguf
    import numpy as np

    tokens = ["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256)), *(f"▁p{i}" for i in range(29))]
    w = gguf.GGUFWriter(str(path), "llama")
    sizes = {"context_length": 64, "embedding_length": 64, "block_count": 1, "feed_forward_length": 128}
    for key, value in {**sizes, "head_count": 4, "layer_norm_rms_eps": 1e-5, "tokenizer_model": "llama"}.items():
        getattr(w, f"add_{key}")(value)
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * len(tokens))
    w.add_token_types([2, 3, 3] + [6] * 256 + [1] * 29)  # unknown, control, byte, normal
    rng = np.random.default_rng(0)
    for name, shape in _tensors(len(tokens), 64, 128):
        if len(shape) == 1:  # norms
            w.add_tensor(name, np.ones(shape, dtype=np.float32))
            continue
        q8 = gguf.quants.quantize(rng.standard_normal(shape).astype(np.float32) * 0.1, gguf.GGMLQuantizationType.Q8_0)
        w.add_tensor(name, q8, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _tensors(n_vocab: int, n_embd: int, n_ff: int):
    """(name, numpy shape: (rows, cols), ggml's ne reversed) of the one-layer model."""
    yield from (("token_embd.weight", (n_vocab, n_embd)), ("output_norm.weight", (n_embd,)))
    yield from (("output.weight", (n_vocab, n_embd)), ("blk.0.attn_norm.weight", (n_embd,)))
    yield from ((f"blk.0.{t}.weight", (n_embd, n_embd)) for t in ("attn_q", "attn_k", "attn_v", "attn_output"))
    yield from (("blk.0.ffn_norm.weight", (n_embd,)), ("blk.0.ffn_down.weight", (n_embd, n_ff)))
    yield from ((f"blk.0.{t}.weight", (n_ff, n_embd)) for t in ("ffn_gate", "ffn_up"))


def main(argv: Sequence[str]) -> int:
    """The child: load the model on the CPU and decode one batch. A crash ends this process."""
    from .backend import LlamaModel

    model = LlamaModel.load(Path(argv[0]), n_ctx=64, threads=1, gpu_layers=0)
    model.evaluate(list(range(3, 3 + N_TOKENS)), n_logits=2)
    model.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

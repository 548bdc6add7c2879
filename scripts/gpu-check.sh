#!/usr/bin/env bash
# The prepared GPU check: speculative decoding on an NVIDIA GPU, measured side by side.
#
#   scripts/gpu-check.sh prepare        here, where the package index is reachable: put a trimmed
#                                       llama-cpp-python source archive and the Python wheels the
#                                       GPU machine lacks into gpu-bundle/ (git-ignored, ~25 MB)
#   scripts/gpu-check.sh run            there (16 cores, one GPU, no network; under 10 minutes):
#                                       unpack the CUDA build scripts/build_cuda_wheel.sh made here
#                                       (gpu-bundle/cuda/, 15 MB; else build llama.cpp with CUDA from
#                                       the bundle, 236 s on the H200), write random-weight
#                                       models of real shapes, run `localspec bench` on them and
#                                       print the cost curve, what a change of batch size adds,
#                                       per-step overhead and speed-ups
#   scripts/gpu-check.sh run --cpu      a rehearsal of `run` on any machine: the installed llama_cpp,
#                                       tiny shapes, a few tokens (what CI's tests cannot cover)
#
# Random weights accept almost nothing from a random draft, so the bench adds an oracle drafter
# that replays the target-only reply with a set share of its tokens corrupted: a controlled
# acceptance at zero draft cost. The 0.5B-shaped draft model gives the real cost of drafting,
# and with the real Qwen pair's recorded verdicts (`--verdicts`, shipped in the package) it
# drafts as auto mode does, right where the real draft was: auto / the target alone at the real
# pair's acceptance, per target shape.
# Results go to $OUT (the device tool's output folder) or gpu-check-out/: summary.md, the log,
# and gpu-check.tgz with one JSON and table per target beside them. docs/benchmarks.md says how
# the figures there were made.
#
# Then a hybrid target with its own MTP layer (random weights of Qwen3.5-9B's shape, a 7B-class
# model: gated delta-net layers beside attention): `localspec bench --mtp` gives an MTP pass
# against T(1) and the predicted speed-up at acceptance 0.6-0.8, and scripts/rollback_cost.py
# what one rejected draft costs at 100 and 2,000 tokens of context.
#
# Environment knobs: GPU_CHECK_TARGETS (default "7b:q4_k_m 1.5b:f16", run in that order so the
# most important figures land first; 1.5b:q4_k_m and 7b:f16 are the others: with the build's
# 200 s and the 9B's 100 s of writing, more do not fit one 600-s call), GPU_CHECK_MORE (default
# "1.5b:q4_k_m": after the hybrid, where less than GPU_CHECK_MORE_BEFORE, 330 s, has passed, as
# with the prebuilt package, which spares the build), GPU_CHECK_HYBRID (default
# "qwen3.5-9b:q4_k_m"; empty skips it), GPU_CHECK_FA=1 to compile llama.cpp's
# flash-attention kernels too (about 5 more minutes of build), GPU_CHECK_TOKENS (default 128).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
BUNDLE=${GPU_BUNDLE:-$REPO/gpu-bundle}
LLAMA_VERSION=0.3.36
PYV=${GPU_CHECK_PYTHON_VERSION:-3.12}  # the GPU machine's python3
WHEELS="pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.7.0 typing-inspection==0.4.5
        gguf==0.19.0 diskcache==5.6.3 platformdirs==4.14.8 tomli-w==1.2.0 pydivsufsort==0.0.20"
# pyproject's other dependencies: the GPU machine's image has these (KINDS.md's package list) ...
IMAGE_HAS="numpy huggingface-hub filelock"
# ... and the check never imports these (the app and the server do)
NOT_NEEDED="textual starlette uvicorn"
# Parts of the llama.cpp tree the Python package's build never reads (models/ holds 75 MB of
# vocabularies for llama.cpp's own tests); CUDA and CPU backends stay.
TRIM="models docs media benches tests examples gguf-py scripts conversion pocs .devops .github
      tools/server tools/llama-bench tools/perplexity tools/quantize tools/imatrix tools/tts
      tools/cvector-generator tools/export-lora tools/run tools/batched-bench tools/gguf-split
      tools/rpc tools/tokenize tools/main tools/cli tools/completion tools/ui tools/results
      tools/tuning tools/fit-params app skills ggml/src/ggml-et ggml/src/ggml-virtgpu
      ggml/src/ggml-zendnn
      ggml/src/ggml-vulkan ggml/src/ggml-sycl ggml/src/ggml-cann ggml/src/ggml-musa
      ggml/src/ggml-opencl ggml/src/ggml-webgpu ggml/src/ggml-zdnn ggml/src/ggml-hexagon
      ggml/src/ggml-kompute ggml/src/ggml-openvino"

# shellcheck source=scripts/cuda_cmake_args.sh
. "$REPO/scripts/cuda_cmake_args.sh"

say() { printf '\n== %s [%s]\n' "$*" "$(date +%T)"; }

prepare() {
  local py=${PYTHON:-python3} tmp
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  mkdir -p "$BUNDLE/wheels"
  say "llama-cpp-python $LLAMA_VERSION source, trimmed"
  "$py" -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$LLAMA_VERSION" -d "$tmp"
  tar -xzf "$tmp"/llama_cpp_python-$LLAMA_VERSION.tar.gz -C "$tmp"
  local src=$tmp/llama_cpp_python-$LLAMA_VERSION
  for d in $TRIM; do rm -rf "${src:?}/vendor/llama.cpp/$d"; done
  rm -rf "$src/.git" "$src/examples" "$src/docker" "$src/vendor/llama.cpp/tools/mtmd"/test-*
  tar -czf "$BUNDLE/llama_cpp_python-$LLAMA_VERSION-trimmed.tar.gz" -C "$tmp" "llama_cpp_python-$LLAMA_VERSION"
  say "wheels for Python $PYV on manylinux x86-64"
  # shellcheck disable=SC2086
  "$py" -m pip download -q --no-deps --only-binary=:all: --python-version "$PYV" \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$BUNDLE/wheels" $WHEELS
  du -sh "$BUNDLE"
  [ -f "$BUNDLE/cuda/llama_cpp-cuda-sm90.tar.xz" ] \
    || echo "no prebuilt CUDA package: scripts/build_cuda_wheel.sh makes one (half an hour here), else run builds it there"
  echo "next: copy the repo with gpu-bundle/ to the GPU machine and run scripts/gpu-check.sh run"
}

install_python_deps() {
  SITE=${GPU_CHECK_SITE:-/tmp/localspec-gpu-site}
  mkdir -p "$SITE"
  local spec name
  for spec in $WHEELS; do  # a bundle prepared before a wheel joined WHEELS lacks it
    name=${spec%%==*}
    compgen -G "$BUNDLE/wheels/${name//-/_}-${spec#*==}-*.whl" >/dev/null \
      || echo "gpu-bundle lacks $spec: run scripts/gpu-check.sh prepare here, not there" >&2
  done
  python3 -m pip install -q --no-index --no-deps --no-compile --disable-pip-version-check \
    --upgrade --target "$SITE" "$BUNDLE"/wheels/*.whl
  export PYTHONPATH=$SITE:$REPO${PYTHONPATH:+:$PYTHONPATH}
}

gpu_offload() { python3 -c 'import llama_cpp, sys; sys.exit(not llama_cpp.llama_supports_gpu_offload())' 2>/dev/null; }

# The package scripts/build_cuda_wheel.sh built on the CPU machines (sm_90, CUDA 13): no build
# here where it loads. It links this machine's libcudart.so.13 and libcublas.so.13 (its image's
# toolkit and Python packages), found wherever they are, and the driver's libcuda.so.1.
cuda_lib_dirs() {  # where the toolkit's and the Python packages' CUDA 13 libraries are, quickly
  python3 - <<'PY' 2>/dev/null
import glob, os
found = glob.glob("/usr/local/cuda*/lib*/lib*.so.13")
try:
    import nvidia  # nvidia-cublas, nvidia-cuda-runtime: beside the image's torch
    for base in nvidia.__path__:
        found += glob.glob(os.path.join(base, "**", "lib*.so.13"), recursive=True)
except ImportError:
    pass
names = ("libcublas.so.13", "libcudart.so.13")
print(":".join(dict.fromkeys(os.path.dirname(p) for p in found if os.path.basename(p) in names)))
PY
}

prebuilt_cuda() {
  local tarball=$BUNDLE/cuda/llama_cpp-cuda-sm90.tar.xz dirs
  [ -f "$tarball" ] || return 1
  [ "$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '. ')" = 90 ] \
    || { echo "the prebuilt package is for sm_90 (H100, H200): building for this GPU"; return 1; }
  dirs=$(cuda_lib_dirs)
  [ -n "$dirs" ] || dirs=$(find /usr /opt \( -name 'libcublas.so.13' -o -name 'libcudart.so.13' \) -printf '%h\n' 2>/dev/null | sort -u | paste -sd:)
  export LD_LIBRARY_PATH=$dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  echo "prebuilt $(basename "$tarball"); CUDA libraries from ${dirs:-nowhere}"
  rm -rf "$SITE/llama_cpp" && tar -xJf "$tarball" -C "$SITE"
  gpu_offload && return 0
  echo "the prebuilt package has no GPU offload here: building instead"
  rm -rf "$SITE/llama_cpp"
  return 1
}

build_llama_cuda() {
  if gpu_offload; then
    echo "llama_cpp with GPU offload is installed already: no build"
    return
  fi
  prebuilt_cuda && return
  local arch fa=OFF
  arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '. ')
  [ "${GPU_CHECK_FA:-0}" = 1 ] && fa=ON
  CMAKE_ARGS=$(cuda_cmake_args "$arch" "$fa")
  export CMAKE_ARGS
  export CMAKE_BUILD_PARALLEL_LEVEL=$(nproc)
  echo "CMAKE_ARGS=$CMAKE_ARGS"
  python3 -m pip install --no-index --no-build-isolation --no-deps --no-cache-dir \
    --disable-pip-version-check --target "$SITE" \
    "$BUNDLE/llama_cpp_python-$LLAMA_VERSION-trimmed.tar.gz" 2>&1 | tail -5
  gpu_offload || { echo "the build has no GPU offload: see the log above" >&2; exit 1; }
}

bench_spec() {  # $1 SHAPE:TYPE: its random-weight model written, then benched (run's locals:
  # models, draft, draft_shape, threads, out, extra, first, t0)
  local spec=$1 name=${1/:/-}
  say "random-weight models of real shapes: $draft_shape:q4_k_m, $spec"
  python3 -m tests.support.random_gguf "$models" --models "$draft_shape:q4_k_m,$spec" --threads "$threads" \
    || { echo "models of $spec failed"; return 0; }
  echo "models done after $((SECONDS - t0)) s"
  if [ "$first" = 1 ]; then
    first=0
    import_order_check "$draft"
    say "a verify's rows beside one-token rows: $name"
    python3 "$REPO/scripts/verify_rows.py" "$models/random-$name.gguf" --json "$out/verify-rows-$name.json" \
      || echo "verify rows of $name failed"
  fi
  say "bench: target $name, draft $draft_shape-q4_k_m"
  bench_target "$models/random-$name.gguf" "$draft" "$out/bench-$name.json" "${extra[@]}" \
    | tee "$out/bench-$name.md" || echo "bench of $name failed"
  echo "after $((SECONDS - t0)) s"
}

# --no-copy: greedy text from random weights repeats one token for stretches, so copies from
# the context would be accepted and hide what the draft model costs.
bench_target() {  # $1 target gguf, $2 draft gguf, $3 json out; extra args follow
  local target=$1 draft=$2 out=$3
  shift 3
  python3 -m localspec bench --target "$target" --draft "$draft" \
    --oracle 100/8 --oracle 100 --oracle 80 --oracle 50/4 --verdicts --changing \
    --no-copy --suite default --quick --max-tokens "${GPU_CHECK_TOKENS:-128}" --repeats 2 \
    --json "$out" "$@"
}

run() {
  local cpu=0 out models t0=$SECONDS
  [ "${1:-}" = --cpu ] && cpu=1
  # Results are written to a folder of their own and packed into $OUT when the run ends, also
  # when it is stopped (`timeout 560 bash scripts/gpu-check.sh run`): the device tool brings
  # back 8 files at most, and a run of every target writes 16.
  DEST=${OUT:-$REPO/gpu-check-out}
  RUN_DIR=$(mktemp -d)
  out=$RUN_DIR
  models=${GPU_CHECK_MODELS:-/tmp/localspec-gpu-models}
  mkdir -p "$DEST" "$models"
  trap 'pack "$RUN_DIR"' EXIT
  trap 'exit 143' TERM INT
  trap '' PIPE  # the log's tee stopped with the rest: carry on to pack
  exec > >(tee -a "$out/gpu-check.log") 2>&1
  say "machine"
  uname -a; nproc; free -g | head -2 || true
  if [ $cpu = 1 ]; then
    export PYTHONPATH=$REPO${PYTHONPATH:+:$PYTHONPATH}
    [ -x "$REPO/.venv/bin/python" ] && python3() { "$REPO/.venv/bin/python" "$@"; }
    local targets=${GPU_CHECK_TARGETS:-"tiny:q4_k_m tiny:f16"} draft_shape=tiny threads=$(nproc)
  else
    nvidia-smi --query-gpu=name,memory.total,memory.free,driver_version,compute_cap --format=csv
    say "Python packages from the bundle"
    install_python_deps
    say "build llama-cpp-python $LLAMA_VERSION with CUDA ($(nproc) cores)"
    build_llama_cuda
    local targets=${GPU_CHECK_TARGETS:-"7b:q4_k_m 1.5b:f16"} draft_shape=0.5b threads=$(nproc)
  fi
  echo "build done after $((SECONDS - t0)) s"
  python3 -m localspec doctor || true
  local draft=$models/random-$draft_shape-q4_k_m.gguf extra=() first=1
  [ $cpu = 1 ] && extra=(--max-tokens 16 --repeats 1 --ctx 2048)
  # each target's model is made just before its bench, in the order of $targets, so a run
  # stopped at its time limit has measured what it had time for, the most important first
  for spec in $targets; do
    bench_spec "$spec"
  done
  local hybrid
  [ $cpu = 1 ] && hybrid=${GPU_CHECK_HYBRID-"qwen3.5-tiny:f16"} || hybrid=${GPU_CHECK_HYBRID-"qwen3.5-9b:q4_k_m"}
  [ -n "$hybrid" ] && hybrid_check "$models" "$out" "$hybrid" "$threads" "${extra[@]}"
  # with no build (the prebuilt package) a call has time for another target; a run stopped at
  # its limit packs what it measured
  if [ $cpu = 0 ] && [ $((SECONDS - t0)) -lt "${GPU_CHECK_MORE_BEFORE:-330}" ]; then
    for spec in ${GPU_CHECK_MORE-"1.5b:q4_k_m"}; do
      bench_spec "$spec"
    done
  fi
  say "summary"
  python3 "$REPO/scripts/gpu_check_report.py" "$out"/bench-*.json | tee "$out/summary.md"
  echo "total $((SECONDS - t0)) s"
}

pack() {  # $1 the run's folder: summary.md (made from what there is, if the run stopped short),
  # gpu-check.log and everything as gpu-check.tgz, into $DEST
  trap - EXIT
  local dir=$1
  exec >>"$dir/gpu-check.log" 2>&1  # tee may be gone (a stopped run)
  [ -s "$dir/summary.md" ] || python3 "$REPO/scripts/gpu_check_report.py" "$dir"/bench-*.json >"$dir/summary.md" 2>&1
  cp "$dir/summary.md" "$dir/gpu-check.log" "$DEST/" 2>/dev/null
  tar -czf "$DEST/gpu-check.tgz" -C "$dir" . && echo "results: $DEST/gpu-check.tgz, summary.md, gpu-check.log"
}

# Loading a model crashed (SIGSEGV in llama_model_load_from_file) in a process that imported
# the CLI's native modules before llama_cpp; the CLI now imports llama_cpp first. Say whether
# `python3 -m localspec` loads a model here, and which first import, if any, still breaks a load.
import_order_check() {  # $1 a small gguf
  say "import order before a model load"
  local mod load="import llama_cpp as L; p = L.llama_model_default_params(); p.load_mode = 0
assert L.llama_model_load_from_file(b'$1', p)"
  for mod in llama_cpp numpy yaml markupsafe pydantic_core ssl gguf; do
    if python3 -c "import $mod
$load" >/dev/null 2>&1; then echo "  import $mod, then a load: ok"; else echo "  import $mod, then a load: FAILED ($?)"; fi
  done
  python3 -m localspec run --target "$1" --no-draft --max-tokens 4 --raw hello >/dev/null 2>&1 \
    && echo "  python3 -m localspec run: ok" || echo "  python3 -m localspec run: FAILED ($?)"
}

hybrid_check() {  # $1 models dir, $2 out dir, $3 SHAPE:TYPE, $4 threads; extra bench args follow
  local models=$1 out=$2 spec=$3 threads=$4 name
  shift 4
  name=${spec/:/-}
  say "hybrid target with MTP: $name"
  python3 -m tests.support.random_gguf "$models" --models "$spec" --threads "$threads" || return 0
  python3 -m localspec bench --target "$models/random-$name.gguf" --mtp --no-copy --suite default --quick \
    --max-tokens "${GPU_CHECK_TOKENS:-128}" --repeats 2 --json "$out/bench-$name.json" "$@" \
    | tee "$out/bench-$name.md" || echo "bench of $name failed"
  python3 "$REPO/scripts/rollback_cost.py" "$models/random-$name.gguf" --contexts 100,2000 \
    --json "$out/rollback-$name.json" | tee "$out/rollback-$name.md" || echo "rollback cost of $name failed"
}

case "${1:-}" in
  prepare) prepare ;;
  run) shift; run "$@" ;;
  *) awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0"; exit 2 ;;
esac

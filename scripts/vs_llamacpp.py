"""localspec's auto mode beside llama.cpp's own `llama-speculative-simple` at several
--spec-draft-n-max, same pair, prompts (chat-formatted with the GGUF's template, as localspec
renders it), threads and tokens, interleaved in one sitting; greedy; decode speed on both sides.

Build the binary from the llama.cpp that llama-cpp-python vendors (the same kernels as ours):

    pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36   # then unpack it
    cmake -S llama_cpp_python-0.3.36/vendor/llama.cpp -B build -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \\
          -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF
    cmake --build build -j2 --target llama-speculative-simple

    .venv/bin/python scripts/vs_llamacpp.py --bin build/bin/llama-speculative-simple \\
        --target models/qwen2.5-coder-1.5b-f16.gguf --draft models/qwen2.5-coder-0.5b.gguf
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import tempfile
from pathlib import Path

from localspec.bench import measure, suites
from localspec.chat.session import LoadOptions, PairSpec, Session
from localspec.core.sampling import SamplingParams

SPEED = re.compile(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds, speed:\s+([\d.]+) t/s")


def theirs(args, prompt_file: Path, n_max: int) -> float | None:
    """llama-speculative-simple's decode tokens/s, or None (its output is printed)."""
    cmd = [str(args.bin), "-m", str(args.target), "-md", str(args.draft), "-f", str(prompt_file)]
    cmd += ["-n", str(args.tokens), "-t", str(args.threads), "--temp", "0", "--spec-type", "draft-simple"]
    cmd += ["--spec-draft-n-max", str(n_max), "-c", "4096"]
    env = {**os.environ, "LD_LIBRARY_PATH": str(args.bin.parent)}
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    m = SPEED.search(out.stderr + out.stdout)
    if m is None:
        print(out.stderr[-2000:])
        return None
    return float(m.group(3))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", required=True, type=Path, help="llama-speculative-simple")
    p.add_argument("--target", required=True, type=Path)
    p.add_argument("--draft", required=True, type=Path)
    p.add_argument("--prompts", default="code-intervals,edit-refactor,explain-gil")
    p.add_argument("--n-max", default="3,4,6,8", help="llama.cpp's --spec-draft-n-max values")
    p.add_argument("--tokens", type=int, default=96)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args(argv)
    suite = {q["id"]: q for q in suites.load_suite("default")["prompts"]}
    ids, n_maxes = args.prompts.split(","), [int(n) for n in args.n_max.split(",")]
    session = Session.load(PairSpec(args.target, args.draft), LoadOptions(threads=args.threads))
    speeds: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        files = {}
        for pid in ids:  # the chat-formatted prompt, exactly as localspec sends it
            text = session.target.apply_chat_template([{"role": "user", "content": suite[pid]["prompt"]}])
            files[pid] = Path(tmp) / f"{pid}.txt"
            files[pid].write_text(text)
        try:
            for _ in range(args.rounds):
                for pid in ids:
                    run = measure.run_once(session, suite[pid], "draft", SamplingParams(), args.tokens)
                    speeds.setdefault((pid, "localspec auto"), []).append(run.stats["tokens_per_second"])
                    for n in n_maxes:
                        t = theirs(args, files[pid], n)
                        if t is not None:
                            speeds.setdefault((pid, f"n_max={n}"), []).append(t)
        finally:
            session.close()
    print("| prompt | localspec auto | " + " | ".join(f"llama.cpp n_max={n}" for n in n_maxes) + " | ratio to best |")
    print("|---" * (len(n_maxes) + 3) + "|")
    for pid in ids:
        med = {m: statistics.median(v) for (q, m), v in speeds.items() if q == pid}
        theirs_best = max((v for m, v in med.items() if m.startswith("n_max")), default=None)
        cells = " | ".join(f"{med.get(f'n_max={n}', float('nan')):.1f}" for n in n_maxes)
        # no ratio where every run of theirs failed (its output is printed above)
        ratio = "—" if theirs_best is None else f"{med['localspec auto'] / theirs_best:.2f}"
        print(f"| {pid} | {med['localspec auto']:.1f} | {cells} | {ratio} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

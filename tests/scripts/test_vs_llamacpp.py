"""scripts/vs_llamacpp.py: localspec's auto mode beside llama-speculative-simple, on tiny GGUFs
with a stand-in for the llama.cpp binary that answers as it does."""

import json
import re
import sys

import pytest

from tests.support.scripts import load_script
from tests.support.tiny_gguf import write_tiny_gguf

vs_llamacpp = load_script("vs_llamacpp")

# llama-speculative-simple's closing line, at 10 tokens/s per --spec-draft-n-max (30.0 for 3);
# each call's arguments, its library path and its prompt file are kept in calls/
FAKE = """#!{python}
import json, os, pathlib, sys
args = sys.argv[1:]
calls = pathlib.Path({calls!r})
n = len(list(calls.iterdir()))
prompt = pathlib.Path(args[args.index("-f") + 1]).read_text()
kept = {{"args": args, "ld": os.environ.get("LD_LIBRARY_PATH"), "prompt": prompt}}
(calls / f"{{n}}.json").write_text(json.dumps(kept))
n_max = int(args[args.index("--spec-draft-n-max") + 1])
if {speak}:
    print(f"decoded   12 tokens in    0.40 seconds, speed:   {{10 * n_max}}.0 t/s", file=sys.stderr)
"""


@pytest.fixture
def pair(tmp_path):
    target = write_tiny_gguf(tmp_path / "t.gguf", seed=0, n_ctx=2048)
    draft = write_tiny_gguf(tmp_path / "d.gguf", seed=1, noise_of=0, noise=0.6, n_ctx=2048)
    return ["--target", str(target), "--draft", str(draft), "--prompts", "code-intervals", "--tokens", "8"]


def fake_bin(tmp_path, speak=True):
    calls = tmp_path / "calls"
    calls.mkdir()
    binary = tmp_path / "bin" / "llama-speculative-simple"
    binary.parent.mkdir()
    binary.write_text(FAKE.format(python=sys.executable, calls=str(calls), speak=speak))
    binary.chmod(0o755)
    return binary, calls


def test_each_n_max_beside_auto_mode_with_the_ratio_to_the_best(tmp_path, pair, capsys):
    binary, calls = fake_bin(tmp_path)
    argv = ["--bin", str(binary), *pair, "--n-max", "3,4", "--rounds", "2", "--threads", "1"]
    assert vs_llamacpp.main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-3] == "| prompt | localspec auto | llama.cpp n_max=3 | llama.cpp n_max=4 | ratio to best |"
    cells = lines[-1].strip("| ").split(" | ")
    assert cells[0] == "code-intervals" and cells[2:4] == ["30.0", "40.0"]
    assert float(cells[4]) == pytest.approx(float(cells[1]) / 40.0, abs=0.01)  # the best of theirs: n_max=4
    kept = [json.loads(p.read_text()) for p in sorted(calls.iterdir())]
    assert len(kept) == 4  # 2 rounds x 2 n_max
    for call in kept:
        args = call["args"]
        assert args[args.index("-m") + 1] == pair[1] and args[args.index("-md") + 1] == pair[3]
        assert args[args.index("--temp") + 1] == "0" and args[args.index("-n") + 1] == "8"
        assert call["ld"] == str(binary.parent)
        # the chat-formatted prompt, as localspec renders it with the GGUF's template
        assert call["prompt"].startswith("<|im_start|>user\n") and call["prompt"].endswith("<|im_start|>assistant\n")


def test_a_binary_that_reports_no_speed_leaves_no_ratio(tmp_path, pair, capsys):
    binary, _ = fake_bin(tmp_path, speak=False)
    assert vs_llamacpp.main(["--bin", str(binary), *pair, "--n-max", "3", "--rounds", "1", "--threads", "1"]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert re.fullmatch(r"\| code-intervals \| [\d.]+ \| nan \| — \|", last)

"""scripts/ab_cold.sh: interleaved cold runs of two checkouts and fixed k = 4, on tiny GGUFs."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.support.tiny_gguf import write_tiny_gguf

ROOT = Path(__file__).parents[2]
SCRIPT = ROOT / "scripts" / "ab_cold.sh"


def test_without_its_arguments_it_prints_how_to_call_it():
    done = subprocess.run(["bash", str(SCRIPT), "a", "b"], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 2
    assert "scripts/ab_cold.sh /tmp/wt-before /tmp/wt-after heldout held-explain-hash 5" in done.stdout


def test_one_round_runs_each_configuration_cold_and_sums_them_up(tmp_path):
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps({"prompts": [{"id": "p1", "category": "code", "prompt": "def x = 1 + 2"}]}))
    env = {
        **os.environ,
        "PYTHON": sys.executable,
        "TARGET": str(write_tiny_gguf(tmp_path / "t.gguf", seed=0, n_ctx=2048)),
        "DRAFT": str(write_tiny_gguf(tmp_path / "d.gguf", seed=1, noise_of=0, noise=0.6, n_ctx=2048)),
        "LOCALSPEC_DATA_DIR": str(tmp_path / "unused"),
    }
    args = ["bash", str(SCRIPT), str(ROOT), str(ROOT), str(suite), "p1", "1"]
    done = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    runs = [line.split() for line in done.stdout.splitlines() if line.startswith("p1 ")]
    assert [r[1] for r in runs] == ["A", "B", "fixed"]
    assert all(float(r[2]) > 0 and int(r[3]) > 0 for r in runs)  # tok/s, steps
    assert int(runs[2][4]) > 0  # fixed k = 4 drafts
    assert re.search(r"A / fixed [\d.]+ \(paired [\d.]+\); B / fixed", done.stdout)
    assert "texts: 1 distinct over 3 runs" in done.stdout  # greedy: every configuration the same text

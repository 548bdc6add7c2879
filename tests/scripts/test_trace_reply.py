"""scripts/trace_reply.py: one cold reply traced step by step, on tiny GGUFs."""

import json
import re
import sys

import pytest

from tests.support.scripts import load_script
from tests.support.tiny_gguf import write_tiny_gguf

trace_reply = load_script("trace_reply")


@pytest.fixture
def pair(tmp_path):
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps({"prompts": [{"id": "p1", "category": "code", "prompt": "def x = 1 + 2"}]}))
    target = write_tiny_gguf(tmp_path / "t.gguf", seed=0, n_ctx=2048)
    draft = write_tiny_gguf(tmp_path / "d.gguf", seed=1, noise_of=0, noise=0.6, n_ctx=2048)
    return ["--target", str(target), "--draft", str(draft), "--suite", str(suite)]


@pytest.mark.parametrize("fixed", [[], ["--fixed", "3"]])
def test_every_step_and_the_totals(pair, fixed, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["trace_reply.py", *pair, "--prompt", "p1", "--max-tokens", "12", *fixed])
    trace_reply.main()
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("at load: T(1)")
    steps = [line for line in lines if line.startswith("k=")]
    assert steps and all("model: pass" in line for line in steps)
    assert re.search(r"T\(1\) +[\d.]+ ms  (on|off): ", steps[0])  # the drafting line, where it changes
    if fixed:  # every step drafts 3, but where the token budget cuts it
        assert steps[0].startswith("k= 3") and all(int(line[2:4]) <= 3 for line in steps)
    assert re.search(r"\d+ steps, \d+ tokens, \d+ drafted", lines[-1]) and "tok/s of decode" in lines[-1]


def test_an_unknown_prompt_names_the_suite_s(pair, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["trace_reply.py", *pair, "--prompt", "nope"])
    with pytest.raises(SystemExit, match="no prompt 'nope'.*p1"):
        trace_reply.main()


def test_a_profile_is_read_and_kept_only_when_asked(pair, tmp_path, monkeypatch, capsys):
    data = tmp_path / "data"
    monkeypatch.setenv("LOCALSPEC_DATA_DIR", str(data))
    monkeypatch.setattr(sys, "argv", ["trace_reply.py", *pair, "--prompt", "p1", "--max-tokens", "12"])
    trace_reply.main()
    assert not (data / "profiles.json").exists()  # a trace from no profile leaves none
    monkeypatch.setattr(sys, "argv", ["trace_reply.py", *pair, "--prompt", "p1", "--max-tokens", "12", "--profile"])
    trace_reply.main()
    profiles = json.loads((data / "profiles.json").read_text())
    uses = [use for entry in profiles.values() for use in entry.get("use", {}).values()]
    assert any(use["tokens"] > 0 for use in uses)  # this reply was counted, as `localspec run` counts it
    capsys.readouterr()

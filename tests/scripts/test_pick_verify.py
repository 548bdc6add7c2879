"""scripts/pick_verify.py: a verify timed picked by llama.cpp and read in Python, on a tiny GGUF."""

import sys

from tests.support.scripts import load_script
from tests.support.tiny_gguf import write_tiny_gguf

pick_verify = load_script("pick_verify")


def test_both_modes_are_timed_and_give_the_same_tokens(tmp_path, monkeypatch, capsys):
    model = write_tiny_gguf(tmp_path / "m.gguf", seed=0, n_ctx=2048)
    argv = ["pick_verify.py", str(model), "--rows", "9", "--prefix", "40", "--blocks", "2", "--per-block", "2"]
    monkeypatch.setattr(sys, "argv", argv)
    pick_verify.main()
    out = capsys.readouterr().out
    assert "a verify of 9 tokens after 40, medians of 2" in out
    assert "argmax picked by llama.cpp" in out and "rows read in Python" in out
    assert "the same tokens either way" in out

"""scripts/tree_verify.py: a two-branch tree verified in one batch through sequence ids, on a tiny GGUF."""

import re
import sys

import pytest

from localspec.llama import backend
from tests.support.scripts import load_script
from tests.support.tiny_gguf import write_tiny_gguf

tree_verify = load_script("tree_verify")


def test_the_tree_s_rows_are_the_linear_ones_and_its_time_is_printed(tmp_path, monkeypatch, capsys):
    target = write_tiny_gguf(tmp_path / "t.gguf", seed=0, n_ctx=2048)
    monkeypatch.setattr(sys, "argv", ["tree_verify.py", "--target", str(target), "--prefix", "24", "--repeats", "2"])
    tree_verify.main()
    out = capsys.readouterr().out
    found = re.search(r"largest logit difference ([\d.e+-]+), every argmax equal: (\w+)", out)
    assert found and float(found.group(1)) < 1e-3 and found.group(2) == "True", out
    assert re.search(r"tree \(5 tokens\): [\d.]+ ms, [\d.]+x one branch", out)
    assert re.search(r"linear, one branch \(3 tokens\): [\d.]+ ms, 1.00x one branch", out)
    assert backend._context_params(64, 1).n_seq_max == 1  # the two sequences were the script's load alone


def test_a_branch_must_hold_a_token(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["tree_verify.py", "--target", "x.gguf", "--branch", "0"])
    with pytest.raises(SystemExit, match="--branch"):
        tree_verify.main()

"""scripts/tree_verify.py: a two-branch tree verified in one batch through sequence ids, on a tiny GGUF."""

import importlib.util
import re
import sys
from pathlib import Path

import pytest

from localspec.llama import backend
from tests.support.tiny_gguf import write_tiny_gguf

spec = importlib.util.spec_from_file_location("tree_verify", Path(__file__).parents[2] / "scripts" / "tree_verify.py")
assert spec and spec.loader
tree_verify = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tree_verify)


@pytest.fixture
def restore_params(monkeypatch):
    monkeypatch.setattr(backend, "_context_params", backend._context_params)  # the script swaps it in


def test_the_tree_s_rows_are_the_linear_ones_and_its_time_is_printed(tmp_path, monkeypatch, capsys, restore_params):
    target = write_tiny_gguf(tmp_path / "t.gguf", seed=0, n_ctx=2048)
    monkeypatch.setattr(sys, "argv", ["tree_verify.py", "--target", str(target), "--prefix", "24", "--repeats", "2"])
    tree_verify.main()
    out = capsys.readouterr().out
    found = re.search(r"largest logit difference ([\d.e+-]+), every argmax equal: (\w+)", out)
    assert found and float(found.group(1)) < 1e-3 and found.group(2) == "True", out
    assert re.search(r"tree \(5 tokens\): [\d.]+ ms, [\d.]+x one branch", out)
    assert re.search(r"linear, one branch \(3 tokens\): [\d.]+ ms, 1.00x one branch", out)


def test_a_branch_must_hold_a_token(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["tree_verify.py", "--target", "x.gguf", "--branch", "0"])
    with pytest.raises(SystemExit, match="--branch"):
        tree_verify.main()

"""scripts/change_cost.py: a change of batch size timed as a load times it, on a real tiny GGUF."""

import re
import sys

import pytest

from tests.support.scripts import load_script

change_cost = load_script("change_cost")


def run(monkeypatch, capsys, *args: str) -> str:
    monkeypatch.setattr(sys, "argv", ["change_cost.py", *args])
    change_cost.main()
    return capsys.readouterr().out


def test_each_round_gives_the_counted_change_the_raw_median_and_the_signs(tiny_pair, monkeypatch, capsys):
    out = run(monkeypatch, capsys, str(tiny_pair[0]), "--settle", "--rounds", "2", "--threads", "1")
    rounds = re.findall(
        r"round \d: counted ([\d.]+) T\(1\); max\(median, 0\) ([\d.]+) T\(1\); (\d+) of 18 above 0", out
    )
    assert out.startswith("T(1) ") and len(rounds) == 2
    for counted, raw, above in rounds:  # counted only where 15 of 18 came out dearer: then the median
        assert float(counted) == (float(raw) if int(above) >= 15 else 0.0)


def test_a_model_that_does_not_settle_is_refused_with_the_way_out(tiny_pair, monkeypatch, capsys):
    with pytest.raises(SystemExit, match="add --settle"):
        run(monkeypatch, capsys, str(tiny_pair[0]), "--threads", "1")

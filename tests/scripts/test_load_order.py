"""scripts/load_order.py: copies of one model decode in turn, each first in a round, on a tiny GGUF."""

import re

from tests.support.scripts import load_script
from tests.support.tiny_gguf import write_tiny_gguf

load_order = load_script("load_order")


def test_each_copy_decodes_every_round_and_the_rates_are_printed_in_load_order(tmp_path, capsys):
    tiny = write_tiny_gguf(tmp_path / "tiny.gguf")
    load_order.main(
        [str(tiny), "--copies", "2", "--tokens", "3", "--rounds", "2", "--threads", "1", "--prompt-tokens", "64"]
    )
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == ["loaded 1", "loaded 2"]
    assert all(len(re.findall(r"\d+\.\d\d", line.split("rounds:")[1])) == 2 for line in lines)

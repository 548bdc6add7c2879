"""scripts/tui_bench.py: the chat app fed by a paced fake engine, and one prompt on a real tiny pair."""

import html
import random
import re

from tests.support.scripts import load_script
from tests.support.tiny_gguf import write_tiny_gguf

tui_bench = load_script("tui_bench")


class TestPacedSession:
    def test_pieces_are_reproducible_and_as_many_as_asked(self):
        assert tui_bench.pieces(300, random.Random(4)) == tui_bench.pieces(300, random.Random(4))
        assert len(tui_bench.pieces(300, random.Random(4))) == 300

    def test_steps_carry_every_piece_once_in_bursts(self):
        session = tui_bench.PacedSession(n_tokens=200, rate=1e6, burst=5)
        steps = list(session.chat([]))
        assert "".join(s.text for s in steps) == "".join(session.pieces)
        assert all(1 <= len(s.emitted) <= 5 and s.n_accepted == len(s.emitted) - 1 for s in steps)
        assert [s.finish for s in steps[-2:]] == [None, "eos"]
        assert len(session.yield_times) == len(steps)


def test_the_bench_streams_the_whole_reply_and_prints_its_figures(capsys):
    assert tui_bench.main(["--tokens", "300", "--rate", "600", "--width", "80", "--height", "24"]) == 0
    out = capsys.readouterr().out
    assert "view: markdown; 300 tokens at 600 tok/s" in out
    assert "text intact: True" in out  # every piece reached the conversation, in order
    lag = re.search(r"median ([\d.]+) ms, p95 ([\d.]+) ms, max ([\d.]+) ms  \((.*?); (\d+) screen updates\)", out)
    assert lag and float(lag[1]) <= float(lag[2]) <= float(lag[3]) and int(lag[5]) > 0


def test_one_real_prompt_saves_a_screenshot(tmp_path, capsys):
    target = write_tiny_gguf(tmp_path / "t.gguf", seed=0, n_ctx=2048)
    draft = write_tiny_gguf(tmp_path / "d.gguf", seed=1, noise_of=0, noise=0.6, n_ctx=2048)
    shot = tmp_path / "chat.svg"
    argv = ["--real", str(target), "--draft", str(draft), "--max-tokens", "8", "--threads", "1"]
    assert tui_bench.main([*argv, "--prompt", "def x = 1", "--screenshot", str(shot)]) == 0
    screen = html.unescape(shot.read_text()).replace("\xa0", " ")  # the SVG's text, spaces as typed
    assert "def x = 1" in screen  # the prompt, on the screen saved
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  ")]
    figures = {line[2:26].strip(): line[26:] for line in lines}  # the stats panel's, one a line
    assert figures["mode"] == "draft" and float(figures["total tok/s"]) > 0

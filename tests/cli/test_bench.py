"""localspec/cli/bench.py: with --draft-max 0 the bench measures the target alone, as run and
serve run it (``options.drafting_mode``). The bench's reports are tested in tests/bench."""

from __future__ import annotations

import json

from localspec.bench import modes as bench_modes
from localspec.cli import main
from localspec.cli.bench import drafting_modes

SUITE = {"name": "tiny", "max_tokens": 4, "prompts": [{"id": "p1", "category": "chat", "prompt": "hello world"}]}


class TestDraftMaxZero:
    def test_every_drafting_mode_is_the_target_alone_once(self):
        modes = ["none", "draft", "lookup", "oracle-100/8", *bench_modes.sweep_modes(), "lookup+history"]
        assert drafting_modes(modes, 0) == ["none"]
        assert drafting_modes(modes, 16) == modes
        assert drafting_modes([bench_modes.CONTROL, "draft"], 0) == ["none"]  # (the bench adds the control after)

    def test_the_bench_runs_the_target_alone(self, tiny_pair, tmp_path, capsys):
        suite, out = tmp_path / "suite.json", tmp_path / "r.json"
        suite.write_text(json.dumps(SUITE))
        pair = ["--target", str(tiny_pair[0]), "--draft", str(tiny_pair[1]), "--lookup", "--compare-rules"]
        flags = ["--draft-max", "0", "--threads", "1", "--ctx", "512", "--suite", str(suite), "--json", str(out)]
        assert main(["bench", *pair, *flags, "--control"]) == 0
        assert "Traceback" not in capsys.readouterr().err
        assert {r["mode"] for r in json.loads(out.read_text())["rows"]} == {"none", bench_modes.CONTROL}

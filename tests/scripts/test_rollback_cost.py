"""scripts/rollback_cost.py: one rejected draft timed on a tiny hybrid GGUF, and its table."""

import json

import pytest

from tests.support.hybrid_gguf import write_tiny_qwen35
from tests.support.scripts import load_script
from tests.support.tiny_gguf import write_tiny_gguf

rollback_cost = load_script("rollback_cost")


def way(ms: float, truncate_ms: float = 0.01) -> dict:
    return {
        "rollback_seconds": ms / 1e3,
        "quartiles_seconds": [ms / 2e3, ms / 1e3],
        "truncate_seconds": truncate_ms / 1e3,
    }


class TestReport:
    def test_each_context_against_the_first(self):
        rows = [
            {"context": 100, "k": 4, "snapshot": way(2.0), "prefill": way(10.0), "accepted_step_seconds": 0.005},
            {"context": 2000, "k": 4, "snapshot": way(3.0), "prefill": way(0.0), "accepted_step_seconds": 0.006},
        ]
        lines = rollback_cost.report("m.gguf", rows).splitlines()
        assert lines[0].startswith("m.gguf: what one rejection of 4 drafts adds to a step")
        assert lines[2] == "| context | accepted step | snapshot (truncate) | ratio | prefill (truncate) | ratio |"
        # 3 ms at 2,000 tokens is 1.5 x the 2 ms at 100; the ratio at 100 is 1 by definition
        assert lines[4] == "| 100 | 5.0 | 2 [1, 2] (0.01) | 1.00 | 10 [5, 10] (0.01) | 1.00 |"
        assert lines[5] == "| 2000 | 6.0 | 3 [1.5, 3] (0.01) | 1.50 | 0 [0, 0] (0.01) | 0.00 |"

    def test_no_ratio_to_a_free_first_rollback(self):
        rows = [{"context": 10, "k": 2, "checkpoint": way(0.0), "accepted_step_seconds": 0.001}]
        assert rollback_cost.report("m.gguf", rows).splitlines()[-1].endswith("| — |")


class TestOnAHybridModel:
    def test_every_way_at_every_context(self, tmp_path, capsys):
        model = write_tiny_qwen35(tmp_path / "hybrid.gguf", seed=1)
        out = tmp_path / "rollback.json"
        argv = [str(model), "--contexts", "16,48", "--k", "3", "--repeats", "3", "--threads", "1", "--json", str(out)]
        assert rollback_cost.main(argv) == 0
        rows = json.loads(out.read_text())
        assert [(r["context"], r["k"]) for r in rows] == [(16, 3), (48, 3)]
        for r in rows:
            assert r["accepted_step_seconds"] > 0
            for name in rollback_cost.WAYS:
                q1, q3 = r[name]["quartiles_seconds"]
                assert r[name]["rollback_seconds"] >= 0 and q1 <= q3 and r[name]["truncate_seconds"] >= 0
        table = capsys.readouterr().out.splitlines()
        assert table[0].startswith("hybrid.gguf: what one rejection of 3 drafts")
        assert [line.split(" | ")[0] for line in table[4:]] == ["| 16", "| 48"]

    def test_only_the_ways_asked_for(self, tmp_path, capsys):
        model = write_tiny_qwen35(tmp_path / "hybrid.gguf", seed=1)
        out = tmp_path / "rollback.json"
        assert (
            rollback_cost.main(
                [str(model), "--contexts", "16", "--repeats", "1", "--ways", "snapshot", "--json", str(out)]
            )
            == 0
        )
        (row,) = json.loads(out.read_text())
        assert "snapshot" in row and "checkpoint" not in row and "prefill" not in row
        assert "| snapshot (truncate) | ratio |" in capsys.readouterr().out

    def test_a_model_with_a_kv_cache_only_is_refused(self, tmp_path):
        model = write_tiny_gguf(tmp_path / "plain.gguf", seed=0, n_ctx=512)
        with pytest.raises(AssertionError, match="not a recurrent or hybrid model"):
            rollback_cost.main([str(model), "--contexts", "16", "--repeats", "1"])

"""Bench smoke test on tiny GGUFs: structure of the report, greedy texts identical. Never timed."""

import json
from types import SimpleNamespace

import pytest

from localspec import bench
from localspec.cli import main
from localspec.core.modes import builtin_modes

SUITE = {
    "name": "tiny",
    "max_tokens": 12,
    "prompts": [
        {"id": "p1", "category": "code", "prompt": "def x = 1 + 2 def x = 1 + 2 def"},
        {"id": "p2", "category": "chat", "prompt": "hello world the model is fast"},
    ],
}


class TestSuite:
    def test_default_suite_has_every_category(self):
        suite = bench.load_suite()
        cats = {p["category"] for p in suite["prompts"]}
        assert len(suite["prompts"]) >= 12
        assert {"code", "edit", "chat", "summary", "json", "korean"} <= cats

    def test_quick_subset(self):
        q = bench.quick(bench.load_suite())
        assert len(q["prompts"]) == 3 and q["max_tokens"] == bench.QUICK_MAX_TOKENS

    def test_bad_suite_file_is_reported(self, tmp_path):
        bad = tmp_path / "s.json"
        bad.write_text('{"prompts": [{"nope": 1}]}')
        with pytest.raises(ValueError, match="a suite is"):
            bench.load_suite(str(bad))


class TestBenchCli:
    def test_report_structure_and_greedy_identity(self, tiny_pair, tmp_path, capsys):
        suite = tmp_path / "suite.json"
        suite.write_text(json.dumps(SUITE))
        out = tmp_path / "r.json"
        md = tmp_path / "r.md"
        rc = main(
            [
                "bench",
                "--target",
                str(tiny_pair[0]),
                "--draft",
                str(tiny_pair[1]),
                "--lookup",
                "--threads",
                "1",
                "--ctx",
                "512",
                "--suite",
                str(suite),
                "--temp",
                "0",
                "--temp",
                "0.7",
                "--compare-rules",
                "--json",
                str(out),
                "--markdown",
                str(md),
            ]
        )
        assert rc == 0
        rep = json.loads(out.read_text())
        assert set(rep["cost_curve"]["verify_ratio"]) == {str(k) for k in range(1, 17)}
        modes = {r["mode"] for r in rep["rows"]}
        assert modes == {"none", "draft", "lookup", "draft:match", "lookup:match"}
        for r in rep["rows"]:
            for key in ("tokens_per_second", "speedup", "acceptance_rate", "tokens_per_pass", "identical"):
                assert key in r
            if r["temperature"] == 0.0 and r["mode"] != "none":
                assert r["identical"] is True, r
        assert rep["memory"]["files_plus_kv_bytes"] > 0
        assert "| prompt | mode |" in md.read_text()


class TestSweep:
    def test_fixed_configurations_beside_auto_and_the_curve_beside_the_direct_one(self, tiny_pair, tmp_path):
        suite = tmp_path / "suite.json"
        suite.write_text(json.dumps({**SUITE, "prompts": SUITE["prompts"][:1]}))
        out, md = tmp_path / "r.json", tmp_path / "r.md"
        rc = main(
            [
                "bench",
                "--target",
                str(tiny_pair[0]),
                "--draft",
                str(tiny_pair[1]),
                "--sweep",
                "--threads",
                "1",
                "--ctx",
                "512",
                "--suite",
                str(suite),
                "--repeats",
                "2",
                "--json",
                str(out),
                "--markdown",
                str(md),
            ]
        )
        assert rc == 0
        rep = json.loads(out.read_text())
        modes = {r["mode"] for r in rep["rows"]}
        assert {bench.fixed_mode(k, p) for k in bench.SWEEP_KS for p in bench.SWEEP_P_MINS} < modes
        assert all(r["identical"] for r in rep["rows"] if r["mode"] != "none")
        (row,) = rep["sweep"]
        assert row["best_fixed"].startswith("fixed-k") and row["auto_over_best_fixed"] > 0
        assert row["auto_spread"] >= 1.0
        ratios = rep["engine_curve"]["ratios"]
        assert ratios["1"]["engine"] == pytest.approx(1.0) and ratios["8"]["engine_over_direct"] > 0
        text = md.read_text()
        assert "auto ÷ best fixed" in text and "engine ÷ direct" in text

    def test_the_control_runs_the_target_alone_again_and_says_the_noise(self, tiny_pair, tmp_path):
        suite = tmp_path / "suite.json"
        suite.write_text(json.dumps({**SUITE, "prompts": SUITE["prompts"][:1]}))
        out, md = tmp_path / "r.json", tmp_path / "r.md"
        args = ["bench", "--target", str(tiny_pair[0]), "--draft", str(tiny_pair[1]), "--control", "--threads", "1"]
        rc = main([*args, "--ctx", "512", "--suite", str(suite), "--json", str(out), "--markdown", str(md)])
        assert rc == 0
        rep = json.loads(out.read_text())
        control = [r for r in rep["rows"] if r["mode"] == "control"]
        assert len(control) == 1 and control[0]["identical"] is True and control[0]["acceptance_rate"] is None
        assert control[0]["runs_tokens_per_second"] == [control[0]["tokens_per_second"]]  # one repeat
        noise = rep["summary"]["control@0.0"]
        assert noise["min_speedup"] == control[0]["speedup"] == noise["max_speedup"] > 0
        assert f"Control (the target alone again, interleaved): speed-up median {noise['median_speedup']:.2f}" in (
            md.read_text()
        )

    def test_sweep_needs_a_draft_model(self, tiny_pair, capsys):
        assert main(["bench", "--target", str(tiny_pair[0]), "--lookup", "--sweep"]) == 2
        assert "--sweep" in capsys.readouterr().err

    def test_fixed_mode_names_round_trip(self):
        assert bench.parse_fixed(bench.fixed_mode(4, 0.75)) == (4, 0.75)
        assert bench.parse_fixed(bench.fixed_mode(2, 0.0)) == (2, 0.0)
        assert bench.parse_fixed("draft") is None and bench.parse_fixed("oracle-100/4") is None


class TestModes:
    def test_the_bench_registers_its_modes_beside_the_built_in_ones(self):
        session = SimpleNamespace(modes=builtin_modes())
        bench.register_modes(session, ["none", "draft", "draft:match", "fixed-k4-p0.75", "oracle-100/4"])
        modes = session.modes
        assert modes["draft:match"].build is modes["draft"].build and not modes["draft:match"].counts_as_use
        assert modes["fixed-k4-p0.75"].build == bench.FixedDraft(4, 0.75)  # its configuration is its key
        oracle = modes["oracle-100/4"].build
        assert isinstance(oracle, bench.Oracle) and (oracle.accuracy, oracle.k) == (1.0, 4)
        assert modes["draft"].counts_as_use and not modes["oracle-100/4"].counts_as_use
        with pytest.raises(ValueError, match="unknown bench mode 'sometimes'"):
            bench.register_modes(session, ["sometimes"])


class TestFlags:
    @pytest.mark.parametrize(
        "flags, message",
        [
            (["--temp", "-1"], "error: --temp must be"),
            (["--max-tokens", "0"], "error: --max-tokens must be"),
            (["--repeats", "0"], "error: --repeats must be at least 1 (got 0)"),
        ],
    )
    def test_bench_flags_are_checked_before_anything_loads(self, tiny_pair, capsys, flags, message):
        assert main(["bench", "--target", str(tiny_pair[0]), *flags]) == 2
        err = capsys.readouterr().err
        assert err.startswith(message) and "Traceback" not in err


class TestOracleModes:
    def test_oracle_acceptance_follows_the_fraction_and_texts_match(self, tiny_pair, tmp_path):
        suite = tmp_path / "suite.json"
        suite.write_text(json.dumps(SUITE))
        out = tmp_path / "r.json"
        rc = main(
            [
                "bench",
                "--target",
                str(tiny_pair[0]),
                "--oracle",
                "100/4",
                "--oracle",
                "0/4",
                "--oracle",
                "90",
                "--threads",
                "1",
                "--ctx",
                "512",
                "--suite",
                str(suite),
                "--json",
                str(out),
            ]
        )
        assert rc == 0
        rows = {(r["prompt_id"], r["mode"]): r for r in json.loads(out.read_text())["rows"]}
        for pid in ("p1", "p2"):
            full, none = rows[(pid, "oracle-100/4")], rows[(pid, "oracle-0/4")]
            assert full["identical"] is True and none["identical"] is True
            assert full["acceptance_rate"] == 1.0 and full["tokens_per_pass"] > 3
            assert none["acceptance_rate"] == 0.0 and none["tokens_per_pass"] == 1.0
            assert full["overhead_ms_per_step"] > 0

    def test_bad_oracle_percentage_is_refused(self, tiny_pair, capsys):
        rc = main(["bench", "--target", str(tiny_pair[0]), "--oracle", "120"])
        assert rc == 2
        assert "0 to 100" in capsys.readouterr().err
        assert main(["bench", "--target", str(tiny_pair[0]), "--oracle", "50/0"]) == 2

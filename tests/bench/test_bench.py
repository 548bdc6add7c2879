"""Bench smoke test on tiny GGUFs: structure of the report, greedy texts identical. Never timed."""

import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

from localspec.bench import cold, suites
from localspec.bench import modes as bench_modes
from localspec.cli import build_parser, main
from localspec.cli.bench import cold_base
from localspec.cli.flags import given_flags
from localspec.core.modes import builtin_modes
from localspec.core.options import MAX_DRAFT, DraftOptions

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
        suite = suites.load_suite()
        cats = {p["category"] for p in suite["prompts"]}
        assert len(suite["prompts"]) >= 12
        assert {"code", "edit", "chat", "summary", "json", "korean"} <= cats

    def test_quick_subset(self):
        q = suites.quick(suites.load_suite())
        assert len(q["prompts"]) == 3 and q["max_tokens"] == suites.QUICK_MAX_TOKENS

    @pytest.mark.parametrize("name", suites.BUILTIN_SUITES)
    def test_builtin_suites_have_what_the_bench_needs(self, name):
        suite = suites.load_suite(name)
        assert suite["name"] == name and isinstance(suite["max_tokens"], int)
        for p in suite["prompts"]:
            assert {"id", "category", "prompt"} <= set(p) and all(isinstance(p[k], str) and p[k] for k in p)
        edits = [p for p in suite["prompts"] if p["category"] == "edit"]
        # an edit prompt pastes its code and asks for all of it back, so the reply copies it
        assert edits and all("```" in p["prompt"] and "full code" in p["prompt"] for p in edits)

    def test_prompt_ids_are_unique_across_the_builtin_suites(self):
        ids = [p["id"] for name in suites.BUILTIN_SUITES for p in suites.load_suite(name)["prompts"]]
        assert len(ids) == len(set(ids))

    def test_heldout_suite_has_every_category_of_the_default(self):
        heldout = suites.load_suite("heldout")
        cats = [p["category"] for p in heldout["prompts"]]
        assert {p["category"] for p in suites.load_suite()["prompts"]} <= set(cats)
        assert cats.count("edit") >= 6

    def test_bad_suite_file_is_reported(self, tmp_path):
        bad = tmp_path / "s.json"
        bad.write_text('{"prompts": [{"nope": 1}]}')
        with pytest.raises(ValueError, match="a suite is"):
            suites.load_suite(str(bad))


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
        sizes = [*range(1, 17), 20, 24, 28, 32, MAX_DRAFT + 1]
        assert set(rep["cost_curve"]["verify_ratio"]) == {str(k) for k in sizes}
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
        assert {bench_modes.fixed_mode(k, p) for k in bench_modes.SWEEP_KS for p in bench_modes.SWEEP_P_MINS} < modes
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

    def test_changing_runs_draft_mode_with_every_verify_as_long_as_its_draft(self, tiny_pair, tmp_path):
        suite = tmp_path / "suite.json"
        suite.write_text(json.dumps({**SUITE, "prompts": SUITE["prompts"][:1]}))
        out = tmp_path / "r.json"
        args = ["bench", "--target", str(tiny_pair[0]), "--draft", str(tiny_pair[1]), "--changing", "--threads", "1"]
        assert main([*args, "--ctx", "512", "--suite", str(suite), "--json", str(out)]) == 0
        rows = {r["mode"]: r for r in json.loads(out.read_text())["rows"]}
        assert {"none", "draft", bench_modes.CHANGING} <= set(rows) and rows[bench_modes.CHANGING]["identical"]

    def test_plots_are_drawn_after_a_run_and_again_from_its_json(self, tiny_pair, tmp_path, capsys):
        suite = tmp_path / "suite.json"
        suite.write_text(json.dumps({**SUITE, "prompts": SUITE["prompts"][:1]}))
        out, first, again = tmp_path / "r.json", tmp_path / "plots", tmp_path / "again"
        args = ["bench", "--target", str(tiny_pair[0]), "--draft", str(tiny_pair[1]), "--threads", "1"]
        assert main([*args, "--ctx", "512", "--suite", str(suite), "--json", str(out), "--plot", str(first)]) == 0
        printed = capsys.readouterr().out
        drawn = sorted(p.name for p in first.glob("*.svg"))
        assert drawn == [f"{tiny_pair[0].stem}-curve.svg", f"{tiny_pair[0].stem}-speedup.svg"]
        assert main(["bench", "--from-json", str(out), "--plot", str(again)]) == 0
        replayed = capsys.readouterr().out
        tables = replayed.split("\ndrew ")[0].strip()
        assert tables and tables in printed  # the same tables as the run printed
        assert [(again / n).read_text() for n in drawn] == [(first / n).read_text() for n in drawn]

    @pytest.mark.parametrize("content", ["not json", "[1, 2]", '{"no": "rows"}'])
    def test_from_json_refuses_what_is_not_a_report(self, tmp_path, capsys, content):
        bad = tmp_path / "bad.json"
        bad.write_text(content)
        assert main(["bench", "--from-json", str(bad)]) == 2
        assert f"--from-json {bad}" in capsys.readouterr().err

    def test_the_bench_needs_a_target_or_a_report(self, capsys):
        assert main(["bench"]) == 2
        assert "--target" in capsys.readouterr().err

    def test_sweep_needs_a_draft_model(self, tiny_pair, capsys):
        assert main(["bench", "--target", str(tiny_pair[0]), "--lookup", "--sweep"]) == 2
        assert "--sweep" in capsys.readouterr().err

    def test_fixed_mode_names_round_trip(self):
        assert bench_modes.parse_fixed(bench_modes.fixed_mode(4, 0.75)) == (4, 0.75)
        assert bench_modes.parse_fixed(bench_modes.fixed_mode(2, 0.0)) == (2, 0.0)
        assert bench_modes.parse_fixed("draft") is None and bench_modes.parse_fixed("oracle-100/4") is None


class TestModes:
    def test_the_bench_registers_its_modes_beside_the_built_in_ones(self):
        session = SimpleNamespace(modes=builtin_modes())
        bench_modes.register_modes(session, ["none", "draft", "draft:match", "fixed-k4-p0.75", "oracle-100/4"])
        modes = session.modes
        assert modes["draft:match"].build is modes["draft"].build and not modes["draft:match"].counts_as_use
        assert modes["fixed-k4-p0.75"].build == bench_modes.FixedDraft(4, 0.75)  # its configuration is its key
        oracle = modes["oracle-100/4"].build
        assert isinstance(oracle, bench_modes.Oracle) and (oracle.accuracy, oracle.k) == (1.0, 4)
        assert modes["draft"].counts_as_use and not modes["oracle-100/4"].counts_as_use
        with pytest.raises(ValueError, match="unknown bench mode 'sometimes'"):
            bench_modes.register_modes(session, ["sometimes"])


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


class TestVerdictsMode:
    def test_the_target_keeps_what_the_recording_says(self, tiny_pair, tmp_path):
        """p1's draft agreed everywhere, p2's nowhere; k fixed at 4 (--no-adapt), so every step
        drafts and the acceptance is the recording's alone."""
        suite, recording, out = tmp_path / "suite.json", tmp_path / "tiny+pair.json", tmp_path / "r.json"
        suite.write_text(json.dumps(SUITE))
        recorded = {
            "pair": "tiny+pair",
            **{"target": "t.gguf", "draft": "d.gguf", "llama_cpp_python": "0.3.36", "date": "2026-01-01"},
            "prompts": [
                {"id": "p1", "suite": "tiny", "n": 12, "agree": "1" * 12, "confidence": [90] * 12},
                {"id": "p2", "suite": "tiny", "n": 12, "agree": "0" * 12, "confidence": [90] * 12},
            ],
        }
        recording.write_text(json.dumps(recorded))
        model = ["--target", str(tiny_pair[0]), "--draft", str(tiny_pair[1]), "--threads", "1", "--ctx", "512"]
        fixed = ["--no-adapt", "--draft-max", "4", "--suite", str(suite), "--json", str(out)]
        assert main(["bench", *model, *fixed, "--verdicts", str(recording)]) == 0
        rep = json.loads(out.read_text())
        rows = {(r["prompt_id"], r["mode"]): r for r in rep["rows"]}
        right, wrong = rows[("p1", "verdicts")], rows[("p2", "verdicts")]
        assert right["acceptance_rate"] == 1.0 and right["tokens_per_pass"] > 3 and right["identical"] is True
        assert wrong["acceptance_rate"] == 0.0 and wrong["tokens_per_pass"] == 1.0 and wrong["identical"] is True
        assert rep["verdicts"] == "tiny+pair"

    @pytest.mark.parametrize(
        "flags, message",
        [
            (["--verdicts"], "error: --verdicts spends a draft model's passes: give --draft"),
            (["--draft", "D", "--verdicts", "--temp", "0.7"], "error: --verdicts replays greedy verdicts"),
            (["--draft", "D", "--verdicts", "--cold"], "error: --verdicts is a mode of the warm bench"),
            (["--draft", "D", "--verdicts", "nowhere.json"], "error: --verdicts nowhere.json: cannot read"),
        ],
    )
    def test_what_it_cannot_run_with_is_refused_before_anything_loads(self, tiny_pair, capsys, flags, message):
        flags = [str(tiny_pair[1]) if f == "D" else f for f in flags]
        assert main(["bench", "--target", str(tiny_pair[0]), *flags]) == 2
        err = capsys.readouterr().err
        assert err.startswith(message) and "Traceback" not in err


def cold_run(config: str, repeat: int, tps: float, drafted: int, text: str = "same") -> cold.ColdRun:
    """A cold run of prompt p1 as `localspec run --json` would report it (only what the report reads)."""
    out = {"tokens_per_second": tps, "n_drafted": drafted, "text": text}
    return cold.ColdRun(
        prompt_id="p1", category="edit", config=config, temperature=0.0, repeat=repeat, wall_seconds=1.0, out=out
    )


AUTO, FIXED, TARGET = cold.COLD_AUTO, cold.COLD_FIXED, cold.COLD_TARGET


class TestColdReport:
    def test_ratios_collapses_and_identity_from_the_runs(self):
        runs = [
            *(cold_run(TARGET, r, tps, 0) for r, tps in enumerate([10.0, 11.0, 9.0])),  # median 10
            *(cold_run(FIXED, r, tps, n) for r, (tps, n) in enumerate([(14.0, 80), (13.0, 84), (15.0, 90)])),  # 14
            cold_run(AUTO, 0, 5.0, 2),  # drafted 2 < 84 / 4 = 21: collapsed
            cold_run(AUTO, 1, 15.0, 85, text="other"),  # parts from the target alone's text of repeat 1
            cold_run(AUTO, 2, 12.0, 60),
        ]
        (row,) = cold.cold_rows(runs)
        assert row["tokens_per_second"] == {AUTO: 12.0, FIXED: 14.0, TARGET: 10.0}
        assert row["auto_over_fixed"] == pytest.approx(12 / 14)
        assert row["fixed_over_target"] == pytest.approx(1.4)
        assert row["auto_over_target"] == pytest.approx(1.2)
        assert row["auto_drafted"] == [2, 85, 60] and row["fixed_drafted"] == [80, 84, 90]
        assert row["collapse_floor"] == 21 and row["collapses"] == 1
        assert row["collapse_flag"]  # fixed pays (1.4x) and 1 collapse in 3 runs is more than 1 in 5
        assert row["below_fixed_flag"]  # 0.86 < 0.95
        assert row["identical"] == {AUTO: "2/3", FIXED: "3/3"}
        # repeat by repeat (each pair ran one after the other): 5/14, 15/13, 12/15
        assert row["paired_auto_over_fixed"] == pytest.approx([5 / 14, 15 / 13, 12 / 15])
        assert row["paired_median"] == pytest.approx(12 / 15)
        summary = cold.cold_summary([row])
        assert summary["collapses_where_fixed_pays"] == 1 and summary["auto_runs_where_fixed_pays"] == 3
        assert summary["collapse_flagged"] == ["p1"] and summary["below_fixed_flagged"] == ["p1"]

    @pytest.mark.parametrize(
        "auto, expected",
        [
            ([21, 100], 0),  # exactly a quarter of 84 is not a collapse
            ([20, 100], 1),
            ([0, 0, 20], 3),
        ],
    )
    def test_a_collapse_drafts_less_than_a_quarter_of_fixed_median(self, auto, expected):
        assert cold.collapses(auto, [80, 84, 90]) == expected

    @pytest.mark.parametrize(
        "fixed_tps, auto_drafted, flagged",
        [
            (13.0, [2, 80, 80, 80, 80], False),  # one collapse in five is allowed
            (13.0, [2, 2, 80, 80, 80], True),  # two are not
            (12.9, [2, 2, 80, 80, 80], False),  # fixed k = 4 at 1.29x the target alone: not where it pays
        ],
    )
    def test_collapses_are_flagged_only_where_fixed_pays(self, fixed_tps, auto_drafted, flagged):
        runs = [cold_run(TARGET, r, 10.0, 0) for r in range(5)]
        runs += [cold_run(FIXED, r, fixed_tps, 80) for r in range(5)]
        runs += [cold_run(AUTO, r, 13.0, n) for r, n in enumerate(auto_drafted)]
        assert cold.cold_row(runs)["collapse_flag"] is flagged

    def test_pairs_are_matched_by_repeat_and_a_missing_one_is_left_out(self):
        fixed = [cold_run(FIXED, 0, 10.0, 80), cold_run(FIXED, 2, 20.0, 80)]  # repeat 1 has not run
        auto = [cold_run(AUTO, 2, 10.0, 80), cold_run(AUTO, 1, 9.0, 80), cold_run(AUTO, 0, 12.0, 80)]
        assert cold.paired_ratios(auto, fixed) == pytest.approx([1.2, 0.5])

    def test_a_report_written_before_the_pairs_were_kept_still_prints(self):
        runs = [cold_run(TARGET, 0, 10.0, 0), cold_run(FIXED, 0, 14.0, 84), cold_run(AUTO, 0, 12.0, 80)]
        rep = cold.cold_report(runs, {"name": "tiny", "max_tokens": 8}, ["--target", "t.gguf"], _configs(), 1)
        for row in rep["rows"]:
            del row["paired_auto_over_fixed"], row["paired_median"]
        del rep["summary"]["median_paired_auto_over_fixed"]
        assert "| 0.86 | — | 1.40 |" in cold.cold_markdown(rep)

    def test_markdown_has_a_row_per_prompt_and_the_flags(self):
        runs = [cold_run(TARGET, 0, 10.0, 0), cold_run(FIXED, 0, 14.0, 84), cold_run(AUTO, 0, 12.0, 2)]
        rep = cold.cold_report(runs, {"name": "tiny", "max_tokens": 8}, ["--target", "t.gguf"], _configs(), 1)
        md = cold.cold_markdown(rep)
        assert "| p1 | 0 | 12.0 | 14.0 | 10.0 | 0.86 | 0.86 (0.86–0.86) | 1.40 | 1.20 | 2 | 84 | 1/1 | 1/1, 1/1 |" in md
        assert "collapses > 1 in 5, auto < 0.95× fixed |" in md
        assert rep["target"] == "t.gguf" and rep["draft"] == "d.gguf" and rep["machine"]["cpu"]


def _configs() -> dict[str, list[str]]:
    return cold.cold_configs("d.gguf")


class FakeRun:
    """``spawn`` for run_cold: records each command and answers as `localspec run --json` would."""

    def __init__(self, returncode: int = 0) -> None:
        self.calls: list[tuple[list[str], str]] = []
        self.returncode = returncode

    def __call__(self, argv, prompt):
        self.calls.append((list(argv), prompt))
        out = json.dumps({"tokens_per_second": 10.0, "n_drafted": 4, "text": "x"}).encode()
        return subprocess.CompletedProcess(argv, self.returncode, out, b"error: the prompt is empty")


class TestColdRuns:
    def test_the_order_rotates_each_repeat_and_each_prompt(self):
        suite = {"prompts": [{"id": "p1"}, {"id": "p2"}]}
        plan = cold.cold_plan(suite, ["a", "b", "c"], [0.0], 3)
        order = ["".join(t.config for t in plan[i : i + 3]) for i in range(0, len(plan), 3)]
        assert order == ["abc", "bca", "cab", "bca", "cab", "abc"]

    def test_every_run_is_one_command_with_its_configuration(self):
        fake = FakeRun()
        suite = {"prompts": [{"id": "p1", "category": "edit", "prompt": "-x"}]}
        runs = cold.run_cold(suite, ["run", "--json"], _configs(), [0.0, 0.7], 2, spawn=fake)
        assert len(runs) == len(fake.calls) == 1 * 3 * 2 * 2  # prompts x configurations x temperatures x repeats
        argv, prompt = fake.calls[0]
        assert argv == ["run", "--json", "--draft", "d.gguf", "--temp", "0", "-"] and prompt == "-x"
        fixed = next(a for a, _ in fake.calls if "--no-adapt" in a)
        assert fixed[2:-3] == ["--draft", "d.gguf", "--no-adapt", "--draft-max", "4", "--p-min", "0"]
        assert sum("--no-draft" in a for a, _ in fake.calls) == 4

    def test_a_failed_run_stops_the_bench_with_its_message(self):
        suite = {"prompts": [{"id": "p1", "category": "edit", "prompt": "x"}]}
        with pytest.raises(cold.ColdRunFailed, match="exited with 2:\nerror: the prompt is empty"):
            cold.run_cold(suite, ["run"], _configs(), [0.0], 1, spawn=FakeRun(returncode=2))

    def test_the_bench_model_and_drafting_flags_reach_the_runs(self):
        argv = ["bench", "--cold", "--target", "t.gguf", "--draft", "d.gguf", "--threads", "2", "--ctx", "1024"]
        args = build_parser().parse_args([*argv, "--no-copy", "--p-min", "0.5"])
        base = cold_base(args, 8)
        assert base[:5] == [sys.executable, "-m", "localspec", "run", "--json"]
        assert base[5:] == ["--target", "t.gguf", "--threads", "2", "--ctx", "1024", "--max-tokens", "8"]
        assert given_flags(args, DraftOptions) == ["--p-min", "0.5", "--no-copy"]


class TestColdCli:
    def test_a_fresh_run_process_for_every_run(self, tiny_pair, tmp_path, monkeypatch):
        suite = tmp_path / "suite.json"
        suite.write_text(json.dumps({**SUITE, "max_tokens": 8}))
        started = []
        real = subprocess.run

        def spy(argv, *a, **kw):
            if argv[:4] == [sys.executable, "-m", "localspec", "run"]:
                started.append(argv)
            return real(argv, *a, **kw)

        monkeypatch.setattr(subprocess, "run", spy)
        out, md = tmp_path / "r.json", tmp_path / "r.md"
        args = ["bench", "--cold", "--target", str(tiny_pair[0]), "--draft", str(tiny_pair[1]), "--threads", "1"]
        args += ["--ctx", "512", "--suite", str(suite), "--prompts", "p2", "--repeats", "2"]
        assert main([*args, "--json", str(out), "--markdown", str(md)]) == 0
        rep = json.loads(out.read_text())
        assert len(started) == len(rep["runs"]) == 6  # 1 prompt (of 2) x 3 configurations x 2 repeats
        assert {r["prompt_id"] for r in rep["runs"]} == {"p2"}
        assert sorted(r["config"] for r in rep["runs"]) == sorted([AUTO, FIXED, TARGET] * 2)
        assert all("--threads" in a and "--max-tokens" in a and "8" in a for a in started)
        (row,) = rep["rows"]
        assert row["identical"] == {AUTO: "2/2", FIXED: "2/2"}  # greedy: the target's own text
        assert len(row["auto_drafted"]) == 2 and row["tokens_per_second"][TARGET] > 0
        assert rep["repeats"] == 2 and rep["machine"]["cpu"] and rep["command"].startswith("localspec")
        assert "| prompt | temp | auto tok/s |" in md.read_text()

    @pytest.mark.parametrize(
        "extra, message",
        [([], "give --draft"), (["--draft", "d.gguf", "--sweep"], "not with --sweep")],
    )
    def test_cold_runs_its_own_configurations(self, tiny_pair, capsys, extra, message):
        assert main(["bench", "--cold", "--target", str(tiny_pair[0]), *extra]) == 2
        assert message in capsys.readouterr().err


class TestColdResume:
    """A --cold bench saves its report after every run; --resume continues an unfinished one."""

    def test_finished_tasks_are_skipped_and_each_new_run_is_reported(self):
        suite = {"prompts": [{"id": "p1", "category": "edit", "prompt": "x"}]}
        first = cold.run_cold(suite, ["run"], _configs(), [0.0], 2, spawn=FakeRun())
        fake, seen = FakeRun(), []
        runs = cold.run_cold(
            suite, ["run"], _configs(), [0.0], 2, spawn=fake, done=first[:4], on_run=lambda rs: seen.append(len(rs))
        )
        assert len(fake.calls) == 2 and seen == [5, 6]
        assert sorted(map(cold.run_key, runs)) == sorted(map(cold.run_key, first))

    def test_a_report_gives_back_its_runs(self):
        runs = [cold_run(TARGET, 0, 10.0, 0), cold_run(FIXED, 0, 14.0, 84)]
        rep = json.loads(json.dumps(cold.cold_report(runs, {"name": "t"}, ["--target", "t"], _configs(), 1, None, 3)))
        assert rep["complete"] is False and rep["planned"] == 3
        assert cold.runs_from(rep) == runs
        assert "Unfinished: 2 of 3 runs" in cold.cold_markdown(rep)
        # a drafting run whose target-alone twin has not run yet is not compared
        early = cold.cold_row(
            [cold_run(FIXED, 0, 14.0, 84), cold_run(TARGET, 0, 10.0, 0), cold_run(FIXED, 1, 14.0, 84)]
        )
        assert early["identical"] == {AUTO: "0/0", FIXED: "1/1"}

    def test_a_resume_names_what_changed(self):
        suite = {"prompts": [{"id": "p1", "category": "edit", "prompt": "x"}]}
        identity = cold.cold_plan_identity(suite, ["run"], _configs(), [0.0], 5)
        rep = cold.cold_report([], suite, ["run"], _configs(), 5, identity, 15)
        assert cold.resume_problem(rep, identity) is None
        other = {**identity, "repeats": 3, "machine": {"cpu": "another", "cpu_count": 2}}
        assert cold.resume_problem(rep, other) == "the machine (CPU), --repeats changed since its runs ran"
        edited = {"prompts": [{"id": "p1", "category": "edit", "prompt": "y"}]}
        assert "the prompts" in cold.resume_problem(rep, cold.cold_plan_identity(edited, ["run"], _configs(), [0.0], 5))
        assert "not an unfinished" in cold.resume_problem({**rep, "complete": True}, identity)

    def test_an_interrupted_bench_is_kept_and_resumed(self, tiny_pair, tmp_path, monkeypatch, capsys):
        suite = tmp_path / "suite.json"
        suite.write_text(json.dumps({**SUITE, "max_tokens": 8}))
        out = tmp_path / "r.json"
        argv = ["bench", "--cold", "--target", str(tiny_pair[0]), "--draft", str(tiny_pair[1]), "--suite", str(suite)]
        argv += ["--repeats", "2", "--json", str(out)]
        started = []

        def fake(args, *a, stop_after=None, **kw):
            if args[:4] != [sys.executable, "-m", "localspec", "run"]:
                return real(args, *a, **kw)
            if stop_after is not None and len(started) == stop_after:
                raise KeyboardInterrupt
            started.append(args)
            text = json.dumps({"tokens_per_second": 10.0, "n_drafted": 4, "text": "x"}).encode()
            return subprocess.CompletedProcess(args, 0, text, b"")

        real = subprocess.run
        monkeypatch.setattr(subprocess, "run", lambda *a, **kw: fake(*a, stop_after=5, **kw))
        assert main(argv) == 130
        assert "saved in" in capsys.readouterr().err
        rep = json.loads(out.read_text())
        assert (len(rep["runs"]), rep["planned"], rep["complete"]) == (5, 12, False)

        assert main(argv) == 2  # never overwritten without --resume
        assert "holds an unfinished --cold bench (5 of 12 runs): add --resume" in capsys.readouterr().err
        assert main([*argv[:-4], "--repeats", "3", "--json", str(out), "--resume"]) == 2
        assert "--repeats changed since its runs ran" in capsys.readouterr().err
        assert len(json.loads(out.read_text())["runs"]) == 5

        monkeypatch.setattr(subprocess, "run", fake)
        assert main([*argv, "--resume"]) == 0
        rep = json.loads(out.read_text())
        assert len(started) == 12 and rep["complete"] is True and len(rep["runs"]) == 12
        assert len({cold.run_key(r) for r in cold.runs_from(rep)}) == 12

    def test_resume_needs_cold_and_a_report(self, tiny_pair, tmp_path, capsys):
        assert main(["bench", "--target", str(tiny_pair[0]), "--resume"]) == 2
        assert "give --cold" in capsys.readouterr().err
        cold_args = ["bench", "--cold", "--target", str(tiny_pair[0]), "--draft", str(tiny_pair[1]), "--resume"]
        assert main(cold_args) == 2
        assert "give --json" in capsys.readouterr().err
        assert main([*cold_args, "--json", str(tmp_path / "none.json")]) == 2
        assert "does not exist" in capsys.readouterr().err


class TestSizeChange:
    """What a change of batch size costs beyond the steady costs (CUDA re-captures a graph)."""

    def timed_target(self, monkeypatch, penalty: float):
        from localspec.core import costs
        from tests.support.fakes import TimedModel, VirtualClock, hashed_logits

        clock = VirtualClock()
        monkeypatch.setattr(costs, "clock", clock)
        sizes: list[int] = []

        def seconds(n, call):  # steady from the third evaluation of a size in a row
            sizes.append(n)
            return (0.004 + 0.001 * n) * (1.0 if sizes[-3:] == [n] * 3 else penalty)

        target = TimedModel(hashed_logits(10, 64), 64, clock, seconds)
        target.sync([5, 6, 7])
        return target

    @pytest.mark.parametrize("penalty", [1.0, 1.5])
    def test_the_extra_is_what_the_changes_add_and_the_cache_is_kept(self, monkeypatch, penalty):
        from localspec.bench.measure import size_change

        target = self.timed_target(monkeypatch, penalty)
        from localspec.core.costs import CostModel

        loaded = CostModel({1: 0.005})
        loaded.verify.change = 0.002  # what the load timed (calibration.time_change)
        change = size_change(SimpleNamespace(target=target, costs=loaded), k=4, prefix=20)
        m = change["seconds"]
        assert m["one"] == pytest.approx(0.005) and m["k"] == pytest.approx(0.008)
        # the verify after one-token steps and the two one-token steps after it pay the penalty
        assert change["extra_seconds"] == pytest.approx((penalty - 1) * (0.008 + 2 * 0.005))
        assert change["extra_over_t1"] == pytest.approx(change["extra_seconds"] / 0.005)
        assert change["at_load_seconds"] == pytest.approx(0.002)
        assert target.cached == [5, 6, 7]

    def test_the_report_gives_the_two_changes_and_one_change_each_way_as_a_replay_takes_it(self):
        from localspec.bench.report import size_change_markdown

        m = {"one": 0.005, "k": 0.008, "k_after_ones": 0.010, "one_after_k": 0.007, "two_after_k": 0.006}
        change = {"k": 4, "seconds": m, "extra_seconds": 0.005, "extra_over_t1": 1.0, "at_load_seconds": 0.0025}
        first, load = size_change_markdown(change)
        # the replay charges --size-change F at each change: a verify between single tokens pays it twice
        assert first.startswith("Two changes of size (a verify of 4 between one-token steps: into 4 and back) add 5.00")
        assert "= 1.00 T(1) to the steps around them, 0.50 T(1) a change (`bench --replay --size-change 0.50`)" in first
        assert load.startswith("The load timed one change at 2.50 ms")

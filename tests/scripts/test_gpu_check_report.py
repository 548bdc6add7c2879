"""scripts/gpu_check_report.py: the GPU check's bench JSONs summed up, on hand-written reports."""

import json

from tests.support.scripts import load_script

gpu_check_report = load_script("gpu_check_report")


def row(mode, speedup, overhead_ms, identical=True, acceptance=0.8):
    return {
        "mode": mode,
        "speedup": speedup,
        "acceptance_rate": acceptance,
        "tokens_per_pass": 3.0,
        "overhead_ms_per_step": overhead_ms,
        "overhead_fraction": 0.01,
        "identical": identical,
    }


def report(target, rows):
    return {
        "target": f"/models/{target}.gguf",
        "draft": "/models/random-0.5b-q4_k_m.gguf",
        "offload": None,
        "cost_curve": {
            "verify_seconds": {"1": 0.004},  # T(1) = 4 ms
            "verify_ratio": {"1": 1.0, "2": 1.05, "4": 1.2, "8": 1.6},
            "draft_seconds_per_token": 0.001,  # a quarter of T(1)
            "predicted_at_acceptance": {"0.6": 1.5, "0.8": 2.25},
        },
        "rows": rows,
    }


SEVEN_B = report(
    "random-7b-q4_k_m",
    [
        row("oracle-100/8", 3.5, 0.2),
        row("oracle-100/8", 2.9, 0.3),
        row("oracle-100/8", 3.3, 0.4),  # median 3.3: the 3.0x target met
        row("draft", 1.1, 0.6, identical=False),  # 0.6 ms: the worst median, over 0.5
    ],
)


class TestTargetSection:
    def test_the_cost_curve_and_the_draft_pass(self):
        lines = gpu_check_report.target_section(SEVEN_B)
        assert lines[0] == "## random-7b-q4_k_m.gguf (draft random-0.5b-q4_k_m.gguf)"
        assert "T(1) = 4.00 ms; T(k)/T(1): 2: 1.05, 4: 1.20, 8: 1.60" in lines  # only the sizes measured
        assert "Draft pass: 1.00 ms = 0.25 x T(1)" in lines
        assert "Predicted speed-up at acceptance 0.6: 1.50x, 0.8: 2.25x" in lines

    def test_one_line_per_mode_with_medians(self):
        lines = gpu_check_report.target_section(SEVEN_B)
        oracle = next(line for line in lines if line.startswith("| oracle-100/8 "))
        # median speed-up 3.3, min 2.9, overhead median 0.3 ms, all 3 identical
        assert oracle == "| oracle-100/8 | 3.30 | 2.90 | 0.80 | 3.00 | 0.300 | 0.010 | 3/3 |"
        assert "| draft | 1.10 | 1.10 | 0.80 | 3.00 | 0.600 | 0.010 | 0/1 |" in lines

    def test_what_a_change_of_size_adds(self):
        change = {"k": 4, "extra_seconds": 0.004, "extra_over_t1": 1.5, "seconds": {"one": 0.0027}}
        lines = gpu_check_report.target_section({**SEVEN_B, "size_change": change})
        assert (
            "Two changes of size (1 -> 4 -> 1) add 4.00 ms = 1.50 x T(1), 0.75 a change "
            "(`bench --replay --size-change 0.75`; one-token steps in a run: 2.70 ms)"
        ) in lines
        assert not any("change of size" in line for line in gpu_check_report.target_section(SEVEN_B))

    def test_an_mtp_target_names_its_pass(self):
        rep = {**SEVEN_B, "draft": "MTP"}
        assert "MTP pass: 1.00 ms = 0.25 x T(1)" in gpu_check_report.target_section(rep)


class TestVerdicts:
    def test_both_targets_checked(self):
        lines = gpu_check_report.verdicts([(None, SEVEN_B)])
        assert lines[2] == (
            "- Per-step overhead outside llama.cpp <= 0.5 ms: MISSED (worst median over modes and prompts: 0.600 ms)"
        )
        assert lines[3] == "- oracle-100/8 on 7b-q4_k_m: >= 3.0x target-only: met (median 3.30x)"

    def test_a_slow_oracle_misses_and_other_targets_are_not_judged(self):
        slow = report("random-7b-q4_k_m", [row("oracle-100/8", 2.0, 0.1)])
        small = report("random-1.5b-f16", [row("oracle-100/8", 9.0, 0.1)])
        lines = gpu_check_report.verdicts([(None, slow), (None, small)])
        assert "Per-step overhead outside llama.cpp <= 0.5 ms: met" in lines[2]
        assert lines[3:] == [
            "- oracle-100/8 on 7b-q4_k_m: >= 3.0x target-only: MISSED (median 2.00x)",
            "- Oracle runs on random-7b-q4_k_m.gguf write the target alone's text: met (1 of 1)",
            "- Oracle runs on random-1.5b-f16.gguf write the target alone's text: met (1 of 1)",
        ]

    def test_oracle_runs_whose_text_parted_void_their_speed_ups(self):
        """From a parting on, the oracle replays a text the target no longer writes."""
        rows = [row("oracle-100/8", 3.2, 0.1), row("oracle-100/8", 3.4, 0.1), row("oracle-80", 2.0, 0.1)]
        for r, (index, gap) in zip(rows[1:], ((7, 0.44), (1, 1.67)), strict=True):
            r.update(identical=False, divergence={"index": index, "gap": gap})
        lines = gpu_check_report.verdicts([(None, report("random-7b-q4_k_m", rows + [row("draft", 0.8, 0.1, False)]))])
        assert lines[3] == (
            "- oracle-100/8 on 7b-q4_k_m: >= 3.0x target-only: met (median 3.30x) (void: the texts parted, below)"
        )
        assert lines[4] == (
            "- Oracle runs on random-7b-q4_k_m.gguf write the target alone's text: MISSED (2 of 3 parted, "
            "at tokens 1-7, top-2 gaps 0.44-1.67): their speed-ups are void"
        )  # the draft model's run parting is not the oracle's

    def test_the_real_pairs_acceptance_per_target(self):
        """The verdicts mode: auto over the target alone, where the target keeps what the real
        pair's kept; a run whose text parted is counted, not hidden."""
        rows = [row("verdicts", 1.2, 0.1, acceptance=0.7), row("verdicts", 1.6, 0.1, identical=False)]
        rows.append(row("verdicts", 1.4, 0.1, acceptance=0.5))  # medians: 1.4x, acceptance 0.7 (0.5, 0.7, 0.8)
        rep = {**report("random-1.5b-f16", rows), "verdicts": "qwen2.5-coder-1.5b+0.5b"}
        lines = gpu_check_report.verdicts([(None, SEVEN_B), (None, rep)])
        assert lines[-1] == (
            "- The real pair's acceptance (qwen2.5-coder-1.5b+0.5b) on random-1.5b-f16.gguf: auto / the target "
            "alone 1.40x (min 1.20x; acceptance 0.70, 3.00 tokens/pass; 2 of 3 identical)"
        )
        assert not any("real pair" in line for line in gpu_check_report.verdicts([(None, SEVEN_B)]))


class TestMain:
    def test_prints_every_report_then_the_targets(self, tmp_path, capsys):
        paths = []
        for rep in (SEVEN_B, report("random-1.5b-f16", [row("draft", 1.4, 0.1)])):
            paths.append(tmp_path / f"{rep['target'].rsplit('/', 1)[1]}.json")
            paths[-1].write_text(json.dumps(rep))
        assert gpu_check_report.main([str(p) for p in paths]) == 0
        out = capsys.readouterr().out
        assert out.index("## random-7b-q4_k_m.gguf") < out.index("## random-1.5b-f16.gguf") < out.index("## Targets")

    def test_no_reports_is_an_error(self, tmp_path, capsys):
        assert gpu_check_report.main([str(tmp_path / "bench-*.json")]) == 1  # the shell's unmatched glob
        assert capsys.readouterr().out == "no bench results to summarise\n"

"""The bench's SVG plots: valid XML, one point per size and line, one bar per prompt and mode,
the values written out, and only the plots the report has the data for."""

import copy
import xml.etree.ElementTree as ET

import pytest

from localspec.bench.plot import speedups, write_plots

SVG = "{http://www.w3.org/2000/svg}"

# A `localspec bench --json` report, trimmed: the F16 target's --quick run with --control
# (3 prompts × none, draft, control; 48 tokens), its curves cut to k = 1..4 and 9.
REPORT = {
    "offload": "CPU only: this llama.cpp build has no GPU offload",
    "target": "/work/main/models/qwen2.5-coder-1.5b-f16.gguf",
    "draft": "/work/main/models/qwen2.5-coder-0.5b.gguf",
    "suite": "default",
    "max_tokens": 48,
    "repeats": 1,
    "cost_curve": {
        "verify_seconds": {"1": 0.04799, "2": 0.07690, "3": 0.08574, "4": 0.09109, "9": 0.13587},
        "verify_ratio": {"1": 1.0, "2": 1.6023, "3": 1.7865, "4": 1.8981, "9": 2.8312},
        "draft_seconds_per_token": 0.013404,
    },
    "rows": [
        {"prompt_id": "code-intervals", "category": "code", "mode": "none", "temperature": 0.0, "speedup": 1.0},
        {"prompt_id": "code-intervals", "category": "code", "mode": "draft", "temperature": 0.0, "speedup": 1.3467},
        {"prompt_id": "code-intervals", "category": "code", "mode": "control", "temperature": 0.0, "speedup": 0.9985},
        {"prompt_id": "edit-refactor", "category": "edit", "mode": "none", "temperature": 0.0, "speedup": 1.0},
        {"prompt_id": "edit-refactor", "category": "edit", "mode": "draft", "temperature": 0.0, "speedup": 1.2124},
        {"prompt_id": "edit-refactor", "category": "edit", "mode": "control", "temperature": 0.0, "speedup": 1.0056},
        {"prompt_id": "explain-gil", "category": "chat", "mode": "none", "temperature": 0.0, "speedup": 1.0},
        {"prompt_id": "explain-gil", "category": "chat", "mode": "draft", "temperature": 0.0, "speedup": 1.0227},
        {"prompt_id": "explain-gil", "category": "chat", "mode": "control", "temperature": 0.0, "speedup": 1.0458},
    ],
    "engine_curve": {
        "ratios": {
            "1": {"engine": 1.0, "direct": 1.0, "engine_over_direct": 1.0, "engine_samples": 9},
            "2": {"engine": 1.5645, "direct": 1.6023, "engine_over_direct": 0.9764, "engine_samples": 5},
            "3": {"engine": 1.7602, "direct": 1.7865, "engine_over_direct": 0.9853, "engine_samples": 9},
            "4": {"engine": 1.8546, "direct": 1.8981, "engine_over_direct": 0.9771, "engine_samples": 9},
            "9": {"engine": 3.1528, "direct": 2.8312, "engine_over_direct": 1.1136, "engine_samples": 0},
        },
        "engine_t1": 0.04654,
        "direct_t1": 0.04799,
        "engine_draft_seconds": 0.014624,
        "direct_draft_seconds": 0.013404,
    },
    "lookup": False,
}

# the same shape as `localspec bench --cold --json` writes, two prompts
COLD = {
    "cold": True,
    "machine": {"cpu": "AMD EPYC 9R45", "cpu_count": 2},
    "command": "localspec bench --cold --target models/t.gguf --draft models/d.gguf --repeats 5",
    "target": "models/t.gguf",
    "draft": "models/d.gguf",
    "rows": [
        {"prompt_id": "code-intervals", "temperature": 0.0, "auto_over_target": 1.23, "fixed_over_target": 1.31},
        {"prompt_id": "korean-chat", "temperature": 0.0, "auto_over_target": 0.98, "fixed_over_target": 0.87},
    ],
}


def parse(path):
    return ET.parse(path).getroot()  # raises on markup that is not well-formed XML


def of_class(root, tag, cls):
    return [e for e in root.iter(SVG + tag) if e.get("class") == cls]


def texts(root, cls=None):
    return [e.text for e in root.iter(SVG + "text") if cls is None or e.get("class") == cls]


class TestWritePlots:
    def test_both_plots_are_named_after_the_target(self, tmp_path):
        paths = write_plots(REPORT, tmp_path / "plots")  # the folder is created
        assert [p.name for p in paths] == ["qwen2.5-coder-1.5b-f16-curve.svg", "qwen2.5-coder-1.5b-f16-speedup.svg"]
        assert all(p.is_file() for p in paths)

    def test_a_report_without_a_curve_writes_only_the_speedup_plot(self, tmp_path):
        report = {k: v for k, v in REPORT.items() if k not in ("cost_curve", "engine_curve")}
        assert [p.name for p in write_plots(report, tmp_path)] == ["qwen2.5-coder-1.5b-f16-speedup.svg"]

    def test_a_report_with_nothing_to_draw_writes_nothing(self, tmp_path):
        assert write_plots({"target": "t.gguf", "rows": []}, tmp_path) == []
        assert list(tmp_path.iterdir()) == []

    def test_titles_name_the_pair_and_the_captions_say_what_a_speedup_is(self, tmp_path):
        for path in write_plots(REPORT, tmp_path):
            root = parse(path)
            title = root.find(SVG + "title").text
            assert "qwen2.5-coder-1.5b-f16.gguf" in title and "qwen2.5-coder-0.5b.gguf" in title
            assert "localspec bench" in root.find(SVG + "desc").text
            assert any("localspec bench" in t for t in texts(root, "note"))
        speedup = parse(tmp_path / "qwen2.5-coder-1.5b-f16-speedup.svg")
        assert "tok/s ÷ target-alone tok/s in the same run" in " ".join(texts(speedup, "note"))


class TestCurve:
    def test_two_lines_one_point_per_size_each(self, tmp_path):
        root = parse(write_plots(REPORT, tmp_path)[0])
        assert len(of_class(root, "polyline", "line")) == 2
        assert len(of_class(root, "circle", "point")) == 2 * 5  # engine and direct at k = 1, 2, 3, 4, 9
        legend = [t for g in of_class(root, "g", "legend") for t in texts(g)]
        assert legend == ["engine", "direct"]

    def test_each_point_carries_its_value_and_unmeasured_sizes_are_hollow(self, tmp_path):
        root = parse(write_plots(REPORT, tmp_path)[0])
        tips = [c.find(SVG + "title").text for c in of_class(root, "circle", "point")]
        assert "direct: T(2)/T(1) = 1.60" in tips and "engine: T(4)/T(1) = 1.85" in tips
        hollow = [c for c in of_class(root, "circle", "point") if c.get("fill") == "white"]
        assert len(hollow) == 1 and "T(9)" in hollow[0].find(SVG + "title").text  # 0 engine samples

    def test_the_direct_curve_alone_when_the_engine_curve_is_missing(self, tmp_path):
        report = {k: v for k, v in REPORT.items() if k != "engine_curve"}
        root = parse(write_plots(report, tmp_path)[0])
        assert len(of_class(root, "polyline", "line")) == 1
        assert len(of_class(root, "circle", "point")) == 5


class TestSpeedup:
    def test_one_bar_per_prompt_and_mode_the_target_alone_a_dashed_line(self, tmp_path):
        root = parse(write_plots(REPORT, tmp_path)[1])
        assert len(of_class(root, "rect", "bar")) == 3 * 2  # draft and control; none is the line
        (line,) = of_class(root, "line", "baseline")
        assert line.get("stroke-dasharray")
        assert {"code-intervals", "edit-refactor", "explain-gil"} <= set(texts(root))

    def test_values_are_written_on_the_bars(self, tmp_path):
        root = parse(write_plots(REPORT, tmp_path)[1])
        assert texts(root, "value") == ["1.35", "1.00", "1.21", "1.01", "1.02", "1.05"]

    def test_a_cold_report_has_auto_and_fixed_bars_and_names_the_machine(self, tmp_path):
        (path,) = write_plots(COLD, tmp_path)
        root = parse(path)
        assert path.name == "t-cold-speedup.svg"  # beside a warm report of the same target
        assert texts(root, "value") == ["1.23", "1.31", "0.98", "0.87"]
        assert "AMD EPYC 9R45 (2 CPUs)" in root.find(SVG + "title").text
        assert any("--cold" in t for t in texts(root, "note"))

    def test_markup_in_a_prompt_id_stays_text(self, tmp_path):
        report = copy.deepcopy(REPORT)
        report["rows"][1]["prompt_id"] = "a<b & 'c'"
        root = parse(write_plots(report, tmp_path)[1])
        assert "a<b & 'c'" in texts(root)


class TestSpeedups:
    @pytest.mark.parametrize(
        ("temps", "modes"),
        [((0.0, 0.0), ["draft"]), ((0.0, 0.7), ["draft @0", "draft @0.7"])],
    )
    def test_modes_carry_the_temperature_only_when_it_differs(self, temps, modes):
        rows = [
            {"prompt_id": "p", "mode": m, "temperature": t, "speedup": 1.5} for t in temps for m in ("none", "draft")
        ]
        assert speedups({"rows": rows})[1] == modes

    def test_rows_without_a_speedup_are_left_out(self):
        rows = [
            {"prompt_id": "p", "mode": "draft", "temperature": 0.0, "speedup": None},
            {"prompt_id": "q", "mode": "draft", "temperature": 0.0, "speedup": float("nan")},
            {"prompt_id": "r", "mode": "lookup", "temperature": 0.0, "speedup": 0.97},
        ]
        assert speedups({"rows": rows}) == (["r"], ["lookup"], {("r", "lookup"): 0.97})

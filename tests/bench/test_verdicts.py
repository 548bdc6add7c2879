"""bench/verdicts.py: the shipped recording of the default pair is there and well formed, verdicts
are judged from the draft's rows as the draft model chooses, and a malformed file is refused."""

import fnmatch
import json
import tomllib
from pathlib import Path

import numpy as np
import pytest

from localspec.bench import suites, verdicts
from localspec.bench.verdicts import PromptVerdicts, RecordedVerdicts

ROOT = Path(__file__).parents[2]
SHIPPED = ROOT / "localspec" / "bench" / verdicts.TRACES / f"{verdicts.DEFAULT_PAIR}.json"


class TestShipped:
    def test_the_default_pair_is_shipped_and_small(self):
        assert verdicts.DEFAULT_PAIR in verdicts.shipped()
        assert SHIPPED.stat().st_size < 100_000

    def test_it_is_in_the_packages_data(self):
        data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
        relative = SHIPPED.relative_to(ROOT / "localspec").as_posix()
        assert any(fnmatch.fnmatch(relative, pattern) for pattern in data["localspec"])

    def test_it_records_every_prompt_of_both_suites(self):
        rec = verdicts.load(verdicts.DEFAULT_PAIR)
        assert rec.pair == verdicts.DEFAULT_PAIR
        assert (rec.target, rec.draft) == ("qwen2.5-coder-1.5b.gguf", "qwen2.5-coder-0.5b.gguf")
        pinned = next(d for d in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"])
        assert pinned == f"llama-cpp-python=={rec.llama_cpp_python}"
        for name in suites.BUILTIN_SUITES:
            for prompt in suites.load_suite(name)["prompts"]:
                got = rec.get(prompt["id"])
                assert got is not None and got.suite == name and len(got) > 0
                assert len(got.confidence) == len(got) and all(0.0 <= c <= 1.0 for c in got.confidence)

    def test_the_draft_is_surer_where_it_agrees(self):
        """A mask shifted against its confidences by a position would blur this apart."""
        rec = verdicts.load(verdicts.DEFAULT_PAIR)
        pairs = [(a, c) for p in rec.prompts.values() for a, c in zip(p.agree, p.confidence)]
        sure_right = np.mean([c for a, c in pairs if a])
        sure_wrong = np.mean([c for a, c in pairs if not a])
        assert sure_right > sure_wrong + 0.2
        for suite in verdicts.summary(rec).values():
            assert 0.3 < suite["agree"] < 0.98  # a real pair: neither random nor the target itself


class TestJudge:
    def test_agree_and_confidence_per_position(self):
        rows = [
            np.array([0.0, 0.0, 2.0, 0.0]),  # top 2, the reply's: agrees
            np.array([0.0, 3.0, 0.0, 1.0]),  # top 1, the reply has 3: does not
        ]
        agree, conf = verdicts.judge(rows, [0], [2, 3], n_vocab=4)
        assert agree == (True, False)
        e = np.exp(1.0)
        assert conf == pytest.approx((e**2 / (e**2 + 3), e**3 / (e**3 + e + 2)))

    def test_banned_ids_and_ids_past_the_targets_vocabulary_are_never_the_drafts(self):
        rows = [np.array([0.0, 5.0, 1.0, 0.0, 9.0])]  # id 4 is past a 4-id target, id 1 banned
        agree, _ = verdicts.judge(rows, [0], [2], n_vocab=4, banned={1})
        assert agree == (True,)


RECORDED = RecordedVerdicts(
    "a+b", "a.gguf", "b.gguf", "0.3.36", "2026-01-01", {"p1": PromptVerdicts("p1", "s", (True, False), (0.5, 0.07))}
)


class TestFile:
    def test_round_trip(self, tmp_path):
        path = tmp_path / "a+b.json"
        data = verdicts.as_json(RECORDED)
        assert data["prompts"] == [{"id": "p1", "suite": "s", "n": 2, "agree": "10", "confidence": [50, 7]}]
        path.write_text(json.dumps(data))
        assert verdicts.load(str(path)) == RECORDED

    @pytest.mark.parametrize(
        "change, message",
        [
            ({"agree": "12"}, "agree must be"),
            ({"agree": "1"}, "agree must be"),
            ({"confidence": [50]}, "confidence must be"),
            ({"confidence": [50, 101]}, "confidence must be"),
            ({"confidence": [50, 0.5]}, "confidence must be"),
        ],
    )
    def test_a_malformed_prompt_is_named(self, tmp_path, change, message):
        data = verdicts.as_json(RECORDED)
        data["prompts"][0].update(change)
        path = tmp_path / "bad.json"
        path.write_text(json.dumps(data))
        with pytest.raises(ValueError, match=f"prompt p1: {message}"):
            verdicts.load(str(path))

    def test_what_is_not_a_recording_is_refused(self, tmp_path):
        path = tmp_path / "suite.json"
        path.write_text(json.dumps({"prompts": []}))
        with pytest.raises(ValueError, match="not a recording"):
            verdicts.load(str(path))
        with pytest.raises(ValueError, match="cannot read recorded verdicts"):
            verdicts.load(str(tmp_path / "missing.json"))

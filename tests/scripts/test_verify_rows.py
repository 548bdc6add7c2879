"""scripts/verify_rows.py: a verify's rows beside one-token rows, on a tiny GGUF."""

import json

import pytest

from localspec.llama.backend import LlamaModel
from tests.support.scripts import load_script
from tests.support.tiny_gguf import write_tiny_gguf

verify_rows = load_script("verify_rows")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_tiny_gguf(tmp_path_factory.mktemp("vr") / "tiny.gguf")


def test_rows_of_verifies_against_one_token_rows(tiny):
    model = LlamaModel.load(tiny, n_ctx=256, threads=1)
    try:
        r = verify_rows.compare(model, 20, 4)
    finally:
        model.close()
    assert r["rows"] == 16  # verifies at 0, 4, 8, 12: four rows each
    assert 0 <= r["median_difference"] <= r["max_difference"] < 0.05  # the tiny F16 rows nearly equal
    assert r["argmax_flips"] == 0 and r["min_gap"] > r["max_difference"]
    assert 1 <= r["distinct_tokens"] <= 20


def test_a_verify_that_reads_other_rows_is_seen(tiny, monkeypatch):
    """Rows one position off (a verify read wrong) differ by whole logits and flip argmaxes."""
    model = LlamaModel.load(tiny, n_ctx=256, threads=1)
    evaluate = model.evaluate
    monkeypatch.setattr(model, "evaluate", lambda tokens, n=1: (rows := evaluate(tokens, n))[1:] + rows[:1])
    try:
        r = verify_rows.compare(model, 20, 4)
    finally:
        model.close()
    assert r["max_difference"] > 0.5 and r["argmax_flips"] > 0


def test_main_prints_and_writes_json(tiny, tmp_path, capsys):
    out = tmp_path / "r.json"
    assert verify_rows.main([str(tiny), "--tokens", "12", "--k", "3", "--threads", "1", "--json", str(out)]) == 0
    line = capsys.readouterr().out
    assert line.startswith("tiny.gguf: 9 verify rows beside one-token rows")
    assert json.loads(out.read_text())["rows"] == 9


def test_k_must_leave_room_for_a_verify(tiny):
    with pytest.raises(SystemExit):
        verify_rows.main([str(tiny), "--tokens", "4", "--k", "4"])


def test_report_names_the_figures():
    r = {"rows": 2, "logit_std": 8.0, "max_difference": 1.891, "median_difference": 1.55, "median_gap": 1.04,
         "min_gap": 0.0315, "argmax_flips": 6, "distinct_tokens": 23, "tokens": 40}  # fmt: skip
    assert verify_rows.report("m.gguf", r) == (
        "m.gguf: 2 verify rows beside one-token rows (logit std 8.00): difference max 1.891, median 1.55; "
        "top-2 gap median 1.04, min 0.0315; argmax flips 6; 23 distinct of 40 tokens"
    )

"""localspec's drafting against llama.cpp's own, step for step, with no binary: llama.cpp's runs
on the tests' tiny models are kept in tests/fixtures/parity_llamacpp.json, which
scripts/parity_llamacpp.py wrote from the binary built from the vendored sources (its docstring
says how to regenerate it). Per step: the drafted tokens, each draft pass's top 3 with their
probabilities, the accepted count and the target's token; then the text and the prompt."""

import argparse
import json

import numpy as np
import pytest

from tests.support.scripts import load_script
from tests.support.states import WRONG

parity = load_script("parity_llamacpp")
READS_STATES = ("mtp", "gemma4")  # the checks whose drafter reads the target's hidden states


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return parity.write_models(tmp_path_factory.mktemp("parity"))


@pytest.fixture(scope="module")
def results(models):
    try:
        return parity.check_fixture(parity.FIXTURE, models)
    except parity.StaleFixture as e:
        pytest.fail(str(e))


def test_every_check_at_every_draft_length(results):
    assert {(v.check, v.n) for v, _, _ in results} == {(c, n) for c in parity.CHECKS for n in (1, 3, 5)}


def test_every_step_is_llama_cpps(results):
    bad = [f"{v.check} N={v.n}: {json.dumps(v.first_mismatch)}" for v, _, _ in results if not v.ok]
    assert not bad, "\n".join(bad)


def test_the_runs_keep_some_drafts_and_reject_others(results):
    """A run where every draft is kept (or none) would not show a rollback, or the drafts at all."""
    for v, _, _ in results:
        drafted, accepted = v.drafted[0], v.accepted[0]
        assert 0 < accepted < drafted, (v.check, v.n)
        assert v.compared >= 10, (v.check, v.n)


def test_no_near_tie_that_another_cpu_could_break(models, monkeypatch):
    """The fixture is checked on CPUs other than the one that wrote it, whose kernels sum in
    another order (logits apart by ~1e-5): no row of any run may be a near-tie that could pick
    another token there."""
    gaps = rows_read(monkeypatch)
    settings = argparse.Namespace(**json.loads(parity.FIXTURE.read_text())["settings"])
    for check in parity.CHECKS:
        for n in (1, 3, 5):
            parity.ours_check(check, models, n, settings)
    assert len(gaps) > 1000 and min(gaps) >= 1e-3


def rows_read(monkeypatch) -> list[float]:
    """The top-2 gap of every logits row read from llama.cpp from now on, by any model (the
    target, a draft model, an MTP block, an assistant: each reads its rows there)."""
    import llama_cpp as L

    gaps: list[float] = []
    row_of = L.llama_get_logits_ith

    def recording(ctx, i):
        ptr = row_of(ctx, i)
        if ptr:
            n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(L.llama_get_model(ctx)))
            top2 = np.partition(np.ctypeslib.as_array(ptr, shape=(n_vocab,)).astype(np.float64), -2)[-2:]
            gaps.append(float(top2[1] - top2[0]))
        return ptr

    monkeypatch.setattr(L, "llama_get_logits_ith", recording)
    return gaps


@pytest.mark.parametrize("how", WRONG)
def test_wrong_hidden_states_fail(models, how):
    rows = parity.check_fixture(parity.FIXTURE, models, wrong=how)
    for v, _, _ in rows:
        assert v.ok is (v.check not in READS_STATES), (v.check, v.n)


class TestStale:
    def test_another_llama_cpp_python_asks_for_a_new_fixture(self, models, tmp_path):
        fixture = json.loads(parity.FIXTURE.read_text())
        fixture["llama_cpp_python"] = "0.0.1"
        path = tmp_path / "old.json"
        path.write_text(json.dumps(fixture))
        with pytest.raises(parity.StaleFixture, match="llama-cpp-python 0.0.1.*regenerate"):
            parity.check_fixture(path, models)

    def test_another_tiny_model_asks_for_a_new_fixture(self, models, tmp_path):
        other = dict(models, draft=models["target"])
        with pytest.raises(parity.StaleFixture, match="'draft'.*regenerate"):
            parity.check_fixture(parity.FIXTURE, other)

    def test_the_script_says_so_and_exits_2(self, tmp_path, capsys):
        fixture = json.loads(parity.FIXTURE.read_text())
        fixture["llama_cpp_python"] = "0.0.1"
        path = tmp_path / "old.json"
        path.write_text(json.dumps(fixture))
        assert parity.main(["--fixture", str(path)]) == 2
        assert "regenerate" in capsys.readouterr().err

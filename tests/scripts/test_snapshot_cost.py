"""scripts/snapshot_cost.py: the steps timed at several snapshot counts on a tiny hybrid GGUF,
the rollbacks they take, and its table."""

import json

import pytest

from localspec.llama.backend import LlamaModel
from tests.support.hybrid_gguf import write_tiny_qwen35
from tests.support.scripts import load_script
from tests.support.tiny_gguf import write_tiny_gguf

snapshot_cost = load_script("snapshot_cost")


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory):
    return write_tiny_qwen35(tmp_path_factory.mktemp("snapshots") / "hybrid.gguf", seed=1)


def test_every_count_every_step_and_the_table(hybrid, tmp_path, capsys):
    out = tmp_path / "snapshots.json"
    argv = [str(hybrid), "--snapshots", "0,3", "--k", "2,5", "--context", "24", "--rounds", "3", "--threads", "1"]
    assert snapshot_cost.main([*argv, "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert (result["context"], result["ks"], result["rounds"]) == (24, [2, 5], 3)
    rows = result["snapshots"]
    assert set(rows) == {"0", "3"}
    for row in rows.values():
        assert all(row[name] > 0 for name in ("T(1)", "T(3)", "T(6)"))
    assert all(rows["0"][f"{name} ratio"] == 1.0 for name in ("T(1)", "T(3)", "T(6)"))
    table = capsys.readouterr().out.splitlines()
    assert table[0].startswith("hybrid.gguf, context 24: ms, median of 3 rounds [÷ 0 snapshots")
    assert table[2] == "| snapshots | memory | T(1) | T(3) | T(6) | rollback k=2 | rollback k=5 |"
    assert [line.split(" | ")[0] for line in table[4:]] == ["| 0", "| 3"]


@pytest.mark.parametrize(("snapshots", "k", "restores"), [(3, 2, 0), (3, 5, 1), (0, 2, 1)])
def test_a_rejected_draft_rolls_back_as_the_engine_would(hybrid, snapshots, k, restores):
    """By snapshot within the count (no checkpoint restored), by the checkpoint taken first past
    it; either way the cache holds the context again."""
    model = LlamaModel.load(hybrid, n_ctx=128, threads=1, snapshots=snapshots)
    try:
        context = snapshot_cost.context_tokens(model, 21)
        model.evaluate(context[:-1], 1)
        model.checkpoint(lasting=True)
        rb = model.rollback
        before = rb.restores
        snapshot_cost.one_step(model, context, k, rejected=True)
        # the rejection's own rollback, then the step's way back to the context (a checkpoint)
        assert rb.restores - before == restores + 1 and rb.prefills == 0
        assert model.cached == context[:-1]
    finally:
        model.close()


def test_a_model_with_a_kv_cache_only_is_refused(tmp_path, capsys):
    model = write_tiny_gguf(tmp_path / "plain.gguf", seed=0, n_ctx=512)
    with pytest.raises(SystemExit):
        snapshot_cost.main([str(model), "--snapshots", "0", "--rounds", "1"])
    assert "not a recurrent or hybrid model" in capsys.readouterr().err

"""scripts/record_verdicts.py on the tiny pair: each position's verdict is the draft model's own
greedy token after the true prefix, read one prefix at a time here, also past the most rows one
evaluation gives; the file it writes loads, and kept replies are read instead of run again."""

import json

import numpy as np

from localspec.bench import replay, verdicts
from localspec.chat.session import LoadOptions, PairSpec, Session
from localspec.core.drafters import fit_vocab
from localspec.llama.backend import MAX_LOGIT_ROWS
from tests.support.scripts import load_script

record_verdicts = load_script("record_verdicts")

SUITE = {
    "name": "tiny",
    "prompts": [
        {"id": "p1", "category": "code", "prompt": "def x = 1 + 2 def x = 1 + 2 def"},
        {"id": "p2", "category": "chat", "prompt": "hello world the model is fast"},
    ],
}


def test_each_verdict_is_the_drafts_greedy_token_after_the_true_prefix(tiny_pair):
    session = Session.load(PairSpec(*tiny_pair), LoadOptions(n_ctx=512, threads=1))
    prompts = [{**p, "suite": "tiny"} for p in SUITE["prompts"]]
    try:
        recorded = record_verdicts.record(session, prompts, MAX_LOGIT_ROWS + 8, "tiny+pair")
        banned = np.array(sorted(session.compat.banned_draft_ids), dtype=np.int64)
        n_vocab = session.target.n_vocab
        replies = replay.record(session, prompts, MAX_LOGIT_ROWS + 8)["prompts"]  # greedy: the same again
        assert max(len(r["reply"]) for r in replies) > MAX_LOGIT_ROWS  # more rows than one evaluation gives
        for rec in replies:
            context, reply = rec["prompt"], rec["reply"]
            expected = []
            for p, token in enumerate(reply):  # one prefix at a time, not one batch
                row = session.draft.sync(context + reply[:p], n_logits=1)[0]
                expected.append(int(np.argmax(fit_vocab(np.asarray(row), n_vocab, banned))) == token)
            got = recorded.get(rec["id"])
            assert got is not None and got.suite == "tiny" and len(got) == len(reply) > 0
            assert got.agree == tuple(expected)
        assert any(not a for p in recorded.prompts.values() for a in p.agree)  # a noisy copy: not always right
    finally:
        session.close()


def test_the_file_it_writes_loads_and_kept_replies_are_read_again(tiny_pair, tmp_path, capsys, monkeypatch):
    suite, out, kept = tmp_path / "tiny.json", tmp_path / "tiny+pair.json", tmp_path / "replies.json"
    suite.write_text(json.dumps(SUITE))
    argv = [*map(str, tiny_pair), "--suites", str(suite), "--max-tokens", "6", "--threads", "1", "--ctx", "512"]
    assert record_verdicts.main([*argv, "--out", str(out), "--replies", str(kept)]) == 0
    recorded = verdicts.load(str(out))
    assert recorded.pair == "tiny+pair" and (recorded.target, recorded.draft) == ("t.gguf", "d.gguf")
    assert set(recorded.prompts) == {"p1", "p2"} and all(0 < len(p) <= 6 for p in recorded.prompts.values())
    assert capsys.readouterr().out.startswith("tiny: ")  # the summary per suite

    def target_runs(*args, **kw):
        raise AssertionError("the target ran again")

    monkeypatch.setattr(record_verdicts.replay, "record", target_runs)
    again = tmp_path / "again+pair.json"
    assert record_verdicts.main([*argv, "--out", str(again), "--replies", str(kept)]) == 0
    assert verdicts.load(str(again)).prompts == recorded.prompts

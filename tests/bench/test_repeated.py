"""bench.repeated: scenarios of repeated work, played in order on tiny real GGUFs."""

import json

import pytest

from localspec.bench import repeated, suites
from localspec.chat.session import LoadOptions, PairSpec, Session
from localspec.cli import main

SUITE = {
    "name": "tiny",
    "scenarios": [
        {"id": "again", "kind": "regenerate", "times": 2, "prompt": "say something", "max_tokens": 24},
        {"id": "turns", "kind": "chat", "turns": ["one", "two"], "max_tokens": 12},
        {"id": "loop", "kind": "requests", "system": "be brief", "template": "x {input}", "inputs": ["a", "b"]},
    ],
}


@pytest.fixture
def session(tiny_pair):
    # no adaptation: every step proposes what the history says, whatever this busy machine times
    s = Session.load(PairSpec(tiny_pair[0]), LoadOptions(n_ctx=512, threads=1, adaptive=False, draft_max=8))
    yield s
    s.close()


class TestRunRepeated:
    def test_every_mode_plays_every_scenario_and_greedy_replies_stay_the_targets(self, session):
        rep = repeated.run_repeated(session, SUITE, ["none", "lookup", "lookup+history"], repeats=2)
        assert len(rep["rows"]) == 3 * 3 * 2
        assert all(len(r["each_tps"]) == r["replies"] and min(r["each_tps"]) > 0 for r in rep["rows"])
        for row in rep["rows"]:
            if row["mode"] != "none":
                assert row["identical"] == row["replies"] and row["parted"] == [] and row["carried"] == 0
        again = [r for r in rep["rows"] if r["scenario"] == "again" and r["mode"] == "lookup+history"]
        assert all(r["stats"]["accepted_by_source"].get("history", 0) > 0 for r in again)  # the 2nd reply, drafted
        plain = [r for r in rep["rows"] if r["mode"] == "lookup"]
        assert not any(r["stats"]["accepted_by_source"].get("history") for r in plain)
        assert session.replies is None  # the session's own history is left as it was
        table = repeated.markdown(rep)
        assert "| again |" in table and "lookup+history ×" in table and "Median over scenarios" in table

    def test_a_chat_carries_each_modes_own_earlier_replies(self):
        msgs = repeated.messages(SUITE["scenarios"][1], 1, ["first reply"])
        assert [m["content"] for m in msgs] == ["one", "first reply", "two"]
        loop = repeated.messages(SUITE["scenarios"][2], 1, [])
        assert loop == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "x b"}]


class TestPartings:
    class Divergence:
        """A session's ``divergence``: the first differing token, at a gap we name."""

        def __init__(self):
            self.asked = []

        def divergence(self, messages, ref, got):
            self.asked.append([m["content"] for m in messages])
            return {"index": next(i for i, (a, b) in enumerate(zip(ref, got)) if a != b), "gap": 0.01}

    def test_a_parted_reply_has_its_gap_and_a_chats_later_turns_are_carried_not_compared(self):
        session = self.Divergence()
        got, ref = [[1, 2], [3, 4], [5]], [[1, 2], [3, 9], [6]]
        parted, carried = repeated._partings(
            session, SUITE["scenarios"][1] | {"turns": ["a", "b", "c"]}, got, ref, ["r1", "r2", "r3"]
        )
        assert parted == [{"reply": 2, "index": 1, "gap": 0.01}] and carried == 1
        assert session.asked == [["a", "r1", "b"]]  # the conversation both replies answered
        parted, carried = repeated._partings(
            session, SUITE["scenarios"][2] | {"inputs": ["a", "b", "c"]}, got, ref, ["r1", "r2", "r3"]
        )
        assert [p["reply"] for p in parted] == [2, 3] and carried == 0  # requests: each its own context

    @staticmethod
    def identical(rows: list[dict]) -> str:
        """The "identical" column of the report's line for ``rows``, one scenario's."""
        seen = {"scenario": "s", "repeat": 0, "stats": {"tokens_per_second": 1.0}}
        rep = {"suite": "tiny", "modes": ["draft"], "temperature": 0.0, "repeats": 1, "summary": {"draft": {}}}
        table = repeated.markdown(rep | {"rows": [seen | r for r in rows]})
        line = next(line for line in table.splitlines() if line.startswith("| s |"))
        return line.removesuffix(" |").split(" | ")[-1]

    def test_the_table_names_the_largest_gap_and_the_carried_replies(self):
        row = {"mode": "draft", "identical": 3, "replies": 5, "carried": 1}
        rows = [row | {"parted": [{"reply": 2, "index": 7, "gap": 0.02}]}, row | {"parted": [], "carried": 0}]
        assert self.identical(rows) == "6/10 (1 parted at top-2 gaps ≤ 0.020; 1 after a parted turn)"
        assert self.identical([row | {"parted": [], "carried": 0, "identical": 5}]) == "5/5"


class TestLoad:
    def test_the_built_in_suite_has_each_kind_of_repeated_work(self):
        suite = repeated.load()
        assert {s["kind"] for s in suite["scenarios"]} == set(repeated.KINDS)
        loop = next(s for s in suite["scenarios"] if s["kind"] == "requests" and s.get("system"))
        assert len(loop["inputs"]) >= 20

    def test_the_held_out_suite_is_built_in_too(self):
        suite = repeated.load("repeated-heldout")
        kinds = {s["kind"] for s in suite["scenarios"]}
        assert suite["name"] == "repeated-heldout" and kinds == set(repeated.KINDS)

    @pytest.mark.parametrize(
        "content, problem",
        [
            ("{", "cannot read"),
            ('{"scenarios": []}', "a repeated-work suite is"),
            ('{"scenarios": [{"kind": "x"}]}', "needs a kind"),
        ],
    )
    def test_a_bad_file_is_refused_with_what_is_wrong(self, tmp_path, content, problem):
        path = tmp_path / "s.json"
        path.write_text(content)
        with pytest.raises(ValueError, match=problem):
            repeated.load(str(path))

    def test_some_scenarios_are_chosen_by_id_and_an_unknown_id_is_named(self, tmp_path, capsys):
        assert suites.only(SUITE, None, "scenarios") is SUITE  # no --prompts: every scenario
        chosen = suites.only(SUITE, "loop,again", "scenarios")
        assert [s["id"] for s in chosen["scenarios"]] == ["again", "loop"]
        with pytest.raises(ValueError, match="no scenario agian in this suite"):
            suites.only(SUITE, "again,agian", "scenarios")
        path = tmp_path / "s.json"
        path.write_text(json.dumps(SUITE))
        assert main(["bench", "--target", "t.gguf", "--repeated", str(path), "--prompts", "agian"]) == 2
        assert "no scenario agian in this suite (known: again, turns, loop)" in capsys.readouterr().err

    def test_a_file_of_scenarios_loads(self, tmp_path):
        path = tmp_path / "s.json"
        path.write_text(json.dumps(SUITE))
        assert [s["id"] for s in repeated.load(str(path))["scenarios"]] == ["again", "turns", "loop"]

    def test_max_tokens_sets_the_length_of_scenarios_that_set_none(self):
        suite = {"scenarios": [{"id": "a", "kind": "regenerate", "prompt": "p"}, {"id": "b", "max_tokens": 64}]}
        lengths = [s["max_tokens"] for s in repeated.with_max_tokens(suite, 128)["scenarios"]]
        assert lengths == [128, 64] and "max_tokens" not in suite["scenarios"][0]  # the suite itself is kept
        assert repeated.with_max_tokens(suite, None) is suite

    def test_max_tokens_reaches_the_scenarios_through_the_command_line(self, tmp_path, monkeypatch):
        from localspec.cli import bench as cli_bench

        class Loaded:
            modes = ("none", "lookup")

            def close(self):
                pass

        seen = {}

        def play(session, suite, modes, *args, **kwargs):
            seen["lengths"] = [s.get("max_tokens") for s in suite["scenarios"]]
            raise SystemExit(0)  # what is played is the test above's business

        monkeypatch.setattr(cli_bench, "load_session", lambda args, history=True: Loaded())
        monkeypatch.setattr(cli_bench, "wants_mtp", lambda args: False)
        monkeypatch.setattr(repeated, "run_repeated", play)
        path = tmp_path / "s.json"
        path.write_text(json.dumps(SUITE))
        with pytest.raises(SystemExit):
            main(["bench", "--target", "t.gguf", "--repeated", str(path), "--max-tokens", "40"])
        assert seen["lengths"] == [24, 12, 40]

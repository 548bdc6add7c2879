"""scripts/vs_llama_server.py: the servers' command lines, the requests a scenario sends, and
the figures and table of a run (the run itself needs llama-server: its docstring)."""

import argparse
from pathlib import Path

import pytest

from tests.support.scripts import load_script

vs = load_script("vs_llama_server")
ARGS = argparse.Namespace(
    bin=Path("/b/llama-server"), target=Path("t.gguf"), draft=Path("d.gguf"), threads=2, ctx=4096, localspec_args=""
)


class TestCommands:
    def test_localspec_servers(self):
        alone = vs.server_command("localspec", ARGS, 9000)
        assert alone[1:4] == ["-m", "localspec", "serve"] and alone[-2:] == ["--no-draft", "--no-history"]
        assert vs.server_command("localspec-draft", ARGS, 9000)[-3:] == ["--draft", "d.gguf", "--no-history"]
        history = vs.server_command("localspec-history", ARGS, 9000)
        assert history[-2:] == ["--draft", "d.gguf"] and "--no-history" not in history
        assert alone[alone.index("--threads") :][:4] == ["--threads", "2", "--ctx", "4096"]

    def test_llama_servers(self):
        plain = vs.server_command("llama", ARGS, 9001)
        assert plain[:3] == ["/b/llama-server", "-m", "t.gguf"] and "-md" not in plain
        assert plain[plain.index("-t") :][:6] == ["-t", "2", "-tb", "2", "-c", "4096"]
        ngram = vs.server_command("llama-ngram", ARGS, 9001)
        assert ngram[-2:] == ["--spec-type", "ngram-mod"] and "-md" not in ngram
        both = vs.server_command("llama-ngram-draft", ARGS, 9001)
        assert both[-2:] == ["--spec-type", "ngram-mod,draft-simple"] and both[both.index("-md") + 1] == "d.gguf"
        draft = vs.server_command("llama-draft", ARGS, 9001)
        assert draft[-4:] == ["--spec-draft-n-max", "8", "--spec-draft-p-min", "0.75"]


class TestRequests:
    def test_a_regenerate_asks_the_same_twice(self):
        sc = {"id": "r", "kind": "regenerate", "prompt": "Write x.", "times": 2}
        bodies = vs.chat_requests(sc, 200)
        assert (
            bodies == [{"messages": [{"role": "user", "content": "Write x."}], "max_tokens": 200, "temperature": 0}] * 2
        )

    def test_a_loop_keeps_its_system_prompt_and_its_own_length(self):
        sc = {"id": "l", "kind": "requests", "system": "S", "template": "In: {input}", "inputs": ["a", "b", "c"]}
        bodies = vs.chat_requests({**sc, "max_tokens": 64}, 200, n=2)
        assert [b["messages"] for b in bodies] == [
            [{"role": "system", "content": "S"}, {"role": "user", "content": "In: a"}],
            [{"role": "system", "content": "S"}, {"role": "user", "content": "In: b"}],
        ]
        assert {b["max_tokens"] for b in bodies} == {64}

    def test_a_suite_request_carries_the_system_message_given_to_every_server(self, monkeypatch):
        class Server:
            def __init__(self, name):
                self.name, self.url = name, name

            def resume(self): ...

            def stop(self): ...

        asked = []

        def ask(url, body):
            asked.append((url, body["messages"]))
            return {"wall_s": 1.0, "ttft_s": 0.5, "text": "x", "timings": {"prompt_n": 3}}

        monkeypatch.setattr(vs, "ask_streamed", ask)
        prompts = [{"id": "p", "prompt": "Sum it up."}]
        vs.play_suite([Server("a"), Server("b")], prompts, 8, 1, system="Be brief.")
        lead = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Sum it up."}]
        assert asked == [("a", lead), ("b", lead)]
        asked.clear()
        vs.play_suite([Server("a")], prompts, 8, 1)
        assert asked == [("a", [{"role": "user", "content": "Sum it up."}])]

    def test_a_suite_prompt_that_is_not_there_stops_the_run_before_any_server_starts(self, monkeypatch):
        started = []
        monkeypatch.setattr(vs, "start", started.append)
        argv = ["--bin", "/b/llama-server", "--target", "t.gguf", "--draft", "d.gguf"]
        with pytest.raises(SystemExit, match="no prompt doc-nope in this suite .known: doc-filter-backwash"):
            vs.main([*argv, "--suite", "documents:doc-nope"])
        assert started == []

    def test_a_chat_scenario_is_refused(self):
        with pytest.raises(ValueError, match="only regenerate and requests"):
            vs.chat_requests({"id": "c", "kind": "chat", "turns": []}, 200)

    def test_scenarios_by_suite_and_id(self):
        scenario, max_tokens = vs.pick("repeated:loop-contacts")
        assert scenario["kind"] == "requests" and max_tokens == 200
        with pytest.raises(SystemExit, match="no scenario 'nope' in repeated: one of regenerate-sql"):
            vs.pick("repeated:nope")


def row(tokens: int, wall: float, tps: float, text: str = "same") -> dict:
    return {"tokens": tokens, "wall_s": wall, "server_tps": tps, "text": text}


class TestSummary:
    def test_figures_and_ratios_to_the_best_ngram_server(self):
        rows = {
            "localspec-history": [row(100, 10.0, 12.0), row(100, 2.0, 60.0)],
            "llama-ngram": [row(100, 10.0, 11.0), row(100, 4.0, 30.0, "other")],
            "llama-ngram-draft": [row(100, 10.0, 10.0), row(100, 5.0, 25.0)],
        }
        out = vs.summarise(rows, regenerate=True)
        mine, best = out["localspec-history"], out["llama-ngram"]
        assert mine["tokens"] == 200 and mine["wall_tps"] == pytest.approx(200 / 12)
        assert mine["server_tps"] == 36.0 and mine["last_tps"] == 50.0
        assert best["wall_tps"] == pytest.approx(200 / 14) and best["last_tps"] == 25.0
        assert mine["last_tps_over_ngram"] == pytest.approx(2.0) and best["wall_tps_over_ngram"] == 1.0
        assert (mine["texts_differ"], best["texts_differ"]) == (0, 1)
        table = vs.markdown({"regen": out}).splitlines()
        assert "| localspec-history | 200 | 16.7 (1.17) | 36.0 (1.76) | 50.0 (2.00) | 0 |" in table

    def test_a_loop_has_no_last_reply_and_no_ngram_server_no_ratio(self):
        out = vs.summarise({"localspec": [row(64, 8.0, 9.0)]}, regenerate=False)
        assert out["localspec"]["last_tps"] is None and out["localspec"]["wall_tps_over_ngram"] is None
        assert vs.markdown({"loop": out}).splitlines()[-1] == "| localspec | 64 | 8.0 | 9.0 | — | 0 |"

"""scripts/busy_load.py: a pair loaded beside CPU-bound processes, its replies beside the target alone's."""

from localspec.chat.session import PairSpec
from tests.support.scripts import load_script

busy_load = load_script("busy_load")


class TestMeasure:
    def test_reports_each_load_and_reply_on_a_tiny_pair(self, tiny_pair):
        loads = busy_load.measure(
            PairSpec(tiny_pair[0], tiny_pair[1]), 2, 1, 4, prompts=("hello", "the model"), threads=1
        )
        assert len(loads) == 2
        for load in loads:
            assert load["t1_ms"] > 0 and load["t2_over_t1"] >= 1.0
            assert len(load["ratios"]) == 2 and all(r > 0 for r in load["ratios"]) and load["median"] > 0
            assert len(load["lines"]) == 2 and all(load["lines"])
            assert load["timed_again_s"] is None or load["timed_again_s"] > 0

    def test_the_hogs_are_stopped_when_the_load_ends(self, tiny_pair, monkeypatch):
        started = []
        real = busy_load.subprocess.Popen

        def popen(*args, **kwargs):
            started.append(real(*args, **kwargs))
            return started[-1]

        monkeypatch.setattr(busy_load.subprocess, "Popen", popen)
        busy_load.measure(PairSpec(tiny_pair[0], tiny_pair[1]), 1, 2, 2, prompts=("hello",), threads=1)
        assert len(started) == 2 and all(p.poll() is not None for p in started)

"""scripts/overhead.py: the engine's own time per target pass, on a target that costs nothing."""

import numpy as np
import pytest

from tests.support.scripts import load_script

overhead = load_script("overhead")


@pytest.fixture
def setup():
    rng = np.random.default_rng(1)
    vocab, context, tokens = 512, 64, 48
    sequence = [int(t) for t in rng.integers(3, vocab, context + tokens + 64)]
    target = overhead.InstantTarget(sequence, vocab)
    return target, sequence[:context], sequence[context : context + tokens]


class TestInstantTarget:
    def test_its_greedy_continuation_is_the_sequence_picked_or_read(self, setup):
        target, prompt, reference = setup
        for target.picks in (True, False):
            got = list(target.sync_greedy(prompt + reference[:3], n_logits=4))
            assert got == reference[:4]
            target.truncate(0)


class TestRun:
    @pytest.mark.parametrize("k", [0, 4, None], ids=["target-only", "k4", "adaptive"])
    def test_one_figure_a_repeat_in_ms_per_pass(self, setup, k):
        target, prompt, reference = setup
        ms = overhead.run(target, prompt, reference, k, len(reference), repeats=2)
        assert len(ms) == 2 and all(0 < m < 50 for m in ms)

    def test_the_oracle_drafts_the_reference_so_a_pass_yields_several_tokens(self, setup, monkeypatch):
        target, prompt, reference = setup
        passes = []
        real = overhead.RunStats.add

        def add(stats, step):
            passes.append(len(step.emitted))
            return real(stats, step)

        monkeypatch.setattr(overhead.RunStats, "add", add)
        overhead.run(target, prompt, reference, 4, len(reference), repeats=1)
        assert max(passes) == 5  # four drafts kept and the target's own token

    def test_main_prints_every_row(self, monkeypatch, capsys):
        monkeypatch.setattr(
            "sys.argv", ["overhead", "--context", "32", "--tokens", "24", "--vocab", "256", "--repeats", "1"]
        )
        overhead.main()
        out = capsys.readouterr().out
        for label in ("target only", "oracle k=4", "oracle k=8", "oracle, adaptive k"):
            assert label in out

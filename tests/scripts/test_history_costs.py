"""scripts/history_costs.py: what the history of past replies adds to a step, holds and loads."""

import numpy as np

from tests.support.scripts import load_script

history_costs = load_script("history_costs")


class TestMeasure:
    def test_reports_every_figure_for_a_small_history(self):
        out = history_costs.measure(20_000, 300)
        assert out["history_tokens"] >= 20_000 and out["replies"] > 10
        assert out["step_ms_with_history"] > 0 and out["step_ms_context_only"] > 0
        assert 0 < out["memory_mb"] < 1.5 and out["load_ms"] > 0

    def test_growing_contexts_share_one_list_per_reply(self):
        rng = np.random.default_rng(0)
        contexts = history_costs.growing_contexts(history_costs.synthetic_replies(5_000, rng), 50, rng)
        assert len(contexts) == 50 and contexts[0] is contexts[1]  # grown in place, as the engine does
        assert len(set(map(id, contexts))) < 50

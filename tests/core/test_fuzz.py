"""Property-based tests (hypothesis) of the verification rules and the suffix drafter.

Convention as in sampling.py: ``p_target[i]`` is the target's distribution after the first i
drafted tokens (k+1 rows), ``q_draft[i]`` the draft's for x_{i+1}. The UTF-8 streamer and
suffix matcher have their own fuzz tests in test_textstream.py / test_drafters.py.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare

from localspec.core.sampling import SamplingParams, sample, verify_greedy, verify_speculative
from localspec.core.suffix import SuffixDrafter

GREEDY = SamplingParams(temperature=0.0)
FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def distribution(draw, n_vocab: int) -> np.ndarray:
    """Any distribution over n_vocab tokens, zeros included (at least one token > 0)."""
    weights = draw(st.lists(st.one_of(st.just(0.0), st.floats(1e-6, 1.0)), min_size=n_vocab, max_size=n_vocab))
    if sum(weights) == 0:
        weights[draw(st.integers(0, n_vocab - 1))] = 1.0
    w = np.array(weights)
    return w / w.sum()


@st.composite
def speculative_case(draw):
    """(drafted, p_target, q_draft or None, seed): drafts are any ids, not only draws from q."""
    n_vocab = draw(st.integers(1, 8))
    k = draw(st.integers(0, 5))
    drafted = draw(st.lists(st.integers(0, n_vocab - 1), min_size=k, max_size=k))
    p_target = [draw(distribution(n_vocab)) for _ in range(k + 1)]
    q_draft = draw(st.one_of(st.none(), st.just([draw(distribution(n_vocab)) for _ in range(k)])))
    return drafted, p_target, q_draft, draw(st.integers(0, 2**32 - 1))


class TestSpeculativeRule:
    @FAST
    @given(speculative_case())
    def test_verdict_is_always_valid(self, case):
        drafted, p_target, q_draft, seed = case
        v = verify_speculative(drafted, p_target, q_draft, np.random.default_rng(seed))
        n_vocab = len(p_target[0])
        assert 0 <= v.n_accepted <= len(drafted)
        assert 0 <= v.token < n_vocab and isinstance(v.token, int)
        assert v.bonus == (v.n_accepted == len(drafted))
        # the target could have produced every token kept: accepted drafts and the last token
        for i in range(v.n_accepted):
            assert p_target[i][drafted[i]] > 0
        assert p_target[v.n_accepted][v.token] > 0

    @FAST
    @given(speculative_case())
    def test_a_rejected_token_is_never_its_own_replacement_with_a_one_hot_draft(self, case):
        drafted, p_target, _, seed = case
        v = verify_speculative(drafted, p_target, None, np.random.default_rng(seed))
        if not v.bonus:
            assert v.token != drafted[v.n_accepted]  # residual p - onehot(x) has no mass on x

    @settings(max_examples=6, deadline=None, derandomize=True)
    @given(st.integers(2, 5).flatmap(lambda n: st.tuples(distribution(n), distribution(n), st.booleans())))
    def test_first_token_follows_p_target_on_small_vocabularies(self, case):
        """Whatever p and q are, the first token of a step is distributed as p_target[0]
        (Leviathan et al. 2023, Theorem 1). Fixed seeds: the chi-square verdict is repeatable."""
        p, q, one_hot = case
        rng = np.random.default_rng(7)
        n = 6000
        counts = np.zeros(len(p))
        for _ in range(n):
            x = sample(q, rng)
            v = verify_speculative([x], [p, p], None if one_hot else [q], rng)
            counts[x if v.n_accepted else v.token] += 1
        expected = p * n
        assert counts[expected == 0].sum() == 0  # never a token the target rules out
        keep = expected > 0
        if keep.sum() > 1:
            assert chisquare(counts[keep], expected[keep]).pvalue > 1e-4


def reference_greedy(drafted, target_choice):
    """Accept the longest prefix on which the draft equals the target's argmax, then add the
    target's own token there (a bonus when the whole draft was accepted)."""
    n = 0
    while n < len(drafted) and drafted[n] == target_choice[n]:
        n += 1
    return n, target_choice[n], n == len(drafted)


class TestGreedyRule:
    @FAST
    @given(
        st.integers(0, 6).flatmap(
            lambda k: st.tuples(
                st.lists(st.integers(0, 3), min_size=k, max_size=k),
                st.lists(st.integers(0, 3), min_size=k + 1, max_size=k + 1),
            )
        )
    )
    def test_equals_the_reference(self, case):
        drafted, target_choice = case
        v = verify_greedy(drafted, target_choice)
        assert (v.n_accepted, v.token, v.bonus) == reference_greedy(drafted, target_choice)
        assert 0 <= v.n_accepted <= len(drafted)


class TestSuffixDrafter:
    @FAST
    @given(st.lists(st.integers(0, 3), max_size=40), st.integers(0, 8))
    def test_drafts_only_a_real_continuation_of_the_longest_earlier_match(self, ctx, k):
        d = SuffixDrafter().draft(ctx, k, GREEDY, None)
        assert d.q_draft is None and len(d.ids) <= max(k, 0)

        def ends(n):  # where earlier occurrences of the last n tokens end (something follows)
            return [e for e in range(n - 1, len(ctx) - 1) if ctx[e - n + 1 : e + 1] == ctx[len(ctx) - n :]]

        sizes = [n for n in range(1, len(ctx)) if ends(n)]
        if not d.ids:
            assert k <= 0 or not sizes
            return
        n = max(sizes)  # the longest match: the draft continues one of its occurrences
        assert d.match == ("context", min(n, 4))
        assert any(tuple(ctx[e + 1 : e + 1 + len(d.ids)]) == d.ids for e in ends(n))

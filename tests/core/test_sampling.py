"""Processing and verification rules. The statistical tests check that speculative sampling
reproduces the target distribution exactly, and that a wrong rule is caught by the same test."""

import numpy as np
import pytest
from scipy.stats import chisquare

from localspec.core.sampling import (
    SamplingParams,
    Verdict,
    apply_repeat_penalty,
    process,
    sample,
    verify_greedy,
    verify_match,
    verify_speculative,
)

N_DRAWS = 20_000
P_TARGET = np.array([0.45, 0.25, 0.15, 0.10, 0.05])
Q_DRAFT = np.array([0.10, 0.40, 0.05, 0.30, 0.15])  # deliberately unlike p


def first_token(verdict: Verdict, drafted) -> int:
    return drafted[0] if verdict.n_accepted >= 1 else verdict.token


def draw_first_tokens(rule, n=N_DRAWS, seed=0):
    rng = np.random.default_rng(seed)
    counts = np.zeros(len(P_TARGET))
    for _ in range(n):
        x = sample(Q_DRAFT, rng)
        drafted = [x]
        verdict = rule(drafted, [P_TARGET, P_TARGET], [Q_DRAFT], rng)
        counts[first_token(verdict, drafted)] += 1
    return counts


class TestSpeculativeRuleIsExact:
    def test_first_token_follows_p_target(self):
        counts = draw_first_tokens(verify_speculative)
        assert chisquare(counts, P_TARGET * N_DRAWS).pvalue > 0.001

    def test_always_accepting_is_caught(self):
        def always_accept(drafted, p, q, rng):
            return Verdict(len(drafted), sample(p[-1], rng), True)

        counts = draw_first_tokens(always_accept)
        assert chisquare(counts, P_TARGET * N_DRAWS).pvalue < 1e-6

    def test_resampling_from_p_instead_of_residual_is_caught(self):
        def wrong_residual(drafted, p, q, rng):
            x = drafted[0]
            if rng.random() < min(1.0, p[0][x] / q[0][x]):
                return Verdict(1, sample(p[1], rng), True)
            return Verdict(0, sample(p[0], rng), False)  # should be norm(max(0, p - q))

        counts = draw_first_tokens(wrong_residual)
        assert chisquare(counts, P_TARGET * N_DRAWS).pvalue < 1e-6

    def test_deterministic_draft_one_hot_q(self):
        rng = np.random.default_rng(1)
        counts = np.zeros(len(P_TARGET))
        for _ in range(N_DRAWS):
            v = verify_speculative([3], [P_TARGET, P_TARGET], None, rng)
            counts[3 if v.n_accepted else v.token] += 1
        assert chisquare(counts, P_TARGET * N_DRAWS).pvalue > 0.001

    def test_two_token_joint_distribution(self):
        """Position 2 too: accepted x_1 then (x_2 or its replacement, or the bonus)."""
        rng = np.random.default_rng(2)
        p2 = np.array([0.1, 0.2, 0.3, 0.4, 0.0])
        counts = np.zeros((5, 5))
        for _ in range(N_DRAWS):
            d = [sample(Q_DRAFT, rng), sample(Q_DRAFT, rng)]
            v = verify_speculative(d, [P_TARGET, p2, P_TARGET], [Q_DRAFT, Q_DRAFT], rng)
            if v.n_accepted == 0:
                continue  # the step ended after one token: position 2 comes from the next step
            second = d[1] if v.n_accepted == 2 else v.token
            counts[d[0], second] += 1
        rows = counts.sum(axis=1)
        for a in range(5):
            if rows[a] > 500:
                expected = p2 * rows[a]
                keep = expected > 0
                assert counts[a][~keep].sum() == 0
                assert chisquare(counts[a][keep], expected[keep]).pvalue > 0.001

    def test_a_copy_then_a_models_draft_joint_distribution(self):
        """A copy the draft model extends: x_1 is copied (q one-hot, a None entry), x_2 drawn
        from q. Both positions keep the target's distribution."""
        rng = np.random.default_rng(3)
        p2 = np.array([0.1, 0.2, 0.3, 0.4, 0.0])
        counts, first = np.zeros((5, 5)), np.zeros(5)
        for _ in range(N_DRAWS):
            d = [3, sample(Q_DRAFT, rng)]
            v = verify_speculative(d, [P_TARGET, p2, P_TARGET], [None, Q_DRAFT], rng)
            first[3 if v.n_accepted else v.token] += 1
            if v.n_accepted:
                counts[3, d[1] if v.n_accepted == 2 else v.token] += 1
        assert chisquare(first, P_TARGET * N_DRAWS).pvalue > 0.001
        expected = p2 * counts[3].sum()
        keep = expected > 0
        assert counts[3][~keep].sum() == 0
        assert chisquare(counts[3][keep], expected[keep]).pvalue > 0.001


class TestVerifyRules:
    def test_greedy_accepts_matching_prefix_then_corrects(self):
        assert verify_greedy([4, 7, 9], [4, 7, 2, 8]) == Verdict(2, 2, False)  # rejects 9, target says 2

    def test_greedy_bonus_when_all_accepted(self):
        assert verify_greedy([4, 7], [4, 7, 5]) == Verdict(2, 5, True)  # bonus 5

    def test_match_rule_first_token_follows_p(self):
        counts = draw_first_tokens(lambda d, p, q, rng: verify_match(d, p, rng))
        assert chisquare(counts, P_TARGET * N_DRAWS).pvalue > 0.001


class TestProcess:
    def test_greedy_flag(self):
        assert SamplingParams(temperature=0).greedy
        assert not SamplingParams(temperature=0.7).greedy

    def test_top_k_keeps_k(self):
        logits = np.arange(10, dtype=np.float32)
        p = process(logits, [], SamplingParams(temperature=1.0, top_k=3, top_p=1.0, min_p=0.0))
        assert np.count_nonzero(p) == 3 and p[9] > p[8] > p[7] and p.sum() == pytest.approx(1.0)

    def test_top_p_keeps_smallest_nucleus(self):
        logits = np.log(np.array([0.5, 0.3, 0.15, 0.05], dtype=np.float32))
        p = process(logits, [], SamplingParams(temperature=1.0, top_k=0, top_p=0.8, min_p=0.0))
        assert np.count_nonzero(p) == 2  # 0.5 + 0.3 reaches 0.8

    def test_min_p_drops_unlikely(self):
        logits = np.log(np.array([0.6, 0.3, 0.07, 0.03], dtype=np.float32))
        p = process(logits, [], SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.2))
        assert np.count_nonzero(p) == 2  # 0.07 < 0.2 * 0.6

    def test_temperature_sharpens(self):
        logits = np.array([1.0, 0.0], dtype=np.float32)
        cold = process(logits, [], SamplingParams(temperature=0.5, top_k=0, top_p=1.0, min_p=0.0))
        warm = process(logits, [], SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0))
        assert cold[0] > warm[0]

    def test_repeat_penalty_like_llama_cpp(self):
        logits = np.array([2.0, -2.0, 1.0], dtype=np.float32)
        out = apply_repeat_penalty(logits, [0, 1], SamplingParams(repeat_penalty=2.0))
        assert list(out) == [1.0, -4.0, 1.0]

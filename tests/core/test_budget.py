"""Budgets for optional work: what they earn, spend and hold."""

import pytest

from localspec.core.budget import Budget


class TestBudget:
    def test_earns_its_share_spends_only_what_it_holds_and_is_capped(self):
        b = Budget(0.05)
        b.earn(10.0, cap=100.0)
        assert b.credit == pytest.approx(0.5)
        assert not b.spend(0.6) and b.credit == pytest.approx(0.5)
        assert b.spend(0.4) and b.credit == pytest.approx(0.1)
        for _ in range(1000):
            b.earn(10.0, cap=2.0)
        assert b.credit == 2.0

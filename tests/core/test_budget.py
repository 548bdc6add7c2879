"""Budgets for optional work: what they earn, spend and hold."""

import pytest

from localspec.core.budget import Budget


class TestBudget:
    def test_earns_its_share_and_spends_only_what_it_holds(self):
        b = Budget(0.05)
        b.earn(10.0)
        assert b.credit == pytest.approx(0.5)
        assert not b.spend(0.6) and b.credit == pytest.approx(0.5)
        assert b.spend(0.4) and b.credit == pytest.approx(0.1)
        b.earn(-3.0)  # a stake below nothing earns nothing
        assert b.credit == pytest.approx(0.1)

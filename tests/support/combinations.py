"""Combinations of option values for tests that run every one of them (``every``) or, where
that costs too much for the default run, a few that still put every two values of two
options together at least once (``pairwise``): most option bugs are two options that
disagree (a longest draft of 0 with a drafting mode), and a pairwise set has a handful of
cases where the product has thousands."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any


def every(dims: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Every combination of the values of ``dims`` (name -> its values)."""
    return [dict(zip(dims, values)) for values in itertools.product(*dims.values())]


def pairwise(dims: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Combinations that hold every pair of values of every two dims at least once, built
    greedily and the same every run: each starts from the first pair not yet held and gives
    each other dim the value that holds the most new pairs with the values chosen so far."""
    names = list(dims)
    sizes = [len(dims[n]) for n in names]
    # a pair: (dim i, value index a, dim j, value index b) with i < j
    missing = {
        (i, a, j, b)
        for i, j in itertools.combinations(range(len(names)), 2)
        for a in range(sizes[i])
        for b in range(sizes[j])
    }
    rows: list[dict[int, int]] = []
    while missing:
        i, a, j, b = min(missing)
        row = {i: a, j: b}
        for k in range(len(names)):
            if k not in row:
                row[k] = max(range(sizes[k]), key=lambda v: (sum(_pair(k, v, m, row[m]) in missing for m in row), -v))
        missing -= {_pair(k, row[k], m, row[m]) for k, m in itertools.combinations(range(len(names)), 2)}
        rows.append(row)
    return [{names[k]: dims[names[k]][v] for k, v in sorted(row.items())} for row in rows]


def _pair(k: int, v: int, m: int, w: int) -> tuple[int, int, int, int]:
    return (k, v, m, w) if k < m else (m, w, k, v)

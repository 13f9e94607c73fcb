"""MIB's arithmetic, pure (no model): the circuit sizes it measures and the areas it reports.

    mib_sizes(479)               [0, 0, 2, 4, 9, 23, 47, 95, 239, 479]: floor(p * N) per fraction
    areas(MIB_FRACTIONS, f)      (area under f, area between f and 1): CPR / CMD of a curve

Mueller et al. 2025 (the circuit track's `evaluation.py`): fractions 0.1 % ... 100 % of the scored
edges, and the trapezoid rule over the fractions themselves (x linear, not log), so CPR of a curve at
1 everywhere is 0.999 and its CMD 0. `interp.circuits.scores` runs the model for the curves.
"""

from __future__ import annotations

import math
from typing import Sequence

from interp.errors import InterpError

__all__ = ["MIB_FRACTIONS", "areas", "mib_sizes"]

MIB_FRACTIONS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)


def mib_sizes(total: int, fractions: Sequence[float] = MIB_FRACTIONS) -> list[int]:
    """Circuit sizes floor(p * total) for each fraction p, as MIB counts them (`int(pct * n)`)."""
    if isinstance(total, bool) or not isinstance(total, int) or total < 0:
        raise InterpError(f"total={total!r} must be a non-negative int (the number of scored edges or heads)")
    if not fractions or any(not 0 < p <= 1 for p in fractions) or list(fractions) != sorted(set(fractions)):
        raise InterpError(f"fractions must rise strictly within (0, 1], got {list(fractions)}")
    return [int(p * total) for p in fractions]


def areas(fractions: Sequence[float], f: Sequence[float]) -> tuple[float, float]:
    """(area under f, area between f and 1) by the trapezoid rule over `fractions` (x linear):
    MIB's CPR of a signed-order curve and CMD of an |score|-order curve. NaN entries end the curve:
    the areas cover the fractions before the first NaN (at least two are needed)."""
    f = [float(v) for v in f]
    if len(f) != len(fractions):
        raise InterpError(f"{len(f)} faithfulness values for {len(fractions)} fractions")
    n = next((i for i, v in enumerate(f) if math.isnan(v)), len(f))
    if n < 2:
        return float("nan"), float("nan")
    under = from_1 = 0.0
    for i in range(n - 1):
        dx = fractions[i + 1] - fractions[i]
        under += dx * (f[i] + f[i + 1]) / 2
        from_1 += dx * (abs(1 - f[i]) + abs(1 - f[i + 1])) / 2
    return under, from_1

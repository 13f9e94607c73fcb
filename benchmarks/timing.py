"""The one timing helper the benchmarks share (run them as scripts: `python benchmarks/NAME.py`)."""

from __future__ import annotations

import time
from typing import Any, Callable


def best_of(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """(fastest wall time in seconds over `repeats` calls, the last result)."""
    best, out = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out

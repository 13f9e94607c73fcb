"""The timing and reporting helpers the benchmarks share (run them as scripts: `python benchmarks/NAME.py`)."""

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


def report(lines: list[str], record: str | None, lead: str = "") -> str:
    """Print the table `lines` and, when `record` names a file, append it there (after `lead`)."""
    text = "\n".join(lines)
    print(text)
    if record:
        with open(record, "a", encoding="utf-8") as f:
            f.write(lead + text)
    return text

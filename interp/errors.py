"""The one exception type for bad input, so the CLI (and a notebook) can catch one thing.

`InterpError` subclasses ValueError: code that already catches ValueError keeps working.
"""

from __future__ import annotations

__all__ = ["InterpError"]


class InterpError(ValueError):
    """Bad input: the message says what was wrong and what would be right."""

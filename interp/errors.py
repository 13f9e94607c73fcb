"""The one exception type for bad input, so the CLI (and a notebook) can catch one thing.

`InterpError` subclasses ValueError: code that already catches ValueError keeps working.
"""

from __future__ import annotations

__all__ = ["InterpError", "outside_surface"]


class InterpError(ValueError):
    """Bad input: the message says what was wrong and what would be right."""


def outside_surface(package: str, homes: dict[str, str]):
    """A package's module-level `__getattr__` for names that left its surface (`__all__`): each
    still resolves from the module that defines it (`homes`: name -> module), with one
    DeprecationWarning per name that says where to import it from."""
    import importlib
    import warnings

    warned: set[str] = set()

    def __getattr__(name: str):
        if name not in homes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        if name not in warned:
            warned.add(name)
            warnings.warn(f"{package}.{name} is not part of {package}'s surface; import it from {homes[name]}",
                          DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(homes[name]), name)

    return __getattr__

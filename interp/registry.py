"""Registries that point down: each table lives here, low in the package, and is filled where its
entries are defined, by a decorator that runs when their module is imported. No table names a
module above it, not even as a string.

A lookup that misses (the module defining the entry was never imported, say for a file saved in
another session) imports that module through ONE checked allow-list, `declared_in`: the module of
this package whose own source declares the entry with the table's decorator. Only this package's
files are read (as text; nothing is imported to find it), and only a module found there is
imported. A class that moves keeps being found, because the search follows the source.

    declared_in("result", "Grid")  -> "interp.results"  (`@result` on `class Grid`, or `@result(tag="Grid")`)
    view("Graph")                  decorator: the HTML view of result tag "Graph"
    view_for("Graph")              that view, its module imported if it had not been
"""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path
from typing import Callable, TypeVar

from interp.errors import InterpError

__all__ = ["VIEWS", "declared_in", "view", "view_for"]

F = TypeVar("F", bound=Callable)

# result tag -> the function that draws it as an HTML view (filled by @view where each view is defined)
VIEWS: dict[str, Callable] = {}
_PACKAGE = __name__.partition(".")[0]


def _declarations(decorator: str) -> re.Pattern:
    """`@decorator` (or `@module.decorator`), with an optional single string argument (positional or
    keyword), on a `class` or `def`: group 1 the string, group 2 the class or function name."""
    name = re.escape(decorator)
    return re.compile(rf"^@(?:\w+\.)*{name}(?:\(\s*(?:\w+\s*=\s*)?[\"'](\w+)[\"']\s*\))?[ \t]*(?:#[^\n]*)?\n"
                      rf"(?:@[^\n]*\n)*(?:async\s+)?(?:class|def)\s+(\w+)", re.M)


def declared_in(decorator: str, name: str) -> str | None:
    """The module of this package whose source declares `name` under `@decorator`: the decorator's
    string argument when it has one (`@result(tag="Old")`, `@view("Graph")`), else the decorated class
    or function's own name (`@result class Grid`). None when no module does."""
    root = Path(sys.modules[_PACKAGE].__file__).parent
    pattern = _declarations(decorator)
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if f"@{decorator}" not in text and f".{decorator}" not in text:
            continue
        if any((m.group(1) or m.group(2)) == name for m in pattern.finditer(text)):
            parts = path.relative_to(root.parent).with_suffix("").parts
            return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    return None


def view(tag: str) -> Callable[[F], F]:
    """Register the decorated function as the HTML view of results tagged `tag` (`view_for`)."""
    def register(fn: F) -> F:
        old = VIEWS.get(tag)
        if old is not None and (old.__module__, old.__qualname__) != (fn.__module__, fn.__qualname__):
            raise InterpError(f"the view of {tag!r} is already {old.__module__}.{old.__qualname__}; "
                              f"{fn.__module__}.{fn.__qualname__} cannot take it too")
        VIEWS[tag] = fn
        return fn

    return register


def view_for(tag: str | None) -> Callable | None:
    """The registered HTML view of results tagged `tag`, importing the module that declares it when
    none has yet (`declared_in`); None when no module of this package does."""
    if tag is not None and tag not in VIEWS:
        module = declared_in("view", tag)
        if module is not None:
            importlib.import_module(module)
    return VIEWS.get(tag) if tag is not None else None

"""Offline text for training dictionaries: what a model reads while its activations are recorded.

Two sources, both on every machine that runs interp, with no download:

    "docstrings"  the documentation that ships with the Python installation: every docstring
                  (over 40 characters) of the standard library's modules, classes and functions,
                  pydoc's topic pages, and numpy's public docstrings (a dependency of interp).
                  English prose with code in it, about 3.6 MB (about 1M SmolLM2 tokens). It
                  depends on the Python and numpy versions, which `describe` records.
    "zoo"         a zoo model's own training text (`interp.tasks.english.corpus`), for the zoo's
                  word-level models, which read nothing else.

`token_rows(model, source, ...)` gives [rows, n_ctx] token ids, each row beginning with BOS (or
a sentence padded with PAD for the zoo), and a mask of the positions a dictionary trains on: not
BOS (its activations are orders of magnitude larger than the rest and no dictionary is meant to
rebuild them) and not padding.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import io
import pkgutil
import sys
import warnings

import torch
from torch import Tensor

from interp.errors import InterpError

__all__ = ["SOURCES", "describe", "docstring_text", "token_rows"]

SOURCES = ("docstrings", "zoo")
_SKIP = ("this", "antigravity", "idlelib", "tkinter", "turtle", "turtledemo", "__main__", "test", "lib2to3",
         "ensurepip", "venv", "pip")  # side effects on import (this, antigravity), GUIs, test suites
_NUMPY = ("numpy", "numpy.linalg", "numpy.fft", "numpy.random", "numpy.ma", "numpy.polynomial", "numpy.lib",
          "numpy.char", "numpy.strings", "numpy.testing")


def _quiet_import(name: str):
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            return importlib.import_module(name)
    except BaseException:  # a module that cannot import here (missing C library, platform-only) is skipped
        return None


def _stdlib_modules() -> list[str]:
    names = set()
    for name in sorted(sys.stdlib_module_names):
        if name.startswith(_SKIP) or name.startswith("_"):
            continue
        mod = _quiet_import(name)
        if mod is None:
            continue
        names.add(name)
        for info in pkgutil.walk_packages(getattr(mod, "__path__", []), name + "."):
            if not any(p.startswith("_") or p in _SKIP for p in info.name.split(".")):
                names.add(info.name)
    return sorted(names)


def docstring_text() -> str:
    """The "docstrings" source as one string: documents separated by blank lines, each once, in
    a fixed order (sorted module and member names), so one environment always gives the same text."""
    seen: set[str] = set()
    docs: list[str] = []

    def add(obj) -> None:
        d = getattr(obj, "__doc__", None)
        if isinstance(d, str) and len(d) > 40 and d not in seen:
            seen.add(d)
            docs.append(inspect.cleandoc(d))

    def members(mod, exported_only: bool) -> None:
        add(mod)
        for key in sorted(vars(mod)):
            if key.startswith("_"):
                continue
            value = getattr(mod, key, None)
            if exported_only and getattr(value, "__module__", None) != mod.__name__:
                continue
            add(value)
            if inspect.isclass(value):
                for k in sorted(vars(value)):
                    if not k.startswith("_"):
                        add(getattr(value, k, None))

    for name in _stdlib_modules():
        mod = _quiet_import(name)
        if mod is not None:
            members(mod, exported_only=True)
    topics = _quiet_import("pydoc_data.topics")
    if topics is not None:
        for key in sorted(topics.topics):
            add_text = topics.topics[key]
            if add_text not in seen:
                seen.add(add_text)
                docs.append(add_text.strip())
    for name in _NUMPY:
        mod = _quiet_import(name)
        if mod is not None:
            members(mod, exported_only=False)
    return "\n\n".join(docs)


def describe(source: str) -> dict:
    """What produced `source`'s text, for provenance."""
    if source == "docstrings":
        import numpy

        return {"source": source, "python": sys.version.split()[0], "numpy": numpy.__version__}
    if source == "zoo":
        return {"source": source, "text": "interp.tasks.english.corpus"}
    raise InterpError(f"text source {source!r} is not one of {SOURCES}")


def _zoo_rows(n_rows: int, seed: int) -> tuple[Tensor, Tensor]:
    from interp.tasks import PAD_ID, english, pad_rows

    rows = pad_rows(english.encode(english.corpus(n_rows, seed=seed, mix=(0.4, 0.2, 0.4))))
    valid = rows != PAD_ID
    valid[:, 0] = False
    return rows, valid


def token_rows(model, source: str, *, n_ctx: int = 128, max_rows: int | None = None,
               seed: int = 0) -> tuple[Tensor, Tensor]:
    """(tokens [rows, n_ctx], trainable [rows, n_ctx] bool) of `source` for `model`.

    "docstrings": the text tokenized once and cut into rows of n_ctx - 1 tokens, each after BOS,
    in the text's order (shuffle when drawing batches). "zoo": `max_rows` sentences of the zoo's
    English corpus (seed `seed`), padded to the longest."""
    if source == "zoo":
        if max_rows is None:
            raise InterpError("the zoo source needs max_rows, the number of sentences to draw")
        return _zoo_rows(max_rows, seed)
    if source != "docstrings":
        raise InterpError(f"text source {source!r} is not one of {SOURCES}")
    tok = getattr(model, "tokenizer", None)
    if tok is None or tok.bos_token_id is None:
        raise InterpError("the docstrings source needs a model with a BPE tokenizer that has a BOS token "
                          "(a real model); zoo models read source='zoo'")
    ids = torch.tensor(tok(docstring_text(), add_special_tokens=False)["input_ids"])
    width = n_ctx - 1
    n = ids.numel() // width if max_rows is None else min(max_rows, ids.numel() // width)
    body = ids[: n * width].view(n, width)
    rows = torch.cat([torch.full((n, 1), tok.bos_token_id), body], 1)
    valid = torch.ones_like(rows, dtype=torch.bool)
    valid[:, 0] = False
    return rows, valid

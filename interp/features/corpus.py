"""Offline text for training dictionaries: what a model reads while its activations are recorded.

Two sources, both on every machine that runs interp, with no download:

    "docstrings"  the documentation that ships with the Python installation: every docstring
                  (over 40 characters) of the standard library's modules, classes and functions,
                  pydoc's topic pages, and numpy's public docstrings (a dependency of interp).
                  English prose with code in it, about 3.6 MB (about 1M SmolLM2 tokens). It
                  depends on the Python and numpy versions, which `describe` records.
    "english"     English prose from free Debian packages (`ENGLISH`: name, version, licence):
                  the Debian Administrator's Handbook (en-US), the Debian Reference, the Jargon
                  File (its text), the Python 3.11 documentation and the Collaborative International
                  Dictionary of English (Webster 1913 + WordNet). `english_text()` downloads the
                  pinned .debs with `apt-get download` (no root, nothing installed), unpacks them
                  with `dpkg-deb`, keeps each paragraph of at least 40 characters once (exact
                  duplicates, such as navigation, dropped), cuts each package's text into pieces
                  of about 8 kB and orders all pieces by their sha256, so every stretch of rows
                  mixes the sources. Built once into $INTERP_CACHE/corpus/ with its per-package
                  byte counts (`describe`); about 50 MB.
    "zoo"         a zoo model's own training text (`interp.tasks.english.corpus`), for the zoo's
                  word-level models, which read nothing else.

`token_rows(model, source, ...)` gives [rows, n_ctx] token ids, each row beginning with BOS (or
a sentence padded with PAD for the zoo), and a mask of the positions a dictionary trains on: not
BOS (its activations are orders of magnitude larger than the rest and no dictionary is meant to
rebuild them) and not padding.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import html.parser
import importlib
import inspect
import io
import json
import pkgutil
import re
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import torch
from torch import Tensor

from interp.errors import InterpError
from interp.files.storage import cache_dir, write_text_atomic

__all__ = ["ENGLISH", "SOURCES", "describe", "docstring_text", "english_text", "token_rows"]

SOURCES = ("docstrings", "english", "zoo")
# (package, version, licence, files read): pinned, so one pin gives one text on every machine
ENGLISH = (
    ("debian-handbook", "11.20220922", "GPL-2+ or CC-BY-SA-3.0", "usr/share/doc/debian-handbook/html/en-US/*.html"),
    ("debian-reference-en", "2.100", "GPL-2+", "usr/share/debian-reference/*.en.html"),
    ("jargon-text", "4.4.7-4.1", "public domain", "usr/share/doc/jargon-text/jargon.txt.gz"),
    ("python3.11-doc", "3.11.2-6+deb12u9", "PSF-2.0", "usr/share/doc/python3.11/html/**/*.html"),
    ("dict-gcide", "0.48.5+nmu2", "GPL-2+", "usr/share/dictd/gcide.dict.dz"),
)
_PIECE = 8000  # characters per piece of one package's text before the sources are interleaved
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


class _HtmlText(html.parser.HTMLParser):
    """An HTML page's text: a blank line at each block element, whitespace collapsed outside <pre>
    (where code keeps its lines), <head>, <script> and <style> left out."""

    BLOCK = {"p", "div", "pre", "li", "dt", "dd", "tr", "td", "th", "table", "br", "blockquote", "section",
             "h1", "h2", "h3", "h4", "h5", "h6"}
    SKIP = {"head", "script", "style"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skip = self.pre = 0

    def handle_starttag(self, tag, attrs) -> None:
        self.skip += tag in self.SKIP
        self.pre += tag == "pre"
        if tag in self.BLOCK:
            self.parts.append("\n\n")

    def handle_endtag(self, tag) -> None:
        self.skip -= tag in self.SKIP and self.skip > 0
        self.pre -= tag == "pre" and self.pre > 0
        if tag in self.BLOCK:
            self.parts.append("\n\n")

    def handle_data(self, data) -> None:
        if not self.skip:
            self.parts.append(data if self.pre else re.sub(r"\s+", " ", data))


def _html_text(page: str) -> str:
    parser = _HtmlText()
    parser.feed(page)
    parser.close()
    return "".join(parser.parts)


def _wrapped_text(raw: str) -> str:
    """A plain-text file's paragraphs, each on one line (its lines were wrapped at a column),
    without a dictd file's header entries ("00-database-..."), the source tags on lines of their
    own ("[1913 Webster]") and the headwords' pronunciation marks (\\Ab*do"men\\)."""
    raw = re.sub(r"(?m)^\s*\[[^\]\n]*\]\s*$", "", raw)
    raw = re.sub(r" ?\\[^\\\n]*\\", "", raw)
    entries = re.split(r"\n\s*\n", raw)
    return "\n\n".join(" ".join(e.split()) for e in entries if not e.lstrip().startswith("00-database"))


def _paragraphs(text: str, seen: set[str]) -> list[str]:
    """`text`'s paragraphs (blank-line separated, lines right-stripped, at least 40 characters)
    not in `seen`, which they join."""
    out = []
    for para in re.split(r"\n\s*\n", text):
        para = "\n".join(line.rstrip() for line in para.strip("\n").splitlines() if line.strip())
        if len(para) >= 40 and para not in seen:
            seen.add(para)
            out.append(para)
    return out


def _unpack(package: str, version: str, into: Path) -> Path:
    """The pinned .deb downloaded (`apt-get download`, into `into`) and unpacked; its root folder."""
    for tool in ("apt-get", "dpkg-deb"):
        if shutil.which(tool) is None:
            raise InterpError(f"the english source is built from Debian packages and needs {tool} (a Debian or Ubuntu "
                              f"machine); elsewhere copy {_english_path()} from a machine that built it")
    got = subprocess.run(["apt-get", "download", f"{package}={version}"], cwd=into, capture_output=True, text=True)
    debs = list(into.glob(f"{package}_*.deb"))
    if got.returncode or not debs:
        raise InterpError(f"apt-get download {package}={version} failed ({got.stderr.strip()[-300:]}); run apt-get "
                          "update, or pin the version `apt-cache policy` offers in corpus.ENGLISH (the text changes)")
    root = into / package
    subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(root)], check=True)
    return root


def _english_path() -> Path:
    """The built text's file, named by a digest of the pins and of the code that turns them into text."""
    code = "".join(inspect.getsource(f) for f in (_HtmlText, _html_text, _wrapped_text, _paragraphs, _build_english))
    key = hashlib.sha256(json.dumps([ENGLISH, _PIECE, code]).encode()).hexdigest()[:12]
    return cache_dir() / "corpus" / f"english-{key}.txt"


def _build_english() -> dict:
    """Assemble the english text (see the module docstring); {package: bytes kept}."""
    seen: set[str] = set()
    pieces, kept = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for package, version, _, pattern in ENGLISH:
            root = _unpack(package, version, Path(tmp))
            files = sorted(root.glob(pattern))
            if pattern.endswith((".gz", ".dz")):  # dictzip (.dz) is gzip with an index
                text = "\n\n".join(_wrapped_text(gzip.open(f, "rt", encoding="utf-8", errors="replace").read())
                                   for f in files)
            else:
                text = "\n\n".join(_html_text(f.read_text(encoding="utf-8", errors="replace")) for f in files)
            paras, piece = _paragraphs(text, seen), []
            kept[package] = sum(len(p.encode()) for p in paras)
            for para in paras:
                piece.append(para)
                if sum(map(len, piece)) >= _PIECE:
                    pieces.append("\n\n".join(piece))
                    piece = []
            pieces += ["\n\n".join(piece)] if piece else []
            shutil.rmtree(root)
    pieces.sort(key=lambda p: hashlib.sha256(p.encode()).hexdigest())
    path = _english_path()
    text = "\n\n".join(pieces)
    info = {"packages": {f"{p}={v}": {"licence": lic, "bytes": kept[p]} for p, v, lic, _ in ENGLISH},
            "bytes": len(text.encode()), "sha256": hashlib.sha256(text.encode()).hexdigest()[:16]}
    write_text_atomic(path, text)
    write_text_atomic(path.with_suffix(".json"), json.dumps(info, indent=1) + "\n")  # after the text: its presence says both are whole
    return info


def english_text() -> str:
    """The "english" source as one string (built on first use, then read from $INTERP_CACHE)."""
    path = _english_path()
    if not path.with_suffix(".json").exists():
        _build_english()
    return path.read_text(encoding="utf-8")


def describe(source: str) -> dict:
    """What produced `source`'s text, for provenance."""
    if source == "docstrings":
        import numpy

        return {"source": source, "python": sys.version.split()[0], "numpy": numpy.__version__}
    if source == "english":
        english_text()  # built if missing
        return {"source": source, **json.loads(_english_path().with_suffix(".json").read_text(encoding="utf-8"))}
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

    "docstrings", "english": the text tokenized in pieces of about 1 MB (each cut where a
    paragraph begins) and cut into rows of n_ctx - 1 tokens, each after BOS, in the text's order
    (shuffle when drawing batches); with `max_rows`, only as much of the text as those rows need.
    "zoo": `max_rows` sentences of the zoo's English corpus (seed `seed`), padded to the longest."""
    if source == "zoo":
        if max_rows is None:
            raise InterpError("the zoo source needs max_rows, the number of sentences to draw")
        return _zoo_rows(max_rows, seed)
    if source not in SOURCES:
        raise InterpError(f"text source {source!r} is not one of {SOURCES}")
    tok = getattr(model, "tokenizer", None)
    if tok is None or tok.bos_token_id is None:
        raise InterpError(f"the {source} source needs a model with a BPE tokenizer that has a BOS token "
                          "(a real model); zoo models read source='zoo'")
    text = docstring_text() if source == "docstrings" else english_text()
    width = n_ctx - 1
    ids, start = [], 0
    while start < len(text) and (max_rows is None or len(ids) < max_rows * width):
        end = text.find("\n\n", start + 1_000_000)
        end = len(text) if end < 0 else end
        ids += tok(text[start:end], add_special_tokens=False)["input_ids"]
        start = end
    ids = torch.tensor(ids)
    n = ids.numel() // width if max_rows is None else min(max_rows, ids.numel() // width)
    body = ids[: n * width].view(n, width)
    rows = torch.cat([torch.full((n, 1), tok.bos_token_id), body], 1)
    valid = torch.ones_like(rows, dtype=torch.bool)
    valid[:, 0] = False
    return rows, valid

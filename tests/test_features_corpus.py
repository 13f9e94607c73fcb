"""The offline text sources: the english source assembled from its packages' files (faked here:
the real build downloads about 70 MB of Debian packages), each paragraph once, the sources
interleaved, its provenance recorded; the suite's layer subsets."""

from __future__ import annotations

import gzip

import pytest

from interp.errors import InterpError
from interp.features import corpus
from interp.features import suite as suites

PAGE = """<html><head><title>skip me</title><style>p {}</style></head><body>
<div class="nav">Previous chapter | Next chapter | Home of the whole manual</div>
<h1>A heading of the chapter that is long enough</h1>
<p>The first paragraph of the page,
wrapped over   two lines, with <b>bold</b> text &amp; an entity.</p>
<pre>def f(x):
    return x + 1  # code keeps its lines</pre>
<p>short</p></body></html>"""

DICT = """00-database-short
   The Collaborative International Dictionary of English v.0.48

Abdicator \\Ab"di*ca`tor\\, n.
   One who abdicates a throne, an office, a trust or a right.
   [1913 Webster]
"""


def _fake_unpack(package, version, into):
    root = into / package
    if package == "dict-gcide":
        (root / "usr/share/dictd").mkdir(parents=True)
        with gzip.open(root / "usr/share/dictd/gcide.dict.dz", "wt", encoding="utf-8") as fh:
            fh.write(DICT)
    elif package == "jargon-text":
        (root / "usr/share/doc/jargon-text").mkdir(parents=True)
        with gzip.open(root / "usr/share/doc/jargon-text/jargon.txt.gz", "wt", encoding="utf-8") as fh:
            fh.write("A hacker is a person who enjoys exploring the details\nof programmable systems.\n")
    else:
        pattern = next(p for name, _, _, p in corpus.ENGLISH if name == package)
        page = root / pattern.replace("**/", "a/").replace("[a-z]*/", "a/").replace("*", "page")
        page.parent.mkdir(parents=True)
        page.write_text(PAGE.replace("first", f"first {package}"), encoding="utf-8")
    return root


def test_english_text_keeps_each_paragraph_once_and_records_its_packages(tmp_path, monkeypatch):
    monkeypatch.setenv("INTERP_CACHE", str(tmp_path))
    monkeypatch.setattr(corpus, "_unpack", _fake_unpack)
    text = corpus.english_text()
    paras = text.split("\n\n")
    assert "skip me" not in text and "p {}" not in text and "short" not in paras
    assert "wrapped over two lines, with bold text & an entity." in text
    assert "def f(x):\n    return x + 1  # code keeps its lines" in text
    assert paras.count("Previous chapter | Next chapter | Home of the whole manual") == 1  # navigation once
    assert "Abdicator, n. One who abdicates a throne, an office, a trust or a right." in paras
    assert "[1913 Webster]" not in text and "00-database" not in text
    assert "A hacker is a person who enjoys exploring the details of programmable systems." in paras
    info = corpus.describe("english")
    assert info["bytes"] == len(text.encode()) and set(info["packages"]) == {f"{p}={v}" for p, v, _, _ in corpus.ENGLISH}
    assert sum(p["bytes"] for p in info["packages"].values()) <= info["bytes"]
    monkeypatch.setattr(corpus, "_unpack", None)  # a second call reads the cache, downloads nothing
    assert corpus.english_text() == text


def test_a_missing_pin_says_what_to_change(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus.shutil, "which", lambda tool: None)
    with pytest.raises(InterpError, match="apt-get"):
        corpus._unpack("dict-gcide", "0.48.5+nmu2", tmp_path)


def test_suite_layer_subsets():
    s = suites.SUITES["smollm2-english"]
    assert [p[1] for p in s.pairs((3, 15))] == ["blocks.3.hook_mlp_out", "blocks.15.hook_mlp_out"]
    assert len(s.pairs()) == 30 and len(suites.SUITES["smollm2"].pairs()) == 31  # the SAE only with every layer
    assert suites.folder("smollm2-english", "cpu16k", (3, 15)).name == "cpu16k-layers-3-15"
    with pytest.raises(InterpError, match="subset of 0..29"):
        s.pairs((30,))

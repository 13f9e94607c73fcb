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


def test_suite_keeps_stretches_of_a_layer_subset_and_scores_their_curve(tmp_path, monkeypatch):
    from dataclasses import replace

    from interp.features.train import Recipe

    monkeypatch.setenv("INTERP_CACHE", str(tmp_path))
    tiny = replace(suites.SUITES["zoo"], budgets={"quick": Recipe(n_features=64, k=4, lr=3e-3, tokens=1500, rows=16,
                                                                  checkpoint_every=2)},
                   zoo_rows=400, eval_rows=32, fit_rows=200)
    monkeypatch.setitem(suites.SUITES, "zoo", tiny)
    suites.train_suite("zoo", "quick", layers=(0, 2), every=600, progress=False)
    out = suites.folder("zoo", "quick", (0, 2))
    assert sorted(p.name for p in out.glob("tokens-*")) == ["tokens-1200", "tokens-1500", "tokens-600"]
    data = suites.curve("zoo", "quick", (0, 2), progress=False)
    assert data["budget"]["layers"] == [0, 2] and [r["layer"] for r in data["final"]] == [0, 2]
    tokens = [r["tokens"] for r in data["curve"]]
    assert tokens == sorted(tokens) and len(tokens) == 6 and tokens[0] >= 600  # 2 layers: 2 stretches + the latest (the 3rd)
    assert all(set(r) >= {"fve", "fve_random", "fve_control", "l0", "dead"} for r in data["curve"])
    assert all({"ce_spliced", "ce_random", "ce_recovered", "ce_recovered_random"} <= set(r) for r in data["final"])
    beyond = data["beyond_random"]
    assert [b["layer"] for b in beyond] == [0, 2] and all(b["ci95"][0] <= b["fve_minus_random"] <= b["ci95"][1] for b in beyond)
    final = {r["layer"]: r for r in data["final"]}
    assert all(abs(b["fve_minus_random"] - (final[b["layer"]]["fve"] - final[b["layer"]]["fve_random"])) < 1e-3 for b in beyond)
    assert data["history"]["0"] and data["history"]["0"][-1]["tokens"] == data["trained"]["tokens"]
    assert data["gap"] == {"layers": 2, "met": sum(r["fve"] >= 0.8 and r["dead"] <= 0.1 for r in data["final"])}
    _renders_bound(data)
    suites.train_suite("zoo", "quick", layers=(0, 2), tokens=1800, every=600, progress=False)  # goes on, keeps the old
    assert sorted(p.name for p in out.glob("tokens-*"))[-1] == "tokens-600" and (out / "tokens-1800").exists()


def _renders_bound(data):
    """docs/features_budget.md's regions render from a curve JSON, every number bound to its key."""
    from interp.studies import docs as bound
    from interp.studies.features.budget import bodies

    data["throughput"] = {"matmul_gflops": 60.0, "forward_tokens_per_s": 300.0, "dictionary_tokens_per_s": 80.0,
                          "n_features": 16384, "flops_per_token": {"forward": 212406912, "dictionary": 113246208},
                          "achieved_gflops": {"forward": 63.7, "dictionary": 9.1},
                          "layers": [{"layers": 1, "tokens_per_s": 63.2, "limit_tokens_per_s": 180.1}],
                          "full_budget": {"tokens": 100000000, "layers": 30, "cpu_days_at_measured_rate": 440.2,
                                          "gpu_tflops_assumed": 50.0, "gpu_hours_flop_bound": 1.9}}
    regions = bodies(data)
    doc = "".join(f"<!-- gen:{k} -->\n{v}\n<!-- /gen:{k} -->\n" for k, v in regions.items())
    assert bound.check(doc, data) == [] and "| `dict-gcide=0.48.5+nmu2` | `GPL-2+` |" not in doc  # zoo text: no packages
    bound.set_at(data, "/final/0/fve", data["final"][0]["fve"] * 1.01 + 0.01)
    assert bound.check(doc, data)  # a changed number no longer checks

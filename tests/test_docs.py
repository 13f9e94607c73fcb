"""Every number in a doc is read from the committed JSON beside it.

Bound docs (the rule every study doc is moving to, see interp.studies.docs): each number in a generated
`<!-- gen:NAME -->` region names its JSON key and must equal it at the precision shown; moving any
reported value by 1 % must make the check fail; hand-written prose holds no untied numbers; every verdict
word stored in a JSON follows interp.studies.verdicts.

The older, looser check below stays for docs not yet bound:

For each docs/X.md with docs/X_repro.json (or docs/X.json) beside it, every number in the body
rows of its markdown tables (code spans excepted) must equal, at the precision shown, some number
of the JSON: a cell "0.982" matches a JSON value that rounds to 0.982, "95.5 %" one that rounds to
0.955, "12" one that rounds to 12. Numeric strings in the JSON (keys like "0.7") count too.
"""

from __future__ import annotations

import bisect
import json
import math
import re
import shutil
from pathlib import Path

import pytest

from interp.errors import InterpError

DOCS = Path(__file__).resolve().parent.parent / "docs"
# a number not glued to a word ("h0", "L3H2", "hook_z2" are labels, not numbers), optionally a percentage
NUMBER = re.compile(r"(?<![\w.])([-−]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)(?![\w.]*[A-Za-z_])(\s?%)?")
CODE = re.compile(r"`[^`]*`")


def json_for(doc: Path) -> Path | None:
    for name in (f"{doc.stem}_repro.json", f"{doc.stem}.json"):
        if (doc.parent / name).exists():
            return doc.parent / name
    return None


def pairs() -> list[tuple[Path, Path]]:
    return [(d, j) for d in sorted(DOCS.glob("*.md")) if (j := json_for(d)) is not None]


def json_numbers(obj) -> list[float]:
    """Every finite number in a JSON document (bools excluded), and every string that is a number."""
    out: list[float] = []

    def walk(x) -> None:
        if isinstance(x, bool) or x is None:
            return
        if isinstance(x, (int, float)):
            if math.isfinite(x):
                out.append(float(x))
        elif isinstance(x, str):
            try:
                v = float(x)
            except ValueError:
                return
            if math.isfinite(v):
                out.append(v)
        elif isinstance(x, dict):
            for k, v in x.items():
                walk(k)
                walk(v)
        elif isinstance(x, (list, tuple)):
            for v in x:
                walk(v)

    walk(obj)
    return sorted(out)


def table_numbers(markdown: str) -> list[tuple[int, str, float, float]]:
    """(line number, token, value, half a unit of its last shown digit) for every number in the
    body rows of every markdown table (the header row and the |---| rule are skipped)."""
    out = []
    lines = markdown.splitlines()
    for i, line in enumerate(lines):
        if not line.lstrip().startswith("|"):
            continue
        if re.fullmatch(r"\s*\|?[\s:|-]+\|?\s*", line):
            continue  # the rule under a header
        below = lines[i + 1] if i + 1 < len(lines) else ""
        if re.fullmatch(r"\s*\|[\s:|-]+\|?\s*", below) and "-" in below:
            continue  # a header row
        for m in NUMBER.finditer(CODE.sub(" ", line)):
            text, percent = m.group(1).replace("−", "-"), m.group(2)
            value = float(text)
            mantissa = text.lower().split("e")[0]
            decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
            half = 0.5 * 10.0 ** -decimals
            if "e" in text.lower():
                half *= 10.0 ** int(text.lower().split("e")[1])
            if percent:
                value, half = value / 100, half / 100
            out.append((i + 1, m.group(0).strip(), value, half))
    return out


def unmatched(markdown: str, numbers: list[float]) -> list[str]:
    """The table numbers of `markdown` that no JSON number rounds to."""
    bad = []
    for line, token, value, half in table_numbers(markdown):
        lo = bisect.bisect_left(numbers, value - half - 1e-9 * max(1.0, abs(value)))
        if lo >= len(numbers) or numbers[lo] > value + half + 1e-9 * max(1.0, abs(value)):
            bad.append(f"line {line}: {token}")
    return bad


def check(doc: Path, data: Path) -> list[str]:
    return unmatched(doc.read_text(), json_numbers(json.loads(data.read_text())))


# Docs known to break the rule when this test was written, each with why (xfail strict: a fixed
# doc makes its entry fail, so the entry is removed with the fix).
KNOWN = {"scale.md": "its tables hold configuration values (retries, GPU counts, sizes) that scale.json does not"}


@pytest.mark.parametrize(
    "doc,data",
    [pytest.param(d, j, marks=pytest.mark.xfail(reason=KNOWN[d.name], strict=True)) if d.name in KNOWN else (d, j)
     for d, j in pairs()],
    ids=lambda p: p.name)
def test_doc_tables_match_their_json(doc, data):
    bad = check(doc, data)
    assert not bad, f"{doc.name}: numbers in its tables that {data.name} does not hold: {bad[:20]}"


def test_the_checker_reads_precision_percent_and_labels():
    md = "intro 0.123456 (not a table)\n\n| model | acc | share |\n|---|---|---|\n| s=0.7 h3 `x 99` | 0.982 | 95.5 % |\n"
    found = [(tok, v) for _, tok, v, _ in table_numbers(md)]
    assert found == [("0.7", 0.7), ("0.982", 0.982), ("95.5 %", 0.955)]  # h3, code, header, prose: skipped
    assert unmatched(md, sorted([0.7, 0.98249, 0.9551])) == []
    assert unmatched(md, sorted([0.7, 0.9826, 0.9551])) == ["line 5: 0.982"]  # rounds to 0.983
    assert json_numbers({"0.7": [1, True, None, "x", 2.5]}) == [0.7, 1.0, 2.5]


def test_a_doctored_doc_fails(tmp_path):
    """Change one table number of a real doc (in a temporary copy): the check must name it."""
    candidates = [(d, j) for d, j in pairs() if not check(d, j) and table_numbers(d.read_text())]
    if not candidates:
        pytest.skip("no doc with a matching table to doctor")
    doc, data = candidates[0]
    copy_doc, copy_data = tmp_path / doc.name, tmp_path / data.name
    shutil.copy(data, copy_data)
    text = doc.read_text()
    line, token, _, _ = next(t for t in table_numbers(text) if "." in t[1])
    lines = text.splitlines()
    lines[line - 1] = lines[line - 1].replace(token, "0.123456789", 1)  # a value no study writes
    copy_doc.write_text("\n".join(lines))
    assert check(copy_doc, copy_data) == [f"line {line}: 0.123456789"]


# ---- bound docs: every number in a generated region names its JSON key (interp.studies.docs) ----

import copy

from interp.studies import docs as bound
from interp.studies.verdicts import rejudge

# Study docs not yet bound (no `<!-- gen:NAME -->` regions, or hand-written prose numbers left), each
# with why. xfail strict: binding a doc makes its entry fail, so the entry is removed with the binding.
UNBOUND = {
    "scale.md": "an estimate sheet, not a study: configuration values scale.json does not hold",
}


def bound_pairs(marks: bool = True):
    out = []
    for d, j in pairs():
        if marks and d.name in UNBOUND:
            out.append(pytest.param(d, j, marks=pytest.mark.xfail(reason=UNBOUND[d.name], strict=True)))
        else:
            out.append((d, j))
    return out


def problems(doc: Path, data: dict) -> list[str]:
    text = doc.read_text()
    if not bound.regions(text):
        return ["no generated regions"]
    return bound.check(text, data) + [f"prose {p}" for p in bound.prose_numbers(text, data)]


@pytest.mark.parametrize("doc,data", bound_pairs(), ids=lambda p: p.name)
def test_doc_is_bound_to_its_json(doc, data):
    """(1) every number of every generated region equals its key at the precision shown; (3) no number of
    the hand-written prose is untied (years, references and the JSON's paper/budget values allowed)."""
    bad = problems(doc, json.loads(data.read_text()))
    assert not bad, f"{doc.name}: {bad[:20]}"


def region_pairs():
    """Every doc with its JSON; a doc with no generated region yet is an expected failure."""
    return [(d, j) if bound.regions(d.read_text()) else
            pytest.param(d, j, marks=pytest.mark.xfail(reason="no generated regions yet", strict=True))
            for d, j in pairs()]


@pytest.mark.parametrize("doc,data", region_pairs(), ids=lambda p: p.name)
def test_changing_any_reported_number_by_one_percent_fails(doc, data):
    """(2) for every key a doc reports: the JSON with that value moved by 1 % (an integer by at least 1)
    no longer checks, so a JSON rerun without regenerating its doc cannot pass."""
    text, result = doc.read_text(), json.loads(data.read_text())
    keys, checker = bound.keys_of(text), bound.Checker(text)
    assert keys and not checker.check(result), f"{doc.name} is not bound"
    missed = []
    for ptr in keys:
        value = bound.get(result, ptr)
        if value == 0:
            continue  # 1 % of zero is no change
        new = value + max(1, round(abs(value) * 0.01)) if isinstance(value, int) else value * 1.01
        bound.set_at(result, ptr, new)  # the JSON with this one value moved, then put back
        try:
            if not checker.check(result):
                missed.append(ptr)
        finally:
            bound.set_at(result, ptr, value)
    assert not missed, f"{doc.name}: moving these keys by 1 % left the doc passing: {missed[:20]}"


@pytest.mark.parametrize("data", [j for _, j in pairs()], ids=lambda p: p.name)
def test_every_verdict_word_follows_the_rules(data):
    """Every verdict stored in a JSON (interp.studies.verdicts.judge) is what its numbers give now."""
    assert rejudge(json.loads(data.read_text())) == []


def test_bound_check_reads_keys_precision_and_prose():
    data = {"a": {"x": 0.98249, "n": 12, "p": 0.9551, "neg": -0.0123}, "paper": {"acc": 0.93},
            "budget": {"steps": 300}}
    r = bound.Render(data)
    body = (f"| m | x | n | p | d |\n|---|---|---|---|---|\n| `s 0.7` L3 Gemma-3 | {r.num('/a/x')} | "
            f"{r.int('/a/n')} | {r.pct('/a/p')} | {r.num('/a/neg', signed=True)} |")
    md = (f"# T\nThe paper gets 0.93 in 2024 (Table 2) at 300 steps; we get 0.5.\n"
          f"<!-- gen:t -->\n{r.region(body)}\n<!-- /gen:t -->\n")
    assert bound.keys_of(md) == ["/a/x", "/a/n", "/a/p", "/a/neg"]
    assert "| 0.982 | 12 | 95.5 % | -0.0123 |" in md
    assert bound.check(md, data) == []
    assert bound.prose_numbers(md, data) == ["line 2: 0.5"]  # paper value, year, table, budget pass
    for ptr, new in [("/a/x", 0.9835), ("/a/n", 13), ("/a/n", 12.4), ("/a/p", 0.956), ("/a/neg", -0.0124)]:
        changed = copy.deepcopy(data)
        bound.set_at(changed, ptr, new)
        assert len(bound.check(md, changed)) == 1, ptr
    # a hand edit inside a region: a number added without a key, or a key removed
    assert bound.check(md.replace("| 12 |", "| 12 | 7 |"), data) == ["region t: 5 numbers, 4 keys"]
    with pytest.raises(InterpError, match="numbers but"):
        bound.Render(data).region("an unbound 0.5")
    with pytest.raises(InterpError, match="no key 'y'"):
        bound.Render(data).num("/a/y")


def test_rendered_floats_show_enough_digits_for_one_percent():
    r = bound.Render({"v": [0.5, 0.995, 123.456, 0.00123, 1e-7, 2.0]})
    body = r.region(" ".join(r.num(f"/v/{i}") for i in range(6)))
    assert bound.numbers_in(body) == ["0.500", "0.995", "123.5", "0.00123", "0.000000100", "2.00"]


def test_region_keys_follow_the_text_not_the_call_order():
    r = bound.Render({"a": 0.25, "b": 7})
    later = r.num("/a")
    first = r.int("/b")
    unused = r.num("/a")  # formatted, never placed: names no key  # noqa: F841
    body = r.region(f"b {first}, a {later}")
    assert bound.regions(f"<!-- gen:x -->\n{body}\n<!-- /gen:x -->") == [("x", "b 7, a 0.250\n", ["/b", "/a"])]


def test_fill_writes_regions_and_refuses_unrendered_bodies(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text("a\n<!-- gen:t -->\nold\n<!-- /gen:t -->\nb\n")
    r = bound.Render({"k": 0.25})
    bound.write(doc, {"t": r.region(f"k is {r.num('/k')}")})
    assert bound.check(doc.read_text(), {"k": 0.25}) == [] and bound.check(doc.read_text(), {"k": 0.26})
    with pytest.raises(InterpError, match="Render.region"):
        bound.write(doc, {"t": "k is 0.25"})


def test_verdict_rules():
    from interp.studies import verdicts as v

    assert v.verdict(None, 0.5) == v.NOT_RUN
    ci = dict(effect_ci=(0.85, 0.95))  # told apart only by an interval
    assert v.verdict(0.9, 0.5) == v.CONTROL  # no interval: far apart, yet nothing says how far is far
    assert v.verdict(0.9, 0.5, **ci) == v.REPRODUCED
    assert v.verdict(0.9, 0.5, "less", **ci) == v.NOT_REPRODUCED  # e.g. a rank: lower is the paper's side
    assert v.verdict(0.52, 0.5, effect_ci=(0.49, 0.55)) == v.CONTROL
    assert v.verdict(0.52, 0.5, effect_ci=(0.49, 0.55), setup_control=True) == v.FORCED
    assert v.verdict(0.9, 0.5, control_ci=(0.3, 0.95)) == v.CONTROL  # inside the random draws' range
    assert v.verdict(0.9, 0.5, diff_ci=(-0.01, 0.6)) == v.CONTROL
    assert v.verdict(0.6, 0.5, paper=0.9, paper_control=0.5, diff_ci=(0.05, 0.15)) == v.PARTLY  # a quarter of the paper's margin
    assert v.verdict(0.8, 0.5, paper=0.9, paper_control=0.5, diff_ci=(0.2, 0.4)) == v.REPRODUCED
    assert v.against_all([v.REPRODUCED, v.NOT_REPRODUCED]) == v.NOT_REPRODUCED
    assert v.combine([v.REPRODUCED, v.NOT_REPRODUCED]) == v.PARTLY
    assert v.combine([v.CONTROL, v.FORCED]) == v.FORCED and v.combine([v.NOT_RUN]) == v.NOT_RUN
    with pytest.raises(InterpError, match="needs the control"):
        v.verdict(0.9, None)
    record = v.judge("graft beats facts alone", 3.30, 2.65, "less", diff_ci=(0.3, 1.0))
    assert record["word"] == v.NOT_REPRODUCED and v.rejudge({"x": [record]}) == []
    assert v.rejudge({"x": [{**record, "word": v.PARTLY}]}) == ["/x/0: says 'partly', its numbers give 'not reproduced'"]


def test_readme_study_table_is_the_jsons_verdict_words():
    """README's study table is generated from the committed JSONs' headline verdicts: a JSON whose
    words change without `interp.studies.readme.write_readme` being rerun fails here."""
    from interp.studies import readme as table

    readme = (DOCS.parent / "README.md").read_text()
    begin, end = table.README_BEGIN, table.README_END
    assert begin in readme and end in readme, "README.md lost its generated study table"
    shown = readme.split(begin, 1)[1].split(end, 1)[0].strip()
    assert shown == table.readme_table(DOCS), "README's study table is stale: run interp.studies.readme.write_readme"


def test_headline_verdicts_are_the_outermost_words():
    data = {"claims": {"a": {"label": "A", "word": "partly", "per_model": [{"word": "reproduced"}]},
                       "b": {"claim_text": "B", "word": "not run"}}}
    assert bound.headline_verdicts(data) == [("/claims/a", "A", "partly"), ("/claims/b", "B", "not run")]


def test_the_readme_counts_every_claim_of_every_paper():
    """Per paper, every headline claim (interp.studies.claims) is counted under one word, the claims
    no study runs and those a committed JSON does not word included ("not run")."""
    from interp.studies import claims
    from interp.studies import readme as table

    entries = table.paper_ledger(DOCS)
    assert sorted(e["id"] for e in entries) == sorted(c.id for c in claims.CLAIMS)
    papers = table.papers_table(DOCS)
    for key, title in claims.PAPERS.items():
        row = next(line for line in papers.splitlines() if line.startswith(f"| {title} |"))
        cells = [c.strip() for c in row.strip("|").split("|")][1:]
        total = sum(c.paper == key for c in claims.CLAIMS)
        assert int(cells[-1]) == total and sum(int(c) for c in cells[:-1]) == total
    assert all(e["word"] != "not run" or e.get("needs") for e in entries)  # every "not run" says what it needs


def test_a_studys_claims_list_is_not_read_as_headline_verdicts():
    data = {"x": {"label": "X", "word": "partly"}, bound.LEDGER_KEY: [{"id": "hc.shared_core", "word": "partly"}]}
    assert bound.headline_verdicts(data) == [("/x", "X", "partly")]


# ---- words about the code, not about how it was made ----

ROOT = DOCS.parent
# built from parts so that this file does not match itself
# (a backtick may sit between the word and its number, as markdown rendered a number in a table cell)
PROCESS_WORDS = re.compile(r"\b" + "iss" + r"ues? ?`?#?\d+|\bthis ses" + r"sion\b|\bwas le" + r"nt\b", re.I)


def test_no_issue_numbers_or_session_facts_in_code_tests_or_docs():
    """Code, tests and user docs say what the code does, not which tracker entry asked for it or what a
    working session had at hand; the result JSONs in docs/ are read too (a label in them reaches the docs)."""
    files = [*ROOT.glob("interp/**/*.py"), *ROOT.glob("interp/data/*.json"), *ROOT.glob("tests/*.py"),
             *DOCS.glob("*.md"), *DOCS.glob("*.json"), ROOT / "README.md", *ROOT.glob("notebooks/*.py"),
             *ROOT.glob("benchmarks/*.py"), *ROOT.glob("benchmarks/*.md")]
    found = [f"{path.relative_to(ROOT)}:{i}: {m.group(0)}" for path in files
             for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if (m := PROCESS_WORDS.search(line))]
    assert found == [], found

"""Every study `interp repro` runs has one shape (interp.studies.protocol): a NAME, BUDGETS
with quick and paper, repro(progress, models, budget, overrides, units), departures and regions,
behind one write_doc(json_path, doc_path); the CLI reads the registry, and every registered doc (the
bound docs included) is refilled from its committed JSON byte for byte."""

from __future__ import annotations

import json
import shutil
import types
from pathlib import Path

import pytest

from interp.errors import InterpError
from interp.studies import protocol

DOCS = Path(__file__).resolve().parents[1] / "docs"


@pytest.mark.parametrize("name", protocol.runnable())
def test_every_registered_study_satisfies_the_protocol(name):
    s = protocol.get(name)
    assert s.NAME == name and protocol.problems(s) == []
    assert getattr(s.load(), "STUDY", name) == name  # a module that names its unit store names it the same way


def test_the_cli_lists_the_registered_studies_and_refuses_others(capsys):
    from interp.cli import build_parser, main

    sub = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction").choices
    shown = lambda command: "".join(sub[command].format_help().split())  # noqa: E731 (argparse wraps at hyphens)
    assert "studies:" + ",".join(protocol.runnable()) in shown("repro")
    assert "studies:" + ",".join(protocol.REGISTRY) in shown("doc")
    assert "features" in protocol.REGISTRY and "features" not in protocol.runnable()
    with pytest.raises(InterpError, match="give one of: circuits, cores"):
        protocol.get("steer")
    assert main(["repro", "steer"]) == 2 and "give one of" in capsys.readouterr().err
    with pytest.raises(InterpError, match="interp repro. does not make"):
        protocol.get("features").repro()


def test_studies_register_themselves_and_a_second_owner_of_a_name_is_refused():
    assert protocol.get("steering").module == "interp.studies.steering"
    with pytest.raises(InterpError, match="registered by interp.studies.steering already"):
        protocol.bound_doc("steering", lambda data: {})
    assert "steering" in protocol.REGISTRY and protocol.get("steering").runs


def _good(**changes):
    def repro(progress=True, models=None, budget="quick", overrides=None, units=None):
        return {}

    def write_doc(json_path, doc_path):
        return Path(doc_path)

    fields = dict(NAME="x", BUDGETS={"quick": {}, "paper": {}}, repro=repro, write_doc=write_doc)
    return types.SimpleNamespace(**{**fields, **changes})


@pytest.mark.parametrize("change, expect", [
    ({"BUDGETS": {"quick": {}}}, "BUDGETS must include"),
    ({"NAME": ""}, "no NAME"),
    ({"write_doc": lambda doc, data: None}, "write_doc takes ['doc', 'data']"),
    ({"repro": lambda progress=True, models=None: {}}, "repro takes ['progress', 'models']"),
    ({"repro": lambda progress, models=None, budget="quick", overrides=None, units=None: {}}, "progress need defaults"),
    ({"write_doc": lambda json_path, doc_path, extra: None}, "requires more arguments: extra"),
])
def test_problems_names_what_breaks_the_protocol(change, expect):
    assert protocol.problems(_good()) == []
    found = protocol.problems(_good(**change))
    assert any(expect in p for p in found), found


def test_a_study_module_without_regions_is_caught():
    wrong = protocol.Entry("x", "interp.studies.units")  # a module with no repro, departures or regions
    assert any("no regions(result)" in p for p in protocol.problems(wrong))


@pytest.mark.parametrize("name", list(protocol.REGISTRY))
def test_write_doc_refills_the_committed_doc_from_its_json(tmp_path, name):
    """Every registered doc, refilled from its committed JSON, is the committed doc byte for byte."""
    entry = protocol.get(name)
    doc, data = DOCS / entry.doc_name, DOCS / entry.json_name
    copy = tmp_path / doc.name
    shutil.copy(doc, copy)
    marker = "<!-- gen:"
    text = copy.read_text()
    start = text.index(marker)  # blank the first generated region: write_doc must put it back
    body_start = text.index("-->", start) + 3
    end = text.index("<!-- /gen:", body_start)
    copy.write_text(text[:body_start] + "\nstale\n" + text[end:])
    commit = json.loads(data.read_text()).get("provenance", {}).get("commit", "bound")
    if not commit or commit.endswith("+dirty"):  # made from a dirty tree: refused until rerun clean
        with pytest.raises(InterpError, match="commit, then rerun the aggregation"):
            protocol.get(name).write_doc(data, copy)
        pytest.skip(f"{data.name} was made from a tree with uncommitted changes ({commit}): its doc is refused until rerun")
    assert protocol.get(name).write_doc(data, copy) == copy
    assert copy.read_text() == doc.read_text()


def test_interp_doc_refills_a_doc_through_the_registry(tmp_path, capsys):
    from interp.cli import main

    doc = DOCS / "heuristic_core.md"
    copy = tmp_path / "heuristic_core.md"
    text = doc.read_text()
    start = text.index("<!-- gen:")
    body_start = text.index("-->", start) + 3
    copy.write_text(text[:body_start] + "\nstale\n" + text[text.index("<!-- /gen:", body_start):])
    assert main(["doc", "heuristic-core", "--json", str(DOCS / "heuristic_core_repro.json"), "--doc", str(copy)]) == 0
    assert copy.read_text() == doc.read_text() and f"wrote {copy}" in capsys.readouterr().out
    assert main(["doc", "heuristic-core", "--json", str(tmp_path / "none.json"), "--doc", str(copy)]) == 2
    assert "--json" in capsys.readouterr().err and copy.read_text() == doc.read_text()


@pytest.mark.parametrize("commit", ["0123abc+dirty", None, ""])
def test_the_doc_writer_refuses_a_json_from_a_dirty_tree(tmp_path, commit):
    import json

    from interp.errors import InterpError

    data = json.loads((DOCS / "heuristic_core_repro.json").read_text())
    data["provenance"]["commit"] = commit
    path = tmp_path / "heuristic_core_repro.json"
    path.write_text(json.dumps(data))
    copy = tmp_path / "heuristic_core.md"
    shutil.copy(DOCS / "heuristic_core.md", copy)
    with pytest.raises(InterpError, match="commit, then rerun the aggregation") as e:
        protocol.get("heuristic-core").write_doc(path, copy)
    assert str(path) in str(e.value) and copy.read_text() == (DOCS / "heuristic_core.md").read_text()
    data["provenance"]["commit"] = "0123abc"
    data["provenance"]["verdicts"] = {"commit": "4567def+dirty"}  # verdicts redone in a dirty tree: refused too
    path.write_text(json.dumps(data))
    with pytest.raises(InterpError, match="verdicts commit"):
        protocol.get("heuristic-core").write_doc(path, copy)


@pytest.mark.parametrize("name", protocol.runnable())
def test_every_study_lists_how_its_paper_budget_departs_from_the_paper(name):
    module = protocol.get(name).load()
    rows = module.departures(dict(module.BUDGETS["paper"]))
    assert isinstance(rows, list)
    for r in rows:
        assert set(r) == set(protocol.DEPARTURE_KEYS) and r["why"] and r["what"], r
        assert r["ours"] != r["paper"], r  # a departure is a difference


def test_add_departures_fills_the_budget_block_and_refuses_a_bad_row():
    module = types.SimpleNamespace(departures=lambda v: [{"what": "lr", "ours": v["lr"], "paper": 3e-6, "why": "CPU"}])
    result = {"provenance": {"budget": {"name": "paper", "values": {"lr": 1e-4}}}}
    protocol.add_departures(module, result)
    assert result["budget"]["departures"] == [{"what": "lr", "ours": 1e-4, "paper": 3e-6, "why": "CPU"}]
    bad = types.SimpleNamespace(departures=lambda v: [{"what": "lr"}])
    with pytest.raises(InterpError, match="exactly"):
        protocol.add_departures(bad, {"budget": {"values": {}}})
    with pytest.raises(InterpError, match="no budget values"):
        protocol.add_departures(module, {})


def test_every_doc_gets_its_claims_and_departures_regions_bound_to_its_json(tmp_path):
    from interp.studies import docs

    doc = tmp_path / "x.md"
    doc.write_text("# x\n\nprose\n")
    data = {docs.LEDGER_KEY: [{"id": "a.b", "paper": "p", "text": "rank 4 keeps 99 %", "word": "not run",
                               "needs": "about 2 CPU hours"}],
            "budget": {"values": {}, "departures": [{"what": "lr", "ours": 1e-4, "paper": 3e-6, "why": "8 epochs"}]}}
    docs.write_common(doc, data)
    text = doc.read_text()
    assert "<!-- gen:paper_claims -->" in text and "<!-- gen:departures -->" in text and "`0.0001`" in text
    assert docs.check(text, data) == [] and "`2` CPU hours" in text
    docs.write_common(doc, data)  # a second fill replaces the regions, not appends them again
    assert doc.read_text().count("<!-- gen:departures -->") == 1

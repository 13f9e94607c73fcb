"""The circuits study on the protocol: budgets, one unit per model that resumes, a verdict with its control, a bound doc."""

from __future__ import annotations

import copy

import torch

import pytest

from interp.studies import circuits as study
from interp.errors import InterpError
from interp.studies import docs
from interp.studies.units import comparable
from interp.studies.verdicts import rejudge


@pytest.fixture(scope="module")
def units(tmp_path_factory):
    return tmp_path_factory.mktemp("circuits-units")


@pytest.fixture(scope="module")
def quick(units):
    return study.repro(progress=False, budget="quick", units=units)


def test_quick_budget_runs_one_unit_per_model_with_a_judged_claim(quick):
    assert quick["budget"]["name"] == "quick" and quick["budget"]["units_done"] == quick["budget"]["units_total"] == 1
    m = quick["models"]["zoo:lm-llama"]
    assert m["n"] == 8 and m["exact_edges"] == 40 and m["steps"] == 2
    gap = m["spearman_gap"]
    assert gap["ci"][0] <= gap["gap"] <= gap["ci"][1] and gap["boot"] == 200
    v = quick["verdicts"]["zoo:lm-llama"]
    assert v["effect"] == m["correlation"]["eap_ig"]["spearman"] and v["diff_ci"] == gap["ci"]
    assert not rejudge(quick)
    assert quick["provenance"]["units_run"] == 1
    mib = m["mib"]  # MIB's scores of each method's circuits, random circuits beside them
    assert set(mib["series"]) == {"eap", "eap-ig", "exact", "random"} and mib["series"]["eap-ig"]["upto"] == 1.0
    assert mib["exact_ranked"] == 18 and mib["series"]["exact"]["upto"] == 0.05  # quick: the EAP-IG top 5 % exact
    assert mib["common"]["upto"] == 0.05 and mib["series"]["eap"]["signed"][-1] == pytest.approx(1.0, abs=1e-3)
    assert mib["series"]["exact"]["signed"][-1] is None  # no circuit of all edges from an 18-edge ranking
    w = quick["mib_verdicts"]["zoo:lm-llama"]
    assert w["effect"] == mib["series"]["eap-ig"]["cpr"] and w["control_ci"] == mib["random"]["cpr_range"]
    mask = m["mask"]  # a learned head mask's logits rank the heads
    assert mask["steps"] == 20 and set(mask["series"]) == {"mask", "eap-ig heads", "random"}
    assert mask["series"]["mask"]["signed"][-1] == pytest.approx(1.0, abs=1e-3)


def test_rerun_reads_the_unit_back(quick, units):
    again = study.repro(progress=False, budget="quick", units=units)
    assert again["provenance"]["units_run"] == 0 and comparable(again) == comparable(quick)


def test_doc_regions_are_bound(quick):
    text = "\n\n".join(f"<!-- gen:{k} -->\n{v}\n<!-- /gen:{k} -->" for k, v in study.regions(quick).items())
    assert not docs.check(text, quick)
    moved = copy.deepcopy(quick)
    moved["models"]["zoo:lm-llama"]["clean_metric"] *= 1.1
    assert docs.check(text, moved)
    assert "--budget quick" in text and "--budget paper" in text


def test_bad_input():
    with pytest.raises(InterpError, match="budget key"):
        study.repro(progress=False, budget="quick", overrides={"stepz": 3})


def test_the_capability_imports_no_study_and_keeps_a_small_surface():
    """interp.circuits is a capability; its study lives in interp.studies.circuits. The
    architecture test finds cycles between modules, where circuits.study -> studies.units and
    studies.circuits -> circuits.study never closed one; this checks the packages' direction."""
    import ast
    from pathlib import Path

    import interp.circuits

    folder = Path(interp.circuits.__file__).parent
    for path in folder.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not [n for n in names if n.startswith("interp.studies")], f"{path.name} imports a study"
    assert not (folder / "study.py").exists()
    assert len(interp.circuits.__all__) <= 15
    assert study.demo_section.__module__ == "interp.studies.circuits"


def test_the_stratified_edge_sample_spreads_over_every_size_of_score():
    from interp.studies.circuits import stratified_sample

    score = torch.arange(1000.0)
    pick = stratified_sample(score, 80, seed=0, strata=8)
    assert len(pick) == 80 and len(set(pick.tolist())) == 80 and pick.tolist() == sorted(pick.tolist())
    assert torch.bincount(pick // 125, minlength=8).tolist() == [10] * 8  # ten from each eighth of the scores
    assert not torch.equal(pick, stratified_sample(score, 80, seed=1, strata=8))
    with pytest.raises(InterpError, match="not possible"):
        stratified_sample(score, 1001, seed=0)

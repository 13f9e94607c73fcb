"""The circuits study on the protocol: budgets, one unit per model that resumes, a verdict with its control, a bound doc."""

from __future__ import annotations

import copy

import pytest

from interp.circuits import study
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
    with pytest.raises(SystemExit):
        study.main(["--doc", "x.md"])  # runs go through `interp repro`, not this module

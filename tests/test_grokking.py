"""The grokking study at its quick budget: one unit per run, resumable; every verdict names its null and
the paper's claim and follows the rules; the doc's regions render bound to the JSON; the statistics."""

from __future__ import annotations

import pytest
import torch

from interp.errors import InterpError
from interp.studies import docs as bound
from interp.studies import grokking as study
from interp.studies.grokking.doc import regions
from interp.studies.units import comparable
from interp.studies.verdicts import WORDS, rejudge

STUDY = study  # the `units` and `quick` fixtures (conftest) run it


@pytest.fixture(scope="module")
def result(quick):
    return quick


def test_one_run_per_width_and_seed_each_with_three_cores(result):
    b = result["budget"]["values"]
    assert [(r["width"], r["seed"]) for r in result["runs"]] == [(w, s) for s in b["seeds"] for w in b["widths"]]
    for r in result["runs"]:
        cps = r["checkpoints"]
        assert list(cps) == ["before", "at", "after"]
        assert cps["before"]["step"] <= cps["at"]["step"] <= cps["after"]["step"] == b["steps"] - 1
        for c in cps.values():
            assert 1 <= c["k"] <= b["max_k"] and 0 < c["concentration"] <= 1 + 1e-6
            assert len(c["random"]) == b["draws"] and all(0 < x <= 1 + 1e-6 for x in c["random"])
        assert r["grokked"] == (r["grok_step"] is not None)
    assert result["budget"]["units_done"] == result["budget"]["units_total"] == len(result["runs"])


def test_every_verdict_names_its_null_and_claim_and_follows_the_rules(result):
    assert rejudge(result) == []
    for key in ("cyclic_at_grokking", "inflation", "inverse_scaling"):
        j = result["claims"][key]
        assert j["word"] in WORDS and j["null"] and j["claim_id"].startswith("ace.")


def test_the_registered_run_lists_both_claims_and_the_departures(units):
    from interp.studies.protocol import get

    full = get("grokking").repro(progress=False, budget="quick", units=units)  # every unit read back
    assert {e["id"] for e in full["paper_claims"]} == {"ace.modular_cyclic", "ace.inverse_scaling"}
    rows = full["budget"]["departures"]
    assert rows and all(set(r) == {"what", "ours", "paper", "why"} and r["ours"] != r["paper"] for r in rows)


def test_a_rerun_reads_every_unit_back(result, units):
    again = study.repro(progress=False, budget="quick", units=units)
    assert again["provenance"]["units_run"] == 0
    assert comparable(again) == comparable(result)


def test_doc_regions_are_bound_to_the_json(result):
    from interp.studies.protocol import add_departures

    add_departures(study, result)
    both = {**regions(result), **bound.common_regions(result)}
    md = "".join(f"<!-- gen:{k} -->\n{v}\n<!-- /gen:{k} -->\n" for k, v in both.items())
    assert bound.check(md, result) == [] and bound.keys_of(md)


def test_concentration_and_spearman():
    assert study.concentration(torch.tensor([4.0, 0.0, 0.0]), 2) == 1.0  # one circle, all its power on one frequency
    assert study.concentration(torch.tensor([1.0, 1.0, 1.0, 1.0]), 4) == 0.5
    assert study.spearman([1.0, 2.0, 3.0], [3.0, 2.0, 1.0]) == pytest.approx(-1.0)
    assert study.spearman([1.0, 1.0, 1.0], [3.0, 2.0, 1.0]) == 0.0  # constant side: no correlation


def test_the_budget_is_checked():
    with pytest.raises(InterpError, match="trains its own models"):
        study.repro(progress=False, models=["zoo:modadd"])
    with pytest.raises(InterpError, match="divisible by 4"):
        study.repro(progress=False, overrides={"widths": [30]})
    with pytest.raises(InterpError, match="half the narrowest width"):
        study.repro(progress=False, overrides={"max_k": 17})

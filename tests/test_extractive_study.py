"""The extractive-structures study on the protocol: budgets, units that resume, verdicts by the rules, a bound doc."""

from __future__ import annotations

import copy

import pytest

from interp.errors import InterpError
from interp.studies import docs, extractive
from interp.studies.extractive import doc as extractive_doc
from interp.studies.units import comparable
from interp.studies.verdicts import NOT_RUN, REPRODUCED, rejudge


STUDY = extractive  # the `units` and `quick` fixtures (conftest) run it


def test_quick_budget_has_every_part_with_budget_and_provenance(quick):
    b = quick["budget"]
    assert b["name"] == "quick" and b["units_done"] == b["units_total"] == 4  # hops, graft, layers, ordering
    assert 0 < b["paper_fraction"] < 1
    assert quick["provenance"]["budget"] == b and quick["provenance"]["units_run"] == 4
    m = quick["models"][extractive.TINY]
    seed = m["seeds"]["0"]
    assert set(seed) == {"hops", "graft", "layers"}
    assert seed["hops"]["scores"]["counterfactuals"] == 2 and seed["graft"]["relation"] == "dax"
    assert seed["hops"]["first_hop"]["facts"]["rank_after"] == 0.0  # the tiny model learns its facts
    assert m["mean"]["first_facts_after_per_seed"] == [seed["hops"]["first_hop"]["facts"]["rank_after"]]
    assert {"layers", "layers_restricted"} <= set(m["mean"])
    assert quick["timing"]["models"][extractive.TINY]["s_per_step"] > 0
    assert not rejudge(quick)  # every stored word follows from its numbers


def test_a_rerun_reads_every_unit_back_and_gives_the_same_json(quick, units):
    again = extractive.repro(progress=False, budget="quick", units=units)
    assert again["provenance"]["units_run"] == 0
    assert comparable(quick) == comparable(again)


def test_aggregating_the_stored_units_only(quick, units, tmp_path):
    stored = extractive.repro(progress=False, budget="quick", overrides={"compute": False}, units=units)
    assert stored["provenance"]["units_run"] == 0
    assert stored["models"] == quick["models"] and stored["data_ordering"] == quick["data_ordering"]
    assert all(m["incomplete_seeds"] == [] for m in stored["models"].values())
    with pytest.raises(InterpError, match="compute=false"):
        extractive.repro(progress=False, budget="quick", overrides={"compute": False}, units=tmp_path)
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]  # nothing computed, nothing written


def _mean(**values):
    m = {k: v for k, v in values.items()}
    for k, v in values.items():
        m[k + "_per_seed"] = [v * 0.97, v, v * 1.03]  # three seeds: an interval to judge on
    m.setdefault("seeds", 3)
    return m


BASE = dict(first_impl_after=2.0, first_impl_before=9.0, second_impl_after=3.0, second_impl_before=9.0,
            graft=3.3, graft_control=5.2, facts2_only=2.65)


def test_a_graft_worse_than_the_facts_alone_is_not_a_transfer():
    """A graft that beats the control graft but not the facts delta alone shows no transfer (not "partly")."""
    v = extractive.verdicts(_mean(second_learned_seeds=3, **BASE), {})
    assert v["grafting"]["vs_control"]["word"] == REPRODUCED
    assert v["grafting"]["vs_facts_alone"]["word"] == "not reproduced"
    assert v["grafting"]["word"] == "not reproduced"
    better = extractive.verdicts(_mean(second_learned_seeds=3, **{**BASE, "graft": 1.0}), {})
    assert better["grafting"]["word"] == REPRODUCED


def test_second_hop_implications_are_not_read_when_its_facts_were_not_learned():
    v = extractive.verdicts(_mean(second_learned_seeds=0, **BASE), {})
    assert v["second_hop"]["word"] == NOT_RUN and v["second_hop"]["effect"] is None and not v["second_hop_learned"]
    v = extractive.verdicts(_mean(second_learned_seeds=3, **BASE), {})
    assert v["second_hop"]["word"] == REPRODUCED


def test_seeds_on_both_sides_of_zero_are_not_told_apart():
    m = _mean(second_learned_seeds=2, **BASE)
    m["seeds"] = 2
    for k in BASE:
        m[k + "_per_seed"] = [BASE[k], BASE[k]]
    m["graft_per_seed"], m["graft_control_per_seed"] = [3.0, 6.0], [5.0, 5.0]  # one seed each side
    v = extractive.verdicts(m, {})
    lo, hi = v["grafting"]["vs_control"]["diff_ci"]
    assert lo < 0 < hi and (lo + hi) / 2 == pytest.approx(-0.5)
    assert v["grafting"]["vs_control"]["word"] == "not distinguishable from control"


def test_doc_regions_are_bound_to_the_json(quick):
    text = "\n\n".join(f"<!-- gen:{k} -->\n{v}\n<!-- /gen:{k} -->" for k, v in extractive_doc.regions(quick).items())
    assert not docs.check(text, quick)
    moved = copy.deepcopy(quick)
    moved["models"][extractive.TINY]["mean"]["graft"] *= 1.5
    moved["models"][extractive.TINY]["mean"]["graft"] += 0.5
    assert docs.check(text, moved)
    assert "--budget quick" in text and "--budget paper" in text


def test_bad_budget_input_is_refused(units):
    with pytest.raises(InterpError, match="no budget"):
        extractive.repro(progress=False, budget="huge", units=units)
    with pytest.raises(InterpError, match="budget key"):
        extractive.repro(progress=False, budget="quick", overrides={"epoch": 3}, units=units)
    with pytest.raises(InterpError, match="relation"):
        extractive.repro(progress=False, budget="quick", overrides={"relation": "zong"}, units=units)


def test_one_seed_tells_nothing_apart_and_three_use_a_t_interval():
    assert extractive._rule([2.0], [9.0]) == {}
    lo, hi = extractive._rule([1.0, 2.0, 3.0], [9.0, 9.0, 9.0])["diff_ci"]
    assert (lo + hi) / 2 == pytest.approx(-7.0) and (hi - lo) / 2 == pytest.approx(4.3027 * 1.0 / 3 ** 0.5, rel=1e-3)


def test_early_and_late_layers_are_judged_hop_against_hop():
    def seed(e1, l1, e2, l2):
        return {"layers": {"method": "frozen", "early_only": {"first_hop": {"implications_rank": e1}, "second_hop": {"implications_rank": e2}},
                           "late_only": {"first_hop": {"implications_rank": l1}, "second_hop": {"implications_rank": l2}}}}
    per = {"0": seed(1.0, 8.0, 9.0, 7.0), "1": seed(2.0, 8.5, 8.5, 7.5), "2": seed(1.5, 9.0, 9.0, 6.5)}
    v = extractive._early_late(per, "m")
    assert v["claim_id"] == "es.early_late_layers" and v["word"] == REPRODUCED
    assert v["effect"] == pytest.approx(-7.0) and v["control"] == pytest.approx(5.5 / 3)
    same = {k: seed(1.0, 8.0, 1.0 + i, 8.0) for i, k in enumerate("012")}
    assert extractive._early_late(same, "m")["word"] != REPRODUCED
    assert extractive._early_late({"0": {"hops": {}}}, "m") is None

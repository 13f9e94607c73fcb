"""The specialization study (quick budget, zoo:multidomain): units, nulls and controls that can fail,
verdicts from interp.studies.verdicts, a doc bound to its JSON; the overlap null and the
format-matched prompts on their own."""

from __future__ import annotations

import copy
import re

import pytest
import torch

from interp.errors import InterpError
from interp.probing import overlap_null, within_minus_across
from interp.results import Grid
from interp.studies import docs as bound
from interp.studies import specialization as study
from interp.studies.specialization.doc import regions
from interp.studies.units import comparable
from interp.studies.verdicts import WORDS, rejudge

SPEC = "zoo:multidomain"


STUDY = study  # the `units` and `quick` fixtures (conftest) run it


@pytest.fixture(scope="module")
def result(quick):
    return quick


def test_probes_run_to_their_target_with_no_check_cap(result):
    b = result["budget"]["values"]
    assert b["max_checks"] == 0  # no cap
    for d, s in result["models"][SPEC]["subnetworks"].items():
        assert "max_checks" not in s["stop"], (d, s["stop"])
        assert s["reached"] == (abs(s["sparsity"] - b["sparsity"]) <= 0.01)
        assert s["reached"] or s["stop"] == "every matrix broke the tolerance", (d, s)


def test_the_random_score_search_is_a_control_that_can_fail(result):
    """The same search on random scores reaches the target on one domain and stops short on another:
    its outcome is not fixed by the set-up (unlike a random mask of the probe's counts)."""
    m, target = result["models"][SPEC], result["budget"]["values"]["sparsity"]
    reached = {d: c["random_search"]["sparsity"] >= target - 0.01 for d, c in m["controls"].items()}
    assert set(reached.values()) == {True, False}, reached
    for d, ok in reached.items():
        measure = m["claims"]["2"]["per_domain"][d]["random_search"]["measure"]
        assert measure.startswith("test accuracy" if ok else "sparsity reached"), (d, measure)


def test_every_subnetwork_and_control_is_scored_on_every_domain(result):
    m = result["models"][SPEC]
    doms = set(m["domains"])
    for d in doms:
        assert set(m["subnetworks"][d]["on"]) == doms
        assert set(m["controls"][d]) == set(study.CONTROLS)
        for kind, c in m["controls"][d].items():
            assert set(c["on"]) == doms, (d, kind)
            lo, hi = c["on"][d]["ci"]
            assert lo <= c["on"][d]["score"] <= hi


def test_the_matrix_of_a_run_under_way_shows_the_controls_it_has(result):
    full = study.matrix_grid(result, SPEC)
    partial = copy.deepcopy(result)
    d = next(iter(partial["models"][SPEC]["domains"]))
    del partial["models"][SPEC]["controls"][d]["magnitude"]
    grid = study.matrix_grid(partial, SPEC)
    assert f"magnitude:{d}" in full.labels[0] and f"magnitude:{d}" not in grid.labels[0]
    assert grid.values.shape[0] == full.values.shape[0] - 1


def test_overlap_has_its_permutation_null_and_words_follow_the_rules(result):
    m = result["models"][SPEC]
    null = m["overlap"]["default"]["null"]
    assert null["permutations"] == result["budget"]["values"]["permutations"]
    assert 0 < null["p"] <= 1 and null["null_mean"] <= null["null_q95"] <= null["null_max"]
    assert null["observed"] == pytest.approx(m["overlap"]["default"]["within"] - m["overlap"]["default"]["across"])
    assert rejudge(result) == []
    for c in m["claims"].values():
        assert c["word"] in WORDS
    # 6 tasks in 3 domains give 90 deals, 6 of which rebuild the true grouping: p cannot go below 6/90,
    # so the overlap cannot be told from the null here, and the verdict says so
    assert null["distinct_deals"] == 90 and null["p"] > 0.05
    assert m["claims"]["1"]["word"] == "not distinguishable from control"


def test_a_second_run_reads_every_unit_back(result, units):
    again = study.repro(progress=False, budget="quick", units=units)
    assert again["provenance"]["units_run"] == 0
    assert again["budget"]["units_done"] == again["budget"]["units_total"] == result["budget"]["units_total"]
    assert comparable(again) == comparable(result)


def test_aggregating_without_units_says_not_run(tmp_path):
    empty = study.repro(progress=False, budget="quick", units=tmp_path, compute=False)
    by_set = study.repro(progress=False, budget="quick", units=tmp_path, overrides={"compute": False})
    assert by_set["models"] == empty["models"]  # the command line's `--set compute=false`
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]  # nothing computed, nothing stored
    m = empty["models"][SPEC]
    assert empty["budget"]["units_done"] == 0
    assert {c["word"] for c in m["claims"].values()} == {"not run"}
    assert bound.check("\n".join(f"<!-- gen:{k} -->\n{v}\n<!-- /gen:{k} -->" for k, v in regions(empty).items()),
                       empty) == []


def test_the_doc_regions_bind_every_number(result):
    md = "\n".join(f"<!-- gen:{k} -->\n{v}\n<!-- /gen:{k} -->" for k, v in regions(result).items())
    assert bound.check(md, result) == []
    keys = bound.keys_of(md)
    assert any(k.endswith("/null/p") for k in keys) and any("/controls/" in k for k in keys)
    for ptr in keys[::7]:  # a sample: tests/test_docs.py moves every key of the committed doc
        value = bound.get(result, ptr)
        if value == 0:
            continue
        changed = copy.deepcopy(result)
        bound.set_at(changed, ptr, value + 1 if isinstance(value, int) else value * 1.01)
        assert bound.check(md, changed), ptr
    grid = study.matrix_grid(result, SPEC)
    assert grid.shape == (1 + 3 * (1 + len(study.CONTROLS)), 3) and grid.labels[0][0] == "full"


def _grid(values: torch.Tensor, domains: list[str]) -> Grid:
    names = [f"t{i}" for i in range(len(domains))]
    return Grid(values.float(), ("task_a", "task_b"), {"task_a": names, "task_b": names}, {"domains": domains})


def test_overlap_null_tells_structure_from_chance():
    domains = [d for d in "abcd" for _ in range(3)]  # 12 tasks, 4 domains: 369,600 deals
    gen = torch.Generator().manual_seed(0)
    noise = torch.rand(12, 12, generator=gen) * 0.1
    noise = (noise + noise.T) / 2
    same = torch.tensor([[a == b for b in domains] for a in domains]).float()
    structured = overlap_null(_grid(0.4 + 0.3 * same + noise, domains), permutations=2000)
    assert structured["p"] < 0.01 and structured["observed"] > structured["null_q99"]
    chance = overlap_null(_grid(0.4 + noise, domains), permutations=2000)
    assert chance["p"] > 0.05  # no domain structure: the null covers what is observed
    assert within_minus_across(0.4 + 0.3 * same, domains) == pytest.approx(0.3)
    with pytest.raises(InterpError, match="permutations"):
        overlap_null(_grid(same, domains), permutations=0)


def test_format_matched_prompts_share_one_frame():
    from interp.tasks import domains

    frames = [t for d in domains._MATCHED.values() for (ts, _) in d.values() for t in ts]
    assert frames and all(re.fullmatch(r"Q: [^\n]*\?\nA: \{answer\}", t) for t in frames)
    assert {shots for d in domains._MATCHED.values() for (_, shots) in d.values()} == {1}
    assert "grammar" not in domains._MATCHED
    with pytest.raises(InterpError, match="no format-matched"):
        domains.task(None, "grammar", "sva_pp", fmt="matched")
    with pytest.raises(InterpError, match="not a prompt format"):
        domains.task(None, "facts", "capital", fmt="chat")


def test_matched_domains_have_three_tasks_so_the_permutation_test_can_reach_small_p():
    from interp.tasks import domains

    assert all(len(ts) == 3 for ts in domains.MATCHED_DOMAINS.values())
    assert dict(domains._items("arithmetic", "times")[:3][0][1]) == {"a": "0", "b": "0"}
    assert all(int(a) * int(b) == int(ans) <= 9 for _, s, ans in domains._items("arithmetic", "times")
               for a, b in [(s["a"], s["b"])])
    assert {ans for *_, ans in domains._items("facts", "continent")} == {"Europe", "Asia", "Africa", "America", "Oceania"}
    assert all(ans == s["a"] for _, s, ans in domains._items("code", "first_arg"))
    with pytest.raises(InterpError, match="unknown arithmetic task"):
        domains.task(None, "arithmetic", "times")  # a matched-format task only
    from interp.studies.specialization import _task_names
    assert len(_task_names("smollm2-135m", "matched")) == 9 and "arithmetic/times" not in _task_names("smollm2-135m", "default")

"""Controls that can fail, by rule, and every paper claim listed (interp.studies.verdicts, .claims)."""

import pytest

from interp.errors import InterpError
from interp.studies import claims
from interp.studies import verdicts as v


@pytest.mark.parametrize("why, kwargs", [
    ("the full model is a comparison, not a null", dict(null="full model")),
    ("random draws that all gave one value", dict(null="random units", draws=500, control_ci=(1.0, 1.0))),
    ("too few random draws", dict(null="random directions", draws=3, control_ci=(0.1, 0.4))),
    ("a random null with no interval at all", dict(null="random masks", draws=100)),
])
def test_a_planted_control_that_cannot_fail_earns_no_word(why, kwargs):
    # the effect is far from the control: without the rule each of these would read "reproduced"
    assert v.verdict(0.9, 0.5, effect_ci=(0.85, 0.95), **{k: x for k, x in kwargs.items() if k == "control_ci"}) == v.REPRODUCED
    assert v.verdict(0.9, 0.5, **kwargs) == v.NO_CONTROL, why


def test_a_random_null_with_enough_draws_and_spread_judges_as_before():
    assert v.verdict(0.9, 0.5, null="random units", draws=100, control_ci=(0.3, 0.7)) == v.REPRODUCED
    assert v.verdict(0.6, 0.5, null="random units", draws=100, control_ci=(0.3, 0.7)) == v.CONTROL
    assert v.verdict(0.9, 0.5, null="shuffled labels", draws=20, diff_ci=(0.1, 0.6)) == v.REPRODUCED
    assert v.verdict(0.9, 0.5, null="method", diff_ci=(0.1, 0.6)) == v.REPRODUCED  # a comparison the claim names


def test_nulls_are_named_from_a_fixed_list():
    with pytest.raises(InterpError, match="not a known control"):
        v.verdict(0.9, 0.5, null="some baseline")
    assert v.WORDS.index(v.NO_CONTROL) < v.WORDS.index(v.CONTROL)  # worse than a fair null's "not distinguishable"


def test_judge_stores_the_claim_and_the_null_and_rejudge_reads_them():
    d = v.judge("x beats random units", 0.9, 0.5, claim_id="hc.shared_core", null="random units", draws=4,
                control_ci=(0.4, 0.6))
    assert d["word"] == v.NO_CONTROL and d["claim_id"] == "hc.shared_core" and d["null"] == "random units"
    assert v.rejudge({"a": d}) == []
    assert v.rejudge({"a": {**d, "draws": 400}}) == ["/a: says 'no control', its numbers give 'reproduced'"]


def test_every_paper_claim_is_listed_once_with_a_study_or_what_it_needs():
    ids = [c.id for c in claims.CLAIMS]
    assert len(ids) == len(set(ids)) and {c.paper for c in claims.CLAIMS} == set(claims.PAPERS)
    assert all(c.needs for c in claims.CLAIMS if c.study is None)
    assert {e["id"] for e in claims.unassigned()} == {c.id for c in claims.CLAIMS if c.study is None}


def test_ledger_words_come_from_the_verdicts_that_name_each_claim():
    data = {"a": v.judge("spread", 0.9, 0.5, claim_id="hc.subnetworks_differ", null="random masks", draws=50,
                         control_ci=(0.3, 0.6)),
            "b": {"m1": v.judge("core", 0.9, 0.5, claim_id="hc.shared_core", null="random masks", draws=50, control_ci=(0.3, 0.6)),
                  "m2": v.judge("core", 0.5, 0.5, claim_id="hc.shared_core", null="random masks", draws=50, control_ci=(0.3, 0.6))}}
    got = {e["id"]: e for e in claims.ledger("heuristic-core", data)}
    assert got["hc.subnetworks_differ"]["word"] == v.REPRODUCED
    assert got["hc.shared_core"]["word"] == v.PARTLY and got["hc.shared_core"]["verdicts"] == ["/b/m1", "/b/m2"]
    assert got["hc.core_is_heuristic"]["word"] == v.NOT_RUN and got["hc.core_is_heuristic"]["needs"]
    assert set(got) == {c.id for c in claims.CLAIMS if c.study == "heuristic-core"}
    with pytest.raises(InterpError, match="no paper makes"):
        claims.ledger("heuristic-core", {"x": v.judge("?", 1.0, 0.0, claim_id="hc.nonsense")})
    assert sum(claims.counts(list(got.values())).values()) == len(got)


def test_every_judge_call_of_the_studies_names_its_null():
    """Each `judge(...)` in interp/studies names what its control is (`null=`, or a `**` dict that does)."""
    import ast
    from pathlib import Path

    import interp.studies

    missing = []
    root = Path(interp.studies.__file__).parent
    for path in sorted(root.rglob("*.py")):
        if path.relative_to(root).as_posix() in ("verdicts.py", "steering/real.py"):  # the rules themselves; real.py judges numbers
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            # judge(...) and extractive's judge_(...) (a prefixing wrapper); not english.judge (the grammar judge)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("judge", "judge_"):
                if not any(k.arg in ("null", None) for k in node.keywords):
                    missing.append(f"{path.relative_to(root)}:{node.lineno}")
    assert missing == [], f"judge calls that do not name their null: {missing}"


def test_the_heuristic_core_is_judged_against_random_units_not_the_full_model():
    """"The core alone does worse OOD" was judged against the full model (which random units of
    the core's size also fall short of); it is judged against random units of the core's per-layer sizes,
    and the full model stays beside it as description with no word."""
    import json
    from pathlib import Path

    from interp.studies.heuristic_core import reverdict

    data = json.loads((Path(__file__).resolve().parent.parent / "docs" / "heuristic_core_repro.json").read_text())
    out = reverdict(data)
    for spec, m in out["models"].items():
        s = m["sparsities"][f"{out['budget']['values']['sparsity']:g}"]
        ood = m["ood_split"]
        j = m["verdicts"]["core_ood"]
        assert j["null"] == "random units" and j["draws"] >= v.MIN_DRAWS
        assert j["control"] == s["core"]["size_matched_alone"][ood]["median"]
        full = m["verdicts"]["core_ood_vs_full_model"]
        assert "word" not in full and full["full_model"] == m["full"][ood]
        assert all(d.get("null") != "full model" for d in m["verdicts"].values())
    assert v.rejudge(out) == []
    assert {e["id"] for e in out["paper_claims"]} == {c.id for c in claims.CLAIMS if c.study == "heuristic-core"}


def test_numbers_far_apart_without_an_interval_are_not_told_apart():
    from interp.studies.verdicts import CONTROL, REPRODUCED, judge, verdict

    assert verdict(0.9, 0.1, tol=0.01, null="baseline") == CONTROL
    assert verdict(0.9, 0.1, effect_ci=[0.85, 0.95], null="baseline") == REPRODUCED
    j = judge("x", 0.9, 0.1, effect_ci=[0.85, 0.95], control_ci=[0.0, 0.2], paper=0.8, paper_control=0.3, null="baseline")
    assert j["interval_widths"] == {"effect": pytest.approx(0.1), "control": pytest.approx(0.2)}
    assert j["mde"] == pytest.approx(0.15) and j["paper_margin"] == pytest.approx(0.5)
    d = judge("x", 0.9, 0.1, "less", diff_ci=[0.7, 0.9], null="baseline")
    assert d["mde"] == pytest.approx(0.1) and d["word"] == "not reproduced" and "paper_margin" not in d
    assert judge("x", 0.9, 0.1, null="baseline")["mde"] is None

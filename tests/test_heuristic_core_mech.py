"""The heuristic core's mechanism claims: the importance percentile, the emergence verdict read before
the model generalizes, the core's reading of each head from EAP edges, the reading verdict against
random heads and against the non-generalizing masks (each planted both ways), the departures, and the
zoo trainer's checkpoint every k steps across both phases."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from interp.circuits import Graph
from interp.studies import heuristic_core
from interp.studies.heuristic_core.mech import GENERALIZED, departures, emergence, percentile_of, reading, reading_scores


@pytest.mark.parametrize("heads, expected", [
    ([(1, 1)], 1.0),               # the most important head
    ([(0, 0)], 0.0),               # the least important
    ([(0, 0), (1, 1)], 0.5),       # the mean of the two
    ([(0, 1), (1, 0)], 0.5),       # two tied heads share the middle ranks
])
def test_percentile_of(heads, expected):
    imp = torch.tensor([[0.0, 1.0], [1.0, 3.0]])
    assert percentile_of(imp, heads) == pytest.approx(expected)


def _unit(core_from: int, generalize_at: int, steps=(0, 100, 200, 300, 400), n_heads=16):
    """Checkpoints where head (1, 3) is the most important from step `core_from` and OOD accuracy
    jumps at `generalize_at`."""
    imp, hist = [], []
    for s in steps:
        t = torch.arange(2 * n_heads, dtype=torch.float32).flip(0).view(2, n_heads)  # (0, 0) the most important
        if s >= core_from:
            t[1, 3] = 100.0
        imp.append(t.tolist())
        hist.append({"step": s, "sva_id": 0.95, "sva_attractor_mismatch": 1.0 if s >= generalize_at else 0.1})
    return {"steps": list(steps), "importance": imp, "history": hist}


def test_emergence_is_judged_at_the_last_checkpoint_before_generalization():
    e = emergence(_unit(core_from=100, generalize_at=300), [(1, 3)], draws=2000, ood_split="sva_attractor_mismatch", id_split="sva_id")
    assert e["generalized_at"] == 300 and e["judged_at"] == 200 and e["core_first_above_random"] == 100
    assert e["verdict"]["word"] == "reproduced" and e["verdict"]["claim_id"] == "hc.core_emerges_early"
    late = emergence(_unit(core_from=300, generalize_at=300), [(1, 3)], draws=2000, ood_split="sva_attractor_mismatch", id_split="sva_id")
    assert late["verdict"]["word"] == "not distinguishable from control"  # the core appears only with generalization
    assert GENERALIZED == 0.9


@pytest.mark.parametrize("core, generalize_at", [([], 300), ([(1, 3)], 10**6), ([(1, 3)], 0)])
def test_emergence_without_a_core_or_a_checkpoint_before_generalizing_is_not_run(core, generalize_at):
    e = emergence(_unit(core_from=0, generalize_at=generalize_at), core, draws=50, ood_split="sva_attractor_mismatch",
                  id_split="sva_id")
    assert e["verdict"]["word"] == "not run"


def test_reading_scores_sum_core_edges_into_q_and_share_k_v_over_the_group():
    g = Graph(("a0.h0", "a0.h0", "a0.h0", "a0.h1", "embed"), ("a1.h1.q", "a1.g0.k", "a1.g0.v", "a1.h0.q", "a1.h0.q"),
              torch.tensor([-2.0, 1.0, 3.0, 5.0, 7.0]), {"n_layers": 2, "n_heads": 2, "n_kv_heads": 1})
    s = reading_scores(g, [(0, 0)])
    # head (1, 1): |q| 2 + half of |k| + |v| = 2 + 2; head (1, 0): half of k, v only (its q edge comes from a non-core sender)
    assert s.tolist() == [[0.0, 0.0], [2.0, 4.0]]


def _masks(gen_heads, non_heads):
    return [{"heads": [[0, 0], *gen_heads], "ood": 1.0}, {"heads": [[0, 0], *gen_heads], "ood": 0.99},
            {"heads": [[0, 0], *non_heads], "ood": 0.5}, {"heads": [[0, 0], *non_heads], "ood": 0.4}]


def test_reading_planted_both_ways():
    scores = torch.zeros(3, 4, dtype=torch.float64)
    scores[1, 0], scores[2, 0] = 1.0, 0.9  # only these two heads read the core head (0, 0)
    scores[1, 1:] = scores[2, 1:] = 0.01 * torch.arange(1, 4)
    good = reading(scores, [(0, 0)], _masks([[1, 0], [2, 0]], [[1, 1], [2, 1]]), draws=500)
    assert good["vs_random"]["word"] == "reproduced" and good["vs_not_generalizing"]["word"] == "reproduced"
    assert good["claim"] == {**good["claim"], "claim_id": "hc.generalization_adds_heads", "word": "reproduced"}
    swapped = reading(scores, [(0, 0)], _masks([[1, 1], [2, 1]], [[1, 0], [2, 0]]), draws=500)
    assert swapped["claim"]["word"] == "not reproduced"
    none = reading(scores, [], _masks([[1, 0]], [[1, 1]]), draws=500)
    assert none["claim"]["word"] == "not run" and none["vs_random"]["effect"] is None


@pytest.mark.parametrize("budget", ["quick", "paper"])
def test_departures_name_both_values(budget):
    rows = departures(dict(heuristic_core.BUDGETS[budget]))
    whats = [r["what"] for r in rows]
    assert {"models", "task and data", "mask batch size", "emergence", "reading the core"} <= set(whats)
    assert all(r["ours"] != r["paper"] and r["why"] for r in rows)
    assert ("mask steps (zoo)" in whats) == (heuristic_core.BUDGETS[budget]["steps"] != heuristic_core.PAPER_STEPS)


def test_train_keeps_a_checkpoint_every_k_steps_across_both_phases(tmp_path):
    from interp.zoo.train import RECIPES, train

    recipe = replace(RECIPES["lm-gpt2"], data={"sentences": 200}, eval_every=2)
    card = train(recipe, tmp_path / "m", steps=3, progress=False, evaluate_after=False)
    steps = [h["step"] for h in card["history"]]
    assert steps == [0, 2, 3, 5]  # phase 1: 0, 2 and its last (2); phase 2 counts on from 3
    saved = sorted(p.name for p in (tmp_path / "m" / "checkpoints").glob("step-*"))
    assert saved == ["step-00000", "step-00002", "step-00003", "step-00005"]
    assert json.loads((tmp_path / "m" / "checkpoints" / "step-00003" / "checkpoint.json").read_text())["step"] == 3


def test_extend_refuses_a_dirty_tree(monkeypatch):
    """The mechanism parts are added only from a clean checkout, so a commit reproduces them."""
    from interp.errors import InterpError
    from interp.studies import units
    from interp.studies.heuristic_core import extend

    monkeypatch.setattr(units, "commit", lambda: "abc+dirty")
    with pytest.raises(InterpError, match="clean checkout"):
        extend({"budget": {"name": "paper", "values": {}}, "models": {}, "provenance": {}})

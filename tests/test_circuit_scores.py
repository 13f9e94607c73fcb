"""Circuit scores as MIB reports them (interp.circuits.mib, interp.circuits.scores): the arithmetic
on planted curves, the identities of the whole model and the empty circuit, pruning, and the
ordering a score must have on the zoo's IOI (EAP above random circuits of the same sizes)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

import interp
from interp import circuits
from interp.circuits import Graph, circuit_scores, eap, edge_list, head_circuit_scores
from interp.circuits.circuit import prune
from interp.circuits.mib import MIB_FRACTIONS, areas, mib_sizes
from interp.errors import InterpError

META = {"n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "method": "eap"}


# ---- the arithmetic (no model) ----------------------------------------------------------------


def test_sizes_are_mibs_floor_of_each_fraction():
    assert mib_sizes(479) == [0, 0, 2, 4, 9, 23, 47, 95, 239, 479]
    assert mib_sizes(70651) == [70, 141, 353, 706, 1413, 3532, 7065, 14130, 35325, 70651]
    assert mib_sizes(16) == [0, 0, 0, 0, 0, 0, 1, 3, 8, 16]
    with pytest.raises(InterpError, match="total"):
        mib_sizes(-1)
    with pytest.raises(InterpError, match="fractions"):
        mib_sizes(10, (0.5, 0.1))


def test_areas_are_the_trapezoids_of_a_planted_curve():
    f = [0.0, 0.1, 0.3, 0.5, 0.6, 0.8, 1.2, 1.0, 0.9, 1.0]
    # by hand: sum over neighbours of (x2 - x1) * (f1 + f2) / 2, and of |1 - f|
    dx = [0.001, 0.003, 0.005, 0.01, 0.03, 0.05, 0.1, 0.3, 0.5]
    under = sum(d * (a + b) / 2 for d, a, b in zip(dx, f, f[1:]))
    from_1 = sum(d * (abs(1 - a) + abs(1 - b)) / 2 for d, a, b in zip(dx, f, f[1:]))
    cpr, cmd = areas(MIB_FRACTIONS, f)
    assert cpr == pytest.approx(under) and cmd == pytest.approx(from_1)
    assert cpr == pytest.approx(0.94915)  # the same sum written out once, by hand
    assert areas(MIB_FRACTIONS, [1.0] * 10) == pytest.approx((0.999, 0.0))  # x runs from 0.001, not 0
    assert areas(MIB_FRACTIONS, [0.0] * 10) == pytest.approx((0.0, 0.999))
    # a curve that overshoots 1 gains CPR but pays CMD: |1 - f| counts both sides
    assert areas(MIB_FRACTIONS, [2.0] * 10) == pytest.approx((1.998, 0.999))


def test_a_curve_that_stops_early_is_integrated_up_to_its_last_size():
    f = [0.0, 0.5, 1.0] + [float("nan")] * 7
    assert areas(MIB_FRACTIONS, f) == pytest.approx(areas(MIB_FRACTIONS[:3], f[:3]))
    assert all(math.isnan(x) for x in areas(MIB_FRACTIONS, [0.3] + [float("nan")] * 9))
    with pytest.raises(InterpError, match="fractions"):
        areas(MIB_FRACTIONS, [1.0] * 3)


def test_prune_keeps_exactly_the_edges_on_a_path_from_embed_to_logits():
    s, r = edge_list(2, 4, 2)
    g = Graph(s, r, torch.zeros(len(s)), dict(META))
    at = {e: i for i, e in enumerate(zip(s, r))}
    path = [at["embed", "a0.g0.v"], at["a0.h1", "m1"], at["m1", "logits"]]  # v of group 0 feeds heads 0 and 1
    dangling = [at["a0.h2", "m0"], at["m0", "a1.h3.q"], at["embed", "a1.h0.q"]]  # a0.h2 unfed; a1.h3, a1.h0 feed nothing
    kept = prune(g.select(path + dangling))
    assert set(zip(kept.senders, kept.receivers)) == {(s[i], r[i]) for i in path}
    assert len(prune(g)) == len(g)  # the whole graph: every sender reaches the logits directly
    assert len(prune(g.select([at["m0", "m1"]]))) == 0


# ---- on the zoo's IOI -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def llama_ioi():
    return interp.load("zoo:lm-llama"), interp.tasks.make("ioi", split="train", n=8)


@pytest.fixture(scope="module")
def scored(llama_ioi):
    model, task = llama_ioi
    g = eap(model, task, progress=False)
    return g, circuit_scores(model, task, {"eap": g}, random=2, progress=False)


def test_the_whole_model_has_f_1_and_the_empty_circuit_f_0(scored):
    g, grid = scored
    assert grid.axes == ("fraction", "series", "order") and grid.labels[1] == ("eap", "random")
    assert grid.labels[0] == MIB_FRACTIONS and grid.meta["sizes"][-1] == len(g) == grid.meta["total_edges"]
    assert torch.allclose(grid.values[-1], torch.ones(2, 2), atol=1e-4)  # 100 % of the edges: the clean run
    # under resample ablation the empty circuit is the corrupt run, and 0.1 % of 343 edges is no edge
    assert grid.meta["empty_metric"] == pytest.approx(grid.meta["corrupt_metric"], abs=1e-4)
    assert torch.allclose(grid.values[0], torch.zeros(2, 2), atol=1e-4)


def test_eap_circuits_score_above_random_circuits_of_the_same_sizes(scored):
    _, grid = scored
    cpr, cmd, rnd = grid.meta["cpr"], grid.meta["cmd"], grid.meta["random"]
    assert rnd["draws"] == 2 and len(rnd["cpr"]) == 2
    assert cpr["eap"] > max(rnd["cpr"]) + 0.3 and cmd["eap"] < min(rnd["cmd"]) - 0.3
    assert cpr["random"] == pytest.approx(sum(rnd["cpr"]) / 2)
    # the areas are those of the curves in the Grid: CPR of the signed order, CMD of the |score| order
    f = grid.values[:, 0]
    assert cpr["eap"] == pytest.approx(areas(MIB_FRACTIONS, f[:, 0].tolist())[0], abs=1e-5)
    assert cmd["eap"] == pytest.approx(areas(MIB_FRACTIONS, f[:, 1].tolist())[1], abs=1e-5)


def test_a_partial_ranking_is_scored_up_to_its_own_size(llama_ioi, scored):
    model, task = llama_ioi
    g, _ = scored
    grid = circuit_scores(model, task, {"top 40": g.top(40)}, random=0, progress=False)
    assert grid.labels[1] == ("top 40",) and grid.meta["upto"]["top 40"] == 0.1  # 34 of 343 edges; 20 % is 68
    assert math.isnan(float(grid.values[7, 0, 0])) and not math.isnan(float(grid.values[6, 0, 0]))


def test_faithfulness_curve_reports_mibs_areas_as_its_headline(llama_ioi, scored):
    model, task = llama_ioi
    g, grid = scored
    curve = circuits.faithfulness_curve(model, task, g, ablation="resample", order="top", targets=(), progress=False)
    assert curve.edges.tolist() == sorted({0, *mib_sizes(len(g))})
    at = dict(zip(curve.edges.tolist(), curve.metric.tolist()))
    f = [(at[n] - at[0]) / (curve.meta["clean_metric"] - at[0]) for n in mib_sizes(len(g))]
    assert curve.meta["area_from_1"] == pytest.approx(areas(MIB_FRACTIONS, f)[1], abs=1e-6)
    assert "area under f" in repr(curve) and "80%" not in repr(curve)
    # unpruned and pruned circuits may differ, but not by more than the pruned edges can move f
    assert curve.meta["area_from_1"] == pytest.approx(grid.meta["cmd"]["eap"], abs=0.1)


def test_head_rankings_learned_or_attributed_score_against_random_heads(llama_ioi, scored):
    model, task = llama_ioi
    g, _ = scored
    grid = head_circuit_scores(model, task, {"eap heads": g.heads().values}, random=2, progress=False)
    assert grid.axes == ("fraction", "series", "order") and grid.meta["total_heads"] == 16
    assert torch.allclose(grid.values[-1], torch.ones(2, 1), atol=1e-4)  # every head kept: the clean run
    assert grid.meta["cpr"]["eap heads"] > max(grid.meta["random"]["cpr"])
    with pytest.raises(InterpError, match="heads are"):
        head_circuit_scores(model, task, {"bad": torch.zeros(3, 3)}, progress=False)


def test_bad_input_and_the_grid_renders(llama_ioi, scored):
    model, task = llama_ioi
    g, grid = scored
    with pytest.raises(InterpError, match="at least one"):
        circuit_scores(model, task, {}, progress=False)
    with pytest.raises(InterpError, match="random"):
        circuit_scores(model, task, {"eap": g}, random=-1, progress=False)
    other = replace(g, meta={**g.meta, "n_layers": 5})
    with pytest.raises(InterpError, match="layers"):
        circuit_scores(model, task, {"eap": other}, progress=False)
    from interp.views import plot

    fig = plot.render(grid)
    assert len(fig.data) == 4  # two series, two panels (signed order, |score| order)

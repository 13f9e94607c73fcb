"""The cores study's controls can fail: planted cases where the control must match the
effect (any linear code of a Markov chain's state gives its spectrum) and where it must not (the
state hidden in a small subspace beside a large distractor); the operator's identity baseline;
k read on held-out rows; and the study as resumable units at the quick budget."""

from __future__ import annotations

import json

import pytest
import torch

import interp
from interp.cores import Core, controls, extract, validate
from interp.errors import InterpError
from interp.studies.cores import doc as ace_docs
from interp.studies.cores import real as ace_real
from interp.studies import cores as cores_study
from interp.studies.cores import zoo as cores_zoo
from interp.studies.verdicts import rejudge
from interp.tasks import english, markov

pytestmark = pytest.mark.filterwarnings("ignore:A forward hook edited hook_scale")


def _chain_rows(n: int = 256, length: int = 32):
    chain = markov.random_chain(4, seed=0)
    return chain, torch.tensor(markov.sample(chain, n, length, seed=3))


def test_a_random_plane_recovers_the_spectrum_of_any_linear_state_code():
    # activations that are a linear code of the current state (plus a little noise): every random
    # 3-plane is as good as the true code, so the control must match the effect
    chain, rows = _chain_rows()
    g = torch.Generator().manual_seed(0)
    emb = torch.randn(int(rows.max()) + 1, 64, generator=g)
    acts = emb[rows] + 0.01 * torch.randn(*rows.shape, 64, generator=g)
    true = chain.nonunit_eigenvalues
    out = controls.spectrum_controls(acts, rows, true, 3, start=1)
    near = [d for d in out["random"]["draws"] if d < 2 * out["state"]]
    assert out["random"]["n"] == 20 and len(near) >= 15  # nearly every random plane gets the spectrum
    assert out["state"] == pytest.approx(out["class_means"], abs=0.01)  # the state itself: the sampling floor
    assert not controls.beats_every_draw(out["class_means"], out["random"]["draws"], lower_is_better=True)


def test_a_state_code_beside_a_large_distractor_beats_random_planes():
    # the state lives in 3 dims; 61 others carry large noise that is independent across time, so a
    # random plane sees mostly noise and its operator no longer has the chain's eigenvalues
    chain, rows = _chain_rows()
    g = torch.Generator().manual_seed(1)
    states = torch.unique(rows[:, 1:])
    code = torch.randn(len(states), 3, generator=g)
    z = torch.zeros(*rows.shape, 3)
    for i, s in enumerate(states):
        z[rows == s] = code[i]
    acts = torch.cat([z, 20.0 * torch.randn(*rows.shape, 61, generator=g)], -1)
    true = chain.nonunit_eigenvalues
    planted = controls._time_error(z[:, 1:] - z[:, 1:].mean((0, 1)), true, 0)
    out = controls.spectrum_controls(acts, rows, true, 3, start=1)
    assert planted < 0.05 and out["random"]["min"] > 3 * planted
    assert controls.beats_every_draw(planted, out["random"]["draws"], lower_is_better=True)
    assert out["pca"] > 3 * planted  # PCA is fooled by the distractor too


def test_a_spread_needs_twenty_draws():
    with pytest.raises(InterpError, match="at least 20"):
        controls.beats_every_draw(0.1, [0.2, 0.3], lower_is_better=True)


def test_operator_identity_baseline_and_shuffled_fit(lm):
    fit, test = english.ioi(64, split="train", seed=1), english.ioi(64, split="train", seed=3)
    same = extract(lm, fit, site="blocks.2.hook_resid_post")
    out = controls.operator_baselines(lm, same, same, fit, test)
    assert out["identity_r2"] == pytest.approx(1.0, abs=1e-5)  # one site to itself: the identity is exact
    assert out["operator_r2_heldout"] == pytest.approx(1.0, abs=1e-4)
    assert out["shuffled_rows_r2"] < 0.2 and out["random_subspaces_r2"]["n"] == 20
    early = extract(lm, fit, site="blocks.0.hook_resid_pre", k=same.k)
    far = controls.operator_baselines(lm, early, same, fit, test)
    assert far["identity_r2"] < out["identity_r2"] - 0.2  # the embedding is not the layer-2 residual


def test_heldout_k_is_where_the_core_only_metric_stops_rising(lm):
    task = english.sva(128, split="sva_id", seed=4)
    core = extract(lm, english.sva(128, split="sva_id", seed=1), site="blocks.3.hook_resid_post", k=6)
    out = controls.heldout_k(lm, core, task)
    ld = out["core_only_logit_diff"]
    assert len(ld) == 6 and out["k"] is not None and ld[out["k"] - 1] >= 0.99 * max(ld)
    assert all(v < 0.99 * max(ld) for v in ld[: out["k"] - 1])


def test_core_verdict_counts_random_draws_that_match_the_core(lm):
    task = english.sva(96, split="sva_id", seed=1)
    core = extract(lm, task, site="blocks.3.hook_resid_post")
    v = ace_real.core_verdict(validate(lm, core, task, n_random=20, progress=False))
    only = v["logit_diff"]["core_only"]
    assert only["n_random"] == 20 and only["random_min"] <= only["random_mean"] <= only["random_max"]
    assert only["random_beats_core"] == 0 and v["sufficient"]
    # a core that is a random plane itself is matched by its own control in about half the draws
    blind = extract(lm, task, site="blocks.3.hook_resid_post", method="pca", k=1)
    rand = Core(torch.linalg.qr(torch.randn(blind.d_model, 1, generator=torch.Generator().manual_seed(5)))[0],
                            blind.mean, blind.spectrum, blind.site, "pca", {})
    v = ace_real.core_verdict(validate(lm, rand, task, n_random=20, progress=False))
    assert v["logit_diff"]["core_only"]["random_beats_core"] >= 3 and not v["sufficient"]


@pytest.fixture(scope="module")
def lm():
    return interp.load("zoo:lm-llama")


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    root = tmp_path_factory.mktemp("units")
    over = {"markov_rows": 32, "operator_rows": 16, "rows": 32}
    first = cores_study.repro(progress=False, budget="quick", overrides=over, units=root)
    again = cores_study.repro(progress=False, budget="quick", overrides=over, units=root)
    return first, again


def test_quick_study_is_one_json_of_units_with_controls(quick):
    r, again = quick
    assert r["provenance"]["units_run"] > 0 and again["provenance"]["units_run"] == 0  # the rerun reads every unit back
    drop = ("provenance",)
    assert {k: v for k, v in r.items() if k not in drop} == {k: v for k, v in again.items() if k not in drop}
    s = r["markov"]["seeds"]["markov-s0"]
    assert s["controls"]["random"]["n"] == 20 and r["markov"]["verdict"] == s["verdict"]["word"]
    assert s["verdict"]["word"] == ("reproduced" if s["random_planes_beaten"] else "forced")  # the random plane is a set-up control
    assert rejudge(r) == []  # every word follows from its numbers (interp.studies.verdicts)
    fam = r["sva"]["families"]["llama"]
    assert set(fam["layers"]) == {f"blocks.{i}.hook_resid_post" for i in range(4)}  # every layer read
    assert all(len(v["core"]["validation"]["core_only"]["binary_accuracy"]) == 5 for v in fam["layers"].values())
    ioi = r["ioi"]["families"]["llama"]
    assert {"identity_r2", "shuffled_rows_r2", "random_subspaces_r2"} <= set(ioi["baselines"])
    assert r["command"] == "interp repro cores --budget quick --set markov_rows=32 --set operator_rows=16 --set rows=32"
    json.dumps(r)  # one JSON
    md = ace_docs.repro_markdown(r)
    assert r["markov"]["verdict"] in md and r["sva"]["verdict"] in md


def test_bootstrap_interval_tells_a_better_prediction_apart_and_a_copy_not():
    g = torch.Generator().manual_seed(0)
    y = torch.randn(200, 3, generator=g)
    noisy = y + torch.randn(200, 3, generator=g)
    lo, hi = controls.bootstrap_r2_diff(y, noisy, y, n_boot=200)
    assert 0 < lo <= hi  # the exact prediction beats the noisy one on every resample
    assert controls.bootstrap_r2_diff(noisy, noisy, y, n_boot=50) == [0.0, 0.0]  # a map against itself: nothing to tell apart


class _Cfg:
    def __init__(self, n_layers):
        self.n_layers = n_layers


class _Model:
    def __init__(self, n_layers):
        self.cfg = _Cfg(n_layers)


@pytest.mark.parametrize("n_layers,count", [(30, 2), (18, 2), (18, 0), (4, 6), (2, 1)])
def test_real_model_layers_never_include_the_forced_last(n_layers, count):
    layers = ace_real.default_layers(_Model(n_layers), count)
    assert layers and max(layers) == n_layers - 2 and n_layers - 1 not in layers
    assert len(layers) == (min(count, n_layers - 1) if count else n_layers - 1)


def test_the_axis_layer_is_never_the_forced_last_even_where_the_last_is_best():
    def layer(flipped, removed):
        return {"axis": {"validation": {"core_flipped": {"binary_accuracy": {"core": flipped}},
                                        "core_removed": {"binary_accuracy": {"core": removed}}}}}

    layers = {"b0": layer(0.9, 0.9), "b1": layer(0.2, 0.5), "b2": layer(0.2, 0.4), "b3": layer(0.0, 0.0)}
    assert cores_zoo.unforced_layer(layers, "b3") == "b2"  # the last wins everywhere but is never read


@pytest.mark.parametrize("effect,word", [(0.9, "reproduced"), (0.5, "not distinguishable from control"), (0.1, "not reproduced")])
def test_alignment_and_transfer_words_follow_their_random_draws(effect, word):
    draws = [0.3 + 0.02 * i for i in range(20)]  # 0.3 .. 0.68
    pair = {"r2_heldout": effect, "random_directions_mean": sum(draws) / 20, "random_directions_min": min(draws),
            "random_directions_max": max(draws), "random_directions_n": 20}
    cores_zoo.alignment_judges({"a->b": pair})
    assert pair["judge"]["word"] == word and pair["judge"]["claim_id"] == "ace.sva_axis_aligns"
    t = {"r2_after_transfer": effect, "random_operators": controls.spread(draws), "control_mean": 0.5, "control_min": 0.3,
         "control_max": 0.68, "control_n": 20}
    cores_zoo.transfer_judges({"a->b": t})
    assert t["judges"]["random"]["word"] == word and t["judges"]["random"]["mde"] == pytest.approx(0.19)
    few = dict(pair, random_directions_n=5)  # too few draws: a control that cannot show its spread
    cores_zoo.alignment_judges({"a->b": few})
    assert few["judge"]["word"] == "no control"


def test_cores_as_far_apart_as_random_planes_are_forced_not_orthogonal():
    from interp.studies.verdicts import verdict

    rp = cores_study.random_plane_angles(64, 3, n=400, seed=1)
    judge = lambda angle: verdict(angle, rp["mean"][0], "greater", control_ci=[rp["p05"][0], rp["p95"][0]],  # noqa: E731
                                  null="random subspaces", draws=rp["pairs"], setup_control=True)
    assert judge(rp["mean"][0]) == "forced"  # near-orthogonal, as any two random 3-planes in 64 dimensions are
    assert judge(rp["p05"][0] / 2) == "not reproduced" and judge(1.56) == "reproduced"


@pytest.mark.parametrize("budget", sorted(cores_study.BUDGETS))
def test_every_budget_lists_its_departures_beside_the_paper(budget):
    rows = cores_study.departures(cores_study.BUDGETS[budget])
    assert rows and all(set(r) == {"what", "ours", "paper", "why"} for r in rows)
    assert any("GPT-2" in r["paper"] for r in rows)

"""Controls that can fail: plant a case where the effect a study looks for is absent (or present by
construction) and check that the study's own reading reports it so."""

from __future__ import annotations

import pytest
import torch

import interp
from interp import masking, simplify
from interp.masking import HeadMask
from interp.studies import heuristic_core, illusions
from interp.tasks import english


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _study_json(masks: list[HeadMask], sparsity: float) -> dict:
    """What `masking.Study.to_json` holds for these masks, as `summarize` reads it."""
    return {
        "core_baseline": {f"{sparsity:g}": masking.core_baseline(masks, draws=300)},
        "subnetworks": [{"sparsity": sparsity, "achieved_sparsity": m.sparsity, "accuracy": {"id": 1.0, "ood": 0.5}}
                        for m in masks],
        "core_accuracy": {},
    }


def test_random_masks_are_not_called_a_heuristic_core(gpt2):
    """Masks drawn at random with the kept-head counts of a learned-looking mask have some core by
    chance (few heads per layer, many masks); the study must not call it a heuristic core."""
    g = torch.Generator().manual_seed(0)
    shape = HeadMask.keeping(gpt2, [(0, 0), (0, 1), (0, 2), (1, 1), (1, 3)], mlps=[0])  # 3 of 4, 2 of 4 heads
    for trial in range(3):
        masks = [masking.random_like(shape, g) for _ in range(4)]
        out = heuristic_core.summarize(_study_json(masks, 0.5), "id", "ood")["0.5"]
        assert out["core_above_chance"] is False, (trial, out)


def test_a_planted_core_is_found_above_chance(gpt2):
    """Masks that all keep the same three heads (the rest random, same per-layer counts) have a
    core above chance: the control can pass, so its failure above means something."""
    g = torch.Generator().manual_seed(1)
    core = [(0, 0), (0, 1), (1, 3)]
    masks = []
    for _ in range(6):
        extra = [(0, int(torch.randint(2, 4, (1,), generator=g)))]  # one more head in layer 0, random
        masks.append(HeadMask.keeping(gpt2, core + extra, mlps=[0]))
    out = heuristic_core.summarize(_study_json(masks, 0.5), "id", "ood")["0.5"]
    assert out["core_above_chance"] is True and out["core_units"] >= 4
    assert out["core_p_value"] < 0.05 and out["chance_units_mean"] < out["core_units"]


def test_nearest_noun_control_scores_a_heuristic_model_as_the_heuristic():
    """A 'model' that agrees with the nearest noun reaches exactly the control's accuracy: ~0.9 in
    distribution and 0 on mismatch, so an ID score near the control says nothing about syntax."""
    splits = heuristic_core.sva_tasks(False, 8, 300)[1]
    ident, mismatch = (english.nearest_noun_agrees(t).float().mean().item() for t in splits.values())
    assert 0.85 < ident < 0.95 and mismatch == 0.0


@pytest.fixture(scope="module")
def dyck_model():
    return interp.load("zoo:dyck")


def test_an_exact_simplifier_shows_no_illusion(dyck_model):
    """Full-rank SVD without centring reproduces the head exactly: the study's records must show
    same-prediction 1, zero accuracy gaps and no significant ID-vs-OOD gap on any split."""
    head = (1, 0)
    fit = simplify.dyck_rows(40, split="train", seed=0)
    splits = {s: simplify.dyck_rows(40, split=s, seed=7) for s in illusions.DYCK_SPLITS}
    exact = simplify.svd(dyck_model, head, fit, rank=dyck_model.cfg.d_head, center=False)
    recs = illusions.records(simplify.faithfulness(dyck_model, exact, splits, reference="seen_struct", n_boot=200), "svd")
    for r in recs:
        assert r["same_prediction"] == pytest.approx(1.0) and r["delta"] == pytest.approx(0.0, abs=1e-6)
        assert r["delta_gap"] == pytest.approx(0.0, abs=1e-6)
        assert r["delta_gap_p"] is None or r["delta_gap_p"] > 0.05
    # and a crude one does differ in distribution already: the records can show an effect
    crude = illusions.records(simplify.faithfulness(dyck_model, simplify.svd(dyck_model, head, fit, rank=1), splits,
                                                    reference="seen_struct", n_boot=200), "svd")
    assert min(r["same_prediction"] for r in crude) < 0.95

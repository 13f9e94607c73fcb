"""The heuristic-core study as units: batched seeds equal lone seeds, a killed mask resumes, distinct
masks only in the chance test, the random-mask control, and the quick budget end to end."""

from __future__ import annotations

import pytest
import torch

from interp import masking, run
from interp.errors import InterpError
from interp.interventions import Mask
from interp.masking import HeadMask
from interp.masking import learn as learn_module
from interp.masking.controls import distinct, matched_random
from interp.studies import heuristic_core
from interp.files.storage import load_state
from interp.studies.units import comparable
from test_masking import one_thread, random_task  # noqa: F401  (one_thread: a module-wide autouse fixture)


@pytest.fixture(scope="module")
def task(gpt2):
    return random_task(gpt2, n=40)


# the package recipe moves the gates within a few steps, so equality is tested where it matters
FAST = dict(steps=25, batch_size=8, progress=False, mean_over="tokens")


def test_per_row_mask_equals_each_row_alone(gpt2, task):
    """A [batch, head] mask masks each row by its own row, as that row run alone with its mask."""
    refs = run.reference(gpt2, ["blocks.1.attn.hook_z", "blocks.0.hook_mlp_out"], "mean", task.clean)
    g = torch.Generator().manual_seed(0)
    heads = torch.rand(3, gpt2.cfg.n_heads, generator=g)
    mlp = torch.rand(3, generator=g)
    rows = task.clean[:3]
    both = [Mask("blocks.1.attn.hook_z", heads, refs["blocks.1.attn.hook_z"]), Mask("blocks.0.hook_mlp_out", mlp, refs["blocks.0.hook_mlp_out"])]
    batched = run.logits(gpt2, rows, both)
    for i in range(3):
        alone = run.logits(gpt2, rows[i : i + 1], [Mask("blocks.1.attn.hook_z", heads[i], refs["blocks.1.attn.hook_z"]),
                                                    Mask("blocks.0.hook_mlp_out", mlp[i], refs["blocks.0.hook_mlp_out"])])
        torch.testing.assert_close(batched[i : i + 1], alone, atol=1e-5, rtol=1e-5)
    with pytest.raises(InterpError, match="rows"):
        run.logits(gpt2, task.clean[:4], both)


def test_batched_seeds_equal_each_seed_alone(gpt2, task):
    """Seeds (and sparsities) learned side by side in one forward end where each ends alone."""
    seeds, sparsities = [0, 1, 5], [0.5, 0.5, 0.7]
    together = masking.learn_masks(gpt2, task, sparsity=sparsities, seeds=seeds, **FAST)
    for m, seed, sp in zip(together, seeds, sparsities):
        alone = masking.learn_mask(gpt2, task, sparsity=sp, seed=seed, **FAST)
        torch.testing.assert_close(torch.tensor(m.meta["log_alpha"]), torch.tensor(alone.meta["log_alpha"]), atol=2e-3, rtol=0)
        assert torch.equal(m.units(), alone.units()) and m.meta["seed"] == seed and m.meta["sparsity"] == sp
        assert abs(m.meta["final_kl"] - alone.meta["final_kl"]) < 1e-3
        assert m.meta["learned_with"] == 3 and alone.meta["learned_with"] == 1
    # the seeds' gates really moved apart: otherwise equality would say nothing
    assert together[0].meta["log_alpha"] != together[1].meta["log_alpha"]
    assert max(abs(x) for x in together[0].meta["log_alpha"]) < 9.5


def test_a_killed_run_resumes_from_its_checkpoint(gpt2, task, tmp_path, monkeypatch):
    ckpt = tmp_path / "group.safetensors"
    whole = masking.learn_masks(gpt2, task, sparsity=0.5, seeds=[0, 1], **FAST)
    calls = {"n": 0}
    real = learn_module.hard_concrete

    def dies(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] > 17:
            raise KeyboardInterrupt("killed")
        return real(*args, **kwargs)

    monkeypatch.setattr(learn_module, "hard_concrete", dies)
    with pytest.raises(KeyboardInterrupt):
        masking.learn_masks(gpt2, task, sparsity=0.5, seeds=[0, 1], checkpoint=ckpt, checkpoint_every=5, **FAST)
    monkeypatch.setattr(learn_module, "hard_concrete", real)
    assert ckpt.exists() and load_state(ckpt)["step"] == 15
    resumed = masking.learn_masks(gpt2, task, sparsity=0.5, seeds=[0, 1], checkpoint=ckpt, checkpoint_every=5, **FAST)
    for a, b in zip(whole, resumed):
        assert a.meta["log_alpha"] == b.meta["log_alpha"] and torch.equal(a.units(), b.units())
        assert [h["kl"] for h in a.meta["history"]] == [h["kl"] for h in b.meta["history"]]
    # a checkpoint of other options is ignored, not misread
    other = masking.learn_masks(gpt2, task, sparsity=0.3, seeds=[0, 1], checkpoint=ckpt, **FAST)
    assert other[0].meta["log_alpha"] != whole[0].meta["log_alpha"]


def test_learn_masks_rejects_bad_seeds_and_sparsities(gpt2, task):
    with pytest.raises(InterpError, match="sparsities for"):
        masking.learn_masks(gpt2, task, sparsity=[0.5, 0.5], seeds=[0, 1, 2], **FAST)
    with pytest.raises(InterpError, match="at least one seed"):
        masking.learn_masks(gpt2, task, sparsity=0.5, seeds=[], **FAST)
    with pytest.raises(InterpError, match="sparsity"):
        masking.learn_masks(gpt2, task, sparsity=[0.5, 1.2], seeds=[0, 1], **FAST)


def test_distinct_drops_and_counts_duplicates(gpt2):
    a = HeadMask.keeping(gpt2, [(0, 0), (1, 1)], [0])
    b = HeadMask.keeping(gpt2, [(0, 1), (1, 1)], [0])
    named = [HeadMask(m.heads, m.mlps, {"seed": s, "sparsity": 0.5}) for m, s in ((a, 0), (a, 1), (b, 2), (b, 3), (a, 4))]
    uniq, dropped = distinct(named)
    assert [m.meta["seed"] for m in uniq] == [0, 2]
    assert dropped == [{"name": "s=0.5 seed=1", "same_as": "s=0.5 seed=0"}, {"name": "s=0.5 seed=3", "same_as": "s=0.5 seed=2"},
                       {"name": "s=0.5 seed=4", "same_as": "s=0.5 seed=0"}]
    # counting duplicates as independent draws inflates the chance test: two distinct masks share less
    assert masking.core_baseline(uniq, draws=300)["masks"] == 2


def test_matched_random_keeps_only_masks_in_the_id_window(gpt2, task):
    learned = [HeadMask.keeping(gpt2, [(l, h) for l in range(gpt2.cfg.n_layers) for h in range(2)], list(range(gpt2.cfg.n_layers)))]
    splits = {"id": task, "ood": random_task(gpt2, n=40, seed=3)}
    out = matched_random(gpt2, learned, splits, draws=12, tolerance=0.05, reference=task.clean)
    lo, hi = out["id_window"]
    assert out["draws"] == 12 and out["random"]["id"]["n"] == 12 and 0 <= out["matched"] <= 12
    assert lo == pytest.approx(out["learned"]["id"]["min"] - 0.05) and hi == pytest.approx(out["learned"]["id"]["max"] + 0.05)
    wide = matched_random(gpt2, learned, splits, draws=12, tolerance=1.0, reference=task.clean)
    assert wide["matched"] == 12 and wide["matched_ood"]["n"] == 12  # every draw matches a window of width 2


def test_quick_budget_end_to_end_and_resumes(tmp_path):
    """The quick budget learns, stores and aggregates; a rerun learns nothing and says the same."""
    over = {"seeds": 2, "steps": 20, "rows": 32, "control_draws": 8, "baseline_draws": 50}
    first = heuristic_core.repro(progress=False, budget="quick", overrides=over, units=tmp_path)
    m = first["models"]["zoo:lm-gpt2"]
    assert first["budget"]["units_done"] == first["budget"]["units_total"] == 2
    assert first["provenance"]["units_run"] == 2
    s = m["sparsities"]["0.5"]
    assert s["done"] == 2 and s["distinct"] + len(s["duplicates"]) == 2
    assert set(s["core"]) >= {"units", "p_value", "chance_units_mean", "alone"} and s["random_control"]["draws"] == 8
    assert all(k in m["masks"][0] for k in ("achieved_sparsity", "within_tolerance", "accuracy"))
    assert m["seconds_per_seed_step"] > 0
    again = heuristic_core.repro(progress=False, budget="quick", overrides=over, units=tmp_path)
    assert again["provenance"]["units_run"] == 0
    assert comparable(again)["models"] == comparable(first)["models"]
    with pytest.raises(InterpError, match="budget key"):
        heuristic_core.repro(progress=False, budget="quick", overrides={"nonsense": 1}, units=tmp_path)


def test_timing_scales_a_real_model_by_its_forward_profile_and_the_zoo_by_its_host_step():
    from interp.studies.heuristic_core.cost import timing

    out = {"models": {"smollm2-135m": {"seconds_per_seed_step": 0.72}, "zoo:lm-gpt2": {"seconds_per_seed_step": 0.05}}}
    configs = [{"model": "smollm2-135m", "steps": 150}] * 4 + [{"model": "zoo:lm-gpt2", "steps": 9300}] * 8
    t = timing(out, configs, host_step=0.018, seeds_per_forward=4, profiles={"smollm2-135m": {"cpu_over_gpu": [40.0, 20.0]}})
    real, zoo = t["per_model"]["smollm2-135m"], t["per_model"]["zoo:lm-gpt2"]
    assert real["cpu_hours"] == 0.12 and real["gpu_hours_estimate"] == 0.006  # 600 x 0.72 s, then / 20 (the slower GPU end)
    assert zoo["gpu_hours_estimate"] == round(2 * 9300 * 0.018 / 3600, 2)  # two groups of four seeds, host-bound
    assert t["cpu_hours"] == round(0.12 + zoo["cpu_hours"], 2)

"""Every capability on every device present (`device`: the CPU always; cuda and mps where the
machine has them, or $INTERP_TEST_DEVICES; `make test-gpu`). Inputs are left on the CPU on
purpose (entry points move them), results come back on the CPU, each result's meta records its
peak memory, and on an accelerator every number equals the CPU's within float32 rounding."""

import pytest
import torch

import interp
from interp import circuits, masking, patching, run, simplify
from interp import steering as st
from interp.features import attribute, train_dictionaries
from interp.features.train import Recipe, fit

FAMILIES = ["lm-llama", "lm-gpt2"]


@pytest.fixture(scope="module")
def cpu_models():
    return {f: interp.load(f"zoo:{f}") for f in FAMILIES}


@pytest.fixture(scope="module")
def models(device, cpu_models):
    return cpu_models if device == "cpu" else {f: interp.load(f"zoo:{f}", device=device) for f in FAMILIES}


@pytest.fixture(scope="module")
def task():
    return interp.tasks.make("ioi", split="train", n=6)  # on the CPU, as a user makes it


def _same(a, b, rtol=1e-4):
    a, b = torch.as_tensor(a).float().cpu(), torch.as_tensor(b).float().cpu()
    assert a.shape == b.shape
    assert torch.allclose(a, b, rtol=rtol, atol=rtol * max(1.0, float(b.abs().max()))), float((a - b).abs().max())


def _check(device, family, models, cpu_models, call, values):
    """Runs `call(model)` on the device's model and the CPU's; `values(result)` -> tensor to compare."""
    ours = call(models[family])
    for r in ours.values() if isinstance(ours, dict) else ours if isinstance(ours, list) else [ours]:
        v = values(r)
        assert v.device.type == "cpu", "results come back on the CPU"
        if hasattr(r, "meta"):
            assert r.meta["peak_memory"]["bytes"] > 0 and r.meta["peak_memory"]["device"].startswith(device)
    if device != "cpu":
        ref = call(cpu_models[family])
        refs = list(ref.values()) if isinstance(ref, dict) else ref if isinstance(ref, list) else [ref]
        mine = list(ours.values()) if isinstance(ours, dict) else ours if isinstance(ours, list) else [ours]
        for a, b in zip(mine, refs):
            _same(values(a), values(b))
    return ours


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("how", ["z", "resid_pre by position", "attribution", "path"])
def test_patching(device, family, how, models, cpu_models, task):
    def call(model):
        if how == "z":
            return patching.activation_patch(model, task, site="z", progress=False)
        if how == "resid_pre by position":
            return patching.activation_patch(model, task, site="resid_pre", by_pos=True, positions="mean", progress=False)
        if how == "attribution":
            return patching.attribution_patch(model, task, site="z")
        return patching.path_patch(model, task, progress=False)

    _check(device, family, models, cpu_models, call, lambda g: g.values)


@pytest.mark.parametrize("family", FAMILIES)
def test_edges_and_circuits(device, family, models, cpu_models, task):
    graphs = _check(device, family, models, cpu_models, lambda m: [circuits.eap(m, task, progress=False),
                                                                   circuits.eap_ig(m, task, steps=2, progress=False)],
                    lambda g: g.scores)
    top = graphs[0].top(20)
    _check(device, family, models, cpu_models, lambda m: circuits.exact(m, task, top, progress=False), lambda g: g.scores)
    grid = circuits.circuit_scores(models[family], task, {"eap": graphs[0]}, random=0, progress=False)
    assert grid.values.device.type == "cpu" and torch.isfinite(grid.values).all()


def test_masks_and_subnetworks(device, models, cpu_models, task):
    recipe = dict(steps=4, batch_size=4)
    masks = _check(device, "lm-llama", models, cpu_models,
                   lambda m: masking.subnetworks(m, task, sparsity=0.5, seeds=[0, 1], progress=False, **recipe),
                   lambda h: h.heads)
    one = masking.learn_mask(models["lm-llama"], task, sparsity=0.5, seed=0, progress=False, **recipe)
    assert torch.equal(one.heads, masks[0].heads)  # alone or side by side, on this device
    grid = masking.evaluate(models["lm-llama"], masks, {"train": task})
    assert grid.values.device.type == "cpu" and torch.isfinite(grid.values).all()


@pytest.mark.parametrize("family", FAMILIES)
def test_steered_generation(device, family, models, cpu_models):
    model = models[family]
    axis = st.axis_from_contrast(model, ["the cat sat"], ["a dog ran"], site="resid_pre", layer=1)
    assert axis.direction.device.type == "cpu"
    _check(device, family, models, cpu_models,
           lambda m: st.generate(m, ["the keys to the", "a man"], st.Steer(axis, "add", 2.0), max_new_tokens=4),
           lambda g: g.tokens)


def test_one_hot_simplifier(device, models, cpu_models, task):
    def call(model):
        return run.logits(model, task.clean, [simplify.onehot(model, (1, 0))])[:, -1]

    ours = call(models["lm-llama"])
    if device != "cpu":
        _same(ours, call(cpu_models["lm-llama"]))


def test_dictionaries_and_attribution_graph(device, models, cpu_models, task, tmp_path):
    model = models["lm-llama"]
    site = "blocks.1.hook_resid_post"
    _, acts = run.cache(model, task.clean, [site])
    x = acts[site].flatten(0, 1)  # on the model's device
    recipe = Recipe(n_features=32, k=4, tokens=2048, seed=0)
    sae = fit(x, site_in=site, recipe=recipe)
    assert sae.W_enc.device.type == "cpu" and sae.meta["peak_memory"]["device"].startswith(device)
    assert torch.isfinite(sae(x.cpu())).all() and torch.isfinite(sae(x)).all()  # follows its input's device
    pairs = [(f"blocks.{l}.ln2.hook_normalized", f"blocks.{l}.hook_mlp_out") for l in range(model.cfg.n_layers)]
    tcs = train_dictionaries(model, pairs, task.clean, task.clean != 0, tmp_path / "tc", progress=False,
                recipe=Recipe(n_features=32, k=4, tokens=512, rows=4, seed=0, checkpoint_every=2))
    graph = attribute(model, "the keys to the cabinet", list(tcs.values()), progress=False, max_feature_nodes=20)
    assert graph.meta["peak_memory"]["bytes"] > 0 and torch.isfinite(graph.adjacency).all()

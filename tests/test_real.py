"""Integration tests on a real pretrained model: SmolLM2-135M-Instruct (LLaMA family, GQA: 9 query
heads over 3 KV heads, rotary), one test per capability at small n, each checking a property that
must hold on real weights: parity with plain TransformerLens / hand-written hooks, or a causal
effect measured on this model (thresholds carry a wide margin over the measured numbers, noted
beside each). The same capabilities on Gemma-3-270M run at the end, behind `-m real` (`make test-real`).
"""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from transformer_lens import patching as tlp
from transformer_lens.tools.analysis import attribution_patching as tl_attr

import interp
from interp import cores, masking, patching, run, simplify, steering
from interp.hooks import hooks
from interp.metrics import for_task
from interp.tasks import bpe



def _path_patch_by_hand(model, task, layer, head):
    """Path patching to the logits written with plain TL hooks: every hook_z and hook_mlp_out
    frozen at its clean value, except the sender head's output, taken from the corrupt run."""
    _, cc = model.run_with_cache(task.clean)
    _, kc = model.run_with_cache(task.corrupt)

    def frozen(name):
        return lambda act, *, hook: cc[name]

    def sender(act, *, hook):
        act = cc[hook.name].clone()
        act[:, :, head] = kc[hook.name][:, :, head]
        return act

    L = model.cfg.n_layers
    fwd = [(f"blocks.{l}.attn.hook_z", sender if l == layer else frozen(f"blocks.{l}.attn.hook_z")) for l in range(L)]
    fwd += [(f"blocks.{l}.hook_mlp_out", frozen(f"blocks.{l}.hook_mlp_out")) for l in range(L)]
    with torch.no_grad(), hooks(model, fwd):
        return float(for_task(task)(model(task.clean)))

@pytest.fixture(scope="module")
def ioi(smollm2):
    return bpe.ioi(smollm2, 2, split="abba")


@pytest.fixture(scope="module")
def sva(smollm2):
    """Two 6-token rows ("The bag by the customer"): the cheap task for whole-model sweeps."""
    return bpe.sva(smollm2, 2, split="pp_match", seed=1)


@pytest.fixture(scope="module")
def ioi_z(smollm2, ioi):
    """Head patching (site z, all positions) of the 2 IOI rows: 270 cells, shared by several tests."""
    return patching.activation_patch(smollm2, ioi, site="z", progress=False)


def _tl_cells(setter, name, model, task, cells, axes):
    """TransformerLens's own patching (generic_activation_patch), restricted to `cells` (index_df)."""
    _, clean_cache = model.run_with_cache(task.clean)
    df = pd.DataFrame(cells, columns=list(axes))
    out = tlp.generic_activation_patch(model, task.corrupt, clean_cache, for_task(task), setter, name, index_df=df)
    return out.detach().cpu().flatten()


def test_activation_patching_equals_transformer_lens(smollm2, ioi, sva, ioi_z):
    model = smollm2
    g = ioi_z
    assert g.axes == ("layer", "head") and g.shape == (30, 9)
    # the corruption matters (clean ~1.0, corrupt ~-2.2 on these rows) and some heads restore most of it
    gap = g.meta["clean_metric"] - g.meta["corrupt_metric"]
    assert gap > 1.0
    assert g.values.max() - g.meta["corrupt_metric"] > 0.3 * gap  # measured: 8.1 restores ~60 %
    top = [(c["layer"], c["head"]) for c, _ in g.top(3)]
    cells = top + [(0, 0), (15, 4), (29, 8)]
    theirs = _tl_cells(tlp.layer_head_vector_patch_setter, "z", model, ioi, cells, ("layer", "head"))
    ours = torch.stack([g.values[l, h] for l, h in cells])
    assert (ours - theirs).abs().max() <= 1e-3

    # keys and values live on the 3 KV heads: the grid's axis is kv_head
    for site in ("k", "v"):
        kv = patching.activation_patch(model, sva, site=site, progress=False)
        assert kv.axes == ("layer", "kv_head") and kv.shape == (30, 3)
        cells = [(0, 0), (2, 1), (5, 2), (14, 0), (29, 2)]
        theirs = _tl_cells(tlp.layer_head_vector_patch_setter, site, model, sva, cells, ("layer", "head"))
        assert (torch.stack([kv.values[l, h] for l, h in cells]) - theirs).abs().max() <= 1e-3, site
        assert kv.values.std() > 1e-3

    # residual stream by position, on two layers (every position)
    rp = patching.activation_patch(model, sva, site="resid_pre", by_pos=True, progress=False)
    assert rp.axes == ("layer", "pos") and rp.shape == (30, 6)
    cells = [(l, p) for l in (3, 20) for p in range(6)]
    theirs = _tl_cells(tlp.layer_pos_patch_setter, "resid_pre", model, sva, cells, ("layer", "pos"))
    assert (torch.stack([rp.values[l, p] for l, p in cells]) - theirs).abs().max() <= 1e-3
    # the noun (position 2) carries the number: patching it at layer 3 restores the clean metric
    assert rp.values[3, 2].item() == pytest.approx(rp.meta["clean_metric"], abs=0.3)


def test_attribution_equals_transformer_lens_and_tracks_exact(smollm2, ioi, ioi_z):
    ours = patching.attribution_patch(smollm2, ioi, site="z")
    heads = torch.zeros_like(ours.values)
    for row in range(len(ioi)):  # TL runs one row at a time; our task metric is the mean over rows
        c, i, p = int(ioi.correct[row]), int(ioi.incorrect[row]), int(ioi.answer_pos[row])
        theirs = tl_attr.attribution_patch(smollm2, ioi.clean[row:row + 1], ioi.corrupt[row:row + 1],
                                           lambda lg, c=c, i=i, p=p: (lg[:, p, c] - lg[:, p, i]).mean())
        for node, score in theirs.node_scores.items():  # TL scores each head per position
            if node.kind == "attn_head_out":
                heads[node.layer, node.head] += score / len(ioi)
    assert (heads - ours.values).abs().max() <= 1e-3
    assert ours.values.abs().max() > 0.05
    exact = (ioi_z.values - ioi_z.meta["corrupt_metric"]).flatten()
    r = torch.corrcoef(torch.stack([exact, ours.values.flatten()]))[0, 1].item()
    assert r > 0.3, r


def test_path_patching_to_logits_matches_hand_written(smollm2, ioi, ioi_z):
    model = smollm2
    senders = [(c["layer"], c["head"]) for c, _ in ioi_z.top(2)] + [(29, 1), (25, 4)]
    g = patching.path_patch(model, ioi, senders=senders, progress=False)
    assert torch.isfinite(torch.stack([g.values[l, h] for l, h in senders])).all()
    assert torch.isnan(g.values).sum() == 30 * 9 - len(senders)
    layer, head = 29, 1  # a late head: its direct path carries part of the answer
    want = _path_patch_by_hand(model, ioi, layer, head)
    assert g.values[layer, head].item() == pytest.approx(want, abs=1e-3)
    # a sender's corrupt output can only pull the metric away from clean, never past it by much
    assert (torch.stack([g.values[l, h] for l, h in senders]) <= g.meta["clean_metric"] + 0.5).all()


def test_ablation_scan_equals_one_at_a_time_and_learned_mask(smollm2, sva):
    model = smollm2
    metric = for_task(sva)
    g = masking.ablation_scan(model, sva, ablation="zero", progress=False)
    assert g.axes == ("layer", "unit") and g.shape == (30, 10)
    assert g.meta["baseline"] == pytest.approx(float(metric(run.logits(model, sva.clean))), abs=1e-4)
    assert (g.values - g.meta["baseline"]).abs().max() > 0.5  # some unit matters
    zero_head = lambda h: lambda act, *, hook: torch.cat([act[:, :, :h], torch.zeros_like(act[:, :, h:h + 1]), act[:, :, h + 1:]], 2)
    for layer, unit in [(0, 3), (4, 8), (17, 0), (29, 5), (0, 9), (12, 9)]:
        if unit < 9:
            fwd = [(f"blocks.{layer}.attn.hook_z", zero_head(unit))]
        else:  # the MLP
            fwd = [(f"blocks.{layer}.hook_mlp_out", lambda act, *, hook: torch.zeros_like(act))]
        with torch.no_grad(), hooks(model, fwd):
            want = float(metric(model(sva.clean)))
        assert g.values[layer, unit].item() == pytest.approx(want, abs=1e-3), (layer, unit)

    # a few steps of the hard-concrete mask reach a real sparsity and keep the behaviour
    train = bpe.sva(model, 8, split="pp_match", seed=2)
    mask = masking.learn_mask(model, train, sparsity=0.5, steps=20, batch_size=4, lr=1.0, warmup=0.3, progress=False)
    assert mask.heads.shape == (30, 9) and set(mask.heads.unique().tolist()) <= {0.0, 1.0}
    assert mask.meta["history"][-1]["step"] == 19 and mask.meta["history"][-1]["target"] == 0.5
    assert 0.2 <= mask.sparsity <= 0.6  # measured 0.39 (target 0.5, ramped over 6 of 20 steps)
    full = float(for_task(train)(run.logits(model, train.clean)))
    with masking.apply(model, mask, ablation="mean", reference=train.clean):
        masked = float(for_task(train)(run.logits(model, train.clean)))
    assert masked > 0.25 * full, (masked, full)  # the kept units still prefer the agreeing verb


def test_simplifiers_on_a_real_head(smollm2):
    model = smollm2
    fit = bpe.ioi(model, 8, split="abba", seed=2)
    head = (8, 1)
    full = simplify.svd(model, [head], fit, rank=model.cfg.d_head, center=False)  # full rank: identity
    cmp = simplify.compare_attention(model, full, fit.clean[0], head)
    assert cmp.patterns.shape[0] == 2
    assert (cmp.patterns[0] - cmp.patterns[1]).abs().max() < 1e-4
    hot = simplify.compare_attention(model, simplify.onehot(model, [head]), fit.clean[0], head)
    original, simplified = hot.patterns
    assert torch.equal(simplified.sum(-1), torch.ones(simplified.shape[0]))
    assert torch.equal(simplified.argmax(-1), original.argmax(-1))
    assert set(simplified.unique().tolist()) == {0.0, 1.0}


def test_core_extraction_is_necessary_and_sufficient(smollm2):
    task = bpe.sva(smollm2, 32, split="none", seed=3)  # "The ministers" -> " are"
    core = cores.extract(smollm2, task, site="resid_post", layer=10)
    assert core.basis.shape[0] == 576 and 1 <= core.basis.shape[1] <= 16
    g = cores.validate(smollm2, core, task, n_random=3, progress=False)
    df = g.to_dataframe()
    v = {(r.method, r.quantity): r.value for r in df[df.metric == "logit_diff"].itertuples()}
    full = v["full", "core"]
    assert full > 2.0  # measured 3.47
    # removing the core hurts far more than removing random subspaces (measured 1.83 vs 3.47 +- 0.002)
    assert v["core_removed", "core"] < v["core_removed", "random_mean"] - 1.0
    assert v["core_flipped", "core"] < 0  # flipping it flips the agreement (measured -1.04)
    assert v["core_only", "core"] > 0.7 * full  # keeping only it suffices (measured 3.53)
    assert abs(v["core_only", "random_mean"]) < 0.5 * full  # random subspaces do not (measured 0.02)


def test_steering_identity_at_zero_and_sva_flip(smollm2):
    model = smollm2
    fit = bpe.sva(model, 64, split="none", seed=0)
    is_id = model.to_single_token(" is")
    sg = [t for t, c in zip(fit.text, fit.correct.tolist()) if c == is_id]
    pl = [t for t, c in zip(fit.text, fit.correct.tolist()) if c != is_id]
    axis = steering.axis_from_contrast(model, sg, pl, site="resid_pre", layer=8)
    prompts = ["I am sure that the keys to the cabinet", "Everyone knows that the dog near the cars"]
    plain = steering.generate(model, prompts, (), max_new_tokens=4)
    zero = steering.generate(model, prompts, steering.Steer(axis, "flip", 0.0), max_new_tokens=4)
    assert torch.equal(plain.tokens, zero.tokens)
    flipped = steering.generate(model, prompts, steering.Steer(axis, "flip"), max_new_tokens=4)
    assert not torch.equal(plain.tokens, flipped.tokens)
    dev = bpe.sva(model, 16, split="pp_match", seed=7)
    g = steering.curve(model, dev, axis, [0, 1], mode="flip", progress=False)
    (ld0, acc0), (ld1, acc1) = g.values.tolist()
    assert ld0 > 1.0 and acc0 >= 0.9  # measured 1.78, 1.0
    assert ld1 < 0 and acc1 < 0.5  # measured -1.03, 0.19: the verb's preference flips


# --- Gemma-3-270M (Gemma family: 4 query heads over 1 KV head, rotary with q/k norms, sliding-window
# layers with a global layer every 6th), every capability again, behind `-m real` ---------------


@pytest.fixture(scope="module")
def gemma(real_cache):
    """Gemma-3-270M, loaded (and converted into the session cache) once for the module."""
    return interp.load("gemma3-270m")


@pytest.fixture(scope="module")
def gemma_ioi(gemma):
    return bpe.ioi(gemma, 2, split="abba")  # 16 tokens; clean 4.85, corrupt -1.95


@pytest.fixture(scope="module")
def gemma_sva(gemma):
    return bpe.sva(gemma, 2, split="pp_match", seed=1)  # 6 tokens; clean 4.24, corrupt -0.58


@pytest.fixture(scope="module")
def gemma_ioi_z(gemma, gemma_ioi):
    return patching.activation_patch(gemma, gemma_ioi, site="z", progress=False)


@pytest.mark.real
def test_gemma3_resume_and_head_patching(gemma, gemma_ioi, gemma_ioi_z):
    """Gemma-3-270M (4 query heads over 1 KV head): resume equals the full forward, and head
    patching equals hand-written hooks."""
    from interp.model.resuming import cached_keys_values, kv_cache_kwargs, new_kv_cache, resume

    model, task = gemma, gemma_ioi
    tokens = task.clean
    L = model.cfg.n_layers
    layer, start = L // 2, tokens.shape[1] // 2
    resid, cache = {}, new_kv_cache(model)
    keep = lambda act, *, hook: resid.__setitem__("r", act.clone())
    with torch.no_grad(), hooks(model, [(f"blocks.{layer}.hook_resid_pre", keep)]):
        full = model(tokens, **kv_cache_kwargs(model, cache))
    kv = cached_keys_values(cache)
    with torch.no_grad():
        out = resume(model, tokens, layer=layer, start=start, residual=resid["r"][:, start:],
                     keys_values=[(k[:, :, :start], v[:, :, :start]) for k, v in kv])
    assert (out - full[:, start:]).abs().max() < 1e-3

    g = gemma_ioi_z
    assert g.shape == (L, model.cfg.n_heads)
    metric = for_task(task)
    _, cc = model.run_with_cache(task.clean)
    for l, h in [(0, 1), (layer, 2), (L - 1, 0)]:
        def patch(act, *, hook, h=h):
            act = act.clone()
            act[:, :, h] = cc[hook.name][:, :, h]
            return act

        with torch.no_grad(), hooks(model, [(f"blocks.{l}.attn.hook_z", patch)]):
            want = float(metric(model(task.corrupt)))
        assert g.values[l, h].item() == pytest.approx(want, abs=1e-3), (l, h)
    # one head (measured 12.1: 4.12 of clean 4.85 from corrupt -1.95) restores most of the gap
    gap = g.meta["clean_metric"] - g.meta["corrupt_metric"]
    assert gap > 3.0 and g.values.max() - g.meta["corrupt_metric"] > 0.5 * gap


@pytest.mark.real
def test_gemma3_kv_patching_per_kv_head_equals_transformer_lens(gemma, gemma_sva):
    model, task = gemma, gemma_sva
    for site in ("k", "v"):
        kv = patching.activation_patch(model, task, site=site, progress=False)
        assert kv.axes == ("layer", "kv_head") and kv.shape == (18, 1)  # one KV head
        cells = [(0, 0), (5, 0), (13, 0), (16, 0), (17, 0)]
        theirs = _tl_cells(tlp.layer_head_vector_patch_setter, site, model, task, cells, ("layer", "head"))
        assert (torch.stack([kv.values[l, h] for l, h in cells]) - theirs).abs().max() <= 1e-3, site
        assert kv.values.std() > 1e-3
    # the values at layer 13 carry the number (measured: corrupt -0.58 -> 2.18 of clean 4.24)
    assert kv.values[13, 0] - kv.meta["corrupt_metric"] > 1.0


@pytest.mark.real
def test_gemma3_attribution_equals_transformer_lens_and_tracks_exact(gemma, gemma_ioi, gemma_ioi_z):
    ioi = gemma_ioi
    ours = patching.attribution_patch(gemma, ioi, site="z")
    assert ours.shape == (18, 4)
    heads = torch.zeros_like(ours.values)
    for row in range(len(ioi)):
        c, i, p = int(ioi.correct[row]), int(ioi.incorrect[row]), int(ioi.answer_pos[row])
        theirs = tl_attr.attribution_patch(gemma, ioi.clean[row:row + 1], ioi.corrupt[row:row + 1],
                                           lambda lg, c=c, i=i, p=p: (lg[:, p, c] - lg[:, p, i]).mean())
        for node, score in theirs.node_scores.items():
            if node.kind == "attn_head_out":
                heads[node.layer, node.head] += score / len(ioi)
    assert (heads - ours.values).abs().max() <= 1e-3  # measured 0.0
    assert ours.values.abs().max() > 0.5  # measured 5.1
    exact = (gemma_ioi_z.values - gemma_ioi_z.meta["corrupt_metric"]).flatten()
    r = torch.corrcoef(torch.stack([exact, ours.values.flatten()]))[0, 1].item()
    assert r > 0.6, r  # measured 0.94


@pytest.mark.real
def test_gemma3_path_patching_to_logits_matches_hand_written(gemma, gemma_ioi, gemma_ioi_z):
    model, ioi = gemma, gemma_ioi
    senders = [(c["layer"], c["head"]) for c, _ in gemma_ioi_z.top(2)]  # measured (12, 1), (11, 2)
    g = patching.path_patch(model, ioi, senders=senders, progress=False)
    L = model.cfg.n_layers
    assert torch.isfinite(torch.stack([g.values[l, h] for l, h in senders])).all()
    assert torch.isnan(g.values).sum() == L * 4 - len(senders)
    layer, head = senders[0]
    want = _path_patch_by_hand(model, ioi, layer, head)
    assert g.values[layer, head].item() == pytest.approx(want, abs=1e-3)
    # the top head's direct path carries most of the answer (measured: clean 4.85 -> 0.47)
    assert g.meta["clean_metric"] - g.values[layer, head] > 2.0
    assert (torch.stack([g.values[l, h] for l, h in senders]) <= g.meta["clean_metric"] + 0.5).all()


@pytest.mark.real
def test_gemma3_ablation_scan_equals_one_at_a_time_and_learned_mask(gemma, gemma_sva):
    model, sva = gemma, gemma_sva
    metric = for_task(sva)
    g = masking.ablation_scan(model, sva, ablation="zero", progress=False)
    assert g.axes == ("layer", "unit") and g.shape == (18, 5)  # 4 heads + the MLP
    assert g.meta["baseline"] == pytest.approx(float(metric(run.logits(model, sva.clean))), abs=1e-4)
    assert (g.values - g.meta["baseline"]).abs().max() > 0.5  # measured 2.2
    zero_head = lambda h: lambda act, *, hook: torch.cat([act[:, :, :h], torch.zeros_like(act[:, :, h:h + 1]), act[:, :, h + 1:]], 2)
    for layer in (5, 13):  # a global and a sliding-window layer, every unit
        for unit in range(5):
            if unit < 4:
                fwd = [(f"blocks.{layer}.attn.hook_z", zero_head(unit))]
            else:
                fwd = [(f"blocks.{layer}.hook_mlp_out", lambda act, *, hook: torch.zeros_like(act))]
            with torch.no_grad(), hooks(model, fwd):
                want = float(metric(model(sva.clean)))
            assert g.values[layer, unit].item() == pytest.approx(want, abs=1e-3), (layer, unit)

    train = bpe.sva(model, 8, split="pp_match", seed=2)
    mask = masking.learn_mask(model, train, sparsity=0.5, steps=20, batch_size=4, lr=1.0, warmup=0.3, progress=False)
    assert mask.heads.shape == (18, 4) and set(mask.heads.unique().tolist()) <= {0.0, 1.0}
    assert mask.meta["history"][-1]["step"] == 19 and mask.meta["history"][-1]["target"] == 0.5
    assert 0.15 <= mask.sparsity <= 0.65  # measured 0.36
    full = float(for_task(train)(run.logits(model, train.clean)))
    with masking.apply(model, mask, ablation="mean", reference=train.clean):
        masked = float(for_task(train)(run.logits(model, train.clean)))
    assert masked > 0.25 * full, (masked, full)  # measured 4.17 of 4.50


@pytest.mark.real
def test_gemma3_simplifiers_on_a_real_head(gemma):
    model = gemma
    fit = bpe.ioi(model, 8, split="abba", seed=2)
    _, cache = model.run_with_cache(fit.clean[:1])
    for head in [(8, 1), (11, 2)]:  # a sliding-window and a global layer (q/k norms, rotary)
        full = simplify.svd(model, [head], fit, rank=model.cfg.d_head, center=False)
        cmp = simplify.compare_attention(model, full, fit.clean[0], head)
        original = cache[f"blocks.{head[0]}.attn.hook_pattern"][0, head[1]]
        assert (cmp.patterns[0] - original).abs().max() < 1e-4  # the comparison's original is the model's
        assert (cmp.patterns[0] - cmp.patterns[1]).abs().max() < 1e-4  # measured 7e-7
        low = simplify.compare_attention(model, simplify.svd(model, [head], fit, rank=4, center=False),
                                         fit.clean[0], head)
        assert (low.patterns[0] - low.patterns[1]).abs().max() > 0.05  # measured 0.35 / 0.72: not a no-op
        hot = simplify.compare_attention(model, simplify.onehot(model, [head]), fit.clean[0], head)
        original, simplified = hot.patterns
        assert torch.equal(simplified.sum(-1), torch.ones(simplified.shape[0]))
        assert torch.equal(simplified.argmax(-1), original.argmax(-1))
        assert set(simplified.unique().tolist()) == {0.0, 1.0}


@pytest.mark.real
def test_gemma3_core_extraction_is_necessary_and_sufficient(gemma):
    task = bpe.sva(gemma, 32, split="none", seed=3)
    core = cores.extract(gemma, task, site="resid_post", layer=9)
    assert core.basis.shape[0] == 640 and 1 <= core.basis.shape[1] <= 16  # measured k = 1
    g = cores.validate(gemma, core, task, n_random=3, progress=False)
    df = g.to_dataframe()
    v = {(r.method, r.quantity): r.value for r in df[df.metric == "logit_diff"].itertuples()}
    full = v["full", "core"]
    assert full > 3.0  # measured 6.36
    assert v["core_removed", "core"] < v["core_removed", "random_mean"] - 2.0  # measured 0.49 vs 6.34
    assert v["core_flipped", "core"] < -1.0  # measured -4.95
    assert v["core_only", "core"] > 0.7 * full  # measured 5.85
    assert abs(v["core_only", "random_mean"]) < 0.2 * full  # measured 0.02


@pytest.mark.real
def test_gemma3_steering_identity_at_zero_and_sva_flip(gemma):
    model = gemma
    fit = bpe.sva(model, 64, split="none", seed=0)
    is_id = model.to_single_token(" is")
    sg = [t for t, c in zip(fit.text, fit.correct.tolist()) if c == is_id]
    pl = [t for t, c in zip(fit.text, fit.correct.tolist()) if c != is_id]
    axis = steering.axis_from_contrast(model, sg, pl, site="resid_pre", layer=9)  # at layer 6 it does not flip
    prompts = ["I am sure that the keys to the cabinet", "Everyone knows that the dog near the cars"]
    plain = steering.generate(model, prompts, (), max_new_tokens=4)
    zero = steering.generate(model, prompts, steering.Steer(axis, "flip", 0.0), max_new_tokens=4)
    assert torch.equal(plain.tokens, zero.tokens)
    flipped = steering.generate(model, prompts, steering.Steer(axis, "flip"), max_new_tokens=4)
    assert not torch.equal(plain.tokens, flipped.tokens)  # measured: "the dog ... is" -> "at"
    dev = bpe.sva(model, 16, split="pp_match", seed=7)
    g = steering.curve(model, dev, axis, [0, 1], mode="flip", progress=False)
    (ld0, acc0), (ld1, acc1) = g.values.tolist()
    assert ld0 > 2.0 and acc0 >= 0.9  # measured 4.00, 1.0
    assert ld1 < 0 and acc1 < 0.5  # measured -1.85, 0.31: the verb's preference flips

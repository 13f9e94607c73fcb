"""interp.masking: invariants of masks and ablations, learned masks, a planted subnetwork."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

import interp
from interp import masking, results, run
from interp.errors import InterpError
from interp.masking import HeadMask
from interp.masking import mask as mask_ops, subnets
from interp.model.building import hf_config, hf_model_class, save_model_dir
from interp.tasks.base import BOS_ID, Task, word_tokenizer
from interp.model.building import DEFAULT_WORDS


def random_task(model, n: int = 48, length: int = 6, seed: int = 0) -> Task:
    """Random word rows over the tiny vocabulary; the answer is read at the last position."""
    g = torch.Generator().manual_seed(seed)
    vocab = model.cfg.d_vocab
    clean = torch.randint(5, vocab, (n, length), generator=g)
    clean[:, 0] = BOS_ID
    corrupt = clean.clone()
    corrupt[:, 1:] = torch.randint(5, vocab, (n, length - 1), generator=g)
    correct = torch.randint(5, vocab, (n,), generator=g)
    incorrect = (correct - 5 + 1) % (vocab - 5) + 5
    return Task("random", "test", clean, corrupt, correct, incorrect, torch.full((n,), length - 1),
                tuple(str(i) for i in range(n)), metric="logit_diff")


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Small models run several times faster on one thread, above all on a shared CPU."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def task(gpt2):
    return random_task(gpt2)


# ---------------------------------------------------------------------------- invariants of apply


@pytest.mark.parametrize("family", ["gpt2", "llama", "gemma2", "qwen2", "bert"])
@pytest.mark.parametrize("ablation", ["mean", "zero", "resample"])
def test_all_ones_mask_changes_nothing_exactly(tiny_models, family, ablation):
    model = tiny_models[family]
    task = random_task(model, n=8)
    ref = {"mean": task.clean, "zero": None, "resample": task.corrupt}[ablation]
    with torch.no_grad():
        base = model(task.clean)
        with masking.apply(model, HeadMask.full(model), ablation=ablation, reference=ref):
            masked = model(task.clean)
    assert torch.equal(base, masked)


def test_all_zeros_mask_is_mean_ablation(gpt2, task):
    """Every head and MLP replaced by its per-position mean, written as plain TL hooks."""
    L = gpt2.cfg.n_layers
    sites = [f"blocks.{l}.attn.hook_z" for l in range(L)] + [f"blocks.{l}.hook_mlp_out" for l in range(L)]
    with torch.no_grad():
        _, cache = gpt2.run_with_cache(task.clean, names_filter=lambda n: n in sites)
        means = {s: cache[s].mean(0) for s in sites}  # no padding in these rows
        expected = gpt2.run_with_hooks(task.clean, fwd_hooks=[(s, lambda a, hook: means[hook.name].expand_as(a).contiguous()) for s in sites])
        with masking.apply(gpt2, HeadMask.full(gpt2, 0.0), ablation="mean", reference=task.clean):
            got = gpt2(task.clean)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def zero_head(h):
    """A plain TransformerLens hook zeroing head `h` of a [batch, pos, head, d_head] activation."""
    return lambda act, hook: torch.cat([act[:, :, :h], torch.zeros_like(act[:, :, h : h + 1]), act[:, :, h + 1 :]], 2)


def test_zero_mask_on_one_head_matches_hooks_ablate(gpt2, task):
    mask = HeadMask.full(gpt2, mlps=False).heads.clone()
    mask[1, 2] = 0.0
    with torch.no_grad():
        expected = gpt2.run_with_hooks(task.clean, fwd_hooks=[("blocks.1.attn.hook_z", zero_head(2))])
        with masking.apply(gpt2, HeadMask(mask), ablation="zero"):
            got = gpt2(task.clean)
    torch.testing.assert_close(got, expected)


def test_fractional_mask_interpolates(gpt2, task):
    act, ref = torch.randn(2, 3, 4, 5), torch.randn(3, 4, 5)
    m = torch.tensor([0.0, 0.25, 1.0, 0.5])
    mask = HeadMask(torch.stack([torch.ones(4), m]))
    refs = {s: interp.interventions.Reference("mean", ref, ref.mean(0)) for s in mask_ops.sites(mask)}
    ivs = mask_ops.interventions(mask, refs)
    assert [iv.sites for iv in ivs] == [("blocks.1.attn.hook_z",)]  # the all-ones layer 0 is left alone
    out = ivs[0](act, site="blocks.1.attn.hook_z")
    torch.testing.assert_close(out, (act - ref) * m[:, None] + ref)
    assert torch.equal(out[:, :, 2], act[:, :, 2])


def test_hooks_removed_after_error(gpt2, task):
    with pytest.raises(RuntimeError, match="boom"):
        with masking.apply(gpt2, HeadMask.full(gpt2, 0.0), ablation="zero"):
            raise RuntimeError("boom")
    assert not any(h.fwd_hooks for h in gpt2.hook_dict.values() if hasattr(h, "fwd_hooks"))
    with torch.no_grad():
        torch.testing.assert_close(gpt2(task.clean), gpt2(task.clean))


def test_ablation_scan_matches_plain_hooks(gpt2, task):
    grid = masking.ablation_scan(gpt2, task, ablation="zero")
    assert grid.axes == ("layer", "unit") and grid.shape == (2, 5)
    metric = interp.metrics.for_task(task)
    with torch.no_grad():
        want = float(metric(gpt2.run_with_hooks(task.clean, fwd_hooks=[("blocks.1.attn.hook_z", zero_head(3))])))
        mlp = float(metric(gpt2.run_with_hooks(task.clean, fwd_hooks=[("blocks.0.hook_mlp_out", lambda a, hook: torch.zeros_like(a))])))
    assert grid.values[1, 3].item() == pytest.approx(want, abs=1e-5)
    assert grid.values[0, 4].item() == pytest.approx(mlp, abs=1e-5)


@pytest.mark.parametrize("family", ["gpt2", "llama", "bert"])
@pytest.mark.parametrize("ablation", ["mean", "resample"])
def test_batched_ablation_scan_equals_one_at_a_time(tiny_models, family, ablation):
    """Every single-unit ablation batched through run.evaluate equals its own run under run.intervened."""
    model = tiny_models[family]
    task = random_task(model, n=8)
    grid = masking.ablation_scan(model, task, ablation=ablation, variants_per_forward=3, progress=False)
    ref = task.clean if ablation == "mean" else task.corrupt
    L, H = model.cfg.n_layers, model.cfg.n_heads
    full = HeadMask.full(model)
    refs = run.reference(model, mask_ops.sites(full), ablation, ref)
    metric = interp.metrics.for_task(task)
    assert grid.meta["baseline"] == pytest.approx(float(metric(run.logits(model, task.clean))), abs=1e-5)
    for layer in range(L):
        for unit in range(H + 1):
            heads, mlps = full.heads.clone(), full.mlps.clone()
            if unit < H:
                heads[layer, unit] = 0.0
            else:
                mlps[layer] = 0.0
            with torch.no_grad(), run.intervened(model, mask_ops.interventions(HeadMask(heads, mlps), refs)):
                want = float(metric(model(task.clean)))
            assert grid.values[layer, unit].item() == pytest.approx(want, abs=1e-4), (layer, unit)


def test_masks_leave_the_model_unchanged(gpt2, task):
    before = {k: v.clone() for k, v in gpt2.state_dict().items()}
    grads = {n: p.requires_grad for n, p in gpt2.named_parameters()}
    masking.learn_mask(gpt2, task, sparsity=0.5, steps=2, batch_size=8, progress=False)
    masking.ablation_scan(gpt2, task, progress=False)
    after = gpt2.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert grads == {n: p.requires_grad for n, p in gpt2.named_parameters()}
    assert not any(h.fwd_hooks for h in gpt2.hook_dict.values() if hasattr(h, "fwd_hooks"))


# ---------------------------------------------------------------------------- the mask as data


def test_headmask_save_load_and_grid(tmp_path, gpt2):
    mask = HeadMask.keeping(gpt2, [(0, 1), (1, 3)], mlps=[1])
    mask = replace(mask, meta={"seed": 3, "sparsity": 0.7, "log_alpha": [1.5, -2.0], "history": [{"step": 0, "kl": 0.1}]})
    for back in (HeadMask.load(mask.save(tmp_path / "m.safetensors")), results.load(results.save(mask, tmp_path / "r.safetensors"))):
        assert isinstance(back, HeadMask)
        assert torch.equal(back.heads, mask.heads) and torch.equal(back.mlps, mask.mlps) and back.meta == mask.meta
        assert back.kept_heads() == [(0, 1), (1, 3)] and back.kept_mlps() == [1]
    no_mlps = HeadMask.keeping(gpt2, [(0, 0)])
    assert results.load(results.save(no_mlps, tmp_path / "n.safetensors")).mlps is None
    grid = mask.to_grid()
    assert grid.axes == ("layer", "unit") and grid.labels[1][-1] == "mlp" and grid.shape == (2, 5)
    assert grid.meta["chart"] == "heatmap"
    assert mask.sparsity == pytest.approx(7 / 10)
    with pytest.raises(InterpError, match="not a HeadMask"):
        HeadMask.load(results.save(grid, tmp_path / "g.safetensors"))


def test_headmask_rejects_bad_values():
    with pytest.raises(InterpError, match=r"\[0, 1\]"):
        HeadMask(torch.full((2, 4), 1.5))
    with pytest.raises(Exception, match="mlps"):  # jaxtyping catches it first under the test checker
        HeadMask(torch.ones(2, 4), torch.ones(3))


def test_core_and_overlap(gpt2):
    a = HeadMask.keeping(gpt2, [(0, 1), (1, 3)], mlps=[0])
    b = HeadMask.keeping(gpt2, [(0, 1), (1, 2)], mlps=[0, 1])
    assert torch.equal(masking.heuristic_core([a, a, a]).heads, a.heads)
    assert torch.equal(masking.heuristic_core([a]).mlps, a.mlps)
    core = masking.heuristic_core([a, b])
    assert core.kept_heads() == [(0, 1)] and core.kept_mlps() == [0]
    grid = subnets.overlap([a, b])
    assert grid.axes == ("model", "other")
    assert grid.values[0, 0] == 1.0 and grid.values[0, 1].item() == pytest.approx(2 / 5)
    with pytest.raises(InterpError, match="at least one"):
        masking.heuristic_core([])


def test_mean_over_tokens_is_one_mean_per_head_everywhere(gpt2, task):
    """mean_over="tokens" (the official Heuristic-Core reference): each head's mean over every
    token of the reference rows, hand-computed from the cache, at every position."""
    names = mask_ops.sites(HeadMask.full(gpt2))
    refs = mask_ops.references(gpt2, names, "mean", task.clean, "tokens")
    _, acts = run.cache(gpt2, task.clean, names)
    for n in names:
        want = acts[n].flatten(0, 1).mean(0)  # [head, d_head] or [d_model]: no padding in random rows
        got = refs[n].like(acts[n][:, :3], start=2)  # any window, even past the reference width
        assert torch.allclose(got, want.expand_as(got), atol=1e-5)
    per_pos = mask_ops.references(gpt2, names, "mean", task.clean, "position")[names[0]]
    assert not torch.allclose(per_pos.values[0], per_pos.values[1])  # the default differs per position
    whole = HeadMask.full(gpt2, 0.0)
    with torch.no_grad(), masking.apply(gpt2, whole, reference=task.clean, mean_over="tokens"):
        out = gpt2(task.clean)
    assert torch.allclose(out[:, 0], out[:, 0][:1].expand_as(out[:, 0]), atol=1e-4)  # the input no longer matters
    with pytest.raises(Exception, match="mean_over"):  # InterpError; under the tests' type checks, theirs first
        mask_ops.references(gpt2, names, "mean", task.clean, "rows")


# ---------------------------------------------------------------------------- learned masks


def test_learn_mask_reaches_target_sparsity(gpt2, task):
    mask = masking.learn_mask(gpt2, task, sparsity=0.5, seed=0, steps=100, batch_size=16)
    zeros = int((mask.units() == 0).sum())
    assert abs(zeros - 0.5 * mask.n_units) <= 1
    assert set(mask.units().unique().tolist()) <= {0.0, 1.0}
    assert mask.meta["seed"] == 0 and len(mask.meta["log_alpha"]) == mask.n_units


def test_learn_mask_official_options(gpt2, task):
    """The official recipe's options run, record themselves, and push the sampled gates' sparsity
    to the target (their Lagrangian's quantity); bad option names raise."""
    opts = dict(mean_over="tokens", sparsity_from="sampled", optimizer="adamw", lr=0.1, reg_lr=1.0, warmup=0.5,
                weight_decay=1.0)
    mask = masking.learn_mask(gpt2, task, sparsity=0.5, seed=0, steps=120, batch_size=16, progress=False, **opts)
    assert {k: mask.meta[k] for k in ("mean_over", "sparsity_from", "optimizer")} == {
        "mean_over": "tokens", "sparsity_from": "sampled", "optimizer": "adamw"}
    late = [h["sampled_sparsity"] for h in mask.meta["history"] if h["step"] >= 90]
    assert sum(late) / len(late) > 0.3  # the gates left their saturated start
    assert 0 < mask.sparsity <= 0.5 + 1e-6 and set(mask.units().unique().tolist()) <= {0.0, 1.0}
    for bad, match in ((dict(sparsity_from="mean"), "sparsity_from"), (dict(optimizer="sgd"), "optimizer"),
                       (dict(warmup=1.5), "warmup")):
        with pytest.raises(Exception, match=match):  # InterpError, or the tests' type check of the Literal
            masking.learn_mask(gpt2, task, sparsity=0.5, steps=1, **bad)


def test_learn_mask_adamw_decays_gates_not_multipliers(gpt2, task, monkeypatch):
    """The official recipe's AdamW decays log_alpha only: the Lagrange multipliers' group has no
    weight decay (as the official code), so with zero gradient a step leaves them unchanged (the old
    group inherited the decay: multipliers times 1 - reg_lr * weight_decay per step, -3.65 for the
    recipe at 20 steps). A decay that flips log_alpha's sign (lr * weight_decay >= 1) raises."""
    made = []

    class Recording(torch.optim.AdamW):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(torch.optim, "AdamW", Recording)
    masking.learn_mask(gpt2, task, sparsity=0.5, steps=3, batch_size=8, progress=False, mean_over="tokens",
                       sparsity_from="sampled", optimizer="adamw", lr=0.1, reg_lr=1.0, warmup=0.0, weight_decay=0.5)
    (opt,) = made
    gates, multipliers = opt.param_groups
    assert gates["weight_decay"] == 0.5 and multipliers["weight_decay"] == 0.0 and multipliers["maximize"]
    opt.state.clear()  # no moments: a zero-gradient step is the decay alone
    for g in opt.param_groups:
        g["lr"] = 1.0
        for p in g["params"]:
            p.data.fill_(2.0)
            p.grad = torch.zeros_like(p)
    opt.step()
    assert all(float(p.detach()) == 2.0 for p in multipliers["params"])
    assert torch.allclose(gates["params"][0], torch.full_like(gates["params"][0], 1.0))  # 2 * (1 - 1.0 * 0.5)
    with pytest.raises(InterpError, match="weight_decay"):
        masking.learn_mask(gpt2, task, sparsity=0.5, steps=5, optimizer="adamw", lr=0.1, weight_decay=10.0, progress=False)


def test_random_like_and_core_baseline(gpt2):
    """random_like keeps each layer's kept-head count; a core of identical masks is far above
    chance, a core of random masks with the same per-layer counts is not."""
    g = torch.Generator().manual_seed(0)
    a = HeadMask.keeping(gpt2, [(0, 1), (0, 2), (1, 3)], mlps=[1])
    r = masking.random_like(a, g)
    assert r.heads.sum(1).tolist() == a.heads.sum(1).tolist() and r.mlps.sum() == 1
    same = masking.core_baseline([a] * 6, draws=300)
    assert same["observed_units"] == 4 and same["p_value"] < 0.01 and same["percentile"] > 0.99
    chance = masking.core_baseline([masking.random_like(a, g) for _ in range(6)], draws=300, seed=1)
    assert chance["p_value"] > 0.05 and chance["null_q05"] <= chance["observed_units"] <= chance["null_q95"]
    with pytest.raises(InterpError, match="at least one"):
        masking.core_baseline([])


def test_learn_mask_forced_units(llama):
    task = random_task(llama, n=16)
    mask = masking.learn_mask(llama, task, sparsity=0.5, seed=1, steps=10, batch_size=8,
                              force_on=[(0, 0), (1, "mlp")], force_off=[(1, 3)])
    assert mask.heads[0, 0] == 1 and mask.mlps[1] == 1 and mask.heads[1, 3] == 0


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """A 2-layer GPT-2 whose MLPs and all heads but (0, 1) and (1, 2) write nothing: only those
    two heads can change the output."""
    tok = word_tokenizer(DEFAULT_WORDS)
    torch.manual_seed(0)
    hf = hf_model_class("gpt2")(hf_config("gpt2", vocab_size=len(tok), d_model=32, n_layers=2, n_heads=4))
    keep = {(0, 1), (1, 2)}
    d_head = 8
    with torch.no_grad():
        for layer, block in enumerate(hf.transformer.h):
            for head in range(4):
                rows = slice(head * d_head, (head + 1) * d_head)  # Conv1D weight is [in, out]
                if (layer, head) in keep:
                    block.attn.c_proj.weight[rows] *= 40.0
                else:
                    block.attn.c_proj.weight[rows] = 0.0
            block.mlp.c_proj.weight.zero_()
            block.mlp.c_proj.bias.zero_()
        hf.transformer.ln_f.weight *= 50.0  # sharp output distributions, so the KL sees the heads
    path = save_model_dir(hf, tok, tmp_path_factory.mktemp("planted") / "gpt2")
    return interp.load(path), sorted(keep)


def test_planted_heads_are_recovered(planted):
    model, keep = planted
    task = random_task(model, n=64, seed=1)
    mask = masking.learn_mask(model, task, sparsity=0.75, seed=0, steps=100, include_mlps=False, batch_size=32, ablation="zero")
    assert mask.kept_heads() == keep


def test_subnetworks_evaluate_and_study(gpt2, task):
    masks = masking.subnetworks(gpt2, task, sparsity=0.5, seeds=[0, 1], steps=10, batch_size=8)
    assert [m.meta["seed"] for m in masks] == [0, 1]
    grid = masking.evaluate(gpt2, masks, {"a": task, "b": random_task(gpt2, seed=5)})
    assert grid.axes == ("model", "split", "metric") and grid.shape == (3, 2, 2)
    assert grid.labels[0][0] == "full" and grid.labels[2] == ("accuracy", "logit_diff")
    with torch.no_grad():
        full = float(interp.metrics.for_task(task)(gpt2(task.clean)))
    assert grid.values[0, 0, 1].item() == pytest.approx(full, abs=1e-5)
    for i, m in enumerate([None, *masks]):  # each batched variant equals its own run
        ivs = [] if m is None else mask_ops.interventions(m, run.reference(gpt2, mask_ops.sites(m), "mean", task.clean))
        logits = run.logits(gpt2, task.clean, ivs)
        acc = float(interp.metrics.binary_accuracy(logits, task.correct, task.incorrect, task.answer_pos).mean())
        assert grid.values[i, 0, 0].item() == pytest.approx(acc, abs=1e-6)
        assert grid.values[i, 0, 1].item() == pytest.approx(float(interp.metrics.for_task(task)(logits)), abs=1e-4)
    result = masking.study(gpt2, task, [task], sparsities=(0.5,), seeds=[0, 1], steps=5, batch_size=8)
    js = result.to_json()
    assert set(js) >= {"full", "subnetworks", "core"} and len(js["subnetworks"]) == 2


def test_study_round_trip_and_scatter(tmp_path, gpt2, task):
    other = random_task(gpt2, seed=5)
    result = masking.study(gpt2, task, {"id": task, "ood": other}, sparsities=(0.5,), seeds=[0, 1], steps=3,
                           batch_size=8, progress=False)
    back = results.load(results.save(result, tmp_path / "study.safetensors"))
    assert isinstance(back, masking.Study) and back.to_json() == result.to_json()
    grid = result.to_grid()
    assert grid.meta["chart"] == "scatter" and grid.meta["highlight"] == ["full"]
    # full, two masks, then the core of the two kept alone
    assert grid.axes == ("model", "metric") and grid.shape == (4, 3) and grid.labels[1][2] == "sparsity"
    assert grid.labels[0][-1] == "core s=0.5" and set(result.to_json()["core_accuracy"]) == {"0.5"}
    assert grid.values[:, 0].tolist() == pytest.approx(result.accuracy("id"))
    assert grid.values[:, 1].tolist() == pytest.approx(result.accuracy("ood"))


def test_effective_size(gpt2, task):
    eff = masking.effective_size(gpt2, task, [task], tolerance=1.0, sparsities=(0.5,), steps=5, batch_size=8)
    assert eff.curve.axes == ("k", "split") and eff.curve.labels[0][-1] == 10  # the full model
    assert eff.fraction == pytest.approx(min(eff.curve.labels[0]) / 10)  # tolerance 1.0 accepts any accuracy
    assert subnets.smallest_within([10, 5, 2], torch.tensor([[0.9], [0.89], [0.5]]), torch.tensor([0.9]), 0.02) == 5
    assert eff.to_grid().meta["chart"] == "lines" and eff.meta["n_units"] == 10


def test_renders(gpt2, task):
    from interp.views import plot

    mask = HeadMask.keeping(gpt2, [(0, 1)], mlps=[0])
    assert plot.render(mask).data
    result = masking.study(gpt2, task, [task, random_task(gpt2, seed=5)], sparsities=(0.5,), seeds=[0], steps=2,
                           batch_size=8, progress=False)
    assert plot.render(result).data
    eff = masking.effective_size(gpt2, task, [task], tolerance=1.0, sparsities=(0.5,), steps=2, batch_size=8, progress=False)
    assert plot.render(eff).data


# ---------------------------------------------------------------------------- clear errors


@pytest.mark.parametrize("bad", [1.0, -0.1, 1.5])
def test_bad_sparsity(gpt2, task, bad):
    with pytest.raises(InterpError, match=r"sparsity=.*\[0, 1\)"):
        masking.learn_mask(gpt2, task, sparsity=bad, steps=1)


def test_forced_head_out_of_range(gpt2, task):
    with pytest.raises(InterpError, match="head 7 is out of range in layer 0"):
        masking.learn_mask(gpt2, task, sparsity=0.5, steps=1, force_on=[(0, 7)])
    with pytest.raises(InterpError, match="layer 5 is out of range"):
        masking.learn_mask(gpt2, task, sparsity=0.5, steps=1, force_off=[(5, 0)])


@pytest.mark.parametrize("option", ["lr", "reg_lr", "weight_decay"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -0.1])
def test_bad_learning_rates_are_refused_before_the_optimizer_sees_them(gpt2, task, option, bad):
    with pytest.raises(InterpError, match=f"{option}=.* must be a finite number >= 0"):
        masking.learn_mask(gpt2, task, sparsity=0.5, steps=1, **{option: bad})


def test_malformed_head_pairs_are_refused(gpt2, unchecked):
    with pytest.raises(InterpError, match=r"heads must be a list of \(layer, head\) tuples; \(0,\) is not one"):
        HeadMask.keeping(gpt2, [(0,)])


def test_task_without_metric(gpt2, task):
    bad = replace(task, metric="")
    with pytest.raises(InterpError, match="no usable metric"):
        masking.learn_mask(gpt2, bad, sparsity=0.5, steps=1)
    with pytest.raises(InterpError, match="no usable metric"):
        masking.ablation_scan(gpt2, bad)


def test_reference_errors(gpt2, task):
    with pytest.raises(InterpError, match="needs reference token rows"):
        with masking.apply(gpt2, HeadMask.full(gpt2, 0.0), ablation="mean"):
            pass
    with pytest.raises(InterpError, match="resample reference has shape"):
        with masking.apply(gpt2, HeadMask.full(gpt2, 0.0), ablation="resample", reference=task.clean[:4]):
            gpt2(task.clean)
    with pytest.raises(Exception, match="mean_ablate"):  # jaxtyping catches it first under the test checker
        masking.ablation_scan(gpt2, task, ablation="mean_ablate")
    with pytest.raises(InterpError, match="no reference for blocks.0.attn.hook_z"):
        mask_ops.interventions(HeadMask.full(gpt2, 0.0), {})
    with pytest.raises(InterpError, match=r"mask covers \[layer, head\]"):
        with masking.apply(gpt2, HeadMask(torch.ones(3, 4)), ablation="zero"):
            pass

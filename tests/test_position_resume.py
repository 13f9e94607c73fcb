"""The runner's native resumed engines, chosen by `run.evaluate` (interp.run.packed: resid_pre x
position cells resumed per cell and packed per block; interp.run.heads: z over all positions from
each block's o_proj): the same numbers as the bridge engine and as TransformerLens, on a zoo model of
each family they run on; the bridge where they cannot apply."""

import dataclasses

import pytest
import torch
from transformer_lens import patching as tlp

import interp
from interp import patching, run
from interp.hooks import hooks
from interp.interventions import Mask, Patch, Project, WeightMask
from interp.metrics import for_task
from interp.model import native
from interp.run import hf_hooks, packed


@pytest.fixture(scope="module")
def task():
    # mixed IOI templates: right-padded rows of unequal length, answers at different positions
    return interp.tasks.make("ioi", split="train", n=5)


@pytest.fixture(scope="module", params=["lm-llama", "lm-qwen2", "lm-gemma2", "lm-gpt2"])
def zoo(request):
    return request.param, interp.load(f"zoo:{request.param}")


def _sweep(model, task, monkeypatch=None, **kw):
    return patching.activation_patch(model, task, site="resid_pre", by_pos=True, positions="mean", progress=False, **kw)


def _runner_path(model, task, monkeypatch, **kw):
    with monkeypatch.context() as m:
        m.setattr(run.packed, "cells", lambda *a: None)
        return _sweep(model, task, **kw)


def test_equals_the_runner_path_and_transformer_lens(zoo, task, monkeypatch):
    name, model = zoo
    assert (task.clean == 0).any() and len(set(task.answer_pos.tolist())) > 1  # padded rows, answers apart
    ours = _sweep(model, task)
    old = _runner_path(model, task, monkeypatch)
    _, clean_cache = model.run_with_cache(task.clean)
    theirs = tlp.get_act_patch_resid_pre(model, task.corrupt, clean_cache, for_task(task)).detach().cpu()
    assert ours.values.shape == theirs.shape == (model.cfg.n_layers, task.clean.shape[1])
    assert (ours.values - old.values).abs().max() <= 1e-5
    assert (ours.values - theirs).abs().max() <= 1e-5
    assert ours.meta["clean_metric"] == old.meta["clean_metric"]
    assert old.meta["path"] == "runner" and ours.meta["path"] == ("runner" if name == "lm-gpt2" else "native packed")


def test_a_native_run_that_disagrees_with_the_bridge_falls_back(zoo, task, monkeypatch):
    """The packed engine is chosen only where its native stages compute the bridge's, checked once per
    model and dtype (here a mismatch planted: the final norm's output shifted on the native copy only)."""
    name, model = zoo
    if name == "lm-gpt2":
        return  # not run natively at all (test_applies_only_to_what_it_runs)
    real = native.stack_of

    class Shifted(torch.nn.Module):
        def __init__(self, norm):
            super().__init__()
            self.norm = norm

        def forward(self, x):
            return self.norm(x) + 0.01

    def off(hf, n):
        stack = real(hf, n)
        return dataclasses.replace(stack, norm=Shifted(stack.norm))

    monkeypatch.setattr(native, "stack_of", off)
    monkeypatch.setitem(hf_hooks._AGREES, model, {})  # checked afresh, and the cached verdicts back after
    assert _sweep(model, task).meta["path"] == "runner"


@pytest.mark.parametrize("site,by_pos,switch", [("resid_pre", True, run.packed), ("z", False, run.heads)])
def test_raw_tokens_full_logits_and_noise_direction(zoo, site, by_pos, switch, monkeypatch):
    """No answer positions: every position's logits are the metric's (base run's before p)."""
    name, model = zoo
    g = torch.Generator().manual_seed(0)
    clean = torch.randint(5, 60, (3, 9), generator=g)
    corrupt = clean.clone()
    corrupt[:, 3] = torch.randint(5, 60, (3,), generator=g)

    def metric(logits):  # reads every position, so NaN anywhere would show
        return logits[:, :, 7].mean() - logits[:, -1, 8].mean()

    kw = dict(metric=metric, site=site, by_pos=by_pos, direction="noise", progress=False)
    ours = patching.activation_patch(model, clean, corrupt, **kw)
    with monkeypatch.context() as m:
        m.setattr(switch, "cells", lambda *a: None)
        old = patching.activation_patch(model, clean, corrupt, **kw)
    assert torch.isfinite(ours.values).all()
    assert (ours.values - old.values).abs().max() <= 1e-5


def test_cells_per_forward_cap_and_memory_split_change_nothing(zoo, task, monkeypatch):
    name, model = zoo
    whole = _sweep(model, task).values
    assert (_sweep(model, task, variants_per_forward=2).values - whole).abs().max() <= 1e-5
    monkeypatch.setattr(packed, "_FLOATS", 1)  # every cell its own forward
    assert (_sweep(model, task).values - whole).abs().max() <= 1e-5


def test_groups_cover_every_position_once_in_order():
    for floats, cap, n_groups in ((1, None, 12), (2**26, None, 1), (2**26, 3, 4), (50_000, None, None)):
        with pytest.MonkeyPatch.context() as m:
            m.setattr(packed, "_FLOATS", floats)
            groups = packed.groups(range(12), 12, 4, 2, 100, cap)
        assert [p for g in groups for p in g] == list(range(12))
        assert all(g for g in groups) and (cap is None or max(map(len, groups)) <= cap)
        assert n_groups is None or len(groups) == n_groups
        if floats == 50_000:  # a budget between: several groups, each (but a lone cell) within it
            assert 1 < len(groups) < 12


def test_the_runner_chooses_only_what_an_engine_runs(zoo, task):
    name, model = zoo
    tokens = task.corrupt
    resid = torch.zeros(*tokens.shape, model.cfg.d_model)
    z = torch.zeros(*tokens.shape, model.cfg.n_heads, model.cfg.d_head)
    at = lambda l, **kw: [Patch(f"blocks.{l}.hook_resid_pre", resid, **kw)]  # noqa: E731
    on = lambda variants: run.engine_of(model, tokens, variants)  # noqa: E731
    packs = "runner" if name == "lm-gpt2" else "native packed"
    heads = "native" if name in ("lm-llama", "lm-qwen2") else "runner"
    assert on([at(0, pos=1), at(1, pos=0)]) == packs
    assert on([at(0, pos=1), at(1), at(2, pos=3) + at(2, pos=1)]) == packs  # whole, or two at one site
    assert on([at(0, pos=1) + at(1, pos=2)]) == "runner"  # two blocks in one variant
    assert on([at(0, pos=1), []]) == "runner"  # the base run
    assert on([[Patch("blocks.0.hook_resid_mid", resid, pos=1)]]) == "runner"
    edit = WeightMask({next(n for n, _ in model.named_parameters()): torch.ones(())})
    assert on([at(0, pos=1) + [edit]]) == "runner"  # a weight edit
    mask = Mask("blocks.1.attn.hook_z", torch.ones(model.cfg.n_heads))
    assert on([[Patch("blocks.1.attn.hook_z", z, head=1)], [mask]]) == heads
    assert on([[Patch("blocks.1.attn.hook_z", z, head=1, pos=2)]]) == heads
    assert on([[Patch("blocks.1.attn.hook_z", z, head=1)] + at(1, pos=0)]) == "runner"
    with hooks(model, [("blocks.1.hook_resid_pre", lambda act, *, hook: act)]):  # a caller's hook must fire
        assert on([at(0, pos=1)]) == "runner"


def test_any_intervention_on_the_engines_equals_the_runner(zoo, task, monkeypatch):
    """Masks, projections and patches (not only one-cell patches) take the native engines and give
    the runner's numbers."""
    name, model = zoo
    g = torch.Generator().manual_seed(0)
    d, n_heads = model.cfg.d_model, model.cfg.n_heads
    basis = torch.linalg.qr(torch.randn(d, 3, generator=g))[0]
    ref = run.reference(model, ["blocks.1.attn.hook_z"], "mean", task.clean)["blocks.1.attn.hook_z"]
    variants = [
        [Mask("blocks.1.attn.hook_z", torch.tensor([0.0] + [1.0] * (n_heads - 1)), ref)],
        [Mask("blocks.2.attn.hook_z", torch.rand(n_heads, generator=g))],
        [Project("blocks.1.hook_resid_pre", basis, torch.zeros(d))],
        [Patch("blocks.2.hook_resid_pre", torch.randn(*task.clean.shape, d, generator=g), pos=3),
         Project("blocks.2.hook_resid_pre", basis, torch.zeros(d), mode="core_only")],
    ]
    metric = for_task(task)
    ours = [run.evaluate(model, task.corrupt, [v], metric, answer_pos=task.answer_pos, progress=False) for v in variants]
    with monkeypatch.context() as m:
        m.setattr(run.packed, "cells", lambda *a: None)
        m.setattr(run.heads, "cells", lambda *a: None)
        old = [run.evaluate(model, task.corrupt, [v], metric, answer_pos=task.answer_pos, progress=False) for v in variants]
    assert (torch.cat(ours) - torch.cat(old)).abs().max() <= 1e-5


def test_bert_is_not_resumed(tiny_models):
    bert = tiny_models["bert"]
    tokens = torch.ones(1, 4, dtype=torch.long)
    patch = Patch("blocks.0.hook_resid_pre", torch.zeros(1, 4, bert.cfg.d_model), pos=1)
    assert run.engine_of(bert, tokens, [[patch]]) == "runner"


@pytest.mark.parametrize("starts,n_prefix,n_pos,window", [([0], 0, 5, None), ([0, 2, 4], 6, 6, None),
                                                          ([1, 3], 7, 7, 2), ([0, 5], 6, 6, 3)])
def test_packed_mask_is_the_causal_rule_per_segment(starts, n_prefix, n_pos, window):
    mask, pos = native.packed_mask(starts, n_prefix, n_pos, window, torch.float32, "cpu")
    segs = [(s, t) for s in starts for t in range(s, n_pos)]  # (segment start, position) per packed query
    assert pos.tolist() == [t for _, t in segs]
    keys = [("recorded", k, None) for k in range(n_prefix)] + [("new", t, s) for s, t in segs]
    for qi, (s, t) in enumerate(segs):
        for ki, (kind, k, ks) in enumerate(keys):
            seen = (k < s) if kind == "recorded" else (ks == s and k <= t)
            seen &= window is None or t - k < window
            assert (mask[0, 0, qi, ki] == 0) == seen, (s, t, kind, k, ks)


def test_heads_all_positions_equal_the_runner_path_and_transformer_lens(zoo, task, monkeypatch):
    """z over all positions: natively from each layer's o_proj on LLaMA-shaped blocks (LLaMA, Qwen2);
    Gemma-2 (norms around the attention output) and GPT-2 take the runner path."""
    name, model = zoo
    ours = patching.activation_patch(model, task, site="z", progress=False)
    capped = patching.activation_patch(model, task, site="z", variants_per_forward=2, progress=False)
    with monkeypatch.context() as m:
        m.setattr(run.heads, "cells", lambda *a: None)
        old = patching.activation_patch(model, task, site="z", progress=False)
    _, clean_cache = model.run_with_cache(task.clean)
    theirs = tlp.get_act_patch_attn_head_out_all_pos(model, task.corrupt, clean_cache, for_task(task)).detach().cpu()
    assert ours.values.shape == theirs.shape == (model.cfg.n_layers, model.cfg.n_heads)
    assert (ours.values - old.values).abs().max() <= 1e-5
    assert (ours.values - theirs).abs().max() <= 1e-5
    assert (capped.values - ours.values).abs().max() <= 1e-5
    assert ours.meta["path"] == ("native" if name in ("lm-llama", "lm-qwen2") else "runner")

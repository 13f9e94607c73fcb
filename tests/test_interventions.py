"""The intervention protocol as a table of invariants, each against plain TransformerLens hooks."""

import pytest
import torch

from interp import run
from interp.errors import InterpError
from interp.interventions import Intervention, Mask, Patch, Project, Reference, WeightDelta, WeightEdit, WeightMask, project


@pytest.fixture(scope="module")
def toks(gpt2):
    return gpt2.to_tokens(["the cat sees the dog .", "the keys to the cabinet are"])


@pytest.fixture(scope="module")
def other(gpt2):
    return gpt2.to_tokens(["a dog sees the cat .", "the key to the cabinets is"])


def _mlp_weight(model, layer=0):
    """The name of a weight matrix of `layer`'s MLP (the bridge's own parameter names)."""
    return next(n for n, p in model.named_parameters() if p.ndim == 2 and f".{layer}." in n and ("mlp" in n or "intermediate" in n))


def _acts(model, tokens, name):
    return run.cache(model, tokens, [name])[1][name]


@pytest.mark.parametrize("name,kw", [
    ("blocks.1.attn.hook_z", {}), ("blocks.1.attn.hook_z", {"pos": 2}), ("blocks.1.attn.hook_z", {"head": 3}),
    ("blocks.0.attn.hook_z", {"pos": 4, "head": 1}), ("blocks.1.hook_resid_pre", {"pos": 0}),
    ("blocks.0.attn.hook_pattern", {"pos": 3, "head": 2}), ("blocks.0.attn.hook_v", {"head": 1}),
])
def test_patch_from_own_activation_is_identity(gpt2, toks, name, kw):
    base = run.logits(gpt2, toks)
    patched = run.logits(gpt2, toks, [Patch(name, _acts(gpt2, toks, name), **kw)])
    assert torch.allclose(patched, base, atol=1e-6)


def test_patch_writes_only_its_cell(gpt2, toks, other):
    name = "blocks.1.attn.hook_z"
    source = _acts(gpt2, other, name)
    seen = run.cache(gpt2, toks, [name], [Patch("z", source, pos=3, head=2, layer=1)])[1][name]
    expect = _acts(gpt2, toks, name).clone()
    expect[:, 3, 2] = source[:, 3, 2]
    assert torch.equal(seen, expect)


@pytest.mark.parametrize("ablation", ["zero", "mean", "resample"])
def test_mask_ablation_equals_plain_hooks(gpt2, toks, other, ablation):
    name = "blocks.1.attn.hook_z"
    ref_tokens = {"zero": None, "mean": other, "resample": other}[ablation]
    ref = run.reference(gpt2, [name], ablation, ref_tokens)[name]
    if ablation == "zero":
        want_head = torch.zeros(2, toks.shape[1], gpt2.cfg.d_head)
    elif ablation == "mean":
        want_head = _acts(gpt2, other, name).mean(0)[None, :, 1].expand(2, -1, -1)
    else:
        want_head = _acts(gpt2, other, name)[:, :, 1]

    def plain(act, *, hook):
        act = act.clone()
        act[:, :, 1] = want_head
        return act

    want = gpt2.run_with_hooks(toks, fwd_hooks=[(name, plain)])
    got = run.logits(gpt2, toks, [Mask.ablate(name, [1], ref, n_heads=gpt2.cfg.n_heads)])
    assert torch.allclose(got, want, atol=1e-5)


def test_identities(gpt2, toks):
    base = run.logits(gpt2, toks)
    d = gpt2.cfg.d_model
    eye = torch.eye(d)
    same = [
        Mask("z", torch.ones(gpt2.cfg.n_heads), layer=0),
        Mask("mlp_out", torch.ones(()), layer=1),
        Project("resid_pre", eye, torch.randn(d), "core_only", layer=1),  # full-rank core keeps everything
        Project("resid_mid", eye[:, :0], torch.zeros(d), "core_removed", layer=0),  # an empty core removes nothing
        WeightDelta({_mlp_weight(gpt2): torch.zeros_like(gpt2.get_parameter(_mlp_weight(gpt2)))}),
    ]
    for iv in same:
        assert torch.allclose(run.logits(gpt2, toks, [iv]), base, atol=1e-5), iv
    h, b = torch.randn(3, 5, d), torch.linalg.qr(torch.randn(d, 4))[0]
    mu = torch.randn(d)
    flipped = project(h, b, mu, "core_flipped")
    assert torch.allclose(project(flipped, b, mu, "core_flipped"), h, atol=1e-4)
    assert torch.allclose(project(h, b, mu, "core_only") + project(h, b, mu, "core_removed"), h + mu, atol=1e-5)


def test_weight_edits_leave_the_model_unchanged(gpt2, toks):
    before = {n: (p, p.detach().clone()) for n, p in gpt2.named_parameters()}
    name = _mlp_weight(gpt2)
    param = dict(gpt2.named_parameters())[name]
    zero = WeightMask({name: torch.zeros_like(param)})
    double = WeightDelta({name: param.detach().clone()})
    pruned, doubled = run.logits(gpt2, toks, [zero]), run.logits(gpt2, toks, [double])
    assert not torch.allclose(pruned, run.logits(gpt2, toks), atol=1e-4)
    with torch.no_grad():  # by hand: write the edited weight, run, put it back
        original = param.detach().clone()
        param.zero_()
        want_pruned = gpt2(toks)
        param.copy_(2 * original)
        want_doubled = gpt2(toks)
        param.copy_(original)
    assert torch.allclose(pruned, want_pruned, atol=1e-5) and torch.allclose(doubled, want_doubled, atol=1e-5)
    for n, p in gpt2.named_parameters():  # the same tensors, with the same values
        assert p is before[n][0] and torch.equal(p.detach(), before[n][1])


def test_protocol_and_errors(gpt2, toks):
    assert isinstance(Patch("z", torch.zeros(1), layer=0), Intervention)
    assert isinstance(WeightMask({"x": torch.ones(1)}), WeightEdit)
    with pytest.raises((InterpError, TypeError), match="intervention|Intervention"):  # TypeError under runtime type checks
        run.logits(gpt2, toks, [lambda act: act])
    with pytest.raises(InterpError, match="unknown parameter"):
        run.logits(gpt2, toks, [WeightMask({"blocks.0.attn.W_QQ": torch.ones(1)})])
    with pytest.raises(InterpError, match="does not broadcast"):
        run.logits(gpt2, toks, [WeightMask({_mlp_weight(gpt2): torch.ones(7)})])
    with pytest.raises(InterpError, match="one value per head"):
        Mask("z", torch.ones(()), layer=0)
    with pytest.raises(InterpError, match="head=1 needs a per-head site"):
        Patch("resid_pre", torch.zeros(1), head=1, layer=0)
    with pytest.raises(InterpError, match="patch source has shape"):
        run.logits(gpt2, toks, [Patch("z", torch.zeros(2, 3, 4, 5), layer=0)])
    with pytest.raises(InterpError, match="resample reference"):
        Reference("resample", torch.zeros(1, 2, 3)).like(torch.zeros(2, 2, 3))


def test_positions_outside_a_cached_forward_are_left_alone(gpt2, toks):
    """A forward over new positions only (start > 0, as a generator on a KV cache runs) must not
    touch a position it does not compute, and must find one it does, negative indices included."""
    name = "blocks.0.hook_resid_pre"
    d = gpt2.cfg.d_model
    act = torch.randn(2, 3, d)  # positions 4..6 of a 7-position sequence
    src = torch.randn(2, 7, d)
    assert torch.equal(Patch(name, src, pos=2)(act, site=name, start=4), act)
    patched = Patch(name, src, pos=-1)(act, site=name, start=4)
    assert torch.equal(patched[:, 2], src[:, 6]) and torch.equal(patched[:, :2], act[:, :2])
    basis = torch.linalg.qr(torch.randn(d, 2))[0]
    proj = Project(name, basis, torch.zeros(d), "core_removed", positions=torch.tensor([1, 5]))(act, site=name, start=4)
    assert torch.equal(proj[0], act[0])  # row 0's position 1 is in the cache
    assert torch.allclose(proj[1, 1], project(act[1, 1], basis, torch.zeros(d), "core_removed"))


def test_non_finite_values_and_positions_past_the_prompt_are_refused(gpt2, toks, unchecked):
    """A NaN in a mask, basis or weight edit would turn every logit into NaN far from its cause, and a
    projection position past the prompt would change nothing: each is refused, naming what was wrong."""
    nan, d = float("nan"), gpt2.cfg.d_model
    basis, mean = torch.linalg.qr(torch.randn(d, 2))[0], torch.zeros(d)
    weight = dict(gpt2.named_parameters())[_mlp_weight(gpt2)]
    with pytest.raises(InterpError, match="mask on blocks.0.attn.hook_z holds NaN"):
        Mask("z", torch.tensor([1.0, nan, 1.0, 1.0]), layer=0)
    with pytest.raises(InterpError, match="mask on blocks.0.hook_resid_pre holds NaN"):
        Mask("resid_pre", torch.tensor(float("inf")), layer=0)
    with pytest.raises(InterpError, match="Project basis holds NaN"):
        Project("resid_pre", basis * nan, mean, layer=0)
    with pytest.raises(InterpError, match="Project mean holds NaN"):
        Project("resid_pre", basis, mean + float("inf"), layer=0)
    with pytest.raises(InterpError, match="WeightDelta.* holds NaN"):
        WeightDelta({_mlp_weight(gpt2): torch.full_like(weight, nan)})
    with pytest.raises(InterpError, match="scale=nan must be a finite number"):
        WeightDelta({_mlp_weight(gpt2): torch.zeros_like(weight)}, scale=nan)
    with pytest.raises(InterpError, match="WeightMask.* holds NaN"):
        WeightMask({_mlp_weight(gpt2): torch.full_like(weight, nan)})
    with pytest.raises(InterpError, match="Patch source must be a tensor.*got list"):
        Patch("resid_pre", [[0.0]], layer=0)
    with pytest.raises(InterpError, match="positions must be a \\[batch\\] tensor of integer positions"):
        Project("resid_pre", basis, mean, positions=torch.ones(len(toks)), layer=0)
    n_pos = toks.shape[1]
    past = Project("resid_pre", basis, mean, positions=torch.full((len(toks),), n_pos), layer=0)
    with pytest.raises(InterpError, match=f"past the prompt: it has {n_pos} positions"):
        run.logits(gpt2, toks, [past])
    last = Project("resid_pre", basis, mean, positions=torch.full((len(toks),), n_pos - 1), layer=0)
    from_end = Project("resid_pre", basis, mean, positions=torch.full((len(toks),), -1), layer=0)
    assert torch.equal(run.logits(gpt2, toks, [last]), run.logits(gpt2, toks, [from_end]))  # still in range: runs

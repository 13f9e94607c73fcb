import pytest
import torch

from interp.hooks import (
    ablate_heads,
    add_direction,
    check_head,
    check_layer,
    head_hook_name,
    hooks,
    patch_from,
    replace_pattern,
    scale,
)

Z = "blocks.1.attn.hook_z"


def _run(model, tokens, fwd=()):
    with torch.no_grad(), hooks(model, fwd):
        return model(tokens)


def _capture(model, tokens, name):
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens, names_filter=name)
    return cache[name]


@pytest.fixture(scope="module")
def toks(gpt2):
    return gpt2.to_tokens(["the cat sees the dog .", "the keys to the cabinet are"])


def _live_hooks(model):
    unique = {id(hp): hp for hp in model.hook_dict.values()}  # aliases share one HookPoint
    return sum(len(hp.fwd_hooks) + len(hp.bwd_hooks) for hp in unique.values())


def test_hooks_removed_on_exit_and_on_error(gpt2, toks):
    base = _run(gpt2, toks)
    with hooks(gpt2, [(Z, ablate_heads(0))]):
        assert _live_hooks(gpt2) == 1
    assert _live_hooks(gpt2) == 0
    with pytest.raises(RuntimeError, match="boom"):
        with hooks(gpt2, [(Z, ablate_heads(0))]):
            raise RuntimeError("boom")
    assert _live_hooks(gpt2) == 0
    assert torch.equal(_run(gpt2, toks), base)


def test_unknown_hook_name_lists_nearest(gpt2):
    with pytest.raises(KeyError, match=r"blocks\.1\.attn\.hook_z"):
        with hooks(gpt2, [("blocks.1.attn.hook_zz", scale(0.0))]):
            pass
    assert _live_hooks(gpt2) == 0


def test_layer_and_head_out_of_range(gpt2, llama):
    with pytest.raises(IndexError, match=r"layers 0\.\.1"):
        check_layer(gpt2, 2)
    with pytest.raises(IndexError, match=r"heads are 0\.\.3"):
        check_head(gpt2, 0, 4)
    with pytest.raises(IndexError, match=r"kv heads are 0\.\.1"):
        check_head(llama, 0, 2, kv=True)
    with pytest.raises(ValueError, match="not a per-head site"):
        head_hook_name(0, "mlp_out")


def test_patching_from_own_cache_is_identity(gpt2, toks):
    base = _run(gpt2, toks)
    z = _capture(gpt2, toks, Z)
    for fn in (patch_from(z), patch_from(z, pos=2), patch_from(z, head=[1, 3]), patch_from(z, pos=[0, 4], head=2)):
        assert torch.allclose(_run(gpt2, toks, [(Z, fn)]), base, atol=1e-6)


def test_patch_by_position_and_head_writes_only_those_cells(gpt2, toks):
    other = gpt2.to_tokens(["a dog sees the cat .", "the key to the cabinets is"])
    z_other = _capture(gpt2, other, Z)
    seen = {}

    def grab(act, *, hook):
        seen["z"] = act.clone()

    with torch.no_grad(), hooks(gpt2, [(Z, patch_from(z_other, pos=3, head=2)), (Z, grab)]):
        gpt2(toks)
    z_own = _capture(gpt2, toks, Z)
    expect = z_own.clone()
    expect[:, 3, 2] = z_other[:, 3, 2]
    assert torch.equal(seen["z"], expect)


def test_ablations(gpt2, toks):
    z = _capture(gpt2, toks, Z)
    ref = torch.randn(5, *z.shape[1:])
    out = {}

    def grab(act, *, hook):
        out["z"] = act.clone()

    for how, reference, expected_head in [
        ("zero", None, torch.zeros_like(z[:, :, 1])),
        ("mean", ref, ref.mean(0)[None, :, 1].expand_as(z[:, :, 1])),
        ("resample", ref[:2], ref[:2, :, 1]),
    ]:
        with torch.no_grad(), hooks(gpt2, [(Z, ablate_heads(1, how, reference)), (Z, grab)]):
            gpt2(toks)
        assert torch.allclose(out["z"][:, :, 1], expected_head)
        assert torch.equal(out["z"][:, :, 0], z[:, :, 0])  # other heads untouched
    with pytest.raises(ValueError, match="needs a reference"):
        ablate_heads(0, "mean")
    # under the test suite's runtime type checks the Literal annotation catches it first
    with pytest.raises((ValueError, TypeError), match="gaussian"):
        ablate_heads(0, "gaussian")


def test_scale_add_and_pattern_identities(gpt2, toks):
    base = _run(gpt2, toks)
    resid = "blocks.1.hook_resid_pre"
    assert torch.equal(_run(gpt2, toks, [(Z, scale(1.0, head=1))]), base)
    assert torch.equal(_run(gpt2, toks, [(resid, add_direction(torch.zeros(gpt2.cfg.d_model), 3.0))]), base)
    assert not torch.allclose(_run(gpt2, toks, [(resid, add_direction(torch.ones(gpt2.cfg.d_model), 3.0))]), base)
    pname = "blocks.0.attn.hook_pattern"
    pattern = _capture(gpt2, toks, pname)
    assert torch.allclose(_run(gpt2, toks, [(pname, replace_pattern(pattern))]), base, atol=1e-6)
    uniform = torch.tril(torch.ones(toks.shape[1], toks.shape[1]))
    uniform = uniform / uniform.sum(-1, keepdim=True)
    assert not torch.allclose(_run(gpt2, toks, [(pname, replace_pattern(uniform, head=0))]), base, atol=1e-4)
    with pytest.raises(ValueError, match="direction has size"):
        _run(gpt2, toks, [(resid, add_direction(torch.zeros(3)))])
    with pytest.raises(ValueError, match="shape"):
        _run(gpt2, toks, [(Z, patch_from(torch.zeros(1, 2, 3, 4)))])

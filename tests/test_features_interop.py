"""SAELens semantics on both sides of the file boundary: JumpReLU as relu(h) * (h > t) (thresholds
below zero included), files carrying sae_lens_version so SAELens 6 reads them through its current
path, hook_z dictionaries flattened and unflattened as SAELens's reshape_activations="hook_z"
does, and refusals that say what SAELens does with the settings Dictionary lacks."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from interp.errors import InterpError
from interp.features import Dictionary, FeatureEdit, feature_acts, feature_edit
from interp.features.saelens import SAE_LENS_VERSION, load_saelens, save_saelens

HOOK_Z = "blocks.0.attn.hook_z"


def _eye(threshold):
    """A 4-feature SAE whose pre-activations are its input (W_enc = I, b_enc = 0)."""
    return Dictionary(torch.eye(4), torch.zeros(4), torch.eye(4), torch.zeros(4), "blocks.0.hook_resid_pre",
                      "blocks.0.hook_resid_pre", torch.tensor(threshold))


def test_jumprelu_below_zero_thresholds_pass_no_negative_activation():
    """SAELens's JumpReLU is relu(h) * (h > t): with t = -0.5, h = -0.3 clears the threshold yet
    gives 0 (h * (h > t) would give -0.3)."""
    d = _eye([-0.5, -0.5, -0.5, 0.5])
    x = torch.tensor([[-0.3, 0.2, -0.7, 1.0], [-0.6, -0.1, 0.4, 0.4]])
    want = torch.tensor([[0.0, 0.2, 0.0, 1.0], [0.0, 0.0, 0.4, 0.0]])  # by hand
    assert torch.equal(d.encode(x), want)
    assert torch.equal(d.activation(d.pre(x, torch.tensor([0, 3])), torch.tensor([0, 3])), want[:, [0, 3]])
    # a feature edit reads the same activations: ablating feature 0 where h = -0.3 removes nothing
    act = x[None]  # [batch 1, pos 2, 4]
    out = FeatureEdit(d, [0, 1], "ablate")(act, site=d.site_out)
    torch.testing.assert_close(out, act - torch.tensor([[[0.0, 0.2, 0, 0], [0, 0, 0, 0]]]))


def test_jumprelu_matches_saelens_through_a_saelens_file(tmp_path):
    """A JumpReLU file in SAELens 6's layout, negative thresholds, apply_b_dec_to_input: loading
    computes SAELens's encode exactly."""
    g = torch.Generator().manual_seed(0)
    w = {"W_enc": torch.randn(6, 10, generator=g), "b_enc": torch.randn(10, generator=g),
         "W_dec": torch.randn(10, 6, generator=g), "b_dec": torch.randn(6, generator=g),
         "threshold": -torch.rand(10, generator=g)}
    (tmp_path / "j").mkdir()
    save_file(w, str(tmp_path / "j" / "sae_weights.safetensors"))
    cfg = {"architecture": "jumprelu", "d_in": 6, "d_sae": 10, "apply_b_dec_to_input": True,
           "normalize_activations": "none", "reshape_activations": "none",
           "metadata": {"sae_lens_version": "6.54.12", "hook_name": "blocks.1.hook_resid_pre"}}
    (tmp_path / "j" / "cfg.json").write_text(json.dumps(cfg))
    d = load_saelens(tmp_path / "j")
    x = torch.randn(50, 6, generator=g)
    h = (x - w["b_dec"]) @ w["W_enc"] + w["b_enc"]
    f = torch.relu(h) * (h > w["threshold"])  # SAELens JumpReLUSAE.encode
    torch.testing.assert_close(d.encode(x), f)
    assert bool(((h < 0) & (h > w["threshold"])).any())  # the case the old h * (h > t) got wrong is exercised


@pytest.mark.parametrize("kind", ["standard", "jumprelu", "transcoder", "jumprelu_transcoder"])
def test_files_carry_the_saelens_6_cfg(tmp_path, kind):
    """save_saelens writes what SAELens 6.54's SAEConfig.to_dict writes: sae_lens_version (>= 6.0,
    so handle_config_defaulting leaves the cfg alone) and the hooks under "metadata"."""
    g = torch.Generator().manual_seed(1)
    transcoder = kind.endswith("transcoder")
    site_out = "blocks.2.hook_mlp_out" if transcoder else "blocks.2.ln2.hook_normalized"
    d = Dictionary(torch.randn(8, 12, generator=g), torch.randn(12, generator=g), torch.randn(12, 8, generator=g),
                   torch.randn(8, generator=g), "blocks.2.ln2.hook_normalized", site_out,
                   -torch.rand(12, generator=g) if kind.startswith("jumprelu") else None, model="m")
    cfg = json.loads((save_saelens(d, tmp_path / "s") / "cfg.json").read_text())
    meta = cfg["metadata"]
    assert cfg["architecture"] == kind and meta["sae_lens_version"] == SAE_LENS_VERSION == "6.54.12"
    assert tuple(int(p) for p in SAE_LENS_VERSION.split(".")) >= (6, 0, 0)
    assert meta["hook_name"] == d.site_in and meta["model_name"] == "m" and cfg["reshape_activations"] == "none"
    if transcoder:
        assert meta["hook_name_out"] == site_out and cfg["d_out"] == 8 and cfg["apply_b_dec_to_input"] is False
    back = load_saelens(tmp_path / "s")
    x = torch.randn(20, 8, generator=g)
    torch.testing.assert_close(back(x), d(x))


def _hook_z_sae(model, n=24, seed=0):
    g = torch.Generator().manual_seed(seed)
    width = model.cfg.n_heads * model.cfg.d_head
    return Dictionary(torch.randn(width, n, generator=g) / width ** 0.5, torch.zeros(n),
                      torch.randn(n, width, generator=g) / 4, torch.zeros(width), HOOK_Z, HOOK_Z)


def test_hook_z_dictionaries_flatten_heads_as_saelens(gpt2, tmp_path):
    """At blocks.0.attn.hook_z the activation is [batch, pos, n_heads, d_head]: a hook_z SAE encodes
    it flattened to [..., n_heads * d_head] and rebuilds it in the heads' shape; feature_acts and a
    feature edit run at the site; the SAELens file says reshape_activations "hook_z"."""
    from interp.run import cache

    d = _hook_z_sae(gpt2)
    tokens = gpt2.to_tokens(["the keys to", "a cabinet of"])
    _, acts = cache(gpt2, tokens, [HOOK_Z])
    z = acts[HOOK_Z]
    assert z.ndim == 4
    f = feature_acts(gpt2, tokens, d)
    torch.testing.assert_close(f, d.encode(z.flatten(-2)))
    assert d(z).shape == z.shape
    torch.testing.assert_close(d(z).flatten(-2), d.decode(f))
    edit = feature_edit(gpt2, tokens, d, [0, 1, 2], "ablate")
    out = edit(z, site=HOOK_Z)
    assert out.shape == z.shape
    want = z.flatten(-2) - f[..., :3] @ d.W_dec[:3]
    torch.testing.assert_close(out.flatten(-2), want)
    cfg = json.loads((save_saelens(d, tmp_path / "z") / "cfg.json").read_text())
    assert cfg["reshape_activations"] == "hook_z"
    torch.testing.assert_close(load_saelens(tmp_path / "z")(z), d(z))
    cfg["metadata"]["hook_name"] = "blocks.0.hook_resid_pre"
    (tmp_path / "z" / "cfg.json").write_text(json.dumps(cfg))
    with pytest.raises(InterpError, match="reshape_activations"):
        load_saelens(tmp_path / "z")


@pytest.mark.parametrize("norm, says", [("expected_average_only_in", "scales no input"),
                                        ("constant_norm_rescale", "at run time"), ("layer_norm", "at run time")])
def test_normalisation_refusals_say_what_saelens_does(tmp_path, norm, says):
    d = _eye([0.0] * 4)
    save_saelens(d, tmp_path / "s")
    cfg = json.loads((tmp_path / "s" / "cfg.json").read_text())
    cfg["normalize_activations"] = norm
    (tmp_path / "s" / "cfg.json").write_text(json.dumps(cfg))
    with pytest.raises(InterpError, match=says) as caught:
        load_saelens(tmp_path / "s")
    assert len(str(caught.value)) - len(str(tmp_path)) < 300

"""SAELens semantics on both sides of the file boundary: JumpReLU as relu(h) * (h > t) (thresholds
below zero included), TopK as top k then ReLU (decoder-norm ranking folded in), skip transcoders'
W_skip, files carrying sae_lens_version so SAELens 6 reads them through its current path, every
architecture SAELens 6.54 registers for inference round-tripping bit for bit, hook_z dictionaries
flattened and unflattened as SAELens's reshape_activations="hook_z" does, and refusals that say
what SAELens does with the settings and architectures Dictionary lacks."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from interp.errors import InterpError
from interp.features import Dictionary, FeatureEdit, feature_acts, feature_edit
from interp.features.saelens import ARCHITECTURES, REFUSED, SAE_LENS_VERSION, load_saelens, save_saelens

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


def _dictionary(kind, g, d=8, n=12):
    """A dictionary of SAELens architecture `kind` (random weights, negative thresholds)."""
    transcoder = kind.endswith("transcoder")
    site_out = "blocks.2.hook_mlp_out" if transcoder else "blocks.2.ln2.hook_normalized"
    return Dictionary(torch.randn(d, n, generator=g), torch.randn(n, generator=g), torch.randn(n, d, generator=g),
                      torch.randn(d, generator=g), "blocks.2.ln2.hook_normalized", site_out,
                      -torch.rand(n, generator=g) if kind.startswith("jumprelu") else None, model="m",
                      k=3 if kind == "topk" else None, W_skip=torch.randn(d, d, generator=g) if "skip" in kind else None)


@pytest.mark.parametrize("kind", ARCHITECTURES)
def test_every_architecture_round_trips_exactly_with_the_saelens_6_cfg(tmp_path, kind):
    """save_saelens writes what SAELens 6.54's SAEConfig.to_dict writes: the architecture,
    sae_lens_version (>= 6.0, so handle_config_defaulting leaves the cfg alone) and the hooks under
    "metadata"; loading it back gives the same tensors, bit for bit."""
    g = torch.Generator().manual_seed(1)
    d = _dictionary(kind, g)
    cfg = json.loads((save_saelens(d, tmp_path / "s") / "cfg.json").read_text())
    meta = cfg["metadata"]
    assert cfg["architecture"] == kind and meta["sae_lens_version"] == SAE_LENS_VERSION == "6.54.12"
    assert tuple(int(p) for p in SAE_LENS_VERSION.split(".")) >= (6, 0, 0)
    assert meta["hook_name"] == d.site_in and meta["model_name"] == "m" and cfg["reshape_activations"] == "none"
    if kind.endswith("transcoder"):
        assert meta["hook_name_out"] == d.site_out and cfg["d_out"] == 8 and cfg["apply_b_dec_to_input"] is False
    assert cfg.get("k") == d.k
    back = load_saelens(tmp_path / "s")
    for name in ("W_enc", "b_enc", "W_dec", "b_dec", "threshold", "W_skip"):
        a, b = getattr(d, name), getattr(back, name)
        assert (a is None and b is None) or torch.equal(a, b), name
    assert (back.k, back.site_in, back.site_out, back.model) == (d.k, d.site_in, d.site_out, d.model)
    x = torch.randn(20, 8, generator=g)
    assert torch.equal(back(x), d(x))


def _write(folder, cfg, w):
    folder.mkdir()
    save_file(w, str(folder / "sae_weights.safetensors"))
    (folder / "cfg.json").write_text(json.dumps(cfg))


def test_topk_files_compute_what_saelens_computes(tmp_path):
    """A TopK SAE as SAELens 6.54 trains it (apply_b_dec_to_input, rescale_acts_by_decoder_norm):
    TopKSAE ranks ((x - b_dec) W_enc + b_enc) * |W_dec row|, keeps the top k, applies ReLU and
    decodes f / |W_dec row|; the folded dictionary computes the same."""
    g = torch.Generator().manual_seed(2)
    w = {"W_enc": torch.randn(6, 16, generator=g), "b_enc": torch.randn(16, generator=g),
         "W_dec": torch.randn(16, 6, generator=g) * torch.rand(16, 1, generator=g) * 3, "b_dec": torch.randn(6, generator=g)}
    cfg = {"architecture": "topk", "d_in": 6, "d_sae": 16, "k": 10, "rescale_acts_by_decoder_norm": True,
           "apply_b_dec_to_input": True, "normalize_activations": "none", "reshape_activations": "none",
           "metadata": {"sae_lens_version": "6.54.12", "hook_name": "blocks.0.hook_resid_post"}}
    _write(tmp_path / "t", cfg, w)
    d = load_saelens(tmp_path / "t")
    x = torch.randn(40, 6, generator=g)
    norm = w["W_dec"].norm(dim=-1)
    h = ((x - w["b_dec"]) @ w["W_enc"] + w["b_enc"]) * norm
    top = h.topk(10, dim=-1)
    f = torch.zeros_like(h).scatter(-1, top.indices, top.values.relu())  # SAELens's TopK
    torch.testing.assert_close(d.encode(x), f, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(d(x), (f / norm) @ w["W_dec"] + w["b_dec"], rtol=1e-5, atol=1e-5)
    assert d.k == 10 and bool((top.values < 0).any())  # a kept negative pre-activation is exercised


@pytest.mark.parametrize("kind", ["skip_transcoder", "jumprelu_skip_transcoder"])
def test_skip_transcoder_files_compute_what_saelens_computes(tmp_path, kind):
    """SkipTranscoder.forward: decode(encode(x)) + x @ W_skip.T, W_skip stored [d_out, d_in]."""
    g = torch.Generator().manual_seed(3)
    w = {"W_enc": torch.randn(6, 10, generator=g), "b_enc": torch.randn(10, generator=g),
         "W_dec": torch.randn(10, 4, generator=g), "b_dec": torch.randn(4, generator=g),
         "W_skip": torch.randn(4, 6, generator=g)}
    if kind.startswith("jumprelu"):
        w["threshold"] = torch.rand(10, generator=g) - 0.5
    cfg = {"architecture": kind, "d_in": 6, "d_sae": 10, "d_out": 4, "apply_b_dec_to_input": False,
           "normalize_activations": "none", "metadata": {"sae_lens_version": "6.54.12",
           "hook_name": "blocks.1.ln2.hook_normalized", "hook_name_out": "blocks.1.hook_mlp_out"}}
    _write(tmp_path / "s", cfg, w)
    d = load_saelens(tmp_path / "s")
    x = torch.randn(30, 6, generator=g)
    h = x @ w["W_enc"] + w["b_enc"]
    f = torch.relu(h) * (h > w["threshold"]) if "threshold" in w else torch.relu(h)
    torch.testing.assert_close(d(x), f @ w["W_dec"] + w["b_dec"] + x @ w["W_skip"].T)
    cfg["apply_b_dec_to_input"] = True  # SAELens's TranscoderConfig refuses it: b_dec is the output's bias
    (tmp_path / "s" / "cfg.json").write_text(json.dumps(cfg))
    with pytest.raises(InterpError, match="apply_b_dec_to_input"):
        load_saelens(tmp_path / "s")
    cfg["apply_b_dec_to_input"] = False
    (tmp_path / "s" / "cfg.json").write_text(json.dumps(cfg))
    del w["W_skip"]
    (tmp_path / "s" / "sae_weights.safetensors").unlink()
    save_file(w, str(tmp_path / "s" / "sae_weights.safetensors"))
    with pytest.raises(InterpError, match="lacks \\['W_skip'\\]"):
        load_saelens(tmp_path / "s")


@pytest.mark.parametrize("arch", sorted(REFUSED))
def test_architectures_dictionary_cannot_hold_are_refused_with_the_reason(tmp_path, arch):
    save_saelens(_eye([0.0] * 4), tmp_path / "s")
    cfg = json.loads((tmp_path / "s" / "cfg.json").read_text())
    cfg["architecture"] = arch
    (tmp_path / "s" / "cfg.json").write_text(json.dumps(cfg))
    with pytest.raises(InterpError, match=f"{arch}' does not load: ") as caught:
        load_saelens(tmp_path / "s")
    assert REFUSED[arch][:30] in str(caught.value)


def test_dictionaries_saelens_cannot_hold_are_refused(tmp_path):
    from dataclasses import replace

    g = torch.Generator().manual_seed(4)
    topk = _dictionary("topk", g)
    for bad, says in ((replace(topk, threshold=torch.zeros(12)), "top-k"),
                      (replace(_dictionary("transcoder", g), k=2), "top-k transcoder"),
                      (replace(topk, k=None, W_skip=torch.zeros(8, 8)), "skip paths in transcoders only")):
        with pytest.raises(InterpError, match=says):
            save_saelens(bad, tmp_path / "no")
        assert not (tmp_path / "no").exists()


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

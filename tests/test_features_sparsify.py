"""EleutherAI sparsify folders load as the dictionary sparsify computes: the fixtures are written to
sparsify's published layout by a small writer here (cfg.json with SparseCoderConfig's fields and
d_in, sae.safetensors with encoder.weight / encoder.bias / W_dec / b_dec / W_skip), and every
number is checked against sparsify's forward computed by hand."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from interp import results
from interp.errors import InterpError
from interp.features.sparsify import load_sparsify, sparsify_sites


def write_sparsify(folder, d_in=6, n=12, k=3, transcode=False, skip=False, d_out=None, seed=0, cfg=None):
    """A hookpoint folder as SparseCoder.save_to_disk writes it (`cfg` overrides its cfg.json's
    fields); returns its tensors."""
    g = torch.Generator().manual_seed(seed)
    d_out = d_out or d_in
    w = {"encoder.weight": torch.randn(n, d_in, generator=g), "encoder.bias": torch.randn(n, generator=g) * 0.5,
         "W_dec": torch.randn(n, d_out, generator=g), "b_dec": torch.randn(d_out, generator=g)}
    if skip:
        w["W_skip"] = torch.randn(d_out, d_in, generator=g) * 0.3
    folder.mkdir(parents=True)
    save_file(w, str(folder / "sae.safetensors"))
    config = {"activation": "topk", "expansion_factor": 32, "normalize_decoder": True, "num_latents": n, "k": k,
              "multi_topk": False, "skip_connection": skip, "transcode": transcode, "d_in": d_in, **(cfg or {})}
    (folder / "cfg.json").write_text(json.dumps(config))
    return w


def sparsify_forward(w, x, k, transcode):
    """SparseCoder.forward by hand: relu(x' W^T + b), each row's top k, decode the kept latents by
    index, add b_dec and the skip path of the raw input."""
    x_in = x if transcode else x - w["b_dec"]
    pre = torch.relu(x_in @ w["encoder.weight"].T + w["encoder.bias"])
    acts, idx = pre.topk(k, dim=-1, sorted=False)
    y = torch.stack([acts[i] @ w["W_dec"][idx[i]] for i in range(len(x))]) + w["b_dec"]
    if "W_skip" in w:
        y = y + x @ w["W_skip"].T
    dense = torch.zeros_like(pre).scatter(-1, idx, acts)
    return dense, y


@pytest.mark.parametrize("hookpoint, transcode, skip, k", [
    ("layers.1", False, False, 3), ("layers.2.mlp", True, False, 4), ("layers.0.mlp", True, True, 2),
    ("layers.3", False, True, 11), ("model.layers.1.self_attn", False, False, 1)])
def test_loads_what_sparsify_computes(tmp_path, hookpoint, transcode, skip, k):
    w = write_sparsify(tmp_path / "run" / hookpoint, k=k, transcode=transcode, skip=skip)
    d = load_sparsify(tmp_path / "run", hookpoint)
    x = torch.randn(64, 6, generator=torch.Generator().manual_seed(1))
    dense, y = sparsify_forward(w, x, k, transcode)
    torch.testing.assert_close(d.encode(x), dense, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(d(x), y, rtol=1e-5, atol=1e-5)
    assert d.k == k and (d.W_skip is not None) == skip and d.kind == ("transcoder" if transcode else "sae")
    assert (d.site_in, d.site_out) == sparsify_sites(hookpoint, transcode) and d.meta["hookpoint"] == hookpoint
    if k == 11:  # fewer than k positive pre-activations: the kept zeros change nothing
        assert bool(((dense > 0).sum(-1) < k).any())
    back = results.load(results.save(d, tmp_path / "d.safetensors"))  # interp's own format keeps W_skip and k
    assert back.k == d.k and torch.equal(back(x), d(x))


def test_a_seed_folder_and_a_hookpoint_folder(tmp_path):
    w = write_sparsify(tmp_path / "run" / "layers.4.mlp" / "seed1", transcode=True, skip=True, d_out=5)
    d = load_sparsify(tmp_path / "run" / "layers.4.mlp" / "seed1")
    assert (d.site_in, d.site_out) == ("blocks.4.ln2.hook_normalized", "blocks.4.hook_mlp_out")
    x = torch.randn(8, 6)
    torch.testing.assert_close(d(x), sparsify_forward(w, x, 3, True)[1], rtol=1e-5, atol=1e-5)
    assert tuple(d.W_skip.shape) == (6, 5)
    with pytest.raises(InterpError, match=r"its hookpoints: \['layers.4.mlp'\]|is not a sparsify"):
        load_sparsify(tmp_path / "run")


@pytest.mark.parametrize("hookpoint, transcode, want", [
    ("layers.7", False, ("blocks.7.hook_resid_post",) * 2),
    ("layers.7", True, ("blocks.7.hook_resid_pre", "blocks.7.hook_resid_post")),
    ("gpt_neox.layers.2.mlp", False, ("blocks.2.hook_mlp_out",) * 2),
    ("h.3.attn", False, ("blocks.3.hook_attn_out",) * 2),
    ("h.3.mlp.act", False, ("blocks.3.mlp.hook_post",) * 2),
    ("embed_tokens", False, ("hook_embed",) * 2),
])
def test_hookpoints_map_to_sites(hookpoint, transcode, want):
    assert sparsify_sites(hookpoint, transcode) == want


def test_hookpoints_read_what_the_modules_see(llama, tiny_dirs):
    """On the tiny LLaMA the sites hold what sparsify's forward hooks see: layer 1's MLP input and
    output, its decoder layer's input and output, its attention output."""
    from transformers import AutoModelForCausalLM

    from interp.run import cache

    hf = AutoModelForCausalLM.from_pretrained(tiny_dirs["llama"]).eval()
    seen = {}
    layer = hf.model.layers[1]
    hooks = [layer.mlp.register_forward_hook(lambda m, i, o: seen.update(mlp=(i[0], o))),
             layer.register_forward_hook(lambda m, i, o: seen.update(layers=(i[0], o[0] if isinstance(o, tuple) else o))),
             layer.self_attn.register_forward_hook(lambda m, i, o: seen.update(self_attn=(None, o[0])))]
    tokens = llama.to_tokens(["the cat sat on the mat"])
    try:
        with torch.no_grad():
            hf(tokens)
    finally:
        for h in hooks:
            h.remove()
    pairs = {"layers.1.mlp": True, "layers.1": True, "layers.1.self_attn": False}
    names = sorted({s for hp, tc in pairs.items() for s in sparsify_sites(hp, tc)})
    _, acts = cache(llama, tokens, names)
    for hp, transcode in pairs.items():
        site_in, site_out = sparsify_sites(hp, transcode)
        x, y = seen[hp.split(".")[-1] if hp != "layers.1" else "layers"]
        torch.testing.assert_close(acts[site_out].float(), y.float(), rtol=1e-4, atol=1e-5)
        if x is not None:
            torch.testing.assert_close(acts[site_in].float(), x.float(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("change, says", [
    ({"activation": "groupmax"}, "groupmax"),
    ({"k": 99}, "k=99"),
    ({"d_in": 7}, "d_in=7"),
    ({"skip_connection": True}, "W_skip"),
    ({"transcode": "yes"}, "transcode"),
])
def test_bad_folders_are_refused(tmp_path, change, says):
    write_sparsify(tmp_path / "layers.1", cfg=change)
    with pytest.raises(InterpError, match=says):
        load_sparsify(tmp_path / "layers.1")


def test_unknown_hookpoints_and_transcoders_sparsify_cannot_hook_are_refused(tmp_path):
    with pytest.raises(InterpError, match="names no site"):
        sparsify_sites("layers.1.mlp.act_fn")
    with pytest.raises(InterpError, match="no input"):
        sparsify_sites("layers.1.self_attn", transcode=True)
    write_sparsify(tmp_path / "layers.1", d_out=4)
    with pytest.raises(InterpError, match="rebuilds what it reads"):
        load_sparsify(tmp_path / "layers.1")


def test_a_skip_path_is_checked_and_kept(tmp_path):
    """W_skip [d_in, d_out] adds x @ W_skip to the reconstruction: its shape is checked, decode
    without the input is refused (it would drop the skip path), and a non-finite W_skip in a file
    is refused."""
    from dataclasses import replace

    write_sparsify(tmp_path / "layers.0.mlp", transcode=True, skip=True, d_out=5)
    d = load_sparsify(tmp_path / "layers.0.mlp")
    x = torch.randn(4, 6)
    torch.testing.assert_close(d(x), d.decode(d.encode(x), x))
    torch.testing.assert_close(d(x) - replace(d, W_skip=None)(x), x @ d.W_skip)
    with pytest.raises(InterpError, match=r"decode\(f, x\)"):
        d.decode(d.encode(x))
    from jaxtyping import config  # the refusal as a user meets it (the tests' jaxtyping check would refuse first)

    before = config.jaxtyping_disable
    config.update("jaxtyping_disable", True)
    try:
        with pytest.raises(InterpError, match=r"W_skip has shape \(5, 6\); want \[d_in, d_out\] = \[6, 5\]"):
            replace(d, W_skip=d.W_skip.T)
    finally:
        config.update("jaxtyping_disable", before)
    assert "skip" in repr(d) and "top 3" in repr(d)
    path = results.save(replace(d, W_skip=d.W_skip.clone().index_fill_(0, torch.tensor([0]), float("nan"))),
                        tmp_path / "nan.safetensors")
    with pytest.raises(InterpError, match="W_skip"):
        results.load(path)

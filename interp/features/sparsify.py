"""EleutherAI sparsify's on-disk layout -> `Dictionary` (its TopK SAEs, transcoders and skip transcoders).

    load_sparsify(run_or_folder, hookpoint=None)   -> Dictionary
    sparsify_sites("layers.3.mlp", transcode=True)  -> ("blocks.3.ln2.hook_normalized", "blocks.3.hook_mlp_out")

A sparsify run holds one folder per hookpoint (a Hugging Face module name: "layers.3",
"layers.3.mlp"; "layers.3/seed1" when several seeds were trained), each with `cfg.json` (the
SparseCoderConfig fields plus d_in) and `sae.safetensors`:

    encoder.weight [n, d_in]   encoder.bias [n]   W_dec [n, d_out]   b_dec [d_out]
    W_skip [d_out, d_in]       (only with "skip_connection": true)

and computes (SparseCoder.forward, fused_encoder):

    h = relu(x' @ encoder.weight.T + encoder.bias)    x' = x - b_dec for an SAE, x for a transcoder
    keep each token's k largest h ("activation": "topk"), zero the rest
    y = f @ W_dec + b_dec (+ x @ W_skip.T)

which `Dictionary` holds as W_enc = encoder.weight.T, b_enc = encoder.bias - b_dec @ W_enc (an
SAE's input shift folded in), its `k`, and W_skip transposed to [d_in, d_out]. Keeping the top k
after the ReLU gives the same dense activations as SAELens's TopK (top k, then ReLU). "groupmax"
(the largest of each of k groups) has no `Dictionary` equivalent and is refused.

Hookpoints read a module's output (an SAE) or its input and output (a transcoder, "transcode":
true). On LLaMA-family models the sites below hold exactly what those modules see (the tiny
LLaMA's MLP input and ln2.hook_normalized agree to 4e-7); GPT-2's compatibility mode centres the
residual stream, so an SAE at "h.N" sees a shifted input there.
"""

from __future__ import annotations

import re
from pathlib import Path

from interp.errors import InterpError
from interp.features.dictionary import Dictionary
from interp.files.validate import field, read_json, read_safetensors, refuse, tensor

__all__ = ["load_sparsify", "sparsify_sites"]

CFG, WEIGHTS = "cfg.json", "sae.safetensors"

# hookpoint (after an optional "model." / "transformer." / "gpt_neox." prefix) -> the SAE's site and
# the transcoder's (input, output) sites; None: sparsify cannot transcode there (an attention
# module is called with keyword inputs, which its forward hooks do not see)
_SITES = (
    (r"(?:layers|h)\.(\d+)", "blocks.{0}.hook_resid_post", ("blocks.{0}.hook_resid_pre", "blocks.{0}.hook_resid_post")),
    (r"(?:layers|h)\.(\d+)\.mlp", "blocks.{0}.hook_mlp_out", ("blocks.{0}.ln2.hook_normalized", "blocks.{0}.hook_mlp_out")),
    (r"(?:layers|h)\.(\d+)\.(?:self_attn|attn|attention)", "blocks.{0}.hook_attn_out", None),
    (r"h\.(\d+)\.mlp\.act", "blocks.{0}.mlp.hook_post", None),  # GPT-2's (ungated) activation output
    (r"(?:embed_tokens|wte|embed_in)", "hook_embed", None),
)


def sparsify_sites(hookpoint: str, transcode: bool = False) -> tuple[str, str]:
    """(site_in, site_out) of a sparsify hookpoint: the module's output for an SAE, its input and
    output for a transcoder; InterpError naming the hookpoints this mapping knows otherwise."""
    name = re.sub(r"^(?:model\.|transformer\.|gpt_neox\.|base_model\.)+", "", str(hookpoint))
    for pattern, sae, transcoder in _SITES:
        m = re.fullmatch(pattern, name)
        if m and not transcode:
            return sae.format(*m.groups()), sae.format(*m.groups())
        if m and transcoder is not None:
            return transcoder[0].format(*m.groups()), transcoder[1].format(*m.groups())
        if m:
            raise InterpError(f"sparsify hookpoint {hookpoint!r} with transcode=true: sparsify's hooks see no input "
                              "there; transcoders load at 'layers.N' and 'layers.N.mlp'")
    raise InterpError(f"sparsify hookpoint {str(hookpoint)[:60]!r} names no site interp knows; known: 'layers.N' "
                      "(residual after block N), 'layers.N.mlp', 'layers.N.self_attn', 'h.N.mlp.act', 'embed_tokens' "
                      "(also 'h.N' and a 'model.' prefix)")


def _folder(path: Path, hookpoint: str | None) -> tuple[Path, str]:
    """The hookpoint folder and its hookpoint name (a seed folder "seedN" takes its parent's)."""
    folder = path / hookpoint if hookpoint is not None else path
    if not (folder / CFG).exists():
        inside = sorted(p.name for p in path.iterdir() if (p / CFG).exists())[:8] if path.is_dir() else []
        hint = f"; its hookpoints: {inside}" if inside else ""
        raise InterpError(f"{folder} is not a sparsify hookpoint folder (it needs {CFG} and {WEIGHTS}){hint}")
    name = hookpoint or folder.name
    if re.fullmatch(r"seed\d+", folder.name) and hookpoint is None:
        name = folder.parent.name
    return folder, name.split("/")[0]


def _config(path: Path) -> dict:
    cfg = read_json(path, "a sparsify cfg.json", "the cfg.json sparsify's SparseCoder.save_to_disk wrote")
    if not isinstance(cfg, dict):
        raise refuse(path, "the file", f"is a {type(cfg).__name__}", "a JSON object")
    activation = field(cfg, "activation", str, path, default="topk")
    if activation != "topk":
        raise InterpError(f"{path}: activation {activation[:40]!r} keeps the largest latent of each of k groups, which "
                          "Dictionary cannot express; only 'topk' loads")
    for key in ("d_in", "k"):
        field(cfg, key, int, path)
    for key in ("transcode", "skip_connection"):
        field(cfg, key, bool, path, default=False)
    return cfg


def load_sparsify(path: str | Path, hookpoint: str | None = None, *, model: str = "") -> Dictionary:
    """The dictionary of one sparsify hookpoint folder (or of `hookpoint` inside a run folder),
    checked: its cfg, every tensor's shape against d_in and the others, W_skip present exactly when
    the cfg says skip_connection, every weight finite."""
    folder, name = _folder(Path(path), hookpoint)
    cfg = _config(folder / CFG)
    source = folder / WEIGHTS
    _, w = read_safetensors(source, "sparsify weights", "the sae.safetensors sparsify wrote")
    want = ["encoder.weight", "encoder.bias", "W_dec", "b_dec"] + (["W_skip"] if cfg.get("skip_connection") else [])
    if sorted(w) != sorted(want):
        raise refuse(source, "the tensors", f"are {sorted(w)[:8]}", f"{want} (skip_connection={bool(cfg.get('skip_connection'))})")
    enc = tensor(w["encoder.weight"], source, "encoder.weight", floating=True).float()
    n, d_in = tuple(enc.shape) if enc.ndim == 2 else (0, 0)
    if d_in != cfg["d_in"]:
        raise refuse(source, "encoder.weight", f"has shape {list(enc.shape)}", f"[num_latents, d_in={cfg['d_in']}]")
    W_dec = tensor(w["W_dec"], source, "W_dec", floating=True).float()
    d_out = W_dec.shape[-1] if W_dec.ndim == 2 else 0
    b_enc = tensor(w["encoder.bias"], source, "encoder.bias", shape=(n,), floating=True).float()
    tensor(W_dec, source, "W_dec", shape=(n, d_out))
    b_dec = tensor(w["b_dec"], source, "b_dec", shape=(d_out,), floating=True).float()
    W_skip = None
    if "W_skip" in w:
        W_skip = tensor(w["W_skip"], source, "W_skip", shape=(d_out, d_in), floating=True).float().T.contiguous()
    W_enc = enc.T.contiguous()
    transcode = bool(cfg.get("transcode"))
    if not transcode:
        if d_out != d_in:
            raise refuse(source, "W_dec", f"writes width {d_out}", f"width d_in={d_in} (an SAE rebuilds what it reads)")
        b_enc = b_enc - b_dec @ W_enc  # (x - b_dec) W_enc + b == x W_enc + (b - b_dec W_enc)
    site_in, site_out = sparsify_sites(name, transcode)
    meta = {"loaded_from": "sparsify", "hookpoint": name, "architecture": "topk" + ("_transcoder" if transcode else "")}
    try:
        return Dictionary(W_enc=W_enc, b_enc=b_enc, W_dec=W_dec, b_dec=b_dec, site_in=site_in, site_out=site_out,
                          model=model, meta=meta, k=cfg["k"], W_skip=W_skip)
    except InterpError as err:
        raise InterpError(f"{source}: {str(err)[:220]}") from None

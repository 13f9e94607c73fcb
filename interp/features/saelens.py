"""SAELens's on-disk format <-> `Dictionary`.

A SAELens dictionary is a folder with `cfg.json` and `sae_weights.safetensors` (keys W_enc
[d_in, d_sae], b_enc [d_sae], W_dec [d_sae, d_out], b_dec [d_out], threshold [d_sae] for
JumpReLU, W_skip [d_out, d_in] for a skip transcoder). The cfg names the architecture (the
inference classes SAELens 6.54 registers: "standard", "jumprelu", "topk" with its k,
"transcoder", "skip_transcoder", "jumprelu_transcoder", "jumprelu_skip_transcoder"; SAELens
saves BatchTopK and Matryoshka dictionaries as "jumprelu") and the hook, at the top level
(SAELens < 6) or under "metadata" / "meta" (6.x): hook_name, and hook_name_out for a transcoder.
SAELens's hook names are HookedTransformer's, which interp's compatibility-mode bridge shares, so
they load as they are.

SAELens cannot be installed beside interp (SAELens 6.x requires transformer-lens < 4), so this
module reads and writes the files itself. What it reads it folds into the plain form
`Dictionary` holds: an SAE that subtracts b_dec from its input (apply_b_dec_to_input) gets
b_enc - b_dec @ W_enc instead; a TopK SAE that ranks its pre-activations scaled by the decoder
norms (rescale_acts_by_decoder_norm) gets those norms folded into its encoder and decoder. W_skip
is stored transposed, [d_in, d_out]. Input normalisation other than "none" and the architectures
in `REFUSED` are refused, each with what it does that `Dictionary` cannot. JumpReLU is SAELens's
relu(h) * (h > threshold), TopK its top k then ReLU (the same dense activations as ReLU then top
k); a hook_z dictionary (reshape_activations "hook_z") reads and writes [..., n_heads, d_head]
flattened to [..., n_heads * d_head], as SAELens does.

Sources: SAELens's sae.py, jumprelu_sae.py and loading/pretrained_sae_loaders.py
(handle_config_defaulting: a cfg without sae_lens_version >= 6.0 is read as a pre-6.0 one).
"""

from __future__ import annotations

import json
from pathlib import Path


from interp.errors import InterpError
from interp.features.dictionary import Dictionary
from interp.sites import layer_of
from interp.files.storage import atomic_dir, check_replaceable, write_tensors_atomic
from interp.files.validate import field, hook, read_json, read_safetensors, refuse, tensor

__all__ = ["ARCHITECTURES", "REFUSED", "SAE_LENS_VERSION", "load_saelens", "save_saelens"]

CFG, WEIGHTS = "cfg.json", "sae_weights.safetensors"
ARCHITECTURES = ("standard", "jumprelu", "topk", "transcoder", "skip_transcoder", "jumprelu_transcoder",
                 "jumprelu_skip_transcoder")
REFUSED = {  # SAELens 6.54's other architectures, and why Dictionary cannot hold them
    "gated": "a gated SAE has a separate gate and magnitude path (W_gate, r_mag, b_gate, b_mag), Dictionary one encoder",
    "batchtopk": "a training architecture; SAELens saves a trained BatchTopK SAE as 'jumprelu', which loads",
    "matryoshka_batchtopk": "a training architecture; SAELens saves a trained one as 'jumprelu', which loads",
    "temporal": "a temporal SAE attends over earlier tokens' activations; Dictionary encodes each token alone",
    "matching_pursuit": "matching pursuit picks features one residual step at a time, not by one encoder pass",
    "phase_multiplexed": "a phase-multiplexed SAE encodes features in pairs of coordinates, not one encoder column each",
}


def _hook(cfg: dict, key: str, source: Path) -> str | None:
    """cfg's hook name `key` (top level, or under "metadata" / "meta"), checked to be a hook name."""
    for where in ("", "metadata", "meta"):
        block = field(cfg, where, dict, source, default={}) if where else cfg
        if block.get(key):
            return hook(block[key], source, f"{where}.{key}" if where else key)
    return None


def _config(folder: Path) -> dict:
    """cfg.json of a SAELens folder, its schema checked (the fields this reader uses)."""
    path = folder / CFG
    cfg = read_json(path, "a SAELens cfg.json", "the cfg.json SAELens (or save_saelens) wrote")
    if not isinstance(cfg, dict):
        raise refuse(path, "the file", f"is a {type(cfg).__name__}", "a JSON object")
    arch = field(cfg, "architecture", str, path, default="standard")
    if arch in REFUSED:
        raise InterpError(f"{path}: SAELens architecture {arch!r} does not load: {REFUSED[arch]}")
    if arch not in ARCHITECTURES:
        raise InterpError(f"{path}: SAELens architecture {arch[:40]!r} has no Dictionary equivalent; loadable: {ARCHITECTURES}")
    if arch == "topk":
        if isinstance(cfg.get("k"), bool) or not isinstance(cfg.get("k"), int):
            raise refuse(path, "k", f"is {str(cfg.get('k'))[:20]}", "an int: the features a 'topk' SAE keeps per token")
        field(cfg, "rescale_acts_by_decoder_norm", bool, path, default=False)
    norm = field(cfg, "normalize_activations", str, path, default="none") or "none"
    if norm == "expected_average_only_in":
        raise InterpError(f"{path}: normalize_activations='expected_average_only_in': SAELens 6.54 scales no input for "
                          "it (from_pretrained folds its release table's factor s into the weights); fold s in "
                          "(W_enc*s, W_dec/s, b_dec/s), set 'none'")
    if norm != "none":
        raise InterpError(f"{path}: normalize_activations={norm[:40]!r} rescales each token's input at run time in "
                          "SAELens (and the output back), a step Dictionary does not have; only 'none' loads")
    reshape = field(cfg, "reshape_activations", str, path, default="none")
    if reshape not in ("none", "hook_z"):
        raise refuse(path, "reshape_activations", f"is {reshape[:40]!r}", "'none' or 'hook_z'")
    if field(cfg, "apply_b_dec_to_input", bool, path, default=None) and arch.endswith("transcoder"):
        raise refuse(path, "apply_b_dec_to_input", f"is true for a {arch!r}",
                     "false: b_dec is the output's bias, and SAELens 6.54's TranscoderConfig refuses it too")
    for key in ("d_in", "d_sae", "d_out"):
        field(cfg, key, int, path, default=0)
    for key in ("metadata", "meta"):
        field(cfg, key, dict, path, default={})
    return cfg


def load_saelens(folder: str | Path, *, model: str = "") -> Dictionary:
    """The dictionary in SAELens folder `folder` (cfg.json + sae_weights.safetensors), checked: its
    cfg's schema and hook names, its weights' shapes against each other and against the cfg's d_in,
    d_sae and d_out, and every weight finite."""
    folder = Path(folder)
    if not (folder / CFG).exists() or not (folder / WEIGHTS).exists():
        raise InterpError(f"{folder} is not a SAELens dictionary: it needs {CFG} and {WEIGHTS}")
    cfg = _config(folder)
    arch = cfg.get("architecture") or "standard"
    _, w = read_safetensors(folder / WEIGHTS, "SAELens weights", "the sae_weights.safetensors SAELens wrote")
    need = ["W_enc", "b_enc", "W_dec", "b_dec"] + ["threshold"] * arch.startswith("jumprelu") + ["W_skip"] * ("skip" in arch)
    missing = [k for k in need if k not in w]
    if missing:
        raise InterpError(f"{folder / WEIGHTS} lacks {missing} (a {arch!r} dictionary); it has {sorted(w)[:8]}")
    for k, t in w.items():
        tensor(t, folder / WEIGHTS, k, floating=True)
    W_enc = w["W_enc"]
    d_in, d_sae = tuple(W_enc.shape) if W_enc.ndim == 2 else (None, None)
    for key, got in (("d_in", d_in), ("d_sae", d_sae), ("d_out", w["W_dec"].shape[-1] if w["W_dec"].ndim else None)):
        if cfg.get(key) and cfg[key] != got:
            raise refuse(folder / CFG, key, f"is {cfg[key]} but the weights have {got}", "the weights' own size")
    site_in = _hook(cfg, "hook_name", folder / CFG)
    if site_in is None:
        raise InterpError(f"{folder / CFG} names no hook_name (top level, or under 'metadata')")
    if cfg.get("reshape_activations") == "hook_z" and not site_in.endswith("_z"):
        raise refuse(folder / CFG, "reshape_activations", f"is 'hook_z' but the hook is {site_in}",
                     "'hook_z' only at an attention hook_z site (SAELens refuses it too)")
    transcoder = arch.endswith("transcoder")
    site_out = _hook(cfg, "hook_name_out", folder / CFG) if transcoder else site_in
    if site_out is None:
        raise InterpError(f"{folder / CFG} is a transcoder but names no hook_name_out")
    if not transcoder and (w["b_dec"].shape[-1:] != W_enc.shape[:1] or W_enc.ndim != 2):
        raise refuse(folder / WEIGHTS, "b_dec", f"has shape {list(w['b_dec'].shape)} against W_enc {list(W_enc.shape)}",
                     "of shape [d_in] (an SAE rebuilds the width it reads)")
    W_enc, b_enc, W_dec, b_dec = (w[k].float() for k in ("W_enc", "b_enc", "W_dec", "b_dec"))
    if not transcoder and cfg.get("apply_b_dec_to_input", True):
        b_enc = b_enc - b_dec @ W_enc  # (x - b_dec) W_enc + b_enc == x W_enc + (b_enc - b_dec W_enc)
    if arch == "topk" and cfg.get("rescale_acts_by_decoder_norm"):
        norm = W_dec.norm(dim=-1)  # SAELens ranks h * |W_dec row| and decodes f / |W_dec row|
        W_enc, b_enc, W_dec = W_enc * norm, b_enc * norm, W_dec / norm[:, None]
    names = [m for m in (cfg, cfg.get("metadata") or {}, cfg.get("meta") or {}) if isinstance(m.get("model_name"), str)]
    meta_model = model or (names[0]["model_name"] if names else "")
    try:
        return Dictionary(W_enc=W_enc, b_enc=b_enc, W_dec=W_dec, b_dec=b_dec, site_in=site_in, site_out=site_out,
                          threshold=w["threshold"].float() if "threshold" in need else None, model=meta_model,
                          meta={"loaded_from": "saelens", "architecture": arch}, k=cfg["k"] if arch == "topk" else None,
                          W_skip=w["W_skip"].float().T.contiguous() if "W_skip" in need else None)
    except InterpError as err:
        raise InterpError(f"{folder / WEIGHTS}: {str(err)[:220]}") from None


SAE_LENS_VERSION = "6.54.12"  # the SAELens whose format save_saelens writes (6.x: cfg under "metadata")


def save_saelens(d: Dictionary, folder: str | Path) -> Path:
    """Write `d` as a SAELens 6 folder (written beside `folder` and renamed into place): the cfg
    SAELens 6.54 writes, `metadata.sae_lens_version` set so SAELens reads it through its current
    path, and reshape_activations "hook_z" for a dictionary that reads an attention hook_z site.
    An existing `folder` is replaced only when it holds nothing but a SAELens dictionary's files."""
    folder = check_replaceable(folder, lambda name: name in (CFG, WEIGHTS), "a SAELens dictionary")
    transcoder, jump = d.kind == "transcoder", d.threshold is not None
    if d.k is not None and (transcoder or jump):
        raise InterpError(f"{d!r}: SAELens 6.54's only top-k class ('topk') is an SAE without thresholds, so a top-k "
                          "transcoder or a top-k dictionary with thresholds has no SAELens form (interp.results.save keeps it)")
    if d.W_skip is not None and not transcoder:
        raise InterpError(f"{d!r}: SAELens has skip paths in transcoders only ('skip_transcoder'), so an SAE with "
                          "W_skip has no SAELens form (interp.results.save keeps it)")
    if transcoder:
        arch = ("jumprelu_" if jump else "") + ("skip_" if d.W_skip is not None else "") + "transcoder"
    else:
        arch = "topk" if d.k is not None else ("jumprelu" if jump else "standard")
    meta = {"sae_lens_version": SAE_LENS_VERSION, "sae_lens_training_version": SAE_LENS_VERSION,
            "model_name": d.model or None, "hook_name": d.site_in, "hook_layer": layer_of(d.site_in),
            "hook_head_index": None, "prepend_bos": True}
    cfg = {"architecture": arch, "d_in": d.W_enc.shape[0], "d_sae": d.n_features, "dtype": "float32",
           "device": "cpu", "apply_b_dec_to_input": False, "normalize_activations": "none",
           "reshape_activations": "hook_z" if d.site_in.endswith("hook_z") else "none", "metadata": meta}
    if d.k is not None:
        cfg.update(k=d.k, rescale_acts_by_decoder_norm=False)
    if transcoder:
        cfg["d_out"] = d.W_dec.shape[1]
        meta.update({"hook_name_out": d.site_out, "hook_layer_out": layer_of(d.site_out), "hook_head_index_out": None})
    tensors = {"W_enc": d.W_enc, "b_enc": d.b_enc, "W_dec": d.W_dec, "b_dec": d.b_dec}
    if d.threshold is not None:
        tensors["threshold"] = d.threshold
    if d.W_skip is not None:
        tensors["W_skip"] = d.W_skip.T  # SAELens's [d_out, d_in]
    with atomic_dir(folder) as tmp:
        write_tensors_atomic(tmp / WEIGHTS, {k: v.detach().float().contiguous() for k, v in tensors.items()}, {})
        (tmp / CFG).write_text(json.dumps(cfg, indent=2), encoding="utf-8")
    return Path(folder)

"""The one site vocabulary: where in a model an intervention or an analysis acts.

A *site* is one hook point. Every capability accepts it the same two ways:

    short name + layer   "z", 3            -> "blocks.3.attn.hook_z"
    full hook name       "blocks.3.attn.hook_z"  (layer omitted, or equal to the name's)

Short names (the `SITES` table): resid_pre, resid_mid, resid_post, attn_out, mlp_out (residual
width, [batch, pos, d_model]); z, q, k, v (per head, [batch, pos, head, d_head]; k and v carry
key/value heads on grouped-query models); pattern, attn_scores ([batch, head, dest, src]). Any
other hook name of the model (hook_embed, blocks.L.mlp.hook_post, ...) is accepted in full.

Words, one meaning each: a *site* is a hook point (above); a site's *kind* is the layout of its
activation (resid: [batch, pos, d_model]; head: [batch, pos, head, d_head]; pattern: [batch, head,
dest, src]; other). A circuit graph's node has a *role* (interp.circuits.graph), not a kind.

The checks of layers, heads and token ids live here too, beside the vocabulary they check, so
code that only checks shapes never needs interp.hooks.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Literal, Sequence

from interp.errors import InterpError

__all__ = [
    "SITES", "SiteSpec", "check_head", "check_hook_names", "check_layer", "check_position", "check_tokens", "check_tuples",
    "hook_name", "kind_of",
    "kv_head_of", "layer_of", "n_kv_heads", "position_axis", "spec_of",
]

Kind = Literal["resid", "head", "pattern", "other"]


@dataclass(frozen=True)
class SiteSpec:
    hook: str  # hook name with {layer}
    kind: Kind
    kv: bool = False  # per key/value head (k and v on grouped-query models)


SITES: dict[str, SiteSpec] = {
    "resid_pre": SiteSpec("blocks.{layer}.hook_resid_pre", "resid"),
    "resid_mid": SiteSpec("blocks.{layer}.hook_resid_mid", "resid"),
    "resid_post": SiteSpec("blocks.{layer}.hook_resid_post", "resid"),
    "attn_out": SiteSpec("blocks.{layer}.hook_attn_out", "resid"),
    "mlp_out": SiteSpec("blocks.{layer}.hook_mlp_out", "resid"),
    "z": SiteSpec("blocks.{layer}.attn.hook_z", "head"),
    "q": SiteSpec("blocks.{layer}.attn.hook_q", "head"),
    "k": SiteSpec("blocks.{layer}.attn.hook_k", "head", kv=True),
    "v": SiteSpec("blocks.{layer}.attn.hook_v", "head", kv=True),
    "pattern": SiteSpec("blocks.{layer}.attn.hook_pattern", "pattern"),
    "attn_scores": SiteSpec("blocks.{layer}.attn.hook_attn_scores", "pattern"),
}
_SUFFIX = {spec.hook.split("{layer}.")[1]: spec for spec in SITES.values()}
_LAYER = re.compile(r"^blocks\.(\d+)\.")
# a full hook name: dot-separated identifiers (a module path inside the model), nothing a file could
# use to name a path ("../x") or an expression
_FULL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*")


def spec_of(site: str) -> SiteSpec:
    """The SiteSpec of a short name; InterpError listing the valid ones otherwise."""
    if site not in SITES:
        near = difflib.get_close_matches(site, list(SITES), n=3, cutoff=0.5)
        raise InterpError(f"unknown site {site!r}; valid short names: {', '.join(SITES)}"
                          + (f" (did you mean {', '.join(near)}?)" if near else ""))
    return SITES[site]


def hook_name(site: str, layer: int | None = None) -> str:
    """The full hook name of `site` (a short name with `layer`, or a full hook name)."""
    if not isinstance(site, str):
        raise InterpError(f"a site is a short name with a layer or a full hook name, got {site!r}")
    if "." in site or site.startswith("hook_"):
        if len(site) > 200 or not _FULL.fullmatch(site):
            raise InterpError(f"site {site[:80]!r} is not a hook name: use dot-separated identifiers like "
                              "'blocks.0.hook_resid_pre' (see interp.hooks.hook_names(model))")
        found = layer_of(site)
        if layer is not None and found != layer:
            raise InterpError(f"site {site!r} is in layer {found} but layer={layer} was given; pass one or the other")
        return site
    spec = spec_of(site)
    if isinstance(layer, bool) or not isinstance(layer, int):
        raise InterpError(f"site {site!r} is a short name: give its layer as an int (got layer={layer!r}), "
                          f"or pass the full name {spec.hook!r}")
    return spec.hook.format(layer=layer)


def layer_of(name: str) -> int | None:
    """The block index of a full hook name (None outside the blocks, e.g. hook_embed)."""
    m = _LAYER.match(name)
    return int(m.group(1)) if m else None


def kind_of(name: str) -> Kind:
    """resid / head / pattern for the table's hook names, 'other' for any other hook."""
    for suffix, spec in _SUFFIX.items():
        if name.endswith(suffix) and layer_of(name) is not None:
            return spec.kind
    return "other"


def position_axis(name: str) -> int:
    """The position axis of the activation at `name`: dest (2) for attention maps, else 1."""
    return 2 if kind_of(name) == "pattern" else 1


def check_hook_names(model, names: Sequence[str]) -> None:
    """InterpError naming each unknown hook name and the nearest valid ones."""
    valid = model.hook_dict
    for name in names:
        if name not in valid:
            near = difflib.get_close_matches(name, list(valid), n=5, cutoff=0.5)
            raise InterpError(
                f"unknown hook name {name!r}; nearest valid names: {near or 'none'} "
                f"(see interp.hooks.hook_names(model) for all {len(valid)})"
            )


def check_layer(model, layer: int) -> None:
    n = model.cfg.n_layers
    if isinstance(layer, bool) or not isinstance(layer, int):
        raise InterpError(f"layer {layer!r} must be an int, one of this model's layers 0..{n - 1}")
    if not 0 <= layer < n:
        raise InterpError(f"layer {layer!r} is out of range: this model has layers 0..{n - 1}")


def n_kv_heads(model) -> int:
    return getattr(model.cfg, "n_key_value_heads", None) or model.cfg.n_heads


def check_head(model, layer: int, head: int, *, kv: bool = False) -> None:
    check_layer(model, layer)
    n = n_kv_heads(model) if kv else model.cfg.n_heads
    what = "kv head" if kv else "head"
    if isinstance(head, bool) or not isinstance(head, int):
        raise InterpError(f"{what} {head!r} must be an int, one of layer {layer}'s {what}s 0..{n - 1}")
    if not 0 <= head < n:
        raise InterpError(f"{what} {head!r} is out of range in layer {layer}: valid {what}s are 0..{n - 1}")


def kv_head_of(model, head: int) -> int:
    """The key/value head that query head `head` reads under grouped-query attention."""
    check_head(model, 0, head)
    return head // (model.cfg.n_heads // n_kv_heads(model))


def check_tokens(tokens, what: str = "tokens", model=None) -> None:
    """InterpError unless `tokens` is a non-empty integer tensor of token ids, [batch, pos] or
    [pos]; with `model`, also ids inside its vocabulary and rows no longer than its context.

    The one check of token input, called at every entry point (interp.run, patching, circuits,
    features), so float ids, a 3-D stack, an empty batch or a prompt past the context fail here,
    naming the fix, instead of deep inside the embedding."""
    import torch

    if not isinstance(tokens, torch.Tensor):
        raise InterpError(f"{what} is a {type(tokens).__name__}; pass a tensor of token ids, e.g. model.to_tokens(text)")
    if tokens.dtype not in (torch.long, torch.int32):  # what an embedding indexes with
        kind = "integers" if tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.dtype == torch.bool else "int64"
        raise InterpError(f"{what} has dtype {tokens.dtype}; token ids must be {kind}: pass {what}.long()")
    if tokens.ndim not in (1, 2):
        raise InterpError(f"{what} has shape {tuple(tokens.shape)}; token ids must be [batch, pos] (or [pos] for one "
                          f"row): pass {what}.flatten(0, -2) to stack the rows")
    if tokens.numel() == 0:
        raise InterpError(f"{what} is empty, shape {tuple(tokens.shape)}; pass at least one row of at least one token")
    if model is None:
        return
    n_ctx, d_vocab = model.cfg.n_ctx, model.cfg.d_vocab
    if n_ctx and tokens.shape[-1] > n_ctx:
        raise InterpError(f"{what} has {tokens.shape[-1]} positions, past the model's context (n_ctx={n_ctx}); "
                          f"pass at most {n_ctx} tokens per row (truncate or split the prompt)")
    lo, hi = int(tokens.min()), int(tokens.max())
    if lo < 0 or hi >= d_vocab:
        raise InterpError(f"{what} holds token id {lo if lo < 0 else hi}, outside the model's vocabulary "
                          f"(d_vocab={d_vocab}); pass ids in 0..{d_vocab - 1} made by this model's tokenizer")


def check_tuples(items, size: int, what: str, form: str) -> list[tuple]:
    """`items` as a list of tuples of `size` entries each (`form` names them, e.g. "(layer, head)"),
    or InterpError naming the first one that is not: so a caller's loop that unpacks them never
    fails with Python's bare "not enough values to unpack" (a bare string is refused too: it
    iterates into characters)."""
    if isinstance(items, (str, bytes)) or not hasattr(items, "__iter__"):
        raise InterpError(f"{what} must be a list of {form} tuples, got {items!r}")
    out = []
    for item in items:
        if isinstance(item, (str, bytes)) or not hasattr(item, "__len__") or len(item) != size:
            raise InterpError(f"{what} must be a list of {form} tuples; {item!r} is not one")
        out.append(tuple(item))
    return out


def check_position(pos, n_pos: int, what: str = "position") -> int:
    """`pos` as an int, or InterpError unless it indexes one of `n_pos` positions (negative counts
    from the end, as Python does)."""
    if isinstance(pos, bool) or not isinstance(pos, int):
        try:
            import operator

            pos = operator.index(pos)  # numpy and 0-d torch integers
        except TypeError:
            raise InterpError(f"{what}={pos!r} must be an int position") from None
    if not -n_pos <= pos < n_pos:
        raise InterpError(f"{what}={pos} is past the prompt: it has {n_pos} positions; "
                          f"pass one in -{n_pos}..{n_pos - 1}")
    return pos

"""The Hugging Face model under a bridge, without the bridge: the same weights, native modules.

TransformerLens 4's bridge wraps every HF module in a component with hook points and runs them on
every call, a fixed cost per module per forward that dominates token-by-token generation.
`unwrapped(model)` rebuilds the HF module tree from the bridge's `_original_component`s: shallow
copies that share the bridge's (processed) parameters and buffers, with none of its wrappers,
hooks or patched forwards, and attention through PyTorch's SDPA as HF `generate` runs it. Nothing
of the bridge is changed, and a weight swapped into the bridge after the copy is not seen by it
(the runner builds a fresh copy per use; the copy costs milliseconds).

`native_site(name)` says where a bridge hook name sits in the HF tree, for the names whose
activation is exactly a module's input or output there (the residual stream entering and leaving a
block); the runner's native engine registers plain PyTorch hooks at those places.

The model's block internals live here and nowhere else: `Stack` (the parts of a native causal LM),
`run_blocks` (blocks from one on, on packed segments of positions, ahead of recorded keys and values),
`unembed`, and `after_attention` (the second half of a block of LLaMA's shape). The runner's engines
(`interp.run`) call them; no capability does.
"""

from __future__ import annotations

import copy
import inspect
import re
from collections import OrderedDict
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["NATIVE_SITES", "Stack", "after_attention", "block_list", "native_site", "packed_mask", "plain_blocks", "run_blocks",
           "stack_of", "unembed", "unwrapped"]

# bridge hook name -> (module path under the HF model's block list, "input" or "output")
NATIVE_SITES = {"hook_resid_pre": "input", "hook_resid_post": "output"}
_SITE = re.compile(r"^blocks\.(\d+)\.(hook_resid_pre|hook_resid_post)$")
_HOOK_DICTS = ("_forward_hooks", "_forward_hooks_with_kwargs", "_forward_hooks_always_called",
               "_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_backward_hooks",
               "_backward_pre_hooks", "_state_dict_hooks", "_load_state_dict_pre_hooks")


def _is_bridge(module: torch.nn.Module) -> bool:
    return "_original_component" in module.__dict__ or "_original_component" in getattr(module, "_modules", {})


def _original(module: torch.nn.Module) -> torch.nn.Module:
    while True:
        inner = module.__dict__.get("_original_component") or module._modules.get("_original_component")
        if inner is None:
            return module
        module = inner


def _copy(module: torch.nn.Module, config, memo: dict[int, torch.nn.Module]) -> torch.nn.Module:
    module = _original(module)
    if id(module) in memo:  # a module reached twice stays one module
        return memo[id(module)]
    new = copy.copy(module)
    memo[id(module)] = new
    new.__dict__.pop("forward", None)  # a forward patched onto the instance by the bridge
    for name in _HOOK_DICTS:
        if name in new.__dict__:
            setattr(new, name, OrderedDict())
    new._parameters = OrderedDict(module._parameters)
    new._buffers = OrderedDict(module._buffers)
    new._modules = OrderedDict((k, None if v is None else _copy(v, config, memo)) for k, v in module._modules.items())
    if getattr(new, "config", None) is not None and not isinstance(new.config, dict):
        new.config = config
    return new


def unwrapped(model) -> torch.nn.Module:
    """The bridge's HF model as plain HF modules sharing its weights (see the module docstring)."""
    hf = model.original_model
    config = copy.copy(hf.config)
    if getattr(config, "attn_logit_softcapping", None) is None:  # SDPA cannot softcap (Gemma-2)
        config._attn_implementation = "sdpa"  # what HF generate runs; no hook reads attention weights here
    config.output_attentions = False
    return _copy(hf, config, {})


def block_list(native: torch.nn.Module, n_layers: int) -> torch.nn.ModuleList | None:
    """The ModuleList of the native model's decoder blocks."""
    for module in native.modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == n_layers:
            return module
    return None


def native_site(name: str) -> tuple[int, str] | None:
    """(block index, "input" | "output") of a bridge hook name with an exact native place, else None."""
    m = _SITE.match(name)
    return None if m is None else (int(m.group(1)), NATIVE_SITES[m.group(2)])


# --- resumed forwards on the native blocks (position patching) -----------------------------------
#
# A forward that begins at block L with the residual of some positions only, their keys and values
# of earlier positions taken from a recorded run. Several such forwards (say, a resid x position
# sweep's cells of one layer, each starting at its own position) run as ONE forward: their
# positions are packed along the sequence axis, and a 4-D mask lets each packed position see the
# recorded keys before its own segment's start and its own segment's keys up to itself. Every
# block then does exactly the work of its segments, in one large matrix product per weight.


@dataclass(frozen=True)
class Stack:
    """The parts of a native causal LM (`unwrapped`) that a resumed forward runs."""

    blocks: torch.nn.ModuleList
    norm: torch.nn.Module
    lm_head: torch.nn.Module
    rotary: torch.nn.Module  # the rotary position embedding (per layer type on Gemma-3)
    layer_types: tuple[str, ...]  # per block: "full_attention" or "sliding_attention"
    window: int | None  # the sliding window of "sliding_attention" blocks
    softcap: float | None  # final logit softcapping (Gemma-2)

    def __len__(self) -> int:
        return len(self.blocks)


def stack_of(native: torch.nn.Module, n_layers: int) -> Stack | None:
    """The blocks, final norm, unembedding and rotary embedding of a native LLaMA / Qwen2 / Gemma
    model, or None for a model whose parts are not found where those families keep them. Not GPT-2:
    under TL 4.3's bridge its HF modules do not compute what the bridge computes (the bridge folds
    the layer norms into split attention weights of its own; the HF c_attn keeps the unfolded ones)."""
    inner, head = getattr(native, "model", None), getattr(native, "lm_head", None)
    if inner is None or head is None:
        return None
    blocks, norm, rotary = (getattr(inner, k, None) for k in ("layers", "norm", "rotary_emb"))
    if not isinstance(blocks, torch.nn.ModuleList) or len(blocks) != n_layers or norm is None or rotary is None:
        return None
    cfg = native.config
    types = tuple(getattr(cfg, "layer_types", None) or ["full_attention"] * n_layers)
    return Stack(blocks, norm, head, rotary, types, getattr(cfg, "sliding_window", None),
                 getattr(cfg, "final_logit_softcapping", None))


class _Prefix:
    """Stands in for HF's cache inside the blocks: hands each layer its recorded keys and values of
    earlier positions ahead of the new ones, and keeps the new ones (what a base run records)."""

    def __init__(self, keys_values: dict[int, tuple[Tensor, Tensor]] | None):
        self.prefix = keys_values
        self.new: dict[int, tuple[Tensor, Tensor]] = {}

    def update(self, keys: Tensor, values: Tensor, layer_idx: int, *args, **kwargs) -> tuple[Tensor, Tensor]:
        self.new[layer_idx] = (keys, values)
        if self.prefix is None:
            return keys, values
        k0, v0 = self.prefix[layer_idx]
        return torch.cat([k0, keys], 2), torch.cat([v0, values], 2)


def packed_mask(starts: list[int], n_prefix: int, n_pos: int, window: int | None, dtype: torch.dtype,
                device) -> tuple[Tensor, Tensor]:
    """(additive mask [1, 1, q, n_prefix + q], positions [q]) for segments that cover positions
    starts[i]..n_pos-1 each, packed one after another (q = their total length). A packed position t
    of segment i sees the recorded keys 0..starts[i]-1 and its own segment's keys up to t; with a
    `window`, only keys less than `window` positions back (HF's sliding-window rule)."""
    pos = torch.cat([torch.arange(s, n_pos, device=device) for s in starts])  # [q]
    seg = torch.cat([torch.full((n_pos - s,), i, device=device) for i, s in enumerate(starts)])
    first = torch.tensor(starts, device=device)[seg]  # [q] each position's segment start
    key_pos = torch.cat([torch.arange(n_prefix, device=device), pos])  # [k]
    recorded = torch.arange(n_prefix + len(pos), device=device) < n_prefix  # [k]
    ok = torch.where(recorded[None, :], key_pos[None, :] < first[:, None],
                     (torch.cat([torch.full((n_prefix,), -1, device=device), seg])[None, :] == seg[:, None])
                     & (key_pos[None, :] <= pos[:, None]))  # [q, k]
    if window is not None:
        ok &= pos[:, None] - key_pos[None, :] < window
    mask = torch.zeros(ok.shape, dtype=dtype, device=device).masked_fill_(~ok, torch.finfo(dtype).min)
    return mask[None, None], pos


def run_blocks(stack: Stack, layer: int, hidden: Tensor, positions: Tensor, masks: dict[str, Tensor],
               keys_values: dict[int, tuple[Tensor, Tensor]] | None = None) -> tuple[Tensor, list[Tensor], _Prefix]:
    """Blocks layer.. of `stack` on `hidden` [batch, q, d_model] at absolute `positions` [q] under
    `masks` (per layer type, from `packed_mask`), with `keys_values` ({block's layer_idx: (keys,
    values)}, each [batch, kv_head, n_prefix, d_head]) ahead of the new keys. Returns (the last block's output, each block's input
    [from `layer` on], the cache holding each block's new keys and values)."""
    cache = _Prefix(keys_values)
    ids = positions[None].expand(hidden.shape[0], -1)
    embeddings: dict[str, tuple[Tensor, Tensor]] = {}
    inputs = []
    for i in range(layer, len(stack)):
        kind = stack.layer_types[i]
        kwargs: dict = {"attention_mask": masks[kind], "cache": cache, "use_cache": True}
        if kind not in embeddings:
            takes_kind = "layer_type" in inspect.signature(stack.rotary.forward).parameters
            embeddings[kind] = stack.rotary(hidden, ids, kind) if takes_kind else stack.rotary(hidden, ids)
        kwargs.update(position_embeddings=embeddings[kind], position_ids=ids)
        inputs.append(hidden)
        out = stack.blocks[i](hidden, **kwargs)
        hidden = out[0] if isinstance(out, tuple) else out
    return hidden, inputs, cache


def unembed(stack: Stack, hidden: Tensor) -> Tensor:
    """Logits of final-block outputs [..., d_model] -> [..., d_vocab] (final norm, unembedding, and
    Gemma-2's softcapping)."""
    logits = stack.lm_head(stack.norm(hidden))
    if stack.softcap:
        logits = torch.tanh(logits / stack.softcap) * stack.softcap
    return logits


# --- the second half of a block of LLaMA's shape ------------------------------------------------------
#
# On a block computing x + o_proj(z) after attention, then x + mlp(norm(x)), a head's output enters the
# model only through o_proj: a forward that changes z of block L may begin at block L's o_proj.

_PLAIN_BLOCKS = ("LlamaDecoderLayer", "Qwen2DecoderLayer", "MistralDecoderLayer")


def plain_blocks(stack: Stack) -> bool:
    """Whether every block of `stack` has LLaMA's shape (Gemma's norms around the attention output
    do not), so `after_attention` is the whole of a block after its heads."""
    return all(type(b).__name__ in _PLAIN_BLOCKS for b in stack.blocks)


def after_attention(block: torch.nn.Module, resid: Tensor, z: Tensor) -> Tensor:
    """Block output from its input `resid` [rows, pos, d_model] and head outputs `z` [rows, pos,
    head, d_head]: resid + o_proj(z), then the MLP half (a block of `plain_blocks`' shape)."""
    mid = resid + block.self_attn.o_proj(z.flatten(-2))
    return mid + block.mlp(block.post_attention_layernorm(mid))

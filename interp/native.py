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
block); `interp.run.natively` registers plain PyTorch hooks at those places.
"""

from __future__ import annotations

import copy
import re
from collections import OrderedDict

import torch

__all__ = ["NATIVE_SITES", "block_list", "native_site", "unwrapped"]

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

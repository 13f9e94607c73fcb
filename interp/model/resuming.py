"""Resuming a forward pass: a KV cache of earlier positions, and blocks that need not run. What
`interp.run.evaluate` uses to begin a forward where its variants first differ from the base run.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

import torch

from interp.errors import InterpError
from interp.model.building import DECODER_FAMILIES, family_of

__all__ = ["RESUMABLE_FAMILIES", "cached_keys_values", "can_resume", "kv_cache_kwargs", "new_kv_cache", "prefilled_kv_cache",
           "resume", "skipped_blocks"]


# causal decoders a forward may resume in: the zoo's, and those the real models add (loaded, not
# built by build_tiny or trained in the zoo)
RESUMABLE_FAMILIES = (*DECODER_FAMILIES, "gemma3", "gemma3_text")


def new_kv_cache(model):
    """An empty Hugging Face KV cache for `model`."""
    from transformers import DynamicCache

    try:
        return DynamicCache(config=model.original_model.config)
    except TypeError:  # transformers < 4.56
        return DynamicCache()


def kv_cache_kwargs(model, cache) -> dict[str, Any]:
    """Forward kwargs that hand `cache` to the bridge: under the HF model's own name and as
    `layer_past`, where TL 4.3's attention looks (transformers 5 passes it on as `cache`)."""
    import inspect

    params = inspect.signature(model.original_model.forward).parameters
    return {"cache" if "cache" in params else "past_key_values": cache, "layer_past": cache, "use_cache": True}


def cached_keys_values(cache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer (keys, values) [batch, kv_head, pos, d_head] held by a filled HF cache."""
    if hasattr(cache, "layers"):  # transformers >= 4.56
        return [(layer.keys, layer.values) for layer in cache.layers]
    return list(zip(cache.key_cache, cache.value_cache))


def prefilled_kv_cache(model, keys_values: list[tuple[torch.Tensor, torch.Tensor]]):
    """A cache that already holds `keys_values` (one pair per layer), as if those positions ran."""
    cache = new_kv_cache(model)
    for layer, (keys, values) in enumerate(keys_values):
        cache.update(keys, values, layer)
    return cache


def can_resume(model) -> bool:
    """Whether `resume` may skip work on this model: a causal decoder of a supported family
    (BERT attends both ways, so a later position can change an earlier one)."""
    hf_cfg = getattr(model.original_model, "config", None)
    return hf_cfg is not None and family_of(hf_cfg.to_dict()) in RESUMABLE_FAMILIES and _hf_block_list(model) is not None


class _SkippedBlock(torch.nn.Module):
    """Stands in for a block whose output is discarded: hands its input on, computes nothing."""

    def forward(self, hidden_states, *args, **kwargs):
        return hidden_states


def _hf_block_list(model) -> torch.nn.ModuleList | None:
    """The HF ModuleList that holds the bridge's blocks (transformer.h, model.layers, ...)."""
    first = model.blocks[0]
    for module in model.original_model.modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == len(model.blocks) and module[0] is first:
            return module
    return None


@contextmanager
def skipped_blocks(model, n: int) -> Iterator[None]:
    """Blocks 0..n-1 do nothing inside the context (restored on exit, even on error).

    Only for a forward that starts at block n (`start_at_layer=n`), which discards their output
    anyway: TL 4.3's bridge still runs them, and this is what it would cost."""
    if n == 0:
        yield
        return
    blocks = _hf_block_list(model)
    if blocks is None:
        raise RuntimeError("cannot find the Hugging Face module list that holds the model's blocks")
    originals = [blocks[i] for i in range(n)]
    try:
        for i in range(n):
            blocks[i] = _SkippedBlock()
        yield
    finally:
        for i, block in enumerate(originals):
            blocks[i] = block


def resume(
    model,
    tokens: torch.Tensor,
    *,
    layer: int = 0,
    start: int = 0,
    residual: torch.Tensor | None = None,
    keys_values: list[tuple[torch.Tensor, torch.Tensor]] | None = None,
) -> torch.Tensor:
    """Logits [batch, pos - start, d_vocab] of a forward that begins at block `layer` and position
    `start` of `tokens` [batch, pos], on a causal decoder (`can_resume`).

    What is skipped must be supplied, as a run that did compute it recorded it: `residual`, the
    input of block `layer` (its hook_resid_pre) at positions start.., when layer > 0; and
    `keys_values`, every layer's keys and values at positions < start, when start > 0. Hooks
    fire only where work is done, on activations that span positions start.. only.
    """
    n_pos = tokens.shape[1]
    if not 0 <= start < n_pos:
        raise InterpError(f"start={start} must lie in [0, {n_pos}) for {n_pos} positions")
    if layer and residual is None:
        raise InterpError(f"layer={layer} needs the residual entering that block")
    if start and keys_values is None:
        raise InterpError(f"start={start} needs the keys and values of positions 0..{start - 1}")
    kwargs: dict[str, Any] = {}
    if start:
        kwargs = kv_cache_kwargs(model, prefilled_kv_cache(model, keys_values))
        kwargs["position_ids"] = torch.arange(start, n_pos, device=tokens.device).expand(tokens.shape[0], -1)
    with skipped_blocks(model, layer):
        if layer:
            return model(residual, start_at_layer=layer, **kwargs)
        return model(tokens[:, start:], **kwargs)

"""One step of token-by-token decoding under interventions, on the engine the model and the sites
qualify for: the bridge's HF model without the bridge (`hf_hooks.natively`, HF's KV cache and SDPA
attention, what HF `generate` costs) where it computes the bridge's function, else the bridge
(`runner.intervened`). Generation describes its steps; it never picks the engine.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Sequence

import torch
from torch import Tensor

from interp.errors import InterpError
from interp.interventions import Intervention
from interp.model import native as native_model
from interp.model.resuming import kv_cache_kwargs, new_kv_cache
from interp.run.hf_hooks import natively, natively_possible
from interp.run.runner import intervened

__all__ = ["Decoder", "decoder"]


@dataclass(frozen=True)
class Decoder:
    """Runs one decoding step's forward (`__call__`) on the bridge (`hf` None) or natively on `hf`,
    with a KV cache (`new_cache`) when `cached`."""

    model: Any
    hf: torch.nn.Module | None
    cached: bool = True

    @property
    def native(self) -> bool:
        return self.hf is not None

    def new_cache(self):
        """An empty KV cache for the steps to fill (None when not `cached`)."""
        return new_kv_cache(self.model) if self.cached else None

    def cache_kwargs(self, kv) -> dict[str, Any]:
        """Forward kwargs that hand the KV cache `kv` (None: no cache) to this engine's model."""
        cache_kw = kv_cache_kwargs(self.model, kv) if kv is not None else {}
        if self.hf is not None:  # HF's own names only: its layers take **kwargs and would carry `layer_past` along
            cache_kw = {k: v for k, v in cache_kw.items() if k != "layer_past"}
            if "logits_to_keep" in inspect.signature(self.hf.forward).parameters:
                cache_kw["logits_to_keep"] = 1  # as HF generate: the unembedding at the last position only
        return cache_kw

    def __call__(self, interventions: Sequence[Intervention], seq: Tensor, *, start: int, record: Sequence[str],
                 **kw) -> tuple[Tensor, dict[str, Tensor]]:
        """(logits, {name: activation} for `record`) of one forward on `seq` under `interventions`."""
        if self.hf is not None:
            with torch.no_grad(), natively(self.model, self.hf, interventions, start=start, record=record) as seen:
                return self.hf(input_ids=seq, **kw).logits, seen
        with torch.no_grad(), intervened(self.model, interventions, start=start, record=record) as seen:
            return self.model(seq, **kw), seen


def decoder(model, sites: Sequence[str], *, cached: bool, native: bool | None = None) -> Decoder:
    """The engine for decoding steps whose interventions sit at `sites`: natively when `cached`, every
    site the residual stream entering or leaving a block, no hook of the caller's on the bridge, and
    the HF modules compute the bridge's function (`hf_hooks.native_agrees`); else the bridge.
    `native`: None chooses so; True requires the native engine (InterpError where it cannot run);
    False never uses it."""
    possible = cached and natively_possible(model, sites)
    if native and not possible:
        raise InterpError(f"native=True cannot run here: it needs use_cache=True, sites blocks.L.hook_resid_pre/post "
                          f"(got {list(sites)}), no hooks on the bridge, and HF modules that compute the bridge's logits "
                          f"(TL's GPT-2 does not); pass native=None")
    return Decoder(model, native_model.unwrapped(model) if possible and native is not False else None, cached)

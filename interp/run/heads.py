"""The heads engine: variants that each change the head outputs (hook_z) of one block, resumed at
that block's o_proj on the native Hugging Face blocks.

On a block of LLaMA's shape the heads' outputs enter the model only through o_proj, so changing z of
block L (a head patched, masked or ablated) changes nothing before block L's o_proj: a variant runs block L's second half
(`interp.model.native.after_attention`) and blocks L+1.. at every position, natively; the variants of
one block side by side along the batch axis.

`interp.run.evaluate` runs variants here when every one qualifies (`cells`): interventions only, all
at one `blocks.L.attn.hook_z`, on a causal decoder whose blocks all have LLaMA's shape and compute
the bridge's (`hf_hooks.heads_agree`), on one device, with no hook of the caller's on the model. Each
variant's interventions act on the base run's z there, as the runner's hook would.
"""

from __future__ import annotations

import re
from typing import Callable, Sequence

import torch
from torch import Tensor
from tqdm.auto import tqdm

from interp.interventions import Intervention
from interp.model import native
from interp.run.hf_hooks import heads_agree, natively_possible
from interp.run.runner import Variant, applied, at_one_site, cache, measure

__all__ = ["Cell", "cells", "evaluate"]

# at most about this many floats live in one forward (as in `interp.run.packed`)
_FLOATS = 2**26
_SITE = re.compile(r"^blocks\.(\d+)\.attn\.hook_z$")

Cell = tuple[int, list[Intervention]]  # (block, interventions) of one variant


def cells(model, tokens: Tensor, variants: Sequence[Variant]) -> list[Cell] | None:
    """Each variant's (block, interventions) when every variant qualifies (module docstring), else None."""
    found = at_one_site(variants, _SITE)
    names = [f"blocks.{l}.hook_resid_pre" for l in range(model.cfg.n_layers)]
    if found is None or not natively_possible(model, names) or not heads_agree(model):
        return None
    return found


def evaluate(model, tokens: Tensor, todo: list[Cell], metric: Callable, answer_pos: Tensor | None, *,
             cap: int | None = None, progress: bool = True, desc: str = "variants") -> list[Tensor]:
    """The metric of `tokens` under each cell's interventions, in `todo`'s order (as `measure` gives
    it). `cap`: most cells per forward."""
    cfg = model.cfg
    stack = native.stack_of(native.unwrapped(model), cfg.n_layers)
    z_names = [f"blocks.{l}.attn.hook_z" for l in range(cfg.n_layers)]
    pre = [f"blocks.{l}.hook_resid_pre" for l in range(cfg.n_layers)]
    batch, n_pos = tokens.shape
    found: dict[int, Tensor] = {}
    with torch.no_grad():
        base_logits, acts = cache(model, tokens, z_names + pre, answer_pos=answer_pos)
        device, dtype = base_logits.device, acts[pre[0]].dtype
        masks = {kind: native.packed_mask([0], 0, n_pos, stack.window if kind == "sliding_attention" else None,
                                          dtype, device)[0] for kind in set(stack.layer_types)}
        per_token = 4 * (cfg.d_mlp or 4 * cfg.d_model) + (cfg.d_vocab if answer_pos is None else 0)
        fit = max(1, _FLOATS // (batch * n_pos * (cfg.n_heads * n_pos + per_token)))
        size = min(fit, cap or fit)
        plan = []
        for layer in range(cfg.n_layers):
            mine = [i for i, c in enumerate(todo) if c[0] == layer]
            plan += [(layer, mine[i : i + size]) for i in range(0, len(mine), size)]
        positions = torch.arange(n_pos, device=device)
        for layer, members in tqdm(plan, desc=desc, disable=not progress or len(plan) < 2):
            z = torch.stack([applied(todo[i][1], acts[z_names[layer]], z_names[layer]) for i in members])  # [cells, batch, pos, head, d_head]
            hidden = native.after_attention(stack.blocks[layer], acts[pre[layer]].repeat(len(members), 1, 1),
                                            z.flatten(0, 1))
            out, _, _ = native.run_blocks(stack, layer + 1, hidden, positions, masks)
            found.update(zip(members, _measured(stack, out.unflatten(0, (len(members), batch)), metric, answer_pos)))
    return [found[i] for i in range(len(todo))]


def _measured(stack: native.Stack, out: Tensor, metric: Callable, answer_pos: Tensor | None) -> list[Tensor]:
    """The metric of each cell's final-block outputs `out` [cells, batch, pos, d_model]: logits at
    each row's answer position (NaN elsewhere, as `run.evaluate` hands a metric; one unembedding for
    all cells), or at every position."""
    if answer_pos is None:
        return [measure(metric, native.unembed(stack, rows), "intervened") for rows in out]
    rows = torch.arange(out.shape[1], device=out.device)
    at = native.unembed(stack, out[:, rows, answer_pos])  # [cells, batch, d_vocab]
    whole = torch.full((*out.shape[1:3], at.shape[-1]), float("nan"), dtype=at.dtype, device=at.device)
    values = []
    for cell in at:
        whole[rows, answer_pos] = cell
        values.append(measure(metric, whole, "intervened"))
    return values

"""The packed engine: variants that each change the residual entering one block from some position
on, resumed per variant and packed per block on the native Hugging Face blocks.

Changing the residual entering block L from position p on (a patch at p, an ablation, a steer whose
first position is p) leaves every block before L and, attention being causal, every position before
p as in the base run. So such a variant runs blocks L.. at positions p.. only, the keys and values of positions < p taken from one recorded base run. The
variants of one block start at different positions, so no two share a shape; they run as ONE
forward anyway, on the native blocks (`interp.model.native.run_blocks`): each variant's positions are
a segment packed along the sequence axis, and an attention mask keeps each segment to the recorded
keys before its start and its own keys (`interp.model.native.packed_mask`). A block's variants thus
cost one forward whose every matrix product has the arithmetic of the limit, with none of the
bridge's per-module hooks, and the unembedding runs at each row's answer position only.

`interp.run.evaluate` runs variants here when every one qualifies (`cells`): interventions only, all
at one `blocks.L.hook_resid_pre`, whose first position (`first_pos`) lies in the input, on a causal
decoder whose native blocks compute the bridge's (`hf_hooks.stack_agrees`), on one device, with no
hook of the caller's on the model. Each variant's interventions act on the base run's whole residual
there, as the runner's hook would; the segment from its first position on is what runs.
"""

from __future__ import annotations

import re
from typing import Callable, Sequence

import torch
from torch import Tensor
from tqdm.auto import tqdm

from interp.interventions import Intervention
from interp.model import native
from interp.run.hf_hooks import natively_possible, stack_agrees
from interp.run.runner import Variant, applied, at_one_site, cache, measure

__all__ = ["Cell", "cells", "evaluate", "groups"]

# at most about this many floats live in one packed forward: attention scores (batch x heads x
# queries x keys), MLP activations and, with no answer positions, logits at every packed position
_FLOATS = 2**26
_SITE = re.compile(r"^blocks\.(\d+)\.hook_resid_pre$")

Cell = tuple[int, int, list[Intervention]]  # (block, first position, interventions) of one variant


def cells(model, tokens: Tensor, variants: Sequence[Variant]) -> list[Cell] | None:
    """Each variant's (block, first position, interventions) when every variant qualifies (module
    docstring), else None."""
    n_pos = tokens.shape[1]
    found = at_one_site(variants, _SITE)
    if found is None:
        return None
    todo = [(layer, min(iv.first_pos for iv in ivs), ivs) for layer, ivs in found]
    if not all(0 <= p < n_pos for _, p, _ in todo):
        return None
    names = [f"blocks.{l}.hook_resid_pre" for l in range(model.cfg.n_layers)]
    if not natively_possible(model, names) or not stack_agrees(model):
        return None
    return todo


def groups(starts: Sequence[int], n_pos: int, batch: int, heads: int, per_token: int, cap: int | None) -> list[list[int]]:
    """Indices of `starts` (segments starts[i]..n_pos-1) in consecutive groups that fit one forward
    (under _FLOATS floats, counting `per_token` floats per packed position besides the attention
    scores; at most `cap` segments)."""
    out: list[list[int]] = [[]]
    q = 0
    for i, p in enumerate(starts):
        width = n_pos - p
        size = batch * (q + width) * (heads * (n_pos + q + width) + per_token)
        if out[-1] and (size > _FLOATS or len(out[-1]) == cap):
            out.append([])
            q = 0
        out[-1].append(i)
        q += width
    return out if out[0] else []


def evaluate(model, tokens: Tensor, todo: list[Cell], metric: Callable, answer_pos: Tensor | None, *,
             cap: int | None = None, progress: bool = True, desc: str = "variants") -> list[Tensor]:
    """The metric of `tokens` under each cell's interventions, in `todo`'s order (as `measure` gives it).

    The native base run starts from the bridge's embedding (block 0's input); rows whose answer
    lies before a cell's position read the bridge's base logits. `cap`: most cells per forward."""
    L = model.cfg.n_layers
    stack = native.stack_of(native.unwrapped(model), L)
    base_logits, acts = cache(model, tokens, ["blocks.0.hook_resid_pre"], answer_pos=answer_pos)
    embedded = acts["blocks.0.hook_resid_pre"]
    batch, n_pos, _ = embedded.shape
    dtype, device = embedded.dtype, embedded.device
    found: dict[int, Tensor] = {}
    with torch.no_grad():
        full = {kind: native.packed_mask([0], 0, n_pos, stack.window if kind == "sliding_attention" else None,
                                         dtype, device)[0] for kind in set(stack.layer_types)}
        _, resid, recorded = native.run_blocks(stack, 0, embedded, torch.arange(n_pos, device=device), full)
        keys_values = recorded.new  # {layer_idx: (keys, values)} of every position, as the blocks look them up
        cfg = model.cfg
        per_token = 4 * (cfg.d_mlp or 4 * cfg.d_model) + (cfg.d_vocab if answer_pos is None else 0)
        plan = []
        for layer in range(L):
            mine = sorted((i for i, c in enumerate(todo) if c[0] == layer), key=lambda i: todo[i][1])
            for g in groups([todo[i][1] for i in mine], n_pos, batch, cfg.n_heads, per_token, cap):
                plan.append((layer, [mine[j] for j in g]))
        for layer, members in tqdm(plan, desc=desc, disable=not progress or len(plan) < 2):
            values = _group(stack, layer, [todo[i][1:] for i in members], resid[layer], keys_values, metric,
                            base_logits, answer_pos)
            found.update(zip(members, values))
    return [found[i] for i in range(len(todo))]


def _group(stack: native.Stack, layer: int, segments: list[tuple[int, list[Intervention]]], resid: Tensor,
           keys_values: dict[int, tuple[Tensor, Tensor]], metric: Callable, base_logits: Tensor,
           answer_pos: Tensor | None) -> list[Tensor]:
    """The metric of each (first position p, interventions) at block `layer`'s input, from one packed
    forward."""
    batch, n_pos, _ = resid.shape
    site = f"blocks.{layer}.hook_resid_pre"
    starts = [p for p, _ in segments]
    # each segment: the base residual under the variant's interventions, at positions p..
    hidden = torch.cat([applied(ivs, resid, site)[:, p:] for p, ivs in segments], 1)  # [batch, q, d_model]
    masks, positions = {}, None
    for kind in set(stack.layer_types):
        window = stack.window if kind == "sliding_attention" else None
        masks[kind], positions = native.packed_mask(starts, n_pos, n_pos, window, hidden.dtype, hidden.device)
    out, _, _ = native.run_blocks(stack, layer, hidden, positions, masks, keys_values)
    offsets = [0]
    for p in starts:
        offsets.append(offsets[-1] + n_pos - p)
    rows = torch.arange(batch, device=out.device)
    values = []
    if answer_pos is not None:  # each row's answer position in each segment (clamped: rows before p read the base)
        at = torch.stack([offsets[i] + (answer_pos - p).clamp(min=0) for i, p in enumerate(starts)], 1)
        logits = native.unembed(stack, out[rows[:, None], at])  # [batch, cells, d_vocab]
        # one buffer for the group's cells, NaN off the answers (as `run.evaluate` hands a metric)
        whole = torch.full((batch, n_pos, logits.shape[-1]), float("nan"), dtype=logits.dtype, device=logits.device)
        before = base_logits[rows, answer_pos]  # rows whose answer lies before p: the base run's
        for i, p in enumerate(starts):
            whole[rows, answer_pos] = torch.where((answer_pos < p)[:, None], before, logits[:, i])
            values.append(measure(metric, whole, "intervened"))
        return values
    logits = native.unembed(stack, out)  # [batch, q, d_vocab]
    for i, p in enumerate(starts):
        whole = torch.cat([base_logits[:, :p], logits[:, offsets[i]:offsets[i + 1]]], 1)
        values.append(measure(metric, whole, "intervened"))
    return values

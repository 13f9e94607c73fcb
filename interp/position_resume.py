"""Patching sweeps at their limit, natively: each cell redoes only what its patch can change.

Patching the residual entering block L at position p (a resid_pre x position cell) leaves every
block before L and, attention being causal, every position before p as in the base run. So a cell
runs blocks L.. at positions p.. only, the keys and values of positions < p taken from one recorded
base run. The cells of one layer start at different positions, so no two share a shape; they run
as ONE forward anyway, on the native Hugging Face blocks (`interp.native`): each cell's positions
are a segment packed along the sequence axis, and an attention mask keeps each segment to the
recorded keys before its start and its own keys (`interp.native.packed_mask`). A layer's cells
thus cost one forward whose every matrix product has the arithmetic of the limit, with none of the
bridge's per-module hooks, and the unembedding runs at each row's answer position only.

Head outputs over all positions (`site="z"`, by_pos=False) take a second native path, `z_all_pos`
(see its section below), on blocks of LLaMA's shape.

Used by `interp.patching.activation_patch(site="resid_pre", by_pos=True)` where it applies
(`applies`): a causal decoder of a family whose native blocks `interp.native.stack_of` finds, on one
device, no hook of the caller's on the model, and by-index positions; elsewhere the sweep runs as
one `interp.run.evaluate` variant per cell, as before. The numbers are the same (tested to 1e-5
against that path and TransformerLens's).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor
from tqdm.auto import tqdm

from interp import native, run
from interp.tensors import tolerance

__all__ = ["applies", "heads_apply", "resid_pre_by_pos", "z_all_pos"]

# at most about this many floats live in one packed forward: attention scores (batch x heads x
# queries x keys), MLP activations and, with no answer positions, logits at every packed position
_FLOATS = 2**26


def applies(model, site: str, by_pos: bool, mode: str) -> bool:
    """Whether `resid_pre_by_pos` can run this sweep (see the module docstring)."""
    if site != "resid_pre" or not by_pos or mode == "named":
        return False
    names = [f"blocks.{l}.hook_resid_pre" for l in range(model.cfg.n_layers)]
    return run.natively_possible(model, names) and native.stack_of(native.unwrapped(model), model.cfg.n_layers) is not None


def _groups(n_pos: int, batch: int, heads: int, per_token: int, cap: int | None) -> list[list[int]]:
    """Start positions 0..n_pos-1 in groups that fit one forward (under _FLOATS floats, counting
    `per_token` floats per packed position besides the attention scores; at most `cap` cells)."""
    out: list[list[int]] = [[]]
    q = 0
    for p in range(n_pos):
        width = n_pos - p
        size = batch * (q + width) * (heads * (n_pos + q + width) + per_token)
        if out[-1] and (size > _FLOATS or len(out[-1]) == cap):
            out.append([])
            q = 0
        out[-1].append(p)
        q += width
    return out


def resid_pre_by_pos(model, base: list[Tensor], source: list[Tensor], metric: Callable, base_logits: Tensor,
                     answer_pos: Tensor | None, *, cap: int | None = None, progress: bool = True) -> Tensor | None:
    """The metric of the base run (`base[l]`: its hook_resid_pre of block l, [batch, pos, d_model],
    as the bridge recorded it) with hook_resid_pre of block l at position p taken from `source[l]`
    (same shape), for every (l, p), as [n_layers * pos] in (layer, pos) order.

    `base_logits`: the base run's logits (NaN but at `answer_pos` when that is given: cells whose
    row's answer lies before the patched position read them). `cap`: most cells per forward. None
    (nothing run but the base run) when the native blocks do not reproduce the bridge's base run."""
    stack = native.stack_of(native.unwrapped(model), model.cfg.n_layers)
    batch, n_pos, _ = base[0].shape
    dtype, device = source[0].dtype, source[0].device
    with torch.no_grad():
        full = {kind: native.packed_mask([0], 0, n_pos, stack.window if kind == "sliding_attention" else None,
                                         dtype, device)[0] for kind in set(stack.layer_types)}
        out, resid, recorded = native.run_blocks(stack, 0, base[0], torch.arange(n_pos, device=device), full)
        if not _agrees(stack, out, resid, base, base_logits, answer_pos):
            return None
        keys_values = recorded.new  # {layer_idx: (keys, values)} of every position, as the blocks look them up
        cfg = model.cfg
        per_token = 4 * (cfg.d_mlp or 4 * cfg.d_model) + (cfg.d_vocab if answer_pos is None else 0)
        groups = [(l, g) for l in range(len(stack)) for g in _groups(n_pos, batch, cfg.n_heads, per_token, cap)]
        values = torch.empty(len(stack), n_pos)  # cpu: a result
        for layer, starts in tqdm(groups, desc="patch resid_pre", disable=not progress or len(groups) < 2):
            for p, value in zip(starts, _group(stack, layer, starts, resid[layer], source[layer], keys_values, metric,
                                               base_logits, answer_pos)):
                values[layer, p] = value
    return values.flatten()


def _agrees(stack: native.Stack, out: Tensor, resid: list[Tensor], bridge: list[Tensor], base_logits: Tensor,
            answer_pos: Tensor | None) -> bool:
    """Whether the native blocks reproduce the bridge on the base run: every block's input, and the
    logits the metric reads (a guard: a bridge that computes with weights the HF modules do not
    hold, as TL 4.3's GPT-2 does, differs by far more than float rounding)."""
    rtol = tolerance(out.dtype, 1e-5)

    def close(a: Tensor, b: Tensor) -> bool:
        return bool((a.float() - b.float()).abs().max() <= rtol * max(1.0, float(b.abs().max())))

    if out.dtype not in (torch.float32, torch.float64):
        # rounding grows with depth and the paths round differently (run.hf_hooks.native_agrees,
        # which `applies` required, compared every stage on its own): the first block's output here
        return len(resid) < 2 or bool((resid[1].float() - bridge[1].float()).norm() <= rtol * bridge[1].float().norm())
    if not all(close(a, b) for a, b in zip(resid, bridge)):
        return False
    if answer_pos is None:
        return close(native.unembed(stack, out), base_logits)
    rows = torch.arange(out.shape[0], device=out.device)
    return close(native.unembed(stack, out[rows, answer_pos]), base_logits[rows, answer_pos])


def _group(stack: native.Stack, layer: int, starts: list[int], resid: Tensor, source: Tensor,
           keys_values: dict[int, tuple[Tensor, Tensor]], metric: Callable, base_logits: Tensor,
           answer_pos: Tensor | None) -> list[float]:
    """The metric of each cell (layer, p) for p in `starts`, from one packed forward."""
    batch, n_pos, _ = resid.shape
    segments = []
    for p in starts:  # base residual at positions p.., the patched one first
        seg = resid[:, p:].clone()
        seg[:, 0] = source[:, p]
        segments.append(seg)
    hidden = torch.cat(segments, 1)  # [batch, q, d_model]
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
            values.append(run.scalar(metric, whole, "intervened"))
        return values
    logits = native.unembed(stack, out)  # [batch, q, d_vocab]
    for i, p in enumerate(starts):
        whole = torch.cat([base_logits[:, :p], logits[:, offsets[i]:offsets[i + 1]]], 1)
        values.append(run.scalar(metric, whole, "intervened"))
    return values


# --- head outputs (z), all positions ---------------------------------------------------------------
#
# On a block of LLaMA's shape (x + o_proj(z) after attention, then x + mlp(norm(x))) a head's output
# enters the model only through o_proj, so patching z of block L changes nothing before block L's
# o_proj: a cell runs o_proj, block L's MLP half and blocks L+1.. at every position, natively; the
# heads of a layer side by side along the batch axis.

_PLAIN_BLOCKS = ("LlamaDecoderLayer", "Qwen2DecoderLayer", "MistralDecoderLayer")


def heads_apply(model, site: str, by_pos: bool) -> bool:
    """Whether `z_all_pos` can run this sweep: site z over all positions, on a causal decoder whose
    native blocks all have LLaMA's shape (Gemma's norms around the attention output do not)."""
    if site != "z" or by_pos:
        return False
    names = [f"blocks.{l}.hook_resid_pre" for l in range(model.cfg.n_layers)]
    if not run.natively_possible(model, names):
        return False
    stack = native.stack_of(native.unwrapped(model), model.cfg.n_layers)
    return stack is not None and all(type(b).__name__ in _PLAIN_BLOCKS for b in stack.blocks)


def _after_attention(block, resid: Tensor, z: Tensor) -> Tensor:
    """Block output from its input `resid` [rows, pos, d_model] and head outputs `z` [rows, pos,
    head, d_head]: resid + o_proj(z), then the MLP half."""
    mid = resid + block.self_attn.o_proj(z.flatten(-2))
    return mid + block.mlp(block.post_attention_layernorm(mid))


def z_all_pos(model, base: Tensor, source_z: list[Tensor], metric: Callable, base_logits: Tensor,
              answer_pos: Tensor | None, *, cap: int | None = None, progress: bool = True) -> Tensor | None:
    """The metric of `base` [batch, pos] with head h's hook_z of block l at every position taken
    from `source_z[l]` [batch, pos, head, d_head], for every (l, h), as [n_layers * n_heads] in
    (layer, head) order; None when the native blocks do not reproduce the bridge's base run."""
    stack = native.stack_of(native.unwrapped(model), model.cfg.n_layers)
    cfg = model.cfg
    z_names = [f"blocks.{l}.attn.hook_z" for l in range(cfg.n_layers)]
    pre = [f"blocks.{l}.hook_resid_pre" for l in range(cfg.n_layers)]
    batch, n_pos = base.shape
    with torch.no_grad():
        _, acts = run.cache(model, base, z_names + pre)
        outs = [_after_attention(stack.blocks[l], acts[pre[l]], acts[z_names[l]]) for l in range(cfg.n_layers)]
        if not _agrees(stack, outs[-1], outs[:-1], [acts[n] for n in pre[1:]], base_logits, answer_pos):
            return None
        device, dtype = base_logits.device, outs[0].dtype
        masks = {kind: native.packed_mask([0], 0, n_pos, stack.window if kind == "sliding_attention" else None,
                                          dtype, device)[0] for kind in set(stack.layer_types)}
        per_token = 4 * (cfg.d_mlp or 4 * cfg.d_model) + (cfg.d_vocab if answer_pos is None else 0)
        fit = max(1, _FLOATS // (batch * n_pos * (cfg.n_heads * n_pos + per_token)))
        size = min(cfg.n_heads, fit, cap or cfg.n_heads)
        chunks = [(l, list(range(h, min(h + size, cfg.n_heads)))) for l in range(cfg.n_layers)
                  for h in range(0, cfg.n_heads, size)]
        values = torch.empty(cfg.n_layers, cfg.n_heads)  # cpu: a result
        positions = torch.arange(n_pos, device=device)
        for layer, heads in tqdm(chunks, desc="patch z", disable=not progress or len(chunks) < 2):
            z = acts[z_names[layer]].unsqueeze(0).repeat(len(heads), 1, 1, 1, 1)  # [cells, batch, pos, head, d_head]
            for j, h in enumerate(heads):
                z[j, :, :, h] = source_z[layer][:, :, h]
            hidden = _after_attention(stack.blocks[layer], acts[pre[layer]].repeat(len(heads), 1, 1), z.flatten(0, 1))
            out, _, _ = native.run_blocks(stack, layer + 1, hidden, positions, masks)
            values[layer, heads] = torch.tensor(_measured(stack, out.unflatten(0, (len(heads), batch)), metric, answer_pos))  # cpu: host floats
    return values.flatten()


def _measured(stack: native.Stack, out: Tensor, metric: Callable, answer_pos: Tensor | None) -> list[float]:
    """The metric of each cell's final-block outputs `out` [cells, batch, pos, d_model]: logits at
    each row's answer position (NaN elsewhere, as `run.evaluate` hands a metric; one unembedding for
    all cells), or at every position."""
    if answer_pos is None:
        return [run.scalar(metric, native.unembed(stack, rows), "intervened") for rows in out]
    rows = torch.arange(out.shape[1], device=out.device)
    at = native.unembed(stack, out[:, rows, answer_pos])  # [cells, batch, d_vocab]
    whole = torch.full((*out.shape[1:3], at.shape[-1]), float("nan"), dtype=at.dtype, device=at.device)
    values = []
    for cell in at:
        whole[rows, answer_pos] = cell
        values.append(run.scalar(metric, whole, "intervened"))
    return values

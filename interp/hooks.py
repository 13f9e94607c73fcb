"""Hook-function factories and the one context manager that adds hooks and always removes them.

Every factory returns a TransformerLens hook `fn(activation, *, hook) -> activation`. Per-head
factories act on `[batch, pos, head, d_head]` activations (hook_z, hook_q, hook_k, hook_v); on GQA
models hook_k / hook_v carry kv heads, so pass kv-head indices there (see `kv_head_of`).
"""

from __future__ import annotations

import difflib
from contextlib import contextmanager
from typing import Callable, Iterator, Literal, Sequence

import torch
from torch import Tensor

HookFn = Callable[..., Tensor | None]
HookList = Sequence[tuple[str, HookFn]]
_HEAD_SITES = ("hook_z", "hook_q", "hook_k", "hook_v", "hook_pattern", "hook_attn_scores")


def hook_names(model) -> list[str]:
    return list(model.hook_dict)


def check_hook_names(model, names: Sequence[str]) -> None:
    """Raise KeyError naming each unknown hook and the nearest valid names."""
    valid = model.hook_dict
    for name in names:
        if name not in valid:
            near = difflib.get_close_matches(name, list(valid), n=5, cutoff=0.5)
            raise KeyError(
                f"unknown hook name {name!r}; nearest valid names: {near or 'none'} "
                f"(see interp.hooks.hook_names(model) for all {len(valid)})"
            )


def check_layer(model, layer: int) -> None:
    n = model.cfg.n_layers
    if not isinstance(layer, int) or not 0 <= layer < n:
        raise IndexError(f"layer {layer!r} is out of range: this model has layers 0..{n - 1}")


def n_kv_heads(model) -> int:
    return getattr(model.cfg, "n_key_value_heads", None) or model.cfg.n_heads


def check_head(model, layer: int, head: int, *, kv: bool = False) -> None:
    check_layer(model, layer)
    n = n_kv_heads(model) if kv else model.cfg.n_heads
    if not isinstance(head, int) or not 0 <= head < n:
        kind = "kv head" if kv else "head"
        raise IndexError(f"{kind} {head!r} is out of range in layer {layer}: valid {kind}s are 0..{n - 1}")


def kv_head_of(model, head: int) -> int:
    """The key/value head that query head `head` reads under grouped-query attention."""
    check_head(model, 0, head)
    return head // (model.cfg.n_heads // n_kv_heads(model))


def head_hook_name(layer: int, site: str) -> str:
    """'blocks.{layer}.attn.hook_{site}' for a per-head site name such as 'z' or 'pattern'."""
    name = site if site.startswith("hook_") else f"hook_{site}"
    if name not in _HEAD_SITES:
        raise ValueError(f"{site!r} is not a per-head site; choose from {[s[5:] for s in _HEAD_SITES]}")
    return f"blocks.{layer}.attn.{name}"


@contextmanager
def hooks(model, fwd: HookList = (), bwd: HookList = ()) -> Iterator[object]:
    """Add forward/backward hooks for the body; they are removed on exit, even when it raises.

    Names are validated before anything is added, so a typo fails before the model runs.
    """
    check_hook_names(model, [n for n, _ in fwd] + [n for n, _ in bwd])
    with model.hooks(fwd_hooks=list(fwd), bwd_hooks=list(bwd)):
        yield model


def _heads_index(heads: int | Sequence[int] | None) -> slice | list[int]:
    if heads is None:
        return slice(None)
    return [heads] if isinstance(heads, int) else list(heads)


def _check_like(what: str, got: Tensor, want: torch.Size) -> None:
    if got.shape != want:
        raise ValueError(f"{what} has shape {tuple(got.shape)} but the activation has {tuple(want)}")


def ablate_heads(
    heads: int | Sequence[int],
    how: Literal["zero", "mean", "resample"] = "zero",
    reference: Tensor | None = None,
) -> HookFn:
    """Ablate heads of a [batch, pos, head, d_head] activation.

    zero: set to 0. mean: replace by `reference` averaged over its batch axis (a
    [batch', pos, head, d_head] reference set with the same positions, or an already averaged
    [pos, head, d_head] / [head, d_head] tensor). resample: replace by `reference`, the activation
    of another input with the same shape as the activation.
    """
    idx = _heads_index(heads)
    if how == "zero":
        if reference is not None:
            raise ValueError("zero ablation takes no reference")
    elif how in ("mean", "resample"):
        if reference is None:
            raise ValueError(f"{how} ablation needs a reference activation")
    else:
        raise ValueError(f"ablation {how!r} is not one of 'zero', 'mean', 'resample'")
    if how == "mean" and reference is not None and reference.ndim == 4:
        reference = reference.mean(0)

    def hook_fn(act: Tensor, *, hook) -> Tensor:
        act = act.clone()
        if how == "zero":
            act[:, :, idx] = 0.0
        elif how == "resample":
            _check_like("resample reference", reference, act.shape)
            act[:, :, idx] = reference[:, :, idx].to(act)
        else:
            ref = reference.to(act)
            if ref.ndim == 3 and ref.shape[0] != act.shape[1]:
                raise ValueError(
                    f"mean reference covers {ref.shape[0]} positions but the activation has "
                    f"{act.shape[1]}; average over positions too ([head, d_head]) for other lengths"
                )
            act[:, :, idx] = ref.expand(act.shape)[:, :, idx] if ref.ndim == 2 else ref[None].expand(act.shape)[:, :, idx]
        return act

    return hook_fn


def patch_from(
    source: Tensor,
    *,
    pos: int | Sequence[int] | Tensor | None = None,
    head: int | Sequence[int] | None = None,
) -> HookFn:
    """Overwrite an activation with `source` (same shape): whole, at positions, at heads, or both.

    Head selection needs a [batch, pos, head, d_head] activation; position selection works on any
    activation with positions on axis 1.
    """

    def hook_fn(act: Tensor, *, hook) -> Tensor:
        _check_like("patch source", source, act.shape)
        if head is not None and act.ndim != 4:
            raise ValueError(f"head patching needs a [batch, pos, head, d_head] activation, got {tuple(act.shape)} at {hook.name}")
        rows = torch.zeros(act.shape[1], dtype=torch.bool, device=act.device)
        rows[slice(None) if pos is None else torch.as_tensor(pos, device=act.device)] = True
        # a [pos, 1...] or [pos, head, 1] mask selects the outer product of positions and heads
        mask = rows.view(-1, *([1] * (act.ndim - 2)))
        if head is not None:
            cols = torch.zeros(act.shape[2], dtype=torch.bool, device=act.device)
            cols[_heads_index(head)] = True
            mask = mask & cols.view(1, -1, 1)
        return torch.where(mask, source.to(act), act)

    return hook_fn


def scale(factor: float | Tensor, *, head: int | Sequence[int] | None = None) -> HookFn:
    """Multiply an activation (or chosen heads of a per-head activation) by `factor`."""
    head_idx = _heads_index(head)

    def hook_fn(act: Tensor, *, hook) -> Tensor:
        if head is None:
            return act * factor
        act = act.clone()
        act[:, :, head_idx] = act[:, :, head_idx] * factor
        return act

    return hook_fn


def add_direction(
    direction: Tensor, alpha: float = 1.0, *, pos: int | Sequence[int] | None = None
) -> HookFn:
    """Add `alpha * direction` to a [batch, pos, d] activation, at all or chosen positions."""
    if direction.ndim != 1:
        raise ValueError(f"direction must be a vector [d], got shape {tuple(direction.shape)}")
    pos_idx = slice(None) if pos is None else ([pos] if isinstance(pos, int) else list(pos))

    def hook_fn(act: Tensor, *, hook) -> Tensor:
        if act.shape[-1] != direction.shape[0]:
            raise ValueError(
                f"direction has size {direction.shape[0]} but {hook.name} has width {act.shape[-1]}"
            )
        act = act.clone()
        act[:, pos_idx] = act[:, pos_idx] + alpha * direction.to(act)
        return act

    return hook_fn


def replace_pattern(pattern: Tensor, *, head: int | Sequence[int] | None = None) -> HookFn:
    """Replace attention patterns [batch, head, dest, src] (all heads, or chosen heads).

    `pattern` is either the full [batch, head, dest, src] tensor, or [batch, dest, src] /
    [dest, src] for a single chosen head (broadcast over batch when 2-D).
    """
    head_idx = _heads_index(head)

    def hook_fn(act: Tensor, *, hook) -> Tensor:
        new = pattern.to(act)
        act = act.clone()
        if head is None:
            _check_like("replacement pattern", new, act.shape)
            return new.clone()
        target = act[:, head_idx]
        if new.ndim == 2:
            new = new[None, None].expand(target.shape)
        elif new.ndim == 3:
            new = new[:, None].expand(target.shape)
        _check_like("replacement pattern", new, target.shape)
        act[:, head_idx] = new
        return act

    return hook_fn

"""Activation patching (exact), attribution patching (linear), and path patching -> Grid.

Conventions follow TransformerLens: with `direction="denoise"` the model runs on the corrupt
input and one cell (a layer, and a position and/or head) takes its activation from the clean
run; the Grid holds the metric of each patched run. `"noise"` runs clean and patches in corrupt.

Each cell is a `Patch` intervention and every cell of a sweep is one variant of `interp.run.evaluate`:
many cells share one batched forward, and on a causal decoder each forward begins at its cells'
first patched block and position, the rest taken from one recorded base run. The numbers are
the same as TransformerLens's to float rounding (the tests hold them to 1e-4).
"""

from __future__ import annotations

from typing import Literal, Sequence

import torch
from torch import Tensor

from interp import run
from interp.errors import InterpError
from interp.hooks import check_head, n_kv_heads
from interp.interventions import Patch
from interp.metrics import Metric, for_task
from interp.results import Grid
from interp.sites import spec_of
from interp.tasks.base import Task

__all__ = ["SITES", "Cell", "activation_patch", "attribution_patch", "cells", "path_patch"]

# the sites a patching sweep runs over (short names of interp.sites)
SITES: tuple[str, ...] = ("resid_pre", "resid_mid", "attn_out", "mlp_out", "z", "q", "k", "v", "pattern")

# A cell: (layer, pos or None for all positions, head or None for the whole activation).
Cell = tuple[int, "int | None", "int | None"]


def _inputs(model, clean, corrupt, metric) -> tuple[Tensor, Tensor, Metric, dict]:
    """Accept a Task, or clean and corrupt tokens with a metric; return tokens, metric, task info."""
    info: dict = {}
    if isinstance(clean, Task):
        if corrupt is not None:
            raise InterpError("pass either a Task, or clean and corrupt tokens; not a Task and corrupt tokens")
        task = clean
        metric = metric if metric is not None else for_task(task)
        clean, corrupt = task.clean, task.corrupt
        info = {"task": task.name, "split": task.split, "n": len(task)}
    if metric is None:
        raise InterpError("a metric (logits -> scalar tensor) is required with raw tokens; see interp.metrics")
    if not callable(metric):
        raise InterpError(f"metric must be a function of the logits, got {type(metric).__name__}")
    if not (isinstance(clean, Tensor) and isinstance(corrupt, Tensor)):
        raise InterpError("clean and corrupt must be [batch, pos] token tensors, or clean a Task")
    if clean.shape != corrupt.shape or clean.ndim != 2:
        raise InterpError(
            f"clean tokens {tuple(clean.shape)} and corrupt tokens {tuple(corrupt.shape)} must both be "
            "[batch, pos] with the same shape, so activations align position by position"
        )
    top = int(max(clean.max(), corrupt.max()))
    if top >= model.cfg.d_vocab:
        raise InterpError(
            f"token id {top} is outside the model's vocabulary (d_vocab={model.cfg.d_vocab}); "
            "were these tokens made with another model's tokenizer?"
        )
    device = model.cfg.device
    return clean.to(device), corrupt.to(device), metric, info


def cells(model, site: str, by_pos: bool, n_pos: int) -> tuple[list[Cell], tuple[str, ...], tuple[int, ...]]:
    """Every cell of a sweep over `site`, in the Grid's order, with the Grid's axes and shape."""
    spec = spec_of(site)
    layers = range(model.cfg.n_layers)
    n_heads = n_kv_heads(model) if spec.kv else model.cfg.n_heads
    head_axis = "kv_head" if spec.kv and n_heads != model.cfg.n_heads else "head"
    L = model.cfg.n_layers
    if spec.kind == "resid":
        if by_pos:
            return [(l, p, None) for l in layers for p in range(n_pos)], ("layer", "pos"), (L, n_pos)
        return [(l, None, None) for l in layers], ("layer",), (L,)
    if spec.kind == "head":
        if by_pos:
            return [(l, p, h) for l in layers for p in range(n_pos) for h in range(n_heads)], ("layer", "pos", head_axis), (L, n_pos, n_heads)
        return [(l, None, h) for l in layers for h in range(n_heads)], ("layer", head_axis), (L, n_heads)
    if by_pos:  # TransformerLens orders pattern-by-position as [layer, head, dest]
        return [(l, p, h) for l in layers for h in range(n_heads) for p in range(n_pos)], ("layer", "head", "dest"), (L, n_heads, n_pos)
    return [(l, None, h) for l in layers for h in range(n_heads)], ("layer", "head"), (L, n_heads)


def _labels(model, axes: tuple[str, ...], tokens: Tensor, shape: tuple[int, ...]) -> tuple:
    out = []
    for axis, n in zip(axes, shape):
        if axis in ("pos", "dest") and tokens.shape[0] == 1:
            out.append(tuple(f"{i}:{t}" for i, t in enumerate(model.to_str_tokens(tokens[0]))))
        else:
            out.append(tuple(range(n)))
    return tuple(out)


def _check_site(site: str) -> None:
    if site not in SITES:
        raise InterpError(f"unknown site {site!r} for a patching sweep; valid sites: {', '.join(SITES)}")


def activation_patch(
    model,
    clean: Task | Tensor,
    corrupt: Tensor | None = None,
    *,
    site: str,
    metric: Metric | None = None,
    by_pos: bool = False,
    direction: Literal["denoise", "noise"] = "denoise",
    variants_per_forward: int | None = None,
    progress: bool = True,
) -> Grid:
    """Exact activation patching of every cell of `site`; same numbers as TransformerLens.

    `clean` is a Task (its metric is the default) or clean tokens with `corrupt` tokens and a
    `metric`. Axes: (layer) / (layer, pos) for residual sites, (layer, head) / (layer, pos, head)
    for per-head sites (kv_head for k and v on GQA models), (layer, head) / (layer, head, dest)
    for the attention pattern. meta records the clean and corrupt metric values.
    """
    _check_site(site)
    clean, corrupt, metric, info = _inputs(model, clean, corrupt, metric)
    if direction not in ("denoise", "noise"):
        raise InterpError(f"direction={direction!r} must be 'denoise' or 'noise'")
    base, source = (corrupt, clean) if direction == "denoise" else (clean, corrupt)
    todo, axes, shape = cells(model, site, by_pos, clean.shape[1])
    names = [spec_of(site).hook.format(layer=l) for l in range(model.cfg.n_layers)]
    source_logits, source_acts = run.cache(model, source, names)
    base_logits = run.logits(model, base)
    clean_logits, corrupt_logits = (source_logits, base_logits) if direction == "denoise" else (base_logits, source_logits)
    variants = [[Patch(names[l], source_acts[names[l]], pos=p, head=h)] for l, p, h in todo]
    values = run.evaluate(model, base, variants, metric, variants_per_forward=variants_per_forward,
                          progress=progress, desc=f"patch {site}")
    return Grid(
        values.view(shape),
        axes,
        _labels(model, axes, clean, shape),
        {"method": "activation_patch", "site": site, "direction": direction, "by_pos": by_pos,
         "clean_metric": run.scalar(metric, clean_logits, "clean"),
         "corrupt_metric": run.scalar(metric, corrupt_logits, "corrupt"), "metric": "metric", **info},
    )


def attribution_patch(
    model,
    clean: Task | Tensor,
    corrupt: Tensor | None = None,
    *,
    site: str,
    metric: Metric | None = None,
    by_pos: bool = False,
) -> Grid:
    """Attribution patching: (clean - corrupt) . d metric / d activation, on the corrupt run.

    The first-order estimate of `activation_patch(..., direction="denoise")` minus the corrupt
    metric, from one clean forward and one corrupt forward + backward, for every cell at once.
    Same axes as activation_patch.
    """
    _check_site(site)
    clean, corrupt, metric, info = _inputs(model, clean, corrupt, metric)
    spec = spec_of(site)
    names = [spec.hook.format(layer=l) for l in range(model.cfg.n_layers)]
    _, clean_acts = run.cache(model, clean, names)
    logits, acts = run.with_grad(model, corrupt, names)
    with torch.enable_grad():
        value = metric(logits)
        if not isinstance(value, Tensor) or value.numel() != 1 or not torch.isfinite(value):
            raise InterpError(f"the metric must return a finite scalar tensor, got {value!r}")
        grads = torch.autograd.grad(value, [acts[n] for n in names], allow_unused=True)
    rows = []
    for name, grad in zip(names, grads):
        if grad is None:
            raise InterpError(f"{name} does not reach the metric; cannot attribute through it")
        score = (clean_acts[name] - acts[name].detach()) * grad
        if spec.kind == "resid":
            rows.append(score.sum((0, 2)) if by_pos else score.sum())
        elif spec.kind == "head":
            rows.append(score.sum((0, 3)) if by_pos else score.sum((0, 1, 3)))
        else:
            rows.append(score.sum((0, 3)) if by_pos else score.sum((0, 2, 3)))
    values = torch.stack(rows).detach()
    _, axes, _ = cells(model, site, by_pos, clean.shape[1])
    return Grid(
        values,
        axes,
        _labels(model, axes, clean, tuple(values.shape)),
        {"method": "attribution_patch", "site": site, "by_pos": by_pos, "corrupt_metric": float(value.detach()),
         "metric": "metric change", **info},
    )


Receiver = tuple[int, int, Literal["q", "k", "v"]]


def path_patch(
    model,
    clean: Task | Tensor,
    corrupt: Tensor | None = None,
    *,
    metric: Metric | None = None,
    senders: Sequence[tuple[int, int]] | None = None,
    receivers: Sequence[Receiver] | Literal["logits"] = "logits",
    variants_per_forward: int | None = None,
    progress: bool = True,
) -> Grid:
    """Path patching (Wang et al. 2022): the effect of sender heads through chosen receivers only.

    For each sender (layer, head): run clean with the sender's output (hook_z) taken from the
    corrupt run and every other head and MLP frozen at its clean value. With receivers="logits"
    the metric of that run is the result (the direct path to the logits). Otherwise the receivers'
    q/k/v (per KV head for k and v on GQA models) are recorded in that run and patched into a
    fresh clean run, whose metric is the result. `senders=None` sweeps every head. Returns a
    (layer, head) Grid over the senders (NaN where a sender cannot reach any receiver).
    """
    clean, corrupt, metric, info = _inputs(model, clean, corrupt, metric)
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    senders = [(l, h) for l in range(n_layers) for h in range(n_heads)] if senders is None else list(senders)
    for layer, head in senders:
        check_head(model, layer, head)
    if receivers != "logits":
        if not receivers:
            raise InterpError("receivers is empty; pass 'logits' or (layer, head, 'q'|'k'|'v') triples")
        for layer, head, which in receivers:
            if which not in ("q", "k", "v"):
                raise InterpError(f"receiver component {which!r} must be 'q', 'k' or 'v'")
            check_head(model, layer, head, kv=which != "q")
        first = min(r[0] for r in receivers)
        senders_run = [s for s in senders if s[0] < first]
    else:
        senders_run = senders
    z_names = [f"blocks.{l}.attn.hook_z" for l in range(n_layers)]
    mlp_names = [f"blocks.{l}.hook_mlp_out" for l in range(n_layers)]
    clean_logits, clean_acts = run.cache(model, clean, z_names + mlp_names)
    _, corrupt_z = run.cache(model, corrupt, z_names)
    frozen = [Patch(n, clean_acts[n]) for n in z_names + mlp_names]
    # frozen to clean everywhere, except the sender's own output, which is corrupt
    variants = [frozen + [Patch(z_names[l], corrupt_z[z_names[l]], head=h)] for l, h in senders_run]
    if receivers != "logits":
        rec_names = sorted({f"blocks.{l}.attn.hook_{w}" for l, _, w in receivers})
        staged = []
        for variant in variants:  # record the receivers' inputs under each frozen run
            _, recorded = run.cache(model, clean, rec_names, variant)
            staged.append([Patch(f"blocks.{l}.attn.hook_{w}", recorded[f"blocks.{l}.attn.hook_{w}"], head=h)
                           for l, h, w in receivers])
        variants = staged
    result = run.evaluate(model, clean, variants, metric, variants_per_forward=variants_per_forward,
                          progress=progress, desc="path patch")
    values = torch.full((n_layers, n_heads), float("nan"))
    for (layer, head), value in zip(senders_run, result.tolist()):
        values[layer, head] = value
    return Grid(
        values,
        ("layer", "head"),
        meta={"method": "path_patch", "receivers": "logits" if receivers == "logits" else [list(r) for r in receivers],
              "clean_metric": run.scalar(metric, clean_logits, "clean"), "metric": "metric", **info},
    )

"""Activation patching (exact), attribution patching (linear), and path patching -> Grid.

Conventions follow TransformerLens: with `direction="denoise"` the model runs on the corrupt
input and one cell (a layer, and a position and/or head) takes its activation from the clean
run; the Grid holds the metric of each patched run. `"noise"` runs clean and patches in corrupt.

Each cell is a `Patch` intervention and every cell of a sweep is one variant of `interp.run.evaluate`:
many cells share one batched forward, and on a causal decoder each forward begins at its cells'
first patched block and position, the rest taken from one recorded base run (the runner chooses
how; meta["path"] names the engine it chose). The numbers are
the same as TransformerLens's to float rounding (the tests hold them to 1e-4).

Units. Every result's meta names the metric (`meta["metric"]`: the Task's metric name, else the
metric function's `__name__`, else "metric") and its baselines `clean_metric` and
`corrupt_metric`. `normalize=True` has one meaning for all three functions: 0 = the corrupt
baseline, 1 = the clean baseline, i.e. (value - corrupt) / (clean - corrupt) for activation and
path patching, and change / (clean - corrupt) for attribution patching (whose values already are
changes from the corrupt run); meta["normalized"] says so (False when not normalised).

Named positions. A Task may name positions per row (`Task.positions`, e.g. IOI's IO/S1/S2/END).
With `by_pos=True` and rows that share those indices, the position ticks carry the names. Rows
that do not (IOI of mixed templates) make a by-index sweep average unlike tokens, so it raises
unless `positions="named"` (the position axis becomes the names; each row is patched at its own
index for each name) or `positions="mean"` (accept the by-index average).
"""

from __future__ import annotations

from typing import Literal, Sequence

import torch
from torch import Tensor

from interp import run
from interp.errors import InterpError
from interp.interventions import Patch
from interp.metrics import Metric, for_task
from interp.results import Grid
from interp.sites import check_head, check_tokens, check_tuples, n_kv_heads, position_axis, spec_of
from interp.tasks.base import Task
from interp.memory import records_peak

__all__ = ["NORMALIZED", "SITES", "Cell", "activation_patch", "attribution_patch", "cells", "path_patch"]

# meta["normalized"] of a normalised result: the one meaning of normalize=True
NORMALIZED = "0 = corrupt baseline, 1 = clean baseline"
Positions = Literal["index", "named", "mean"]

# the sites a patching sweep runs over (short names of interp.sites)
SITES: tuple[str, ...] = ("resid_pre", "resid_mid", "attn_out", "mlp_out", "z", "q", "k", "v", "pattern")

# A cell: (layer, pos or None for all positions, head or None for the whole activation).
Cell = tuple[int, "int | None", "int | None"]


def _metric_name(metric, task: Task | None) -> str:
    """The task's metric name when its metric is used, else the function's __name__, else "metric"."""
    if metric is None and task is not None:
        return task.metric
    name = getattr(metric, "__name__", None)
    return name if isinstance(name, str) and name.isidentifier() else "metric"


def _inputs(model, clean, corrupt, metric) -> tuple[Tensor, Tensor, Metric, dict, Tensor | None]:
    """Accept a Task, or clean and corrupt tokens with a metric; return tokens, metric, task info
    (info["metric"] is the metric's name), and the positions the metric reads when that is known
    (the task's answer positions, for the task's own metric)."""
    info: dict = {"metric": _metric_name(metric, clean if isinstance(clean, Task) else None)}
    answer_pos = None
    if isinstance(clean, Task):
        if corrupt is not None:
            raise InterpError("pass either a Task, or clean and corrupt tokens; not a Task and corrupt tokens")
        task = clean
        if metric is None:
            metric, answer_pos = for_task(task), task.answer_pos
        clean, corrupt = task.clean, task.corrupt
        info.update({"task": task.name, "split": task.split, "n": len(task)})
    if metric is None:
        raise InterpError("a metric (logits -> scalar tensor) is required with raw tokens; see interp.metrics")
    if not callable(metric):
        raise InterpError(f"metric must be a function of the logits, got {type(metric).__name__}")
    if not (isinstance(clean, Tensor) and isinstance(corrupt, Tensor)):
        raise InterpError("clean and corrupt must be [batch, pos] token tensors, or clean a Task")
    check_tokens(clean, "clean", model=model)
    check_tokens(corrupt, "corrupt", model=model)
    if clean.shape != corrupt.shape or clean.ndim != 2:
        raise InterpError(
            f"clean tokens {tuple(clean.shape)} and corrupt tokens {tuple(corrupt.shape)} must both be "
            "[batch, pos] with the same shape, so activations align position by position"
        )
    device = run.input_device(model)
    return clean.to(device), corrupt.to(device), metric, info, answer_pos


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


def _finish(grid: Grid, normalize: bool) -> Grid:
    """The result, normalised (0 = corrupt baseline, 1 = clean baseline) when asked."""
    if not normalize:
        return Grid(grid.values, grid.axes, grid.labels, {**grid.meta, "normalized": False})
    out = grid.normalize()
    return Grid(out.values, out.axes, out.labels, {**out.meta, "normalized": NORMALIZED})


def _named(task: Task | None, by_pos: bool, positions: str | None) -> tuple[str, dict[str, Tensor] | None, dict[int, str]]:
    """How a by-position sweep treats the task's named positions: (mode, per-row positions for
    "named", {index: name} tick names for aligned rows)."""
    if positions not in (None, "index", "named", "mean"):
        raise InterpError(f"positions={positions!r} must be 'index', 'named' or 'mean'")
    if positions is not None and not by_pos:
        raise InterpError(f"positions={positions!r} applies to a by-position sweep; pass by_pos=True too")
    named = task.positions if task is not None else {}
    if positions == "named":
        if not named:
            raise InterpError("positions='named' needs a Task with named positions (Task.positions); "
                              "these inputs name none")
        return "named", named, {}
    if not by_pos or not named:
        return "index", None, {}
    aligned = task.aligned_positions()
    if aligned is None and positions != "mean":
        key, where = next((k, w) for k, w in named.items() if bool((w != w[0]).any()))
        i = int((where != where[0]).nonzero()[0])
        raise InterpError(  # rows of mixed templates: one index would average different tokens
            f"by_pos=True on {task.name}/{task.split}, whose rows do not share their named positions ({key!r}: index "
            f"{int(where[0])} in row 0, {int(where[i])} in row {i}); pass positions='named' (each row at its own "
            "position per name), positions='mean' (the by-index average) or rows of one template"
        )
    ticks: dict[int, str] = {}
    for key, index in (aligned or {}).items():
        ticks[index] = f"{ticks[index]}/{key}" if index in ticks else key
    return ("mean" if aligned is None else "index"), None, ticks


def _relabel(grid: Grid, ticks: dict[int, str]) -> Grid:
    """Name the position ticks (pos / dest axes) at the task's named indices."""
    if not ticks:
        return grid
    labels = tuple(
        tuple(ticks.get(i, t) for i, t in enumerate(ls)) if a in ("pos", "dest") else ls
        for a, ls in zip(grid.axes, grid.labels)
    )
    return Grid(grid.values, grid.axes, labels, grid.meta)


def _replaced(base: Tensor, source: Tensor, axis: int, where: Tensor) -> Tensor:
    """`base` with each row's activation at index where[row] (along `axis`) taken from `source`."""
    out = base.clone()
    rows = torch.arange(base.shape[0], device=base.device)
    where = where.to(base.device)
    if axis == 1:
        out[rows, where] = source[rows, where]
    else:  # the pattern's dest axis [batch, head, dest, src]
        out[rows, :, where] = source[rows, :, where]
    return out


def _check_site(site: str) -> None:
    if site not in SITES:
        raise InterpError(f"unknown site {site!r} for a patching sweep; valid sites: {', '.join(SITES)}")


@records_peak
def activation_patch(
    model,
    clean: Task | Tensor,
    corrupt: Tensor | None = None,
    *,
    site: str,
    metric: Metric | None = None,
    by_pos: bool = False,
    direction: Literal["denoise", "noise"] = "denoise",
    normalize: bool = False,
    positions: Positions | None = None,
    variants_per_forward: int | None = None,
    progress: bool = True,
) -> Grid:
    """Exact activation patching of every cell of `site`; same numbers as TransformerLens.

    `clean` is a Task (its metric is the default) or clean tokens with `corrupt` tokens and a
    `metric`. Axes: (layer) / (layer, pos) for residual sites, (layer, head) / (layer, pos, head)
    for per-head sites (kv_head for k and v on GQA models), (layer, head) / (layer, head, dest)
    for the attention pattern. meta records the metric's name and the clean and corrupt metric.

    `normalize=True`: (value - corrupt_metric) / (clean_metric - corrupt_metric), so 0 = the
    corrupt baseline and 1 = the clean baseline in either direction (denoise: 1 = fully
    restored; noise: 0 = fully broken); an InterpError when the two baselines are equal.

    `positions` (with by_pos=True and a Task that names positions): by default rows must share
    their named positions (the ticks then carry the names) or an InterpError explains why;
    "named" makes the position axis the names, each row patched at its own index for each name;
    "mean" accepts the by-index sweep over misaligned rows.
    """
    _check_site(site)
    task = clean if isinstance(clean, Task) else None
    clean, corrupt, metric, info, answer_pos = _inputs(model, clean, corrupt, metric)
    if direction not in ("denoise", "noise"):
        raise InterpError(f"direction={direction!r} must be 'denoise' or 'noise'")
    mode, named, ticks = _named(task, by_pos, positions)
    base, source = (corrupt, clean) if direction == "denoise" else (clean, corrupt)
    todo, axes, shape = cells(model, site, by_pos, clean.shape[1])
    names = [spec_of(site).hook.format(layer=l) for l in range(model.cfg.n_layers)]
    source_logits, source_acts = run.cache(model, source, names, answer_pos=answer_pos)
    labels = _labels(model, axes, clean, shape)
    if mode == "named":
        # a source equal to the base run's activation except at each row's named position: patched
        # whole, it writes exactly those positions (the base run's activation is the base's there)
        base_logits, base_acts = run.cache(model, base, names, answer_pos=answer_pos)
        keys = list(named)
        axis = position_axis(names[0])
        sources = {(l, k): _replaced(base_acts[names[l]], source_acts[names[l]], axis, named[k])
                   for l in range(model.cfg.n_layers) for k in keys}
        p_axis = axes.index("dest" if "dest" in axes else "pos")
        shape = tuple(len(keys) if i == p_axis else n for i, n in enumerate(shape))
        todo = [c for c in todo if c[1] is not None and c[1] < len(keys)]
        variants = [[Patch(names[l], sources[(l, keys[p])], head=h)] for l, p, h in todo]
        labels = tuple(tuple(keys) if i == p_axis else ls for i, ls in enumerate(labels))
    else:
        base_logits, _ = run.cache(model, base, [], answer_pos=answer_pos)
        variants = [[Patch(names[l], source_acts[names[l]], pos=p, head=h)] for l, p, h in todo]
    clean_logits, corrupt_logits = (source_logits, base_logits) if direction == "denoise" else (base_logits, source_logits)
    path = run.engine_of(model, base, variants)  # meta["path"] says which engine the runner chose
    values = run.evaluate(model, base, variants, metric, variants_per_forward=variants_per_forward,
                          answer_pos=answer_pos, progress=progress, desc=f"patch {site}")
    grid = Grid(
        values.view(shape),
        axes,
        labels,
        {"method": "activation_patch", "site": site, "direction": direction, "by_pos": by_pos, "path": path,
         "clean_metric": run.scalar(metric, clean_logits, "clean"),
         "corrupt_metric": run.scalar(metric, corrupt_logits, "corrupt"), **info,
         **({"positions": mode} if by_pos and task is not None and task.positions else {})},
    )
    return _finish(_relabel(grid, ticks), normalize)


def _attribution_rows(model, clean: Tensor, corrupt: Tensor, metric: Metric, answer_pos: Tensor | None, site: str,
                      by_pos: bool, mode: str, named: dict | None) -> tuple[Tensor, float, float]:
    """(clean - corrupt) . d metric / d activation at every layer's `site`, summed to the site's
    cells, from one clean forward and one corrupt forward + backward; and the two metrics."""
    spec = spec_of(site)
    names = [spec.hook.format(layer=l) for l in range(model.cfg.n_layers)]
    clean_logits, clean_acts = run.cache(model, clean, names, answer_pos=answer_pos)
    logits, acts = run.with_grad(model, corrupt, names, answer_pos=answer_pos)
    with torch.enable_grad():
        value = metric(logits)
        if not isinstance(value, Tensor) or value.numel() != 1 or not torch.isfinite(value):
            raise InterpError(f"the metric must return a finite scalar tensor, got {value!r}")
        if not value.requires_grad:  # autograd would fail with "does not require grad" deep inside torch
            raise InterpError("the metric's value does not depend on the logits (it carries no gradient), so there "
                              "is nothing to attribute; compute it from the logits it is given")
        grads = torch.autograd.grad(value, [acts[n] for n in names], allow_unused=True)
    rows = []
    # the axes each site's score keeps: (layer,) (layer, pos) (layer, head) (layer, pos, head) (layer, head, dest)
    keep = {"resid": (1,) if by_pos else (), "head": (1, 2) if by_pos else (2,), "pattern": (1, 2) if by_pos else (1,)}
    for name, grad in zip(names, grads):
        if grad is None:
            raise InterpError(f"{name} does not reach the metric; cannot attribute through it")
        diff = clean_acts[name] - acts[name].detach()
        if mode != "named":  # product and sum in one contraction, never the [batch, pos, ...] product
            letters = "abcdefgh"[: diff.ndim]
            kept = "".join(letters[i] for i in keep.get(spec.kind, keep["pattern"]))
            rows.append(torch.einsum(f"{letters},{letters}->{kept}", diff, grad))
            continue
        score = diff * grad  # per name: each row's score at its own index
        per_pos = score.sum(tuple(range(3, score.ndim))) if spec.kind == "pattern" else score.sum(-1)
        axis = 2 if spec.kind == "pattern" else 1
        rows_ = torch.arange(score.shape[0], device=score.device)
        picked = [(per_pos[rows_, :, named[k].to(score.device)] if axis == 2 else per_pos[rows_, named[k].to(score.device)])
                  .sum(0) for k in named]
        rows.append(torch.stack(picked, -1) if axis == 2 else torch.stack(picked, 0))
    return torch.stack(rows).detach(), run.scalar(metric, clean_logits, "clean"), float(value.detach())


@records_peak
def attribution_patch(
    model,
    clean: Task | Tensor,
    corrupt: Tensor | None = None,
    *,
    site: str,
    metric: Metric | None = None,
    by_pos: bool = False,
    normalize: bool = False,
    positions: Positions | None = None,
    batch_size: int | None = None,
) -> Grid:
    """Attribution patching: (clean - corrupt) . d metric / d activation, on the corrupt run.

    The first-order estimate of `activation_patch(..., direction="denoise")` minus the corrupt
    metric, from one clean forward and one corrupt forward + backward, for every cell at once.
    Same axes as activation_patch; the values are changes from the corrupt baseline
    (meta["relative_to"] = "corrupt_metric"). `normalize=True`: change / (clean_metric -
    corrupt_metric), the same scale as a normalised activation_patch (0 = corrupt baseline, 1 =
    clean baseline). `positions` as in activation_patch ("named": each row's score is read at
    its own index for each name).

    `batch_size`: the memory knob. A Task's rows go through in chunks of that many (its metric is
    a mean over rows, so chunk scores weighted by their share of rows add up to the whole batch's
    scores); the peak is then one chunk's forward and backward. None: all rows at once.
    """
    _check_site(site)
    task = clean if isinstance(clean, Task) else None
    if batch_size is not None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InterpError(f"batch_size={batch_size!r} must be an int >= 1")
        if task is None or metric is not None:
            raise InterpError("batch_size splits a Task's rows under its own metric (a mean over rows); with raw "
                              "tokens or another metric, pass batch_size=None")
    clean, corrupt, metric, info, answer_pos = _inputs(model, clean, corrupt, metric)
    mode, named, ticks = _named(task, by_pos, positions)
    if batch_size is None or batch_size >= len(clean):
        values, clean_m, corrupt_m = _attribution_rows(model, clean, corrupt, metric, answer_pos, site, by_pos, mode, named)
    else:
        values, clean_m, corrupt_m = 0.0, 0.0, 0.0
        for i in range(0, len(task), batch_size):
            part = task[i : i + batch_size]
            w = len(part) / len(task)
            got = _attribution_rows(model, part.clean, part.corrupt, for_task(part), part.answer_pos, site, by_pos, mode,
                                    _named(part, by_pos, positions)[1])
            values, clean_m, corrupt_m = values + w * got[0], clean_m + w * got[1], corrupt_m + w * got[2]
    _, axes, _ = cells(model, site, by_pos, clean.shape[1])
    labels = _labels(model, axes, clean, tuple(values.shape))
    if mode == "named":
        p_axis = axes.index("dest" if "dest" in axes else "pos")
        labels = tuple(tuple(named) if i == p_axis else ls for i, ls in enumerate(labels))
    grid = Grid(
        values,
        axes,
        labels,
        {"method": "attribution_patch", "site": site, "by_pos": by_pos, "relative_to": "corrupt_metric",
         "clean_metric": clean_m, "corrupt_metric": corrupt_m, "batch_size": batch_size, **info,
         **({"positions": mode} if by_pos and task is not None and task.positions else {})},
    )
    return _finish(_relabel(grid, ticks), normalize)


Receiver = tuple[int, int, Literal["q", "k", "v"]]


@records_peak
def path_patch(
    model,
    clean: Task | Tensor,
    corrupt: Tensor | None = None,
    *,
    metric: Metric | None = None,
    senders: Sequence[tuple[int, int]] | None = None,
    receivers: Sequence[Receiver] | Literal["logits"] = "logits",
    normalize: bool = False,
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

    meta records the metric's name, clean_metric and corrupt_metric. `normalize=True`:
    (value - corrupt_metric) / (clean_metric - corrupt_metric), 0 = corrupt baseline, 1 = clean
    baseline (here 1 = the sender's path carries none of the clean-vs-corrupt difference).
    """
    clean, corrupt, metric, info, answer_pos = _inputs(model, clean, corrupt, metric)
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    if senders is None:
        senders = [(l, h) for l in range(n_layers) for h in range(n_heads)]
    senders = check_tuples(senders, 2, "senders", "(layer, head)")
    if not senders:
        raise InterpError("senders is empty; pass None (every head) or (layer, head) pairs")
    for layer, head in senders:
        check_head(model, layer, head)
    if receivers != "logits":
        receivers = check_tuples(receivers, 3, "receivers (or 'logits')", "(layer, head, 'q'|'k'|'v')")
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
    clean_logits, clean_acts = run.cache(model, clean, z_names + mlp_names, answer_pos=answer_pos)
    corrupt_logits, corrupt_z = run.cache(model, corrupt, z_names, answer_pos=answer_pos)
    frozen = [Patch(n, clean_acts[n]) for n in z_names + mlp_names]
    # frozen to clean everywhere, except the sender's own output, which is corrupt
    variants = [frozen + [Patch(z_names[l], corrupt_z[z_names[l]], head=h)] for l, h in senders_run]
    if receivers != "logits":
        rec_names = sorted({f"blocks.{l}.attn.hook_{w}" for l, _, w in receivers})
        staged = []
        for variant in variants:  # record the receivers' inputs under each frozen run
            _, recorded = run.cache(model, clean, rec_names, variant, answer_pos=answer_pos)
            staged.append([Patch(f"blocks.{l}.attn.hook_{w}", recorded[f"blocks.{l}.attn.hook_{w}"], head=h)
                           for l, h, w in receivers])
        variants = staged
    result = run.evaluate(model, clean, variants, metric, variants_per_forward=variants_per_forward,
                          answer_pos=answer_pos, progress=progress, desc="path patch")
    values = torch.full((n_layers, n_heads), float("nan"))  # cpu: a result
    for (layer, head), value in zip(senders_run, result.tolist()):
        values[layer, head] = value
    grid = Grid(
        values,
        ("layer", "head"),
        meta={"method": "path_patch", "receivers": "logits" if receivers == "logits" else [list(r) for r in receivers],
              "clean_metric": run.scalar(metric, clean_logits, "clean"),
              "corrupt_metric": run.scalar(metric, corrupt_logits, "corrupt"), **info},
    )
    return _finish(grid, normalize)

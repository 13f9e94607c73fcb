"""Activation patching (exact), attribution patching (linear), and path patching -> Grid.

Conventions follow TransformerLens: with `direction="denoise"` the model runs on the corrupt
input and one cell (a layer, and a position and/or head) takes its activation from the clean
run; the Grid holds the metric of each patched run. `"noise"` runs clean and patches in corrupt.

Speed: TransformerLens runs one whole forward pass per cell. Here many cells share one forward:
the base input is repeated once per cell along the batch axis ([cells * batch, pos]) and one hook
per layer writes each cell's source activation into its own slice of the batch through a boolean
mask. On a causal decoder each forward also begins where its cells first differ from the base
run: at the earliest patched block (the residual entering it is taken from one recorded base run,
and the blocks before it are not run) and at the earliest patched position (the keys and values
of earlier positions come from the base run's KV cache; their logits are the base run's). The
numbers are the same as TransformerLens's to float rounding (the tests hold them to 1e-4).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Literal, Sequence

import torch
from torch import Tensor
from tqdm.auto import tqdm

from interp.hooks import check_head, hooks, n_kv_heads
from interp.metrics import Metric, for_task
from interp.model import cached_keys_values, can_resume, kv_cache_kwargs, new_kv_cache, resume
from interp.results import Grid

Site = Literal["resid_pre", "resid_mid", "attn_out", "mlp_out", "z", "q", "k", "v", "pattern"]


@dataclass(frozen=True)
class SiteSpec:
    hook: str  # hook name with {layer}
    kind: Literal["resid", "head", "pattern"]
    kv: bool = False  # per KV head (k and v on GQA models)


SITES: dict[str, SiteSpec] = {
    "resid_pre": SiteSpec("blocks.{layer}.hook_resid_pre", "resid"),
    "resid_mid": SiteSpec("blocks.{layer}.hook_resid_mid", "resid"),
    "attn_out": SiteSpec("blocks.{layer}.hook_attn_out", "resid"),
    "mlp_out": SiteSpec("blocks.{layer}.hook_mlp_out", "resid"),
    "z": SiteSpec("blocks.{layer}.attn.hook_z", "head"),
    "q": SiteSpec("blocks.{layer}.attn.hook_q", "head"),
    "k": SiteSpec("blocks.{layer}.attn.hook_k", "head", kv=True),
    "v": SiteSpec("blocks.{layer}.attn.hook_v", "head", kv=True),
    "pattern": SiteSpec("blocks.{layer}.attn.hook_pattern", "pattern"),
}

# A cell: (layer, pos or None for all positions, head or None for the whole activation).
Cell = tuple[int, "int | None", "int | None"]


def site_spec(site: str) -> SiteSpec:
    if site not in SITES:
        raise ValueError(f"unknown site {site!r}; valid sites: {', '.join(SITES)}")
    return SITES[site]


def _inputs(model, clean, corrupt, metric) -> tuple[Tensor, Tensor, Metric, dict]:
    """Accept a Task or raw tokens; return tokens, a checked metric and task metadata."""
    from interp.tasks.base import Task

    info: dict = {}
    if isinstance(clean, Task):
        task = clean
        if corrupt is not None and not isinstance(corrupt, Callable):
            raise ValueError("pass either a Task or (clean_tokens, corrupt_tokens), not both")
        metric = metric if metric is not None else (corrupt if corrupt is not None else for_task(task))
        clean, corrupt = task.clean, task.corrupt
        info = {"task": task.name, "split": task.split, "n": len(task)}
    if metric is None:
        raise ValueError("a metric (logits -> scalar tensor) is required with raw tokens; see interp.metrics")
    if not (isinstance(clean, Tensor) and isinstance(corrupt, Tensor)):
        raise ValueError("clean and corrupt must be [batch, pos] token tensors or a Task")
    if clean.shape != corrupt.shape or clean.ndim != 2:
        raise ValueError(
            f"clean tokens {tuple(clean.shape)} and corrupt tokens {tuple(corrupt.shape)} must both be "
            "[batch, pos] with the same shape, so activations align position by position"
        )
    top = int(max(clean.max(), corrupt.max()))
    if top >= model.cfg.d_vocab:
        raise ValueError(
            f"token id {top} is outside the model's vocabulary (d_vocab={model.cfg.d_vocab}); "
            "were these tokens made with another model's tokenizer?"
        )
    device = model.cfg.device
    return clean.to(device), corrupt.to(device), metric, info


def _scalar(metric: Metric, logits: Tensor, what: str) -> float:
    value = metric(logits)
    if not isinstance(value, Tensor) or value.numel() != 1:
        shape = tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__
        raise ValueError(f"the metric must return a scalar tensor, got {shape} on the {what} run; reduce with .mean()")
    value = float(value)
    if value != value:
        raise ValueError(f"the metric returned NaN on the {what} run")
    return value


def _mask(kind: str, act_shape: torch.Size, cells: Sequence[Cell | None], device) -> Tensor:
    """[cells, 1, ...] boolean mask: True where cell c overwrites the activation (None: nowhere)."""
    c = len(cells)
    if kind == "resid":  # [batch, pos, d]
        mask = torch.zeros(c, act_shape[1], dtype=torch.bool)
        for i, cell in enumerate(cells):
            if cell is not None:
                mask[i, slice(None) if cell[1] is None else cell[1]] = True
        return mask.view(c, 1, act_shape[1], 1).to(device)
    if kind == "head":  # [batch, pos, head, d_head]
        mask = torch.zeros(c, act_shape[1], act_shape[2], dtype=torch.bool)
        for i, cell in enumerate(cells):
            if cell is not None:
                mask[i, slice(None) if cell[1] is None else cell[1], slice(None) if cell[2] is None else cell[2]] = True
        return mask.view(c, 1, act_shape[1], act_shape[2], 1).to(device)
    mask = torch.zeros(c, act_shape[1], act_shape[2], dtype=torch.bool)  # pattern [batch, head, dest, src]
    for i, cell in enumerate(cells):
        if cell is not None:
            mask[i, slice(None) if cell[2] is None else cell[2], slice(None) if cell[1] is None else cell[1]] = True
    return mask.view(c, 1, act_shape[1], act_shape[2], 1).to(device)


def _masked_write_hook(source: Tensor, mask: Tensor) -> Callable:
    """Write `source` [batch, ...] into chunk slices of a [cells * batch, ...] activation."""

    def hook_fn(act: Tensor, *, hook) -> Tensor:
        cells = mask.shape[0]
        stacked = act.view(cells, act.shape[0] // cells, *act.shape[1:])
        return torch.where(mask, source.unsqueeze(0).to(act.dtype), stacked).view_as(act)

    return hook_fn


def _chunk_size(model, batch: int, pos: int, requested: int | None) -> int:
    """Cells per forward: a user value, else what fits comfortably in memory (max 64 cells)."""
    if requested is not None:
        if requested < 1:
            raise ValueError(f"cells_per_forward={requested} must be >= 1")
        return requested
    cfg = model.cfg
    # floats kept per row: residual-sized activations (~16 per layer) and attention maps (~4 per head)
    per_row = 4 * pos * cfg.n_layers * (16 * cfg.d_model + 4 * cfg.n_heads * pos) + 4 * pos * cfg.d_vocab
    if str(cfg.device).startswith("cuda"):
        free = torch.cuda.mem_get_info()[0] * 0.5
    else:
        import os

        free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") * 0.25
    return int(max(1, min(64, free // max(1, per_row * batch))))


@dataclass(frozen=True)
class _BaseRun:
    """What every patched run shares with the unpatched base run, recorded once."""

    logits: Tensor  # [batch, pos, d_vocab]
    resid: list[Tensor]  # per layer: hook_resid_pre [batch, pos, d_model]
    keys_values: list[tuple[Tensor, Tensor]]  # per layer: [batch, kv_head, pos, d_head]


def _base_run(model, base: Tensor) -> _BaseRun:
    resid: list[Tensor] = [torch.empty(0)] * model.cfg.n_layers

    def keep(layer: int) -> Callable:
        def hook_fn(act: Tensor, *, hook) -> None:
            resid[layer] = act.detach().clone()

        return hook_fn

    cache = new_kv_cache(model)
    fwd = [(f"blocks.{l}.hook_resid_pre", keep(l)) for l in range(model.cfg.n_layers)]
    with torch.no_grad(), hooks(model, fwd):
        logits = model(base, **kv_cache_kwargs(model, cache))
    return _BaseRun(logits, resid, cached_keys_values(cache))


# A forward's fixed cost, in row-positions through every block: what one forward of a 4-layer,
# d_model-128 model costs beyond its arithmetic on this project's CPU (benchmarks/RESULTS.md).
_FORWARD_COST = 128


def _start(cell: Cell) -> int:
    return 0 if cell[1] is None else cell[1]


def plan_forwards(cells: Sequence[Cell], batch: int, n_pos: int, n_layers: int, size: int, resumable: bool) -> list[tuple[int, int, list[int]]]:
    """Group cells into forwards of at most `size` cells: [(first block, first position, cell indices)].

    A cell at layer L and position p leaves every block before L, and (causal attention) every
    position before p, as they were in the base run, so its forward may begin there. Cells that
    share a forward begin at the earliest block and position among them. With cells in (layer,
    position) order, the split into forwards minimises the total work, counting each forward's
    fixed cost as `_FORWARD_COST` row-positions (dynamic programming over split points).
    """
    if not resumable:
        return [(0, 0, list(range(i, min(i + size, len(cells))))) for i in range(0, len(cells), size)]
    order = sorted(range(len(cells)), key=lambda i: (cells[i][0], _start(cells[i])))
    n = len(order)
    best = [0.0] + [float("inf")] * n  # best[j]: least cost of the first j cells in order
    cut = [0] * (n + 1)
    for j in range(1, n + 1):
        layer, start = n_layers, n_pos
        for i in range(j - 1, max(-1, j - 1 - size), -1):  # the last forward holds order[i:j]
            layer, start = min(layer, cells[order[i]][0]), min(start, _start(cells[order[i]]))
            cost = best[i] + _FORWARD_COST + (j - i) * batch * (n_pos - start) * (n_layers - layer) / n_layers
            if cost < best[j]:
                best[j], cut[j] = cost, i
    plans, j = [], n
    while j:
        members = order[cut[j]:j]
        plans.append((min(cells[m][0] for m in members), min(_start(cells[m]) for m in members), members))
        j = cut[j]
    return plans[::-1]


def _from(x: Tensor, axis: int, start: int) -> Tensor:
    return x.narrow(axis, start, x.shape[axis] - start)


def run_cells(
    model,
    base: Tensor,
    sources: dict[str, Tensor],
    site: str,
    cells: Sequence[Cell],
    metric: Metric,
    *,
    cells_per_forward: int | None = None,
    progress: bool = True,
) -> Tensor:
    """The metric for each cell: run `base` with that cell's activation taken from `sources`.

    `sources` maps hook names to [batch, ...] source activations. Returns a [len(cells)] tensor.
    Many cells share one forward (the base input repeated once per cell along the batch axis,
    one hook per layer writing each cell's source into its own slice), and on a causal decoder
    each forward begins at its cells' first block and first position (`plan_forwards`), taking
    the rest from one recorded base run.
    """
    spec = site_spec(site)
    batch, n_pos = base.shape
    size = _chunk_size(model, batch, n_pos, cells_per_forward)
    resumable = can_resume(model)
    plans = plan_forwards(cells, batch, n_pos, model.cfg.n_layers, size, resumable)
    recorded = _base_run(model, base) if resumable else None
    out = torch.empty(len(cells))
    with torch.no_grad():
        for layer0, start, members in tqdm(plans, desc=f"patch {site}", disable=not progress or len(plans) < 2):
            chunk = [cells[i] for i in members]
            n = len(chunk)
            fwd = []
            for layer in sorted({cell[0] for cell in chunk}):
                name = spec.hook.format(layer=layer)
                mask = _mask(spec.kind, sources[name].shape, [c if c[0] == layer else None for c in chunk], base.device)
                # the position axis: dest of a pattern [batch, head, dest, src], else pos; the
                # mask has one more leading axis (cells)
                axis = 2 if spec.kind == "pattern" else 1
                fwd.append((name, _masked_write_hook(_from(sources[name], axis, start), _from(mask, axis + 1, start))))
            with hooks(model, fwd):
                if recorded is None or (layer0 == 0 and start == 0):
                    logits = model(base.repeat(n, 1))
                else:
                    tail = resume(
                        model, base.repeat(n, 1), layer=layer0, start=start,
                        residual=recorded.resid[layer0][:, start:].repeat(n, 1, 1),
                        keys_values=[(k[:, :, :start].repeat(n, 1, 1, 1), v[:, :, :start].repeat(n, 1, 1, 1)) for k, v in recorded.keys_values],
                    )
                    # positions before `start` are the base run's; the metric sees whole logits
                    logits = torch.cat([recorded.logits[:, :start].repeat(n, 1, 1), tail], 1)
            for j, i in enumerate(members):
                out[i] = _scalar(metric, logits[j * batch : (j + 1) * batch], "patched")
    return out


def _cells_and_axes(model, site: str, by_pos: bool, n_pos: int) -> tuple[list[Cell], tuple[str, ...], tuple]:
    spec = site_spec(site)
    layers = range(model.cfg.n_layers)
    n_heads = n_kv_heads(model) if spec.kv else model.cfg.n_heads
    head_axis = "kv_head" if spec.kv and n_heads != model.cfg.n_heads else "head"
    if spec.kind == "resid":
        if by_pos:
            return [(l, p, None) for l in layers for p in range(n_pos)], ("layer", "pos"), (n_pos,)
        return [(l, None, None) for l in layers], ("layer",), ()
    if spec.kind == "head":
        if by_pos:
            return [(l, p, h) for l in layers for p in range(n_pos) for h in range(n_heads)], ("layer", "pos", head_axis), (n_pos, n_heads)
        return [(l, None, h) for l in layers for h in range(n_heads)], ("layer", head_axis), (n_heads,)
    if by_pos:  # TransformerLens orders pattern-by-position as [layer, head, dest]
        return [(l, p, h) for l in layers for h in range(n_heads) for p in range(n_pos)], ("layer", "head", "dest"), (n_heads, n_pos)
    return [(l, None, h) for l in layers for h in range(n_heads)], ("layer", "head"), (n_heads,)


def _cache(model, tokens: Tensor, names: list[str]) -> tuple[Tensor, dict[str, Tensor]]:
    """(logits, {name: activation}) of one forward on `tokens`."""
    with torch.no_grad():
        logits, cache = model.run_with_cache(tokens, names_filter=lambda n: n in names)
    return logits, {n: cache[n] for n in names}


def _labels(model, axes: tuple[str, ...], tokens: Tensor, shape: tuple[int, ...]) -> tuple:
    out = []
    for axis, n in zip(axes, shape):
        if axis in ("pos", "dest") and tokens.shape[0] == 1:
            out.append(tuple(f"{i}:{t}" for i, t in enumerate(model.to_str_tokens(tokens[0]))))
        else:
            out.append(tuple(range(n)))
    return tuple(out)


def activation_patch(
    model,
    clean,
    corrupt=None,
    metric: Metric | None = None,
    *,
    site: str,
    by_pos: bool = False,
    direction: Literal["denoise", "noise"] = "denoise",
    cells_per_forward: int | None = None,
    progress: bool = True,
) -> Grid:
    """Exact activation patching of every cell of `site`; same numbers as TransformerLens.

    `clean` may be a Task (then `corrupt`, if given, is the metric, and the metric defaults to
    the task's). Axes: (layer) / (layer, pos) for residual sites, (layer, head) / (layer, pos,
    head) for per-head sites (kv_head for k and v on GQA models), (layer, head) / (layer, head,
    dest) for the attention pattern. meta records the clean and corrupt metric values.
    """
    clean, corrupt, metric, info = _inputs(model, clean, corrupt, metric)
    if direction not in ("denoise", "noise"):
        raise ValueError(f"direction={direction!r} must be 'denoise' or 'noise'")
    base, source = (corrupt, clean) if direction == "denoise" else (clean, corrupt)
    spec = site_spec(site)
    cells, axes, tail = _cells_and_axes(model, site, by_pos, clean.shape[1])
    names = [spec.hook.format(layer=l) for l in range(model.cfg.n_layers)]
    source_logits, source_acts = _cache(model, source, names)
    with torch.no_grad():
        base_logits = model(base)
    clean_logits, corrupt_logits = (source_logits, base_logits) if direction == "denoise" else (base_logits, source_logits)
    clean_value = _scalar(metric, clean_logits, "clean")
    corrupt_value = _scalar(metric, corrupt_logits, "corrupt")
    values = run_cells(model, base, source_acts, site, cells, metric, cells_per_forward=cells_per_forward, progress=progress)
    shape = (model.cfg.n_layers, *tail)
    return Grid(
        values.view(shape),
        axes,
        _labels(model, axes, clean, shape),
        {"method": "activation_patch", "site": site, "direction": direction, "by_pos": by_pos,
         "clean_metric": clean_value, "corrupt_metric": corrupt_value, "metric": "metric", **info},
    )


def attribution_patch(
    model,
    clean,
    corrupt=None,
    metric: Metric | None = None,
    *,
    site: str,
    by_pos: bool = False,
) -> Grid:
    """Attribution patching: (clean - corrupt) . d metric / d activation, on the corrupt run.

    The first-order estimate of `activation_patch(..., direction="denoise")` minus the corrupt
    metric, from one clean forward and one corrupt forward + backward, for every cell at once.
    Same axes as activation_patch.
    """
    clean, corrupt, metric, info = _inputs(model, clean, corrupt, metric)
    spec = site_spec(site)
    names = [spec.hook.format(layer=l) for l in range(model.cfg.n_layers)]
    _, clean_acts = _cache(model, clean, names)
    acts: dict[str, Tensor] = {}

    def keep(name: str) -> Callable:
        # hook.name may be the canonical alias of `name`, so the key is bound here
        def hook_fn(act: Tensor, *, hook) -> Tensor:
            # a fresh view that the forward continues from, so the gradient w.r.t. it is defined
            acts[name] = act.view_as(act)
            return acts[name]

        return hook_fn

    fwd = [(n, keep(n)) for n in names]
    needs_leaf = not any(p.requires_grad for p in model.parameters())
    if needs_leaf:  # frozen weights: start the graph at the embeddings instead
        fwd.insert(0, ("hook_embed", lambda act, *, hook: act.detach().requires_grad_(True)))
    with torch.enable_grad(), hooks(model, fwd):
        value = metric(model(corrupt))
        if not isinstance(value, Tensor) or value.numel() != 1 or not torch.isfinite(value):
            raise ValueError(f"the metric must return a finite scalar tensor, got {value!r}")
        grads = torch.autograd.grad(value, [acts[n] for n in names], allow_unused=True)
    rows = []
    for name, grad in zip(names, grads):
        if grad is None:
            raise RuntimeError(f"{name} does not reach the metric; cannot attribute through it")
        score = (clean_acts[name] - acts[name].detach()) * grad
        if spec.kind == "resid":
            rows.append(score.sum((0, 2)) if by_pos else score.sum())
        elif spec.kind == "head":
            rows.append(score.sum((0, 3)) if by_pos else score.sum((0, 1, 3)))
        else:
            rows.append(score.sum((0, 3)) if by_pos else score.sum((0, 2, 3)))
    values = torch.stack(rows).detach()
    _, axes, _ = _cells_and_axes(model, site, by_pos, clean.shape[1])
    return Grid(
        values,
        axes,
        _labels(model, axes, clean, tuple(values.shape)),
        {"method": "attribution_patch", "site": site, "by_pos": by_pos, "corrupt_metric": float(value.detach()), "metric": "metric change", **info},
    )


Receiver = tuple[int, int, Literal["q", "k", "v"]]


def path_patch(
    model,
    clean,
    corrupt=None,
    metric: Metric | None = None,
    *,
    senders: Sequence[tuple[int, int]] | None = None,
    receivers: Sequence[Receiver] | Literal["logits"] = "logits",
    cells_per_forward: int | None = None,
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
        for layer, head, which in receivers:
            if which not in ("q", "k", "v"):
                raise ValueError(f"receiver component {which!r} must be 'q', 'k' or 'v'")
            check_head(model, layer, head, kv=which != "q")
        first = min(r[0] for r in receivers)
        senders_run = [s for s in senders if s[0] < first]
    else:
        senders_run = senders
    z_names = [f"blocks.{l}.attn.hook_z" for l in range(n_layers)]
    mlp_names = [f"blocks.{l}.hook_mlp_out" for l in range(n_layers)]
    clean_logits, clean_acts = _cache(model, clean, z_names + mlp_names)
    _, corrupt_z = _cache(model, corrupt, z_names)
    clean_value = _scalar(metric, clean_logits, "clean")
    batch = clean.shape[0]
    size = _chunk_size(model, batch, clean.shape[1], cells_per_forward)
    values = torch.full((n_layers, n_heads), float("nan"))
    starts = range(0, len(senders_run), size)
    for start in tqdm(starts, desc="path patch", disable=not progress or len(starts) < 2):
        chunk = senders_run[start : start + size]
        cells = [(l, None, h) for l, h in chunk]
        freeze = [(n, (lambda src: lambda act, *, hook: src.repeat(act.shape[0] // src.shape[0], *[1] * (src.ndim - 1)))(clean_acts[n])) for n in mlp_names]
        for layer, name in enumerate(z_names):
            # frozen to clean everywhere, except each chunk slice's own sender, which is corrupt
            mask = _mask("head", corrupt_z[name].shape, [c if c[0] == layer else None for c in cells], clean.device)
            source = clean_acts[name]

            def write(act, *, hook, mask=mask, corrupt_src=corrupt_z[name], clean_src=source):
                k = mask.shape[0]
                out = torch.where(mask, corrupt_src.unsqueeze(0), clean_src.unsqueeze(0).expand(k, *clean_src.shape))
                return out.reshape(act.shape).to(act.dtype)

            freeze.append((name, write))
        with torch.no_grad():
            if receivers == "logits":
                with hooks(model, freeze):
                    logits = model(clean.repeat(len(chunk), 1))
            else:
                rec_names = sorted({f"blocks.{l}.attn.hook_{w}" for l, _, w in receivers})
                recorded: dict[str, Tensor] = {}

                def record(name):
                    def hook_fn(act, *, hook):
                        recorded[name] = act.clone()

                    return hook_fn

                with hooks(model, freeze + [(n, record(n)) for n in rec_names]):
                    model(clean.repeat(len(chunk), 1))
                patch = []
                for name in rec_names:
                    heads = [h for l, h, w in receivers if f"blocks.{l}.attn.hook_{w}" == name]
                    patch.append((name, _receiver_hook(recorded[name], heads)))
                with hooks(model, patch):
                    logits = model(clean.repeat(len(chunk), 1))
        for i, (layer, head) in enumerate(chunk):
            values[layer, head] = _scalar(metric, logits[i * batch : (i + 1) * batch], "path-patched")
    return Grid(
        values,
        ("layer", "head"),
        meta={"method": "path_patch", "receivers": "logits" if receivers == "logits" else [list(r) for r in receivers],
              "clean_metric": clean_value, "metric": "metric", **info},
    )


def _receiver_hook(recorded: Tensor, heads: list[int]) -> Callable:
    def hook_fn(act: Tensor, *, hook) -> Tensor:
        out = act.clone()
        out[:, :, heads] = recorded[:, :, heads]
        return out

    return hook_fn


def demo_section(workdir) -> list:
    """IOI head patching in two zoo families side by side, and an SVA residual position sweep."""
    from interp.results import Heading, stack
    from interp.tasks import make
    from interp.model import ZOO_DIR, load

    if not all((ZOO_DIR / f"lm-{f}" / "config.json").exists() for f in ("gpt2", "llama")):
        return []
    ioi = make("ioi", split="train", n=16, seed=0)
    grids = [activation_patch(load(f"zoo:lm-{f}"), ioi, site="z", progress=False) for f in ("gpt2", "llama")]
    side_by_side = stack(grids, "model", ["lm-gpt2", "lm-llama"])
    sva = make("sva", split="sva_attractor_mismatch", n=256, seed=0)
    pp = [i for i, kind in enumerate(sva.meta["kind"]) if kind == "pp"]
    length = max(set(int(sva.answer_pos[i]) for i in pp), key=[int(sva.answer_pos[i]) for i in pp].count)
    rows = [i for i in pp if int(sva.answer_pos[i]) == length][:16]
    subset = sva[rows]
    subset = replace(subset, clean=subset.clean[:, : length + 1], corrupt=subset.corrupt[:, : length + 1])
    resid = activation_patch(load("zoo:lm-gpt2"), subset, site="resid_pre", by_pos=True, progress=False)
    words = subset.text[0].split()
    resid = Grid(resid.values, resid.axes, (resid.labels[0], ("BOS", *words)[: length + 1]), {**resid.meta, "title": f"SVA residual patching by position, e.g. '{subset.text[0]}'"})
    return [
        Heading("Activation patching"),
        "IOI (training names; the models also solve held-out names, with a smaller logit difference: see the zoo table), clean prompts patched into ABC-corrupted ones, one head's output (hook_z) at a time: "
        "the logit difference IO - S of each patched run. Two families side by side.",
        Grid(side_by_side.values, side_by_side.axes, side_by_side.labels, {**side_by_side.meta, "title": "IOI: patch each head's output (logit diff)"}),
        "Subject-verb agreement with a mismatched prepositional-phrase attractor: the residual stream patched "
        "from the clean prompt into the one with the subject's number flipped, per layer and position.",
        resid,
    ]

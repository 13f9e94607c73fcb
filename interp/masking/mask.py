"""Masks as data, references, hooks, `apply` and single-unit ablation scans (see interp.masking)."""

from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterator, Literal, Mapping, Sequence

import torch
from jaxtyping import Float
from safetensors import safe_open
from torch import Tensor

from interp.hooks import check_head, check_layer, hooks
from interp.metrics import for_task
from interp.results import Grid, write_tensors_atomic
from interp.tasks.base import Task


Ablation = Literal["mean", "zero", "resample"]
ABLATIONS = ("mean", "zero", "resample")
_FORMAT = "interp.HeadMask/1"
_METRICS = ("logit_diff", "prob", "accuracy", "binary_accuracy")
# hard-concrete constants (Louizos et al. 2018, as in CoFiPruning)
LIMIT_L, LIMIT_R, BETA, EPS = -0.1, 1.1, 2.0 / 3.0, 1e-6
INIT_LOG_ALPHA = 10.0


def head_site(layer: int) -> str:
    return f"blocks.{layer}.attn.hook_z"


def mlp_site(layer: int) -> str:
    return f"blocks.{layer}.hook_mlp_out"


# ---------------------------------------------------------------------------------------------
# the mask: data only


@dataclass(frozen=True)
class HeadMask:
    """A mask over attention heads [layer, head] in [0, 1], optionally over MLPs [layer].

    `mlps=None` leaves every MLP untouched. `meta` records provenance (seed, sparsity, task, ...).
    """

    heads: Float[Tensor, "layer head"]
    mlps: Float[Tensor, " layer"] | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        heads = self.heads.detach().float().cpu()
        if heads.ndim != 2:
            raise ValueError(f"heads must be [layer, head], got shape {tuple(heads.shape)}")
        mlps = None if self.mlps is None else self.mlps.detach().float().cpu()
        if mlps is not None and mlps.shape != (heads.shape[0],):
            raise ValueError(f"mlps has shape {tuple(mlps.shape)} but heads {tuple(heads.shape)} need ({heads.shape[0]},)")
        for name, t in (("heads", heads), ("mlps", mlps)):
            if t is not None and t.numel() and not (float(t.min()) >= 0.0 and float(t.max()) <= 1.0):
                raise ValueError(f"{name} mask values must lie in [0, 1]; got range [{float(t.min())}, {float(t.max())}]")
        object.__setattr__(self, "heads", heads)
        object.__setattr__(self, "mlps", mlps)

    # -- constructors
    @classmethod
    def full(cls, model, value: float = 1.0, *, mlps: bool = True) -> HeadMask:
        """Every unit of `model` at `value` (1.0: the full model; 0.0: everything ablated)."""
        L, H = model.cfg.n_layers, model.cfg.n_heads
        return cls(torch.full((L, H), value), torch.full((L,), value) if mlps else None)

    @classmethod
    def keeping(cls, model, heads: Sequence[tuple[int, int]], mlps: Sequence[int] | None = None) -> HeadMask:
        """A binary mask keeping exactly these heads (and these MLPs; None leaves MLPs alone)."""
        mask = torch.zeros(model.cfg.n_layers, model.cfg.n_heads)
        for layer, head in heads:
            check_head(model, layer, head)
            mask[layer, head] = 1.0
        mlp_mask = None
        if mlps is not None:
            mlp_mask = torch.zeros(model.cfg.n_layers)
            for layer in mlps:
                check_layer(model, layer)
                mlp_mask[layer] = 1.0
        return cls(mask, mlp_mask)

    # -- views
    @property
    def n_layers(self) -> int:
        return self.heads.shape[0]

    @property
    def n_units(self) -> int:
        return self.heads.numel() + (0 if self.mlps is None else self.mlps.numel())

    def units(self) -> Tensor:
        """All unit values, heads (layer-major) then MLPs: [unit]."""
        return self.heads.flatten() if self.mlps is None else torch.cat([self.heads.flatten(), self.mlps])

    @property
    def sparsity(self) -> float:
        """Fraction of units that are fully off (mask 0)."""
        return float((self.units() == 0).float().mean())

    @property
    def name(self) -> str:
        m = self.meta
        if "seed" in m and "sparsity" in m:
            return f"s={m['sparsity']:g} seed={m['seed']}"
        return str(m.get("name", "mask"))

    def binarize(self, threshold: float = 0.5) -> HeadMask:
        return HeadMask(
            (self.heads > threshold).float(), None if self.mlps is None else (self.mlps > threshold).float(), dict(self.meta)
        )

    def kept_heads(self) -> list[tuple[int, int]]:
        return [(int(layer), int(head)) for layer, head in (self.heads > 0.5).nonzero().tolist()]

    def kept_mlps(self) -> list[int]:
        return [] if self.mlps is None else [int(i) for i in (self.mlps > 0.5).nonzero().flatten().tolist()]

    def to_grid(self) -> Grid:
        """[layer, unit] Grid: units h0..h{H-1}, plus 'mlp' when MLPs are masked."""
        values = self.heads if self.mlps is None else torch.cat([self.heads, self.mlps[:, None]], 1)
        units = tuple(f"h{h}" for h in range(self.heads.shape[1])) + (("mlp",) if self.mlps is not None else ())
        meta = {**self.meta, "title": f"mask {self.name} (sparsity {self.sparsity:.2f})", "metric": "mask"}
        return Grid(values, ("layer", "unit"), (tuple(range(self.n_layers)), units), meta)

    # -- storage
    def save(self, path: str | Path) -> Path:
        path = Path(path)
        tensors = {"heads": self.heads.contiguous()}
        if self.mlps is not None:
            tensors["mlps"] = self.mlps.contiguous()
        write_tensors_atomic(path, tensors, {"format": _FORMAT, "meta": json.dumps(self.meta)})
        return path

    @classmethod
    def load(cls, path: str | Path) -> HeadMask:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            if meta.get("format") != _FORMAT:
                raise ValueError(f"{path} is not an interp HeadMask file (format {meta.get('format')!r})")
            keys = set(f.keys())
            heads = f.get_tensor("heads")
            mlps = f.get_tensor("mlps") if "mlps" in keys else None
        return cls(heads, mlps, json.loads(meta["meta"]))


# ---------------------------------------------------------------------------------------------
# layer 1: pure tensor function


def mask_activation(act: Tensor, mask: Tensor, ref: Tensor) -> Tensor:
    """act * m + ref * (1 - m), with `mask` over the head axis of a [batch, pos, head, d_head]
    activation ([head]) or a scalar for a [batch, pos, d_model] one. `ref` broadcasts to `act`.
    Exact at m = 1 (act) and m = 0 (ref)."""
    if act.ndim == 4:
        if mask.shape != (act.shape[2],):
            raise ValueError(f"head mask has shape {tuple(mask.shape)} but the activation {tuple(act.shape)} has {act.shape[2]} heads")
        m = mask.to(act)[:, None]  # [head, 1] against [..., head, d_head]
    else:
        if mask.numel() != 1:
            raise ValueError(f"an MLP mask is one value, got shape {tuple(mask.shape)} for activation {tuple(act.shape)}")
        m = mask.to(act).reshape(())
    return act * m + ref.to(act) * (1 - m)


# ---------------------------------------------------------------------------------------------
# layer 2: references and hook factories


@dataclass(frozen=True)
class Reference:
    """What a masked unit is replaced by at one site.

    zero: `values` is a 0-d zero. mean: `values` is [pos, ...] (per-position mean over the
    reference rows' non-pad tokens) and `pooled` [...] the mean over all their positions, used
    past the reference width. resample: `values` is [batch, pos, ...], one row per input row.
    """

    kind: str
    values: Tensor
    pooled: Tensor | None = None

    def like(self, act: Tensor) -> Tensor:
        if self.kind == "zero":
            return self.values
        if self.kind == "resample":
            if self.values.shape != act.shape:
                raise ValueError(
                    f"resample reference has shape {tuple(self.values.shape)} but the activation has "
                    f"{tuple(act.shape)}; pass reference token rows of the same shape as the input"
                )
            return self.values
        n, have = act.shape[1], self.values.shape[0]
        if n <= have:
            return self.values[:n]
        extra = self.pooled.expand(n - have, *self.pooled.shape)
        return torch.cat([self.values, extra], 0)

    def rows(self, index: Tensor) -> Reference:
        """The resample reference for a subset of input rows (other kinds are unchanged)."""
        return replace(self, values=self.values[index]) if self.kind == "resample" else self


def mask_hook(mask: Tensor, ref: Reference):
    """A hook `fn(act, *, hook)` masking one site: a [head] mask on hook_z, a scalar on hook_mlp_out."""

    def hook_fn(act: Tensor, *, hook) -> Tensor:
        return mask_activation(act, mask, ref.like(act))

    return hook_fn


def _pad_id(model) -> int | None:
    tok = getattr(model, "tokenizer", None)
    return getattr(tok, "pad_token_id", None) if tok is not None else None


def references(
    model, sites: Sequence[str], ablation: Ablation, tokens: Tensor | None = None, *, chunk: int = 256
) -> dict[str, Reference]:
    """One `Reference` per hook name, from reference token rows (none needed for zero)."""
    if ablation not in ABLATIONS:
        raise ValueError(f"ablation {ablation!r} is not one of {ABLATIONS}")
    if ablation == "zero":
        if tokens is not None:
            raise ValueError("zero ablation takes no reference tokens")
        return {s: Reference("zero", torch.zeros(())) for s in sites}
    if tokens is None:
        raise ValueError(f"{ablation} ablation needs reference token rows [batch, pos] (e.g. task.clean)")
    if tokens.ndim != 2:
        raise ValueError(f"reference tokens must be [batch, pos], got shape {tuple(tokens.shape)}")
    wanted = set(sites)
    acts: dict[str, list[Tensor]] = {s: [] for s in sites}
    with torch.no_grad():
        for start in range(0, tokens.shape[0], chunk):
            _, cache = model.run_with_cache(tokens[start : start + chunk], names_filter=lambda n: n in wanted)
            for s in sites:
                acts[s].append(cache[s].detach())
    out = {}
    pad = _pad_id(model)
    valid = torch.ones(tokens.shape, dtype=torch.bool) if pad is None else (tokens != pad)
    valid[:, 0] = True  # a row is never all padding
    for s in sites:
        a = torch.cat(acts[s], 0)  # [batch, pos, ...]
        if ablation == "resample":
            out[s] = Reference("resample", a)
            continue
        w = valid.to(a).view(*valid.shape, *([1] * (a.ndim - 2)))  # [batch, pos, 1...]
        pooled = (a * w).sum((0, 1)) / w.sum((0, 1))
        count = w.sum(0)  # [pos, 1...]
        per_pos = torch.where(count > 0, (a * w).sum(0) / count.clamp_min(1), pooled)
        out[s] = Reference("mean", per_pos, pooled)
    return out


def _sites(mask: HeadMask) -> list[str]:
    return [head_site(l) for l in range(mask.n_layers)] + ([mlp_site(l) for l in range(mask.n_layers)] if mask.mlps is not None else [])


def mask_hooks(mask: HeadMask | tuple[Tensor, Tensor | None], refs: Mapping[str, Reference]) -> list[tuple[str, Any]]:
    """(hook name, hook) pairs for every site whose mask is not all ones (gradients pass through)."""
    heads, mlps = (mask.heads, mask.mlps) if isinstance(mask, HeadMask) else mask
    out = []
    for layer in range(heads.shape[0]):
        if heads.requires_grad or bool((heads[layer] != 1).any()):
            out.append((head_site(layer), mask_hook(heads[layer], refs[head_site(layer)])))
        if mlps is not None and (mlps.requires_grad or bool(mlps[layer] != 1)):
            out.append((mlp_site(layer), mask_hook(mlps[layer], refs[mlp_site(layer)])))
    return out


def _check_mask(model, mask: HeadMask) -> None:
    want = (model.cfg.n_layers, model.cfg.n_heads)
    if tuple(mask.heads.shape) != want:
        raise ValueError(f"mask covers [layer, head] = {tuple(mask.heads.shape)} but the model has {want}")


# ---------------------------------------------------------------------------------------------
# layer 3: analyses


@contextmanager
def threads(n: int) -> Iterator[None]:
    """Run the body with `n` torch threads (small models are fastest on one), then restore."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextmanager
def apply(
    model, mask: HeadMask, *, ablation: Ablation = "mean", reference: Tensor | None = None
) -> Iterator[object]:
    """Run the body with `mask` applied; hooks are removed on exit, even on error.

    mean: `reference` is token rows [batch, pos] whose activations are averaged; resample:
    `reference` is token rows of the same shape as the input the body runs; zero: no reference.
    """
    _check_mask(model, mask)
    refs = references(model, _sites(mask), ablation, reference)
    with hooks(model, mask_hooks(mask, refs)):
        yield model


def _check_task(task: Task) -> None:
    if not task.metric or task.metric not in _METRICS:
        raise ValueError(
            f"task {task.name}/{task.split} has no usable metric (metric={task.metric!r}); "
            f"set Task.metric to one of {_METRICS}"
        )


def _default_reference(task: Task, ablation: Ablation, reference: Tensor | None) -> Tensor | None:
    if reference is not None or ablation == "zero":
        return reference
    return task.corrupt if ablation == "resample" else task.clean


def _logits(model, tokens: Tensor, chunk: int = 256) -> Tensor:
    with torch.no_grad():
        return torch.cat([model(tokens[i : i + chunk]) for i in range(0, tokens.shape[0], chunk)], 0)


def ablation_scan(
    model, task: Task, *, ablation: Ablation = "mean", reference: Tensor | None = None, mlps: bool = True
) -> Grid:
    """The task metric with each head (and each MLP) ablated alone: a [layer, unit] Grid.

    The reference defaults to the task's clean rows (mean) or corrupt rows (resample).
    `meta["baseline"]` is the unablated metric.
    """
    _check_task(task)
    metric = for_task(task)
    reference = _default_reference(task, ablation, reference)
    L, H = model.cfg.n_layers, model.cfg.n_heads
    full = HeadMask.full(model, mlps=mlps)
    refs = references(model, _sites(full), ablation, reference)
    values = torch.zeros(L, H + mlps)
    baseline = float(metric(_logits(model, task.clean)))
    for layer in range(L):
        for unit in range(H + mlps):
            heads, mlp = full.heads.clone(), None if full.mlps is None else full.mlps.clone()
            if unit < H:
                heads[layer, unit] = 0.0
            else:
                mlp[layer] = 0.0
            with hooks(model, mask_hooks((heads, mlp), refs)):
                values[layer, unit] = float(metric(_logits(model, task.clean)))
    units = tuple(f"h{h}" for h in range(H)) + (("mlp",) if mlps else ())
    meta = {"task": f"{task.name}/{task.split}", "metric": task.metric, "method": f"{ablation}-ablate one unit", "baseline": baseline}
    return Grid(values, ("layer", "unit"), (tuple(range(L)), units), meta)



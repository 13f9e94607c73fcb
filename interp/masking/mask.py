"""Masks as data, their interventions, `apply` and single-unit ablation scans (see interp.masking)."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator, Literal, Mapping, Sequence

import torch
from jaxtyping import Float
from torch import Tensor

from interp import run
from interp.errors import InterpError
from interp.sites import check_head, check_layer, check_tuples
from interp.interventions import Ablation, AblationStyle, Mask, Reference
from interp.metrics import for_task
from interp.results import Grid, result
from interp.sites import hook_name, position_axis
from interp.tasks.base import Task
from interp.memory import records_peak

__all__ = [
    "HeadMask", "ablation_scan", "apply", "check_mask", "check_task", "default_reference", "head_site",
    "interventions", "mlp_site", "references", "sites",
]

METRICS = ("logit_diff", "prob", "accuracy", "binary_accuracy")
MeanOver = Literal["position", "tokens"]
MEAN_OVER = ("position", "tokens")


def head_site(layer: int) -> str:
    """The hook a head mask acts at: `blocks.{layer}.attn.hook_z`."""
    return hook_name("z", layer)


def mlp_site(layer: int) -> str:
    """The hook an MLP mask acts at: `blocks.{layer}.hook_mlp_out`."""
    return hook_name("mlp_out", layer)


# ---------------------------------------------------------------------------------------------
# the mask: data only


@result
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
            raise InterpError(f"heads must be [layer, head], got shape {tuple(heads.shape)}")
        mlps = None if self.mlps is None else self.mlps.detach().float().cpu()
        if mlps is not None and mlps.shape != (heads.shape[0],):
            raise InterpError(f"mlps has shape {tuple(mlps.shape)} but heads {tuple(heads.shape)} need ({heads.shape[0]},)")
        for name, t in (("heads", heads), ("mlps", mlps)):
            if t is not None and t.numel() and not (float(t.min()) >= 0.0 and float(t.max()) <= 1.0):
                raise InterpError(f"{name} mask values must lie in [0, 1]; got range [{float(t.min())}, {float(t.max())}]")
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
        for layer, head in check_tuples(heads, 2, "heads", "(layer, head)"):
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

    def __repr__(self) -> str:
        """Shape, sparsity, kept units and meta keys; never the tensors (nor log_alpha/history)."""
        L, H = self.heads.shape
        kept = int((self.heads > 0).sum())
        mlps = "" if self.mlps is None else f", mlps kept={int((self.mlps > 0).sum())}/{self.mlps.numel()}"
        meta = f", meta keys={sorted(self.meta)}" if self.meta else ""
        return f"HeadMask({self.name!r}: {L}x{H} heads, heads kept={kept}/{L * H}{mlps}, sparsity={self.sparsity:.3f}{meta})"

    def binarize(self, threshold: float = 0.5) -> HeadMask:
        return HeadMask(
            (self.heads > threshold).float(), None if self.mlps is None else (self.mlps > threshold).float(), dict(self.meta)
        )

    def kept_heads(self) -> list[tuple[int, int]]:
        return [(int(layer), int(head)) for layer, head in (self.heads > 0.5).nonzero().tolist()]

    def kept_mlps(self) -> list[int]:
        return [] if self.mlps is None else [int(i) for i in (self.mlps > 0.5).nonzero().flatten().tolist()]

    def to_grid(self) -> Grid:
        """[layer, unit] heatmap: units h0..h{H-1}, plus 'mlp' when MLPs are masked."""
        values = self.heads if self.mlps is None else torch.cat([self.heads, self.mlps[:, None]], 1)
        units = tuple(f"h{h}" for h in range(self.heads.shape[1])) + (("mlp",) if self.mlps is not None else ())
        meta = {**self.meta, "title": f"mask {self.name} (sparsity {self.sparsity:.2f})", "metric": "mask", "chart": "heatmap"}
        return Grid(values, ("layer", "unit"), (tuple(range(self.n_layers)), units), meta)



# ---------------------------------------------------------------------------------------------
# masks -> interventions


def sites(mask: HeadMask) -> list[str]:
    """The hook names a mask can act at: every hook_z, and every hook_mlp_out if MLPs are masked."""
    return [head_site(l) for l in range(mask.n_layers)] + ([mlp_site(l) for l in range(mask.n_layers)] if mask.mlps is not None else [])


def _ref(refs: Mapping[str, Reference] | None, site: str) -> Reference:
    if refs is None:
        return Reference("zero", torch.zeros(()))
    if site not in refs:
        raise InterpError(f"no reference for {site}; build them with interp.run.reference(model, masking.sites(mask), ...)")
    return refs[site]


def interventions(
    mask: HeadMask | tuple[Tensor, Tensor | None], refs: Mapping[str, Reference] | None = None
) -> list[Mask]:
    """One `Mask` per site whose mask is not all ones (or requires grad): hook_z per layer with the
    layer's [head] row, hook_mlp_out per masked MLP. `mask` is a HeadMask or raw (heads [layer, head],
    mlps [layer] or None) tensors, which may require grad (learned masks). `refs` maps hook names to
    `interp.run.reference(...)` references; None is zero ablation. Raw tensors with a leading row
    axis (heads [row, layer, head], mlps [row, layer]) give every input row its own mask (masks
    learned side by side in one forward, `learn_masks`)."""
    heads, mlps = (mask.heads, mask.mlps) if isinstance(mask, HeadMask) else mask
    rows = heads.ndim == 3
    if mlps is not None and mlps.ndim != heads.ndim - 1:
        raise InterpError(f"heads {tuple(heads.shape)} and mlps {tuple(mlps.shape)} disagree on a row axis")
    out = []
    for layer in range(heads.shape[-2]):
        h = heads[:, layer] if rows else heads[layer]
        if heads.requires_grad or bool((h != 1).any()):
            out.append(Mask(head_site(layer), h, _ref(refs, head_site(layer))))
        m = None if mlps is None else (mlps[:, layer] if rows else mlps[layer])
        if m is not None and (mlps.requires_grad or bool((m != 1).any())):
            out.append(Mask(mlp_site(layer), m, _ref(refs, mlp_site(layer))))
    return out


def check_mask(model, mask: HeadMask) -> None:
    """InterpError unless `mask` covers the model's [layer, head]."""
    want = (model.cfg.n_layers, model.cfg.n_heads)
    if tuple(mask.heads.shape) != want:
        raise InterpError(f"mask covers [layer, head] = {tuple(mask.heads.shape)} but the model has {want}")


def check_task(task: Task) -> None:
    """InterpError unless the task names a metric masking can score."""
    if not task.metric or task.metric not in METRICS:
        raise InterpError(
            f"task {task.name}/{task.split} has no usable metric (metric={task.metric!r}); "
            f"set Task.metric to one of {METRICS}"
        )


def references(
    model, names: Sequence[str], ablation: Ablation, tokens: Tensor | None, mean_over: MeanOver = "position"
) -> dict[str, Reference]:
    """`interp.run.reference` for masking. Mean ablation, `mean_over`:

    position  the mean of each position over the reference rows (positions past their width use
              the mean over all of them), as `interp.run.reference` builds it;
    tokens    one mean per head (per MLP) over every non-padding token of the reference rows,
              used at every position: the official Heuristic-Core code (`PertSelfAttention`
              accumulates `context_layer.sum(dim=2).sum(dim=0)` over batch and positions).
    """
    if mean_over not in MEAN_OVER:
        raise InterpError(f"mean_over={mean_over!r} is not one of {MEAN_OVER}")
    refs = run.reference(model, names, ablation, tokens)
    if ablation != "mean" or mean_over == "position":
        return refs
    out = {}
    for n, r in refs.items():
        ax = position_axis(n) - 1  # mean values have no batch axis
        out[n] = Reference("mean", r.pooled.unsqueeze(ax).expand_as(r.values).contiguous(), r.pooled)
    return out


def default_reference(task: Task, ablation: Ablation, reference: Tensor | None) -> Tensor | None:
    """`reference` if given, else the task rows the style reads (`AblationStyle.reads`: clean for
    mean, corrupt for resample); zero: none."""
    if reference is not None:
        return reference
    reads = AblationStyle.of(ablation).reads
    return None if reads is None else getattr(task, reads)


# ---------------------------------------------------------------------------------------------
# analyses


@contextmanager
def apply(
    model, mask: HeadMask, *, ablation: Ablation = "mean", reference: Tensor | None = None,
    mean_over: MeanOver = "position",
) -> Iterator[object]:
    """Run the body with `mask` applied (through `interp.run.intervened`); removed on exit, even on error.

    mean: `reference` is token rows [batch, pos] whose activations are averaged (per position or
    over all tokens, `mean_over`, see `references`); resample: `reference` is token rows of the
    same shape as the input the body runs; zero: no reference.
    """
    check_mask(model, mask)
    refs = references(model, sites(mask), ablation, reference, mean_over)
    with run.intervened(model, interventions(mask, refs)):
        yield model


@records_peak
def ablation_scan(
    model,
    task: Task,
    *,
    ablation: Ablation = "mean",
    reference: Tensor | None = None,
    mlps: bool = True,
    mean_over: MeanOver = "position",
    variants_per_forward: int | None = None,
    progress: bool = True,
) -> Grid:
    """The task metric with each head (and each MLP) ablated alone: a [layer, unit] Grid.

    Every single-unit ablation is one variant of `interp.run.evaluate` (batched forwards, resumed
    at the unit's layer on causal decoders). The reference defaults to the task's clean rows
    (mean) or corrupt rows (resample); `mean_over`: see `references`. `meta["baseline"]` is the
    unablated metric.
    """
    check_task(task)
    metric = for_task(task)
    reference = default_reference(task, ablation, reference)
    L, H = model.cfg.n_layers, model.cfg.n_heads
    refs = references(model, sites(HeadMask.full(model, mlps=mlps)), ablation, reference, mean_over)
    variants: list[list[Mask]] = [[]]  # the base run first
    for layer in range(L):
        for head in range(H):
            variants.append([Mask.ablate(head_site(layer), head, refs[head_site(layer)], n_heads=H)])
        if mlps:
            variants.append([Mask.ablate(mlp_site(layer), None, refs[mlp_site(layer)])])
    values = run.evaluate(model, task.clean, variants, metric, variants_per_forward=variants_per_forward,
                          answer_pos=task.answer_pos, progress=progress, desc="ablation scan")
    units = tuple(f"h{h}" for h in range(H)) + (("mlp",) if mlps else ())
    meta = {"task": f"{task.name}/{task.split}", "metric": task.metric, "method": f"{ablation}-ablate one unit",
            "ablation": ablation, "mean_over": mean_over, "baseline": float(values[0]), "chart": "heatmap"}
    return Grid(values[1:].view(L, H + mlps), ("layer", "unit"), (tuple(range(L)), units), meta)

"""Faithfulness of a simplifier split by split, sweeps over rank and k, attention comparisons."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import torch
from jaxtyping import Float, Int
from torch import Tensor
from tqdm.auto import tqdm

from interp import run
from interp.errors import InterpError
from interp.results import Grid, result
from interp.simplify.core import IGNORE, HeadSpec, Rows, js_divergence
from interp.simplify.simplifiers import Simplifier, fit_kmeans, fit_svd
from interp.sites import hook_name
from interp.tasks.base import Task
from interp.memory import records_peak

__all__ = ["METRICS", "QUANTITIES", "AttentionComparison", "Sweep", "compare_attention", "faithfulness", "k_sweep", "rank_sweep"]

METRICS = (
    "accuracy_original",     # fraction of scored positions the original model gets right
    "accuracy_simplified",   # the same with the simplifier applied
    "delta",                 # accuracy_simplified - accuracy_original (paired)
    "same_prediction",       # fraction of scored positions where both argmaxes agree
    "js",                    # Jensen-Shannon divergence (bits) of attention rows, simplified heads
    "delta_gap",             # delta(split) - delta(reference split): the ID vs OOD gap
    "same_prediction_gap",   # same_prediction(split) - same_prediction(reference split)
)
QUANTITIES = ("value", "ci_low", "ci_high", "p_value")
_TESTED = ("delta", "delta_gap", "same_prediction_gap")  # metrics with a p-value


# ---------------------------------------------------------------------------------------------
# faithfulness


@dataclass(frozen=True)
class _Run:
    """One model run over a split: predictions at scored positions, attention on chosen heads."""

    pred: list[Tensor]      # per batch: [batch, pos] argmax ids
    pattern: list[Tensor]   # per batch: [batch, head, dest, src] on the chosen heads


def _run(model, rows: Rows, heads: tuple[tuple[int, int], ...], interventions: Sequence[Simplifier]) -> _Run:
    """Predictions and the chosen heads' attention, batch by batch, under `interventions`."""
    names = sorted({hook_name("pattern", layer) for layer, _ in heads})
    preds, patterns = [], []
    for batch in rows.batches():
        logits, got = run.cache(model, batch.tokens.to(model.cfg.device), names, interventions)
        preds.append(logits.argmax(-1).cpu())
        patterns.append(torch.stack([got[hook_name("pattern", layer)][:, h] for layer, h in heads], 1).float().cpu())
    return _Run(preds, patterns)


def _per_row(rows: Rows, orig: _Run, simp: _Run) -> dict[str, Tensor]:
    """Per-row counts: scored positions, correct (original, simplified), same, JS sum, JS count."""
    out: dict[str, list[Tensor]] = {k: [] for k in ("n", "orig", "simp", "same", "js", "m")}
    for batch, po, ps, ao, as_ in zip(rows.batches(), orig.pred, simp.pred, orig.pattern, simp.pattern):
        scored = batch.targets != IGNORE
        out["n"].append(scored.sum(1))
        out["orig"].append(((po == batch.targets) & scored).sum(1))
        out["simp"].append(((ps == batch.targets) & scored).sum(1))
        out["same"].append(((po == ps) & scored).sum(1))
        valid = batch.valid()[:, None, :].expand(-1, ao.shape[1], -1)  # [batch, head, dest]
        js = js_divergence(ao, as_)  # [batch, head, dest]
        out["js"].append((js * valid).sum((1, 2)).double())
        out["m"].append(valid.sum((1, 2)))
    return {k: torch.cat(v).double() for k, v in out.items()}


def _boot_index(n_rows: int, n_boot: int, gen: torch.Generator) -> Tensor:
    return torch.randint(n_rows, (n_boot, n_rows), generator=gen)


def _ratio(num: Tensor, den: Tensor, idx: Tensor | None = None) -> Tensor:
    """sum(num) / sum(den), over rows or over each bootstrap resample of rows."""
    if idx is None:
        return num.sum() / den.sum().clamp_min(1)
    return num[idx].sum(-1) / den[idx].sum(-1).clamp_min(1)


def _p_value(samples: Tensor) -> float:
    """Two-sided bootstrap p-value for 'the statistic is 0'."""
    if bool((samples == 0).all()):
        return 1.0
    lo, hi = float((samples <= 0).double().mean()), float((samples >= 0).double().mean())
    return min(1.0, 2 * min(lo, hi) + 1 / len(samples))


def _stats(counts: Mapping[str, dict[str, Tensor]], names: Sequence[str], reference: str, n_boot: int, seed: int) -> Tensor:
    """[split, metric, quantity] values with percentile bootstrap CIs (95 %) over rows."""
    gen = torch.Generator().manual_seed(seed)
    point: dict[str, dict[str, Tensor]] = {}
    boot: dict[str, dict[str, Tensor]] = {}
    for s in names:
        c = counts[s]
        idx = _boot_index(len(c["n"]), n_boot, gen)
        point[s], boot[s] = {}, {}
        for key, (num, den) in {"accuracy_original": ("orig", "n"), "accuracy_simplified": ("simp", "n"), "same_prediction": ("same", "n"), "js": ("js", "m")}.items():
            point[s][key] = _ratio(c[num], c[den])
            boot[s][key] = _ratio(c[num], c[den], idx)
        point[s]["delta"] = point[s]["accuracy_simplified"] - point[s]["accuracy_original"]
        boot[s]["delta"] = boot[s]["accuracy_simplified"] - boot[s]["accuracy_original"]  # paired: same rows
    out = torch.full((len(names), len(METRICS), len(QUANTITIES)), float("nan"), dtype=torch.float64)
    for i, s in enumerate(names):
        for gap, base in (("delta_gap", "delta"), ("same_prediction_gap", "same_prediction")):
            point[s][gap] = point[s][base] - point[reference][base]
            boot[s][gap] = boot[s][base] - boot[reference][base] if s != reference else torch.zeros(n_boot, dtype=torch.float64)
        for j, metric in enumerate(METRICS):
            b = boot[s][metric]
            out[i, j, 0] = point[s][metric]
            out[i, j, 1], out[i, j, 2] = torch.quantile(b, 0.025), torch.quantile(b, 0.975)
            if metric in _TESTED and not (s == reference and metric.endswith("gap")):
                out[i, j, 3] = _p_value(b)
    return out.float()


def _splits(splits: Mapping[str, Task | Rows] | Sequence[Task | Rows]) -> dict[str, Rows]:
    if isinstance(splits, Mapping):
        out = {str(k): Rows.of(v) for k, v in splits.items()}
    else:
        out = {}
        for v in splits:
            r = Rows.of(v)
            name = str(r.meta.get("split", len(out)))
            if name in out:
                raise InterpError(f"two splits are both called {name!r}; pass a dict {{name: data}}")
            out[name] = r
    if not out:
        raise InterpError("no splits given; pass {name: Task or Rows}")
    for name, r in out.items():
        if len(r) == 0 or int((r.targets != IGNORE).sum()) == 0:
            raise InterpError(f"split {name!r} has no scored positions")
    return out


class _Evaluator:
    """The original model's runs, once per split; then any number of simplifiers against them."""

    def __init__(self, model, heads, splits, *, reference: str | None, n_boot: int, seed: int):
        self.model, self.heads = model, heads
        self.splits = _splits(splits)
        self.reference = reference if reference is not None else next(iter(self.splits))
        if self.reference not in self.splits:
            raise InterpError(f"reference split {self.reference!r} is not one of {list(self.splits)}")
        self.n_boot, self.seed = n_boot, seed
        self.orig = {s: _run(model, r, heads, []) for s, r in self.splits.items()}

    def values(self, simplifier: Simplifier) -> Tensor:
        counts = {s: _per_row(r, self.orig[s], _run(self.model, r, self.heads, [simplifier])) for s, r in self.splits.items()}
        return _stats(counts, list(self.splits), self.reference, self.n_boot, self.seed)

    def meta(self, simplifier: Simplifier) -> dict[str, Any]:
        return {
            "method": simplifier.describe(),
            "heads": [list(h) for h in self.heads],
            "reference": self.reference,
            "n_boot": self.n_boot,
            "ci": 0.95,
            "js_units": "bits",
            "fitted_on": {k: v for k, v in simplifier.meta.items() if not k.endswith("singular_values")},
            "splits": {s: r.meta for s, r in self.splits.items()},
        }


@records_peak
def faithfulness(
    model,
    simplifier: Simplifier,
    splits: Mapping[str, Task | Rows] | Sequence[Task | Rows],
    *,
    reference: str | None = None,
    n_boot: int = 1000,
    seed: int = 0,
) -> Grid:
    """Faithfulness of `simplifier` on each split: Grid [split, metric, quantity].

    metric: see METRICS; quantity: value, ci_low, ci_high (95 % percentile bootstrap over rows),
    p_value (two-sided bootstrap, for delta, delta_gap and same_prediction_gap). `reference` is
    the in-distribution split the gaps are taken against (default: the first). The original and
    simplified runs see the same rows, so delta and the gaps are paired comparisons.
    """
    ev = _Evaluator(model, simplifier.heads, splits, reference=reference, n_boot=n_boot, seed=seed)
    return Grid(ev.values(simplifier), ("split", "metric", "quantity"), (tuple(ev.splits), METRICS, QUANTITIES), ev.meta(simplifier))


_PANELS = {"accuracy_simplified": "accuracy", "same_prediction": "same prediction", "js": "attention JS (bits)"}


@result
@dataclass(frozen=True)
class Sweep:
    """Faithfulness over a sweep of one parameter (`parameter`: "rank" or "k"):
    values [parameter, split, metric, quantity] (see METRICS, QUANTITIES); `grid` as a Grid."""

    values: Float[Tensor, "param split metric quantity"]
    parameter: str
    params: tuple[int, ...]
    splits: tuple[str, ...]
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", tuple(self.params))
        object.__setattr__(self, "splits", tuple(self.splits))
        want = (len(self.params), len(self.splits), len(METRICS), len(QUANTITIES))
        if tuple(self.values.shape) != want:
            raise InterpError(f"Sweep values have shape {tuple(self.values.shape)}, expected {want} "
                              f"({self.parameter}, split, metric, quantity)")

    @property
    def grid(self) -> Grid:
        """Grid [rank|k, split, metric, quantity]."""
        return Grid(self.values, (self.parameter, "split", "metric", "quantity"), (self.params, self.splits, METRICS, QUANTITIES), self.meta)

    def metric(self, name: str, quantity: str = "value") -> Grid:
        """[rank|k, split] values of one metric."""
        if name not in METRICS or quantity not in QUANTITIES:
            raise InterpError(f"metric {name!r} / quantity {quantity!r}: choose from {METRICS} / {QUANTITIES}")
        m, q = METRICS.index(name), QUANTITIES.index(quantity)
        return Grid(self.values[:, :, m, q], (self.parameter, "split"), (self.params, self.splits), {**self.meta, "metric": name})

    def to_dataframe(self):
        """One row per (parameter, split, metric) with value, ci_low, ci_high and p_value columns."""
        frame = self.grid.to_dataframe()
        return frame.pivot_table(index=[self.parameter, "split", "metric"], columns="quantity", values="value", dropna=False, sort=False).reset_index()

    def to_grid(self) -> Grid:
        """The faithfulness chart: lines over rank|k, one per split, a panel per metric (accuracy,
        same prediction, attention JS), 95 % CI bars; "<split> original" is the original model's
        accuracy (drawn in the accuracy panel only)."""
        q = [QUANTITIES.index(x) for x in ("value", "ci_low", "ci_high")]
        panels = [METRICS.index(m) for m in _PANELS]
        simplified = self.values[:, :, panels][..., q]  # [param, split, panel, quantity]
        original = torch.full_like(simplified, float("nan"))
        acc = self.values[:, :, METRICS.index("accuracy_original"), QUANTITIES.index("value")]
        original[:, :, 0] = acc[..., None]  # no error bars: ci = value
        values = torch.cat([simplified, original], 1)
        series = (*self.splits, *(f"{s} original" for s in self.splits))
        title = f"{self.meta.get('method', 'simplifier')} on heads {self.meta.get('heads', '')}: faithfulness per split"
        meta = {**self.meta, "chart": "lines", "log_x": True, "title": title, "metric": "faithfulness"}
        return Grid(values, (self.parameter, "split", "metric", "quantity"), (self.params, series, tuple(_PANELS.values()), ("value", "ci_low", "ci_high")), meta)


def _sweep(ev: _Evaluator, axis: str, params: Sequence[int], make: Callable[[int], Simplifier], progress: bool) -> Sweep:
    values, meta = [], {}
    for p in tqdm(params, desc=f"{axis} sweep", disable=not progress):
        s = make(p)
        values.append(ev.values(s))
        meta = ev.meta(s)
    meta["method"] = meta["method"].split(" ")[0]
    return Sweep(torch.stack(values), axis, tuple(params), tuple(ev.splits), meta)


@records_peak
def rank_sweep(
    model,
    heads: HeadSpec,
    data: Task | Rows,
    splits: Mapping[str, Task | Rows] | Sequence[Task | Rows],
    *,
    ranks: Sequence[int] | None = None,
    basis: str = "separate",
    center: bool = True,
    reference: str | None = None,
    n_boot: int = 1000,
    seed: int = 0,
    progress: bool = True,
) -> Sweep:
    """faithfulness of svd(..., rank=r) for each r in `ranks` (default 1..d_head); one SVD fit."""
    ranks = list(ranks) if ranks is not None else list(range(1, model.cfg.d_head + 1))
    for r in ranks:
        if isinstance(r, bool) or not isinstance(r, int) or not 1 <= r <= model.cfg.d_head:
            raise InterpError(f"rank={r!r} is out of range: choose 1..d_head={model.cfg.d_head}")
    fit = fit_svd(model, heads, data, basis=basis, center=center)
    ev = _Evaluator(model, fit.heads, splits, reference=reference, n_boot=n_boot, seed=seed)
    return _sweep(ev, "rank", ranks, fit.at, progress)


@records_peak
def k_sweep(
    model,
    heads: HeadSpec,
    data: Task | Rows,
    splits: Mapping[str, Task | Rows] | Sequence[Task | Rows],
    *,
    ks: Sequence[int],
    seed: int = 0,
    reference: str | None = None,
    n_boot: int = 1000,
    progress: bool = True,
) -> Sweep:
    """faithfulness of kmeans(..., k=k) for each k in `ks`; the vectors are collected once."""
    fit = fit_kmeans(model, heads, data, seed=seed)
    for k in ks:
        fit.check(k)
    ev = _Evaluator(model, fit.heads, splits, reference=reference, n_boot=n_boot, seed=seed)
    return _sweep(ev, "k", list(ks), fit.at, progress)


# ---------------------------------------------------------------------------------------------
# attention views


@result
@dataclass(frozen=True)
class AttentionComparison:
    """Attention of one head on one row, original and simplified: patterns [2, dest, src].

    `interp.plot.attention(c.patterns, c.tokens, head_names=c.names)` shows it in circuitsvis;
    `interp.plot.render(c)` draws the two as heatmaps side by side (via `to_grid()`).
    """

    patterns: Float[Tensor, "two dest src"]
    tokens: tuple[str, ...]
    names: tuple[str, ...]
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tokens", tuple(self.tokens))
        object.__setattr__(self, "names", tuple(self.names))
        n = len(self.tokens)
        if self.patterns.shape != (len(self.names), n, n):
            raise InterpError(f"patterns have shape {tuple(self.patterns.shape)}, expected ({len(self.names)}, {n}, {n}) "
                              "for the names and tokens given")

    def to_grid(self) -> Grid:
        """[method, dest, src]: one heatmap per entry of `names` (ticks: position and token)."""
        ticks = tuple(f"{i} {t}" for i, t in enumerate(self.tokens))  # unique, so repeated tokens keep their own row
        meta = {**self.meta, "title": f"attention of head {self.meta.get('head', '')}", "metric": "attention"}
        return Grid(self.patterns, ("method", "dest", "src"), (self.names, ticks, ticks), meta)


@records_peak
def compare_attention(model, simplifier: Simplifier, tokens: Int[Tensor, " pos"], head: tuple[int, int]) -> AttentionComparison:
    """The original and simplified attention of `head` (one of the simplifier's) on one row."""
    if tuple(head) not in simplifier.heads:
        raise InterpError(f"head {tuple(head)} is not simplified by this simplifier (heads {simplifier.heads})")
    if tokens.ndim != 1:
        raise InterpError(f"tokens must be one row [pos], got shape {tuple(tokens.shape)}")
    rows = Rows(tokens[None], torch.full_like(tokens[None], IGNORE), torch.tensor([len(tokens)]))
    heads = (tuple(head),)
    a = _run(model, rows, heads, []).pattern[0][0, 0]
    b = _run(model, rows, heads, [simplifier]).pattern[0][0, 0]
    strs = tuple(str(t) for t in model.to_str_tokens(tokens))
    return AttentionComparison(torch.stack([a, b]), strs, ("original", simplifier.describe()), {"head": list(head)})

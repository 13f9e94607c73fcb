"""Result types as data, and the one save/load for every result type.

Every result is a frozen dataclass registered with `@result`; `save(obj, path)` writes its tensors
to safetensors and everything else as JSON in the safetensors header, under one format tag
("interp/2") with the type's short tag; `load(path)` gives the object back (`__post_init__` checks it
again). Provenance lives in one field, `meta`, on every type. Every result is a `Grid` or converts
to one (`to_grid()`), so `interp.plot` draws any of them from the Grid alone: `Grid.meta["chart"]`
picks the chart (see `CHARTS`), axis names and tick labels title it.
"""

from __future__ import annotations

import html
import math
import numbers
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from interp.errors import InterpError
from interp.files.storage import atomic_dir, atomic_path, load, result, save, tag_of, write_tensors_atomic, write_text_atomic
from interp.tensors import AXES

__all__ = [
    "CHARTS", "Grid", "Heading", "atomic_dir", "atomic_path", "load", "result", "save", "stack", "tag_of", "write_tensors_atomic",
    "write_text_atomic",
]

# How plot.render draws a Grid (meta["chart"]; by number of axes when absent):
#   heatmap  2 axes (3: one panel per entry of the first)       bar      1 axis
#   lines    (x, series[, panel]); a last axis "quantity" with labels value / ci_low / ci_high or
#            value / std draws error bars
#   bars     (group, series) grouped bars, same optional "quantity" axis
#   scatter  (points, coordinates): the coordinates' 1st entry is x, the 2nd y, a 3rd the colour
#            (their labels title the axes); meta["highlight"] lists point labels drawn as stars
#   complex  (points, coordinates) with coordinates real, imag: the complex plane with the unit
#            circle; meta["reference"] [[re, im], ...] drawn beside them
CHARTS = ("heatmap", "bar", "lines", "bars", "scatter", "complex")


def _tick(x: Any) -> str | int | float:
    if isinstance(x, torch.Tensor) and x.numel() == 1:  # torch.arange(3) as labels: 0, 1, 2
        x = x.item()
    if isinstance(x, numbers.Integral) and not isinstance(x, (bool, np.bool_)):  # numpy ints too
        return int(x)
    if isinstance(x, numbers.Real) and not isinstance(x, (bool, np.bool_)):
        return float(x)
    return str(x)


@result
@dataclass(frozen=True)
class Heading:
    """A section title in a report (a result-free item, so analyses can return it)."""

    text: str
    level: int = 2


@result
@dataclass(frozen=True)
class Grid:
    """A tensor with one name per axis, tick labels per axis, and metadata.

    `labels[i]` has one entry per index of axis i (defaults to 0..n-1). `meta` holds provenance
    such as model, task, metric and method, as JSON-serialisable values. Axis names are
    identifier-like strings; `interp.tensors.AXES` is the usual vocabulary.

    A Grid is frozen; every operation returns a new Grid with `meta` carried over (and, for
    arithmetic, reductions and normalisation, a note appended to `meta["ops"]`):

        g[1, 0]  g.isel(layer=1)     select by index (an int drops the axis; a list/slice keeps it)
        g.sel(layer=1, head="h0")    select by label (a list of labels keeps the axis)
        g.mean("head")  .sum .max .min .std (population, ddof=0)
                                     reduce named axes (none named: all of them); NaN cells are
                                     skipped, as xarray does
        g - baseline, g / 2, -g      arithmetic with numbers and aligned Grids (same axes, labels)
        g.normalize(corrupt, clean)  (g - corrupt) / (clean - corrupt): 0 at corrupt, 1 at clean
        len(g), g.shape, float(g) (0-axis), g.to_xarray(), g.to_dataframe(), g.top(n)
    """

    values: torch.Tensor
    axes: tuple[str, ...]
    labels: tuple[tuple[str | int | float, ...], ...] | Mapping[str, Sequence[Any]] = ()
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.values, torch.Tensor):
            object.__setattr__(self, "values", torch.as_tensor(self.values))
        axes = tuple(self.axes)
        object.__setattr__(self, "axes", axes)
        if len(axes) != self.values.ndim:
            raise InterpError(f"Grid has {self.values.ndim}-D values {tuple(self.values.shape)} but {len(axes)} axis names {axes}")
        for a in axes:
            if not isinstance(a, str) or not a.isidentifier():
                raise InterpError(
                    f"axis name {a!r} is not an identifier-like name (letters, digits, underscores); "
                    f"the usual names are {', '.join(AXES)}"
                )
        if len(set(axes)) != len(axes):
            raise InterpError(f"axis names repeat: {axes}")
        labels = self.labels
        if isinstance(labels, Mapping):  # {axis: ticks}; axes not named keep 0..n-1
            unknown = set(labels) - set(axes)
            if unknown:
                raise InterpError(f"labels name axes {sorted(unknown)} that the Grid does not have {axes}")
            labels = tuple(labels.get(a, range(n)) for a, n in zip(axes, self.values.shape))
        labels = tuple(labels) or tuple(tuple(range(n)) for n in self.values.shape)
        if len(labels) != len(axes):
            raise InterpError(f"{len(labels)} label lists for {len(axes)} axes {axes}")
        labels = tuple(tuple(_tick(x) for x in ticks) for ticks in labels)
        for a, ticks, n in zip(axes, labels, self.values.shape):
            if len(ticks) != n:
                raise InterpError(f"axis {a!r} has {n} entries but {len(ticks)} labels")
        object.__setattr__(self, "labels", labels)
        object.__setattr__(self, "values", self.values.detach().cpu())

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.values.shape)

    def axis(self, name: str) -> int:
        if name not in self.axes:
            raise InterpError(f"axis {name!r} not in {self.axes}")
        return self.axes.index(name)

    def top(self, n: int = 5, *, largest: bool = True) -> list[tuple[dict[str, Any], float]]:
        """The n largest (or smallest) cells as ({axis: label}, value) pairs."""
        flat = self.values.flatten().float()
        order = flat.argsort(descending=largest)
        order = order[~flat[order].isnan()][:n]  # NaN cells (e.g. unreachable senders) are not ranked
        out = []
        for i in order.tolist():
            idx = torch.unravel_index(torch.tensor(i), self.values.shape)
            where = {a: self.labels[k][int(j)] for k, (a, j) in enumerate(zip(self.axes, idx))}
            out.append((where, float(flat[i])))
        return out

    def to_dataframe(self):
        """Long form: one row per cell, a column per axis (its labels) and a `value` column."""
        import itertools

        import pandas as pd

        rows = [
            (*(self.labels[k][i] for k, i in enumerate(idx)), float(self.values[idx]))
            for idx in itertools.product(*(range(n) for n in self.values.shape))
        ]
        return pd.DataFrame(rows, columns=[*self.axes, "value"])

    def to_grid(self) -> Grid:
        return self

    # ---- selection --------------------------------------------------------------------------

    def __bool__(self) -> bool:
        return True  # a Grid is a value, not a container: `if grid:` never asks about its size

    def __len__(self) -> int:
        if not self.axes:
            raise InterpError("a 0-axis Grid has no length; use float(grid)")
        return self.values.shape[0]

    def __float__(self) -> float:
        if self.values.numel() != 1:
            raise InterpError(f"only a Grid with one cell converts to float; this one has shape {self.shape} {self.axes}")
        return float(self.values.reshape(()))

    def item(self) -> float:
        return float(self)

    def __getitem__(self, key: Any) -> Grid:
        """Select by index along the axes in order: `g[1]`, `g[1, 0]`, `g[:, [0, 2]]`."""
        key = key if isinstance(key, tuple) else (key,)
        if len(key) > len(self.axes):
            raise InterpError(f"{len(key)} indices for a Grid with {len(self.axes)} axes {self.axes}")
        return self.isel(**dict(zip(self.axes, key)))

    def isel(self, **indexers: Any) -> Grid:
        """Select by index per named axis: an int drops the axis; a slice or a list of ints keeps it."""
        return self._select({a: self._index(a, k) for a, k in indexers.items()})

    def sel(self, **indexers: Any) -> Grid:
        """Select by tick label per named axis: one label drops the axis; a list of labels keeps it."""
        out = {}
        for a, want in indexers.items():
            ticks = self.labels[self.axis(a)]
            if isinstance(want, (list, tuple)):
                out[a] = [self._label_index(a, ticks, w) for w in want]
            elif isinstance(want, slice):
                raise InterpError(f"sel({a}=slice) is not supported; use isel({a}=slice(...)) to select by index")
            else:
                out[a] = self._label_index(a, ticks, want)
        return self._select(out)

    def _label_index(self, axis: str, ticks: tuple, want: Any) -> int:
        for i, t in enumerate(ticks):
            if t == want or t == _tick(want):
                return i
        shown = ", ".join(repr(t) for t in ticks[:20]) + (", ..." if len(ticks) > 20 else "")
        raise InterpError(f"axis {axis!r} has no label {want!r}; its labels are {shown} (isel selects by index)")

    def _index(self, axis: str, key: Any) -> int | slice | list[int]:
        n = self.values.shape[self.axis(axis)]
        if isinstance(key, torch.Tensor):
            key = key.tolist()
        if isinstance(key, slice):
            return key
        if isinstance(key, (list, tuple, range)):
            return [self._index(axis, k) for k in key]
        if isinstance(key, numbers.Integral) and not isinstance(key, bool):
            if not -n <= int(key) < n:
                raise InterpError(f"index {key} is out of range for axis {axis!r} of size {n}")
            return int(key) % n
        raise InterpError(f"axis {axis!r}: index {key!r} must be an int, a slice or a list of ints (sel selects by label)")

    def _select(self, picks: Mapping[str, int | slice | list[int]]) -> Grid:
        for a in picks:
            self.axis(a)
        values, axes, labels = self.values, [], []
        dim = 0
        for a, ticks in zip(self.axes, self.labels):
            k = picks.get(a, slice(None))
            if isinstance(k, int):
                values = values.select(dim, k)
                continue
            if isinstance(k, slice):
                values = values[(slice(None),) * dim + (k,)]
                ticks = ticks[k]
            else:
                values = values.index_select(dim, torch.tensor(k, dtype=torch.long))
                ticks = tuple(ticks[i] for i in k)
            axes.append(a)
            labels.append(ticks)
            dim += 1
        return Grid(values.clone(), tuple(axes), tuple(labels), dict(self.meta))

    # ---- reduction --------------------------------------------------------------------------

    def _reduce(self, how: str, axes: tuple[str, ...]) -> Grid:
        names = axes or self.axes
        if len(set(names)) != len(names):
            raise InterpError(f"{how}() names an axis twice: {names}")
        dims = tuple(self.axis(a) for a in names)
        v = self.values
        if how in ("max", "min") and any(v.shape[d] == 0 for d in dims):
            raise InterpError(f"{how}() over an empty axis: {self._describe()}")
        if how in ("mean", "std") and not v.is_floating_point():
            v = v.float()
        if not dims:
            out = v.clone()
        elif how == "sum":
            out = v.nansum(dims) if v.is_floating_point() else v.sum(dims)
        elif how == "mean":
            out = v.nanmean(dims)
        elif how == "std":  # population std (ddof=0), skipping NaN, like xarray
            mean = v.nanmean(dims, keepdim=True)
            out = ((v - mean) ** 2).nanmean(dims).sqrt()
        else:
            if v.is_floating_point():
                nan = v.isnan()
                fill = float("-inf") if how == "max" else float("inf")
                out = v.masked_fill(nan, fill).amax(dims) if how == "max" else v.masked_fill(nan, fill).amin(dims)
                out = out.masked_fill(nan.all(dims), float("nan")) if nan.any() else out
            else:
                out = v.amax(dims) if how == "max" else v.amin(dims)
        keep = [i for i in range(len(self.axes)) if i not in dims]
        meta = _noted(self.meta, f"{how}({', '.join(repr(a) for a in names)})")
        return Grid(out, tuple(self.axes[i] for i in keep), tuple(self.labels[i] for i in keep), meta)

    def mean(self, *axes: str) -> Grid:
        """Mean over the named axes (all when none are named), skipping NaN cells."""
        return self._reduce("mean", axes)

    def sum(self, *axes: str) -> Grid:
        """Sum over the named axes (all when none are named), skipping NaN cells."""
        return self._reduce("sum", axes)

    def max(self, *axes: str) -> Grid:
        """Largest value over the named axes (all when none are named), skipping NaN cells."""
        return self._reduce("max", axes)

    def min(self, *axes: str) -> Grid:
        """Smallest value over the named axes (all when none are named), skipping NaN cells."""
        return self._reduce("min", axes)

    def std(self, *axes: str) -> Grid:
        """Population standard deviation (ddof=0) over the named axes, skipping NaN cells."""
        return self._reduce("std", axes)

    # ---- arithmetic -------------------------------------------------------------------------

    def _binary(self, other: Any, op: str, fn, reverse: bool = False) -> Grid:
        if isinstance(other, Grid) and other.axes and not self.axes:  # a 0-axis Grid is a number, either side
            return other._binary(self, op, fn, reverse=not reverse)
        if isinstance(other, Grid) and not other.axes and self.axes:  # a 0-axis Grid is a number
            rhs, note = other.values, f"{op} {float(other.values):.6g}"
        elif isinstance(other, Grid):
            if other.axes != self.axes or other.labels != self.labels:
                raise InterpError(
                    f"cannot combine Grids that are not aligned (same axes, same labels): "
                    f"{self._describe()} {op} {other._describe()}; select, reduce or relabel one first"
                )
            rhs, note = other.values, f"{op} Grid"
        elif isinstance(other, numbers.Number) and not isinstance(other, bool):
            rhs, note = other, f"{op} {other!r}"
        elif isinstance(other, torch.Tensor) and other.numel() == 1:
            rhs, note = other.detach().cpu().reshape(()), f"{op} {float(other)!r}"
        else:
            return NotImplemented
        values = fn(rhs, self.values) if reverse else fn(self.values, rhs)
        note = f"{note.split(' ', 1)[1]} {op} Grid" if reverse else note
        return Grid(values, self.axes, self.labels, _noted(self.meta, note))

    def __add__(self, other: Any) -> Grid:
        return self._binary(other, "+", torch.add)

    def __radd__(self, other: Any) -> Grid:
        return self._binary(other, "+", torch.add, reverse=True)

    def __sub__(self, other: Any) -> Grid:
        return self._binary(other, "-", torch.sub)

    def __rsub__(self, other: Any) -> Grid:
        return self._binary(other, "-", torch.sub, reverse=True)

    def __mul__(self, other: Any) -> Grid:
        return self._binary(other, "*", torch.mul)

    def __rmul__(self, other: Any) -> Grid:
        return self._binary(other, "*", torch.mul, reverse=True)

    def __truediv__(self, other: Any) -> Grid:
        return self._binary(other, "/", torch.true_divide)

    def __rtruediv__(self, other: Any) -> Grid:
        return self._binary(other, "/", torch.true_divide, reverse=True)

    def __neg__(self) -> Grid:
        return Grid(-self.values, self.axes, self.labels, _noted(self.meta, "negated"))

    def __abs__(self) -> Grid:
        return Grid(self.values.abs(), self.axes, self.labels, _noted(self.meta, "abs"))

    def normalize(self, corrupt: float | int | None = None, clean: float | int | None = None) -> Grid:
        """(value - corrupt) / (clean - corrupt): 0 at the corrupt baseline, 1 at the clean one.

        The baselines default to meta["corrupt_metric"] and meta["clean_metric"] (what the
        patching functions record). A Grid of changes from the corrupt baseline
        (meta["relative_to"] == "corrupt_metric", as attribution_patch writes) is divided by
        (clean - corrupt) only, so the same meaning holds."""
        explicit = corrupt is not None and clean is not None
        corrupt = self.meta.get("corrupt_metric") if corrupt is None else corrupt
        clean = self.meta.get("clean_metric") if clean is None else clean
        if corrupt is None or clean is None:
            raise InterpError("normalize needs the corrupt and clean baselines: pass normalize(corrupt, clean), or "
                              "keep meta['corrupt_metric'] and meta['clean_metric']")
        if self.meta.get("normalized") and not explicit:
            raise InterpError("this Grid is already normalised (meta['normalized']); normalising it again against "
                              "meta's baselines would rescale it twice. Pass normalize(corrupt, clean) explicitly")
        corrupt, clean = float(corrupt), float(clean)
        if not (math.isfinite(corrupt) and math.isfinite(clean)) or clean == corrupt:
            raise InterpError(f"cannot normalize: clean baseline {clean!r} and corrupt baseline {corrupt!r} must be "
                              "finite and different (the clean and corrupt runs score the same on this metric)")
        change = self.meta.get("relative_to") == "corrupt_metric"
        values = (self.values.double() - (0.0 if change else corrupt)) / (clean - corrupt)
        meta = _noted(self.meta, f"normalize(corrupt={corrupt:.6g}, clean={clean:.6g})")
        meta["normalized"] = "0 = corrupt baseline, 1 = clean baseline"
        return Grid(values.to(self.values.dtype if self.values.is_floating_point() else torch.float32),
                    self.axes, self.labels, meta)

    # ---- conversion and display -------------------------------------------------------------

    def to_xarray(self):
        """An xarray.DataArray: dims = axes, coords = labels, attrs = meta."""
        import xarray as xr

        return xr.DataArray(self.values.numpy(), dims=self.axes,
                            coords={a: list(t) for a, t in zip(self.axes, self.labels)}, attrs=dict(self.meta))

    def _describe(self) -> str:
        def ticks(t: tuple) -> str:
            return "[" + ", ".join(repr(x) for x in t[:4]) + (", ..." if len(t) > 4 else "") + "]"
        return "Grid(" + ", ".join(f"{a}={n} {ticks(t)}" for a, n, t in zip(self.axes, self.shape, self.labels)) + ")"

    def _range(self) -> str:
        v = self.values.float()
        finite = v[torch.isfinite(v)]
        if finite.numel() == 0:
            return "no finite values"
        nan = int(v.isnan().sum())
        return f"min {float(finite.min()) + 0.0:.4g}, max {float(finite.max()) + 0.0:.4g}" + (f", {nan} NaN" if nan else "")

    def __repr__(self) -> str:
        axes = ", ".join(f"{a}={n}" for a, n in zip(self.axes, self.shape)) or "scalar"
        metric = f", metric={self.meta['metric']!r}" if "metric" in self.meta else ""
        method = f", method={self.meta['method']!r}" if "method" in self.meta else ""
        if self.values.numel() == 1 and not self.axes:
            return f"Grid({float(self.values):.6g}{metric}{method})"
        return f"Grid({axes}{metric}{method}; {self._range()})"

    def _repr_html_(self) -> str:
        e = html.escape
        head = e(repr(self))
        if len(self.axes) > 2 or self.values.numel() > 400:
            rows = "".join(
                f"<tr><th>{e(a)}</th><td>{n}</td><td>{e(', '.join(str(x) for x in t[:8]) + (', ...' if n > 8 else ''))}</td></tr>"
                for a, n, t in zip(self.axes, self.shape, self.labels)
            )
            meta = "".join(f"<tr><th>{e(str(k))}</th><td colspan=2>{e(str(v))[:200]}</td></tr>" for k, v in self.meta.items())
            return (f"<div><code>{head}</code><table><tr><th>axis</th><th>size</th><th>labels</th></tr>{rows}</table>"
                    f"<table>{meta}</table></div>")
        v = self.values.float()
        if v.ndim == 0:
            return f"<div><code>{head}</code></div>"
        if v.ndim == 1:
            v = v[None]
            rows_label, cols = [e(self.axes[0])], self.labels[0]
            corner = ""
        else:
            rows_label, cols = [e(str(x)) for x in self.labels[0]], self.labels[1]
            corner = f"{e(self.axes[0])} \\ {e(self.axes[1])}"
        header = f"<tr><th>{corner}</th>" + "".join(f"<th>{e(str(c))}</th>" for c in cols) + "</tr>"
        body = "".join(
            f"<tr><th>{r}</th>" + "".join(f"<td>{float(x):.4g}</td>" for x in row) + "</tr>"
            for r, row in zip(rows_label, v.tolist())
        )
        return f"<div><code>{head}</code><table>{header}{body}</table></div>"


def _noted(meta: Mapping[str, Any], note: str) -> dict[str, Any]:
    """A copy of meta with `note` appended to its list of operations."""
    out = dict(meta)
    out["ops"] = [*out.get("ops", ()), note]
    return out



def stack(grids: Sequence[Grid], axis: str, labels: Sequence[Any]) -> Grid:
    """Stack same-shaped Grids along a new leading axis."""
    if len(grids) != len(labels):
        raise InterpError(f"{len(grids)} grids but {len(labels)} labels")
    if not grids:
        raise InterpError("stack needs at least one Grid")
    first = grids[0]
    for g in grids[1:]:
        if g.axes != first.axes or g.shape != first.shape:
            raise InterpError(f"cannot stack grids {first.axes}{first.shape} and {g.axes}{g.shape}")
    return Grid(
        torch.stack([g.values for g in grids]),
        (axis, *first.axes),
        (tuple(labels), *first.labels),
        dict(first.meta),
    )

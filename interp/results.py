"""Result types as data, and the one save/load for every result type.

Every result is a frozen dataclass registered with `@result`; `save(obj, path)` writes its tensors
to safetensors and everything else as JSON in the safetensors header, under one format tag
("interp/1") with the type's name; `load(path)` gives the object back (`__post_init__` checks it
again). Provenance lives in one field, `meta`, on every type. Every result is a `Grid` or converts
to one (`to_grid()`), so `interp.plot` draws any of them from the Grid alone: `Grid.meta["chart"]`
picks the chart (see `CHARTS`), axis names and tick labels title it.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
import os
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence, TypeVar

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from interp.errors import InterpError
from interp.tensors import AXES

__all__ = [
    "CHARTS", "Grid", "Heading", "atomic_dir", "atomic_path", "load", "result", "save", "stack", "write_tensors_atomic",
    "write_text_atomic",
]

FORMAT = "interp/1"
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
_REGISTRY: dict[str, type] = {}
T = TypeVar("T")


def _tick(x: Any) -> str | int | float:
    return x if isinstance(x, (int, float)) and not isinstance(x, bool) else str(x)


def _save_method(self, path: str | Path) -> Path:
    """`interp.results.save(self, path)`."""
    return save(self, path)


def _load_method(cls, path: str | Path):
    """`interp.results.load(path)`, checked to be of this type."""
    obj = load(path)
    if not isinstance(obj, cls):
        raise InterpError(f"{path} holds a {type(obj).__name__}, not a {cls.__name__}")
    return obj


def result(cls: T) -> T:
    """Register a frozen dataclass as a result type that `save` and `load` know, and give it
    `obj.save(path)` and `Type.load(path)` (the same one format for every type)."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls.__name__} must be a dataclass to be a result type")
    _REGISTRY[f"{cls.__module__}.{cls.__qualname__}"] = cls
    cls.save = _save_method
    cls.load = classmethod(_load_method)
    return cls


def _type_name(obj: Any) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def _encode(value: Any, key: str, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(value, torch.Tensor):
        tensors[key] = value.detach().cpu().contiguous()
        return {"$tensor": key}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if _type_name(value) not in _REGISTRY:
            raise InterpError(f"{type(value).__name__} is not a registered result type (decorate it with interp.results.result)")
        fields = {f.name: _encode(getattr(value, f.name), f"{key}.{f.name}", tensors) for f in dataclasses.fields(value)}
        return {"$result": _type_name(value), "fields": fields}
    if isinstance(value, tuple):
        return {"$tuple": [_encode(v, f"{key}.{i}", tensors) for i, v in enumerate(value)]}
    if isinstance(value, list):
        return [_encode(v, f"{key}.{i}", tensors) for i, v in enumerate(value)]
    if isinstance(value, dict):
        for k in value:
            if not isinstance(k, str):
                raise InterpError(f"{key} has a non-string key {k!r}; result dicts need string keys to be saved")
        return {"$dict": {k: _encode(v, f"{key}.{k}", tensors) for k, v in value.items()}}
    if isinstance(value, float) and not math.isfinite(value):
        return {"$float": repr(value)}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise InterpError(f"{key} holds a {type(value).__name__}, which a result cannot save; use tensors, numbers, strings, lists, tuples and dicts")


def _lookup(name: str) -> type:
    if name not in _REGISTRY and name.startswith("interp."):
        importlib.import_module(name.rpartition(".")[0])  # registers the type; only interp's own modules
    if name not in _REGISTRY:
        raise InterpError(f"unknown result type {name!r} in the file header")
    return _REGISTRY[name]


def _decode(value: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(value, list):
        return [_decode(v, tensors) for v in value]
    if not isinstance(value, dict):
        return value
    if "$tensor" in value:
        return tensors[value["$tensor"]]
    if "$tuple" in value:
        return tuple(_decode(v, tensors) for v in value["$tuple"])
    if "$dict" in value:
        return {k: _decode(v, tensors) for k, v in value["$dict"].items()}
    if "$float" in value:
        return float(value["$float"])
    if "$result" in value:
        cls = _lookup(value["$result"])
        return cls(**{k: _decode(v, tensors) for k, v in value["fields"].items()})
    raise InterpError(f"unreadable value in the file header: {sorted(value)}")


def save(obj: Any, path: str | Path) -> Path:
    """Write any registered result to `path` (safetensors + JSON header), atomically."""
    tensors: dict[str, torch.Tensor] = {}
    header = _encode(obj, "root", tensors)
    if not isinstance(header, dict) or "$result" not in header:
        raise InterpError(f"save() takes a result object, got {type(obj).__name__}")
    if not tensors:  # safetensors needs at least one tensor to carry the header
        tensors["root.$empty"] = torch.zeros(0)
    write_tensors_atomic(path, tensors, {"format": FORMAT, "type": header["$result"], "result": json.dumps(header)})
    return Path(path)


def load(path: str | Path) -> Any:
    """The result saved at `path`, of whatever registered type it was."""
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            if meta.get("format") != FORMAT:
                raise InterpError(f"{path} is not an interp result file (format {meta.get('format')!r}, want {FORMAT!r})")
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except InterpError:
        raise
    except Exception as err:  # missing file, or not safetensors at all (safetensors has its own error type)
        raise InterpError(f"cannot read {path} as an interp result file: {err}") from None
    return _decode(json.loads(meta["result"]), tensors)


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
    such as model, task, metric and method, as JSON-serialisable values.
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
            if a not in AXES:
                raise InterpError(f"axis name {a!r} is not in the vocabulary {AXES}")
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
        order = flat.argsort(descending=largest)[:n]
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



@contextmanager
def atomic_path(path: str | Path) -> Iterator[str]:
    """Yield a temp path beside `path`; rename it into place only if the body succeeds.

    So a crash or kill mid-write never leaves a half-written file under the final name.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the file ordinary permissions
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


@contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Yield a temp folder beside `path`; it replaces `path` only if the body succeeds, else it is
    removed, so a crash or kill mid-write never leaves a half-written folder under the final name."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    tmp.chmod(0o755)  # mkdtemp makes 0700; the final folder should be readable like any other
    try:
        yield tmp
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_tensors_atomic(path: str | Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> None:
    with atomic_path(path) as tmp:
        save_file(tensors, tmp, metadata=metadata)


def write_text_atomic(path: str | Path, text: str) -> Path:
    with atomic_path(path) as tmp:
        Path(tmp).write_text(text, encoding="utf-8")
    return Path(path)


def stack(grids: Sequence[Grid], axis: str, labels: Sequence[Any]) -> Grid:
    """Stack same-shaped Grids along a new leading axis."""
    if len(grids) != len(labels):
        raise InterpError(f"{len(grids)} grids but {len(labels)} labels")
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

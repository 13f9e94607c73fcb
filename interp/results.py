"""Result types: frozen dataclasses that are data only, saved as safetensors with JSON metadata."""

from __future__ import annotations

import json
import os
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from interp.tensors import AXES

_FORMAT = "interp.Grid/1"


def _tick(x: Any) -> str | int | float:
    return x if isinstance(x, (int, float)) and not isinstance(x, bool) else str(x)


@dataclass(frozen=True)
class Heading:
    """A section title in a report (a result-free item, so analyses can return it)."""

    text: str
    level: int = 2


@dataclass(frozen=True)
class Grid:
    """A tensor with one name per axis, tick labels per axis, and metadata.

    `labels[i]` has one entry per index of axis i (defaults to 0..n-1). `meta` holds provenance
    such as model, task, metric and method, as JSON-serialisable values.
    """

    values: torch.Tensor
    axes: tuple[str, ...]
    labels: tuple[tuple[str | int | float, ...], ...] = ()
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.values, torch.Tensor):
            object.__setattr__(self, "values", torch.as_tensor(self.values))
        axes = tuple(self.axes)
        object.__setattr__(self, "axes", axes)
        if len(axes) != self.values.ndim:
            raise ValueError(f"Grid has {self.values.ndim}-D values {tuple(self.values.shape)} but {len(axes)} axis names {axes}")
        for a in axes:
            if a not in AXES:
                raise ValueError(f"axis name {a!r} is not in the vocabulary {AXES}")
        if len(set(axes)) != len(axes):
            raise ValueError(f"axis names repeat: {axes}")
        labels = tuple(self.labels) or tuple(tuple(range(n)) for n in self.values.shape)
        if len(labels) != len(axes):
            raise ValueError(f"{len(labels)} label lists for {len(axes)} axes {axes}")
        labels = tuple(tuple(_tick(x) for x in ticks) for ticks in labels)
        for a, ticks, n in zip(axes, labels, self.values.shape):
            if len(ticks) != n:
                raise ValueError(f"axis {a!r} has {n} entries but {len(ticks)} labels")
        object.__setattr__(self, "labels", labels)
        object.__setattr__(self, "values", self.values.detach().cpu())

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.values.shape)

    def axis(self, name: str) -> int:
        if name not in self.axes:
            raise KeyError(f"axis {name!r} not in {self.axes}")
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

    def save(self, path: str | Path) -> Path:
        """Write values to safetensors and axes/labels/meta as JSON in its header, atomically."""
        path = Path(path)
        header = json.dumps({"axes": self.axes, "labels": self.labels, "meta": self.meta})
        write_tensors_atomic(path, {"values": self.values.contiguous()}, {"format": _FORMAT, "grid": header})
        return path

    @classmethod
    def load(cls, path: str | Path) -> Grid:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            if meta.get("format") != _FORMAT:
                raise ValueError(f"{path} is not an interp Grid file (format {meta.get('format')!r})")
            values = f.get_tensor("values")
        header = json.loads(meta["grid"])
        return cls(values, tuple(header["axes"]), tuple(tuple(t) for t in header["labels"]), header["meta"])


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
        raise ValueError(f"{len(grids)} grids but {len(labels)} labels")
    first = grids[0]
    for g in grids[1:]:
        if g.axes != first.axes or g.shape != first.shape:
            raise ValueError(f"cannot stack grids {first.axes}{first.shape} and {g.axes}{g.shape}")
    return Grid(
        torch.stack([g.values for g in grids]),
        (axis, *first.axes),
        (tuple(labels), *first.labels),
        dict(first.meta),
    )

"""The core result types: Core, Operator, Alignment and ValidationBars.

Each is a frozen dataclass registered with `interp.results.result`, so `interp.results.save` /
`load` write and read it (tensors to safetensors, the rest as JSON); provenance is in `meta`.
Each converts to a Grid (`to_grid()`) that `interp.plot.render` draws.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from interp.errors import InterpError
from interp.results import Grid, result

__all__ = ["Alignment", "Core", "Operator", "ValidationBars"]



@result
@dataclass(frozen=True)
class Core:
    """A task's core at one site: an orthonormal basis [d_model, k] of the subspace, the mean
    activation [d_model] it is centred on, the spectrum the dimension was read from, the hook
    name `site`, the extraction `method`, and `meta` (model, task, positions, n, k_rule, ...)."""

    basis: Float[Tensor, "d_model k"]
    mean: Float[Tensor, " d_model"]
    spectrum: Float[Tensor, " rank"]
    site: str
    method: str
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        b, mu = self.basis, self.mean
        if b.ndim != 2 or mu.shape != (b.shape[0],):
            raise InterpError(f"Core basis {tuple(b.shape)} must be [d_model, k] and mean {tuple(mu.shape)} [d_model]")
        gram = b.double().T @ b.double()
        if not torch.allclose(gram, torch.eye(b.shape[1], dtype=torch.float64), atol=1e-3):
            raise InterpError("Core basis columns must be orthonormal (basis.T @ basis = I)")
        for name in ("basis", "mean", "spectrum"):
            object.__setattr__(self, name, getattr(self, name).detach().float().cpu())

    @property
    def k(self) -> int:
        return self.basis.shape[1]

    @property
    def d_model(self) -> int:
        return self.basis.shape[0]

    @property
    def projector(self) -> Float[Tensor, "d_model d_model"]:
        return self.basis @ self.basis.T

    def __repr__(self) -> str:
        meta = f", meta keys={sorted(self.meta)}" if self.meta else ""
        return f"Core(site={self.site!r}, k={self.k}, d_model={self.d_model}, method={self.method!r}{meta})"

    def truncated(self, k: int) -> Core:
        """The same core with only its first k directions (e.g. k=1: the core's axis)."""
        if not 1 <= k <= self.k:
            raise InterpError(f"k={k} must be in 1..{self.k} (this core's dimension)")
        return replace(self, basis=self.basis[:, :k], meta={**self.meta, "truncated_from_k": self.k})

    def coordinates(self, activations: Float[Tensor, "*batch d_model"]) -> Float[Tensor, "*batch k"]:
        """Core coordinates (h - mean) @ basis of activations at this core's site."""
        if activations.shape[-1] != self.d_model:
            raise InterpError(f"activations of width {activations.shape[-1]} but the core at {self.site} has d_model={self.d_model}")
        return (activations.float().cpu() - self.mean) @ self.basis

    def to_grid(self) -> Grid:
        """The spectrum the dimension was read from, as bars."""
        return Grid(self.spectrum, ("rank",), meta={
            "chart": "bar", "title": f"{self.method} spectrum at {self.site} (k={self.k})", "metric": "singular value",
            "site": self.site, "method": self.method, "k": self.k})



@result
@dataclass(frozen=True)
class Operator:
    """A least-squares linear map between core coordinates: y = x @ matrix + bias.

    `matrix` is [k_in, k_out]. `eigenvalues` (of matrix.T, for a square map; empty otherwise) are
    stored as real and imaginary parts. `r2` is the fit's R² on its own data (NaN when unscored).
    `source` and `target` name the sites (equal for an operator over time steps); `meta` holds
    the rest (lag, model, n; `reference` [[re, im], ...] eigenvalues to draw beside them)."""

    matrix: Float[Tensor, "k_in k_out"]
    bias: Float[Tensor, " k_out"]
    eig_real: Float[Tensor, " n_eig"]
    eig_imag: Float[Tensor, " n_eig"]
    r2: float
    source: str
    target: str
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.bias.shape != (self.matrix.shape[1],):
            raise InterpError(f"Operator matrix {tuple(self.matrix.shape)} and bias {tuple(self.bias.shape)} disagree")
        for name in ("matrix", "bias", "eig_real", "eig_imag"):
            object.__setattr__(self, name, getattr(self, name).detach().float().cpu())

    def __repr__(self) -> str:
        k_in, k_out = self.matrix.shape
        where = self.source if self.source == self.target else f"{self.source} -> {self.target}"
        meta = f", meta keys={sorted(self.meta)}" if self.meta else ""
        return f"Operator({where!r}, {k_in}->{k_out}, r2={self.r2:.4f}{meta})"

    @property
    def eigenvalues(self) -> Tensor:
        """Complex eigenvalues, sorted by modulus, largest first."""
        return torch.complex(self.eig_real, self.eig_imag)

    def __call__(self, x: Float[Tensor, "n k_in"]) -> Float[Tensor, "n k_out"]:
        return x.float().cpu() @ self.matrix + self.bias

    def to_grid(self) -> Grid:
        """The eigenvalues in the complex plane (chart "complex"), with meta["reference"] beside them."""
        n = self.eig_real.shape[0]
        meta: dict[str, Any] = {
            "chart": "complex", "source": self.source, "target": self.target, "r2": self.r2,
            "title": self.meta.get("title") or f"operator {self.source} -> {self.target}: eigenvalues (R² {self.r2:.3f})",
        }
        if self.meta.get("reference"):
            meta["reference"] = [list(r) for r in self.meta["reference"]]
        return Grid(torch.stack([self.eig_real, self.eig_imag], 1).reshape(n, 2), ("k", "quantity"),
                    (tuple(range(n)), ("real", "imag")), meta)



@result
@dataclass(frozen=True)
class Alignment:
    """A map from model A's core coordinates to model B's on matched prompts: zb ≈ za @ map + bias.

    `r2` is the fit on all prompts, `r2_heldout` the two-fold cross-validated R² (fit on one
    half, scored on the other, averaged); `canonical` the canonical correlations of za and zb
    (whatever the method); `angles` the principal angles between the two bases when the widths
    agree (else empty). `basis_a`, `basis_b` are the two cores' bases, so `residual_map` can
    carry the map into activation space."""

    map: Float[Tensor, "ka kb"]
    bias: Float[Tensor, " kb"]
    method: str
    r2: float
    r2_heldout: float
    canonical: Float[Tensor, " r"]
    angles: Float[Tensor, " n_angles"]
    basis_a: Float[Tensor, "d_a ka"]
    basis_b: Float[Tensor, "d_b kb"]
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        ka, kb = self.map.shape
        if self.basis_a.shape[1] != ka or self.basis_b.shape[1] != kb:
            raise InterpError(f"Alignment map {tuple(self.map.shape)} disagrees with bases {tuple(self.basis_a.shape)}, {tuple(self.basis_b.shape)}")
        for name in ("map", "bias", "canonical", "angles", "basis_a", "basis_b"):
            object.__setattr__(self, name, getattr(self, name).detach().float().cpu())

    def __repr__(self) -> str:
        ka, kb = self.map.shape
        sites = f"{self.meta.get('site_a', 'A')} -> {self.meta.get('site_b', 'B')}"
        return (f"Alignment({sites!r}, method={self.method!r}, k={ka}->{kb}, r2={self.r2:.4f}, "
                f"r2_heldout={self.r2_heldout:.4f})")

    @property
    def residual_map(self) -> Float[Tensor, "d_a d_b"]:
        """The map in activation space, basis_a @ map @ basis_b.T: a row vector of A's centred
        activations times this gives B's centred activations inside B's core."""
        return self.basis_a @ self.map @ self.basis_b.T

    def __call__(self, za: Float[Tensor, "n ka"]) -> Float[Tensor, "n kb"]:
        return za.float().cpu() @ self.map + self.bias

    def to_grid(self) -> Grid:
        """The canonical correlations of the two cores' coordinates, as bars."""
        title = (f"{self.method} alignment {self.meta.get('site_a', 'A')} -> {self.meta.get('site_b', 'B')}: "
                 f"R² {self.r2:.3f} (held out {self.r2_heldout:.3f})")
        return Grid(self.canonical, ("rank",), meta={"chart": "bar", "title": title, "metric": "canonical correlation",
                                                      "method": self.method, "r2": self.r2, "r2_heldout": self.r2_heldout})



@result
@dataclass(frozen=True)
class ValidationBars:
    """A validation Grid ([method, quantity, metric], as `validate` returns it) drawn as grouped
    bars for one metric: one group per intervention, the core beside the random-subspace control
    (error bar: its std over draws), chance as a dashed line. `meta` may set a "title"."""

    grid: Grid
    metric: str = "binary_accuracy"
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.grid.axes != ("method", "quantity", "metric"):
            raise InterpError(f"ValidationBars takes a validation Grid (method, quantity, metric), got axes {self.grid.axes}")
        if self.metric not in self.grid.labels[2]:
            raise InterpError(f"metric={self.metric!r} is not one of the grid's metrics {self.grid.labels[2]}")

    def __repr__(self) -> str:
        return f"ValidationBars(metric={self.metric!r}, methods={list(self.grid.labels[0])})"

    def to_grid(self) -> Grid:
        g = self.grid
        m = g.labels[2].index(self.metric)
        q = {name: g.labels[1].index(name) for name in ("core", "random_mean", "random_std")}
        v = g.values[:, :, m]
        core = torch.stack([v[:, q["core"]], torch.zeros(v.shape[0])], 1)
        rand = torch.stack([v[:, q["random_mean"]], v[:, q["random_std"]]], 1)
        title = self.meta.get("title") or g.meta.get("title") or f"core validation at {g.meta.get('site', '')}"
        meta = {**{k: val for k, val in g.meta.items() if k != "chance"}, "chart": "bars", "title": title,
                "metric": self.metric, "chance": g.meta.get("chance", {}).get(self.metric)}
        return Grid(torch.stack([core, rand], 1), ("method", "other", "quantity"),
                    (g.labels[0], (f"core (k={g.meta.get('k', '?')})", "random subspace, same k"), ("value", "std")), meta)

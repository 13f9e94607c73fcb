"""The core result types: Core, Operator and Alignment, frozen dataclasses that save to
safetensors with their JSON metadata in the header."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from jaxtyping import Float
from safetensors import safe_open
from torch import Tensor

from interp.results import write_tensors_atomic


def _write(path: str | Path, kind: str, tensors: dict[str, Tensor], meta: dict[str, Any]) -> Path:
    path = Path(path)
    write_tensors_atomic(
        path, {k: v.detach().float().cpu().contiguous() for k, v in tensors.items()},
        {"format": f"interp.{kind}/1", "meta": json.dumps(meta)},
    )
    return path


def _read(path: str | Path, kind: str) -> tuple[dict[str, Tensor], dict[str, Any]]:
    with safe_open(str(path), framework="pt") as f:
        header = f.metadata() or {}
        if header.get("format") != f"interp.{kind}/1":
            raise ValueError(f"{path} is not an interp {kind} file (format {header.get('format')!r})")
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    return tensors, json.loads(header["meta"])


@dataclass(frozen=True)
class Core:
    """A task's core at one site: an orthonormal basis [d_model, k] of the subspace, the mean
    activation [d_model] it is centred on, the spectrum the dimension was read from, the hook
    name `site`, the extraction `method`, and `provenance` (model, task, positions, n, ...)."""

    basis: Float[Tensor, "d_model k"]
    mean: Float[Tensor, " d_model"]
    spectrum: Float[Tensor, " rank"]
    site: str
    method: str
    provenance: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        b, mu = self.basis, self.mean
        if b.ndim != 2 or mu.shape != (b.shape[0],):
            raise ValueError(f"Core basis {tuple(b.shape)} must be [d_model, k] and mean {tuple(mu.shape)} [d_model]")
        gram = b.double().T @ b.double()
        if not torch.allclose(gram, torch.eye(b.shape[1], dtype=torch.float64), atol=1e-3):
            raise ValueError("Core basis columns must be orthonormal (basis.T @ basis = I)")
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

    def truncated(self, k: int) -> Core:
        """The same core with only its first k directions (e.g. k=1: the core's axis)."""
        if not 1 <= k <= self.k:
            raise ValueError(f"k={k} must be in 1..{self.k} (this core's dimension)")
        return replace(self, basis=self.basis[:, :k], provenance={**self.provenance, "truncated_from_k": self.k})

    def coordinates(self, activations: Float[Tensor, "*batch d_model"]) -> Float[Tensor, "*batch k"]:
        """Core coordinates (h - mean) @ basis of activations at this core's site."""
        if activations.shape[-1] != self.d_model:
            raise ValueError(f"activations of width {activations.shape[-1]} but the core at {self.site} has d_model={self.d_model}")
        return (activations.float().cpu() - self.mean) @ self.basis

    def save(self, path: str | Path) -> Path:
        meta = {"site": self.site, "method": self.method, "provenance": self.provenance}
        return _write(path, "Core", {"basis": self.basis, "mean": self.mean, "spectrum": self.spectrum}, meta)

    @classmethod
    def load(cls, path: str | Path) -> Core:
        t, meta = _read(path, "Core")
        return cls(t["basis"], t["mean"], t["spectrum"], meta["site"], meta["method"], meta["provenance"])


@dataclass(frozen=True)
class Operator:
    """A least-squares linear map between core coordinates: y = x @ matrix + bias.

    `matrix` is [k_in, k_out]. `eigenvalues` (of matrix.T, for a square map; empty otherwise) are
    stored as real and imaginary parts. `r2` is the fit's R² on its own data (NaN when unscored).
    `source` and `target` name the sites (equal for an operator over time steps); `meta` holds
    the rest (lag, model, n)."""

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
            raise ValueError(f"Operator matrix {tuple(self.matrix.shape)} and bias {tuple(self.bias.shape)} disagree")
        for name in ("matrix", "bias", "eig_real", "eig_imag"):
            object.__setattr__(self, name, getattr(self, name).detach().float().cpu())

    @property
    def eigenvalues(self) -> Tensor:
        """Complex eigenvalues, sorted by modulus, largest first."""
        return torch.complex(self.eig_real, self.eig_imag)

    def __call__(self, x: Float[Tensor, "n k_in"]) -> Float[Tensor, "n k_out"]:
        return x.float().cpu() @ self.matrix + self.bias

    def save(self, path: str | Path) -> Path:
        tensors = {"matrix": self.matrix, "bias": self.bias, "eig_real": self.eig_real, "eig_imag": self.eig_imag}
        meta = {"r2": self.r2, "source": self.source, "target": self.target, "meta": self.meta}
        return _write(path, "Operator", tensors, meta)

    @classmethod
    def load(cls, path: str | Path) -> Operator:
        t, m = _read(path, "Operator")
        return cls(t["matrix"], t["bias"], t["eig_real"], t["eig_imag"], m["r2"], m["source"], m["target"], m["meta"])


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
            raise ValueError(f"Alignment map {tuple(self.map.shape)} disagrees with bases {tuple(self.basis_a.shape)}, {tuple(self.basis_b.shape)}")
        for name in ("map", "bias", "canonical", "angles", "basis_a", "basis_b"):
            object.__setattr__(self, name, getattr(self, name).detach().float().cpu())

    @property
    def residual_map(self) -> Float[Tensor, "d_a d_b"]:
        """The map in activation space, basis_a @ map @ basis_b.T: a row vector of A's centred
        activations times this gives B's centred activations inside B's core."""
        return self.basis_a @ self.map @ self.basis_b.T

    def __call__(self, za: Float[Tensor, "n ka"]) -> Float[Tensor, "n kb"]:
        return za.float().cpu() @ self.map + self.bias

    def save(self, path: str | Path) -> Path:
        names = ("map", "bias", "canonical", "angles", "basis_a", "basis_b")
        meta = {"method": self.method, "r2": self.r2, "r2_heldout": self.r2_heldout, "meta": self.meta}
        return _write(path, "Alignment", {n: getattr(self, n) for n in names}, meta)

    @classmethod
    def load(cls, path: str | Path) -> Alignment:
        t, m = _read(path, "Alignment")
        return cls(t["map"], t["bias"], m["method"], m["r2"], m["r2_heldout"], t["canonical"], t["angles"],
                   t["basis_a"], t["basis_b"], m["meta"])

"""Axes and interventions as data, and the pure tensor functions that apply them.

See interp.steering for the vocabulary (u, mean, c, strength) and the formula of each mode.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from jaxtyping import Float, Int
from safetensors import safe_open
from torch import Tensor

from interp.results import Grid, write_tensors_atomic

Mode = Literal["add", "flip", "project_out", "set"]
MODES: tuple[str, ...] = ("add", "flip", "project_out", "set")
_AXIS_FORMAT = "interp.Axis/1"


def site_name(site: str | int) -> str:
    """A hook name for `site`: an int layer means `blocks.{layer}.hook_resid_pre`."""
    if isinstance(site, bool) or not isinstance(site, (str, int)):
        raise TypeError(f"site must be a hook name or a layer index, got {site!r}")
    return f"blocks.{site}.hook_resid_pre" if isinstance(site, int) else site


@dataclass(frozen=True)
class Axis:
    """A direction at one site, with the statistics that give its strengths a natural scale.

    direction: unit vector u [d_model] (or exactly zero: a null axis). mean: mu [d_model].
    site: hook name (an int layer is turned into `blocks.{layer}.hook_resid_pre`).
    proj_mean, proj_std: mean and std of (h - mu) . u over the reference set (NaN when unknown,
    e.g. for an axis from a raw vector; mode "set" needs them). meta: provenance (JSON values).
    """

    direction: Float[Tensor, " d_model"]
    mean: Float[Tensor, " d_model"]
    site: str | int  # always a hook name (str) after construction
    proj_mean: float | int = float("nan")
    proj_std: float | int = float("nan")
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        u = torch.as_tensor(self.direction).detach().float().cpu()
        mu = torch.as_tensor(self.mean).detach().float().cpu()
        if u.ndim != 1 or mu.shape != u.shape:
            raise ValueError(f"Axis direction {tuple(u.shape)} and mean {tuple(mu.shape)} must both be [d_model]")
        if not (torch.isfinite(u).all() and torch.isfinite(mu).all()):
            raise ValueError("Axis direction and mean must be finite (found NaN or inf)")
        norm = float(u.norm())
        if norm != 0.0 and abs(norm - 1.0) > 1e-4:
            raise ValueError(f"Axis direction has norm {norm:.6g}; pass a unit vector (or use axis_from_vector)")
        object.__setattr__(self, "direction", u)
        object.__setattr__(self, "mean", mu)
        object.__setattr__(self, "site", site_name(self.site))
        object.__setattr__(self, "proj_mean", float(self.proj_mean))
        object.__setattr__(self, "proj_std", float(self.proj_std))

    @property
    def d_model(self) -> int:
        return self.direction.shape[0]

    def save(self, path: str | Path) -> Path:
        """direction and mean as safetensors; site, projection stats and meta as JSON, atomically."""
        path = Path(path)
        header = json.dumps({"site": self.site, "proj_mean": self.proj_mean, "proj_std": self.proj_std, "meta": self.meta})
        write_tensors_atomic(path, {"direction": self.direction.contiguous(), "mean": self.mean.contiguous()},
                             {"format": _AXIS_FORMAT, "axis": header})
        return path

    @classmethod
    def load(cls, path: str | Path) -> Axis:
        if not Path(path).is_file():
            raise FileNotFoundError(f"no Axis file at {path}")
        try:
            with safe_open(str(path), framework="pt") as f:
                meta = f.metadata() or {}
                direction, mean = (f.get_tensor("direction"), f.get_tensor("mean")) if meta.get("format") == _AXIS_FORMAT else (None, None)
        except Exception as err:  # safetensors raises its own error type for a non-safetensors file
            raise ValueError(f"{path} is not an interp Axis file: it is not readable as safetensors ({err})") from None
        if direction is None:
            raise ValueError(f"{path} is not an interp Axis file (format {meta.get('format')!r}, expected {_AXIS_FORMAT!r})")
        header = json.loads(meta["axis"])
        return cls(direction, mean, header["site"], header["proj_mean"], header["proj_std"], header["meta"])


@dataclass(frozen=True)
class Intervention:
    """An axis with a mode and a strength (see the module docstring for the formulas)."""

    axis: Axis
    mode: str = "flip"  # one of MODES
    strength: float | int = 1.0

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode {self.mode!r} is not one of {MODES}")
        if isinstance(self.strength, bool) or not isinstance(self.strength, (int, float)):
            raise TypeError(f"strength must be a number, got {self.strength!r}")
        if not math.isfinite(self.strength):
            raise ValueError(f"strength must be finite, got {self.strength}")
        if self.mode == "set" and not math.isfinite(self.axis.proj_std):
            raise ValueError(
                "mode 'set' works in units of the axis's natural std, but this axis has none "
                "(proj_std is NaN); build it with axis_from_contrast or give proj_mean/proj_std"
            )
        object.__setattr__(self, "strength", float(self.strength))


@dataclass(frozen=True)
class Generation:
    """What `generate` produced, one row per prompt.

    tokens: [batch, pos] left-padded prompt tokens then generated tokens (pad after a row's EOS).
    prompt_len: real prompt tokens per row; n_generated: generated tokens per row (EOS included).
    projections: [intervention, batch, step] projection c = (h - mu) . u of each intervention's
    axis, read at the position that predicts step `step`, before that intervention acts (NaN
    once a row has finished); None when not recorded. Step 0 reads the last prompt token.
    """

    prompts: tuple[str, ...]
    completions: tuple[str, ...]
    tokens: Int[Tensor, "batch pos"]
    prompt_len: Int[Tensor, " batch"]
    n_generated: Int[Tensor, " batch"]
    projections: Float[Tensor, "n_int batch step"] | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def texts(self) -> tuple[str, ...]:
        """Prompt and completion joined by a space, per row."""
        return tuple(f"{p} {c}".strip() for p, c in zip(self.prompts, self.completions))

    def projection_grid(self) -> Grid:
        """The recorded projections as a Grid (unit = intervention, batch, step)."""
        if self.projections is None:
            raise ValueError("no projections were recorded; call generate(..., record=True)")
        units = tuple(self.meta.get("interventions", range(self.projections.shape[0])))
        return Grid(self.projections, ("unit", "batch", "step"),
                    (units, tuple(range(self.projections.shape[1])), tuple(range(self.projections.shape[2]))),
                    {"metric": "projection (h - mean) . u", **{k: v for k, v in self.meta.items() if k != "interventions"}})


@dataclass(frozen=True)
class Comparison:
    """Unsteered and steered continuations of the same prompts, for side-by-side display.

    tags mark each word of a continuation: "agree" (a verb agreeing with the prompt subject's
    number), "flip" (a verb agreeing with the opposite number) or "" (anything else).
    """

    prompts: tuple[str, ...]
    unsteered: tuple[str, ...]
    steered: tuple[str, ...]
    unsteered_tags: tuple[tuple[str, ...], ...]
    steered_tags: tuple[tuple[str, ...], ...]
    meta: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# layer 1: pure tensor functions


def projection(h: Float[Tensor, "*rest d_model"], axis: Axis) -> Float[Tensor, "*rest"]:
    """c = (h - mean) . u, the coordinate of h along the axis."""
    u, mu = axis.direction.to(h), axis.mean.to(h)
    return (h - mu) @ u


def apply(h: Float[Tensor, "*rest d_model"], intervention: Intervention) -> Float[Tensor, "*rest d_model"]:
    """The intervened activation (module docstring has the formula of each mode)."""
    axis, s = intervention.axis, intervention.strength
    if h.shape[-1] != axis.d_model:
        raise ValueError(f"activation width {h.shape[-1]} but the axis has {axis.d_model} dims")
    u = axis.direction.to(h)
    if intervention.mode == "add":
        return h + s * u
    c = projection(h, axis)[..., None]  # [*rest, 1]
    if intervention.mode == "flip":
        return h - (2.0 * s) * c * u
    if intervention.mode == "project_out":
        return h - s * c * u
    return h + (axis.proj_mean + s * axis.proj_std - c) * u



def axis_from_core(core: Any, *, proj_mean: float = float("nan"), proj_std: float = float("nan")) -> Axis:
    """The axis of a 1-D `interp.cores.Core` (any object with `basis` [d_model, 1], `mean`, `site`).

    A core carries no projection statistics; pass proj_mean/proj_std to use mode "set".
    """
    basis = torch.as_tensor(core.basis).detach().float().cpu()
    if basis.ndim != 2 or basis.shape[1] != 1:
        raise ValueError(f"axis_from_core needs a 1-D core (basis [d_model, 1]), got basis {tuple(basis.shape)}; "
                         "extract it with k=1 or take one column")
    u = basis[:, 0]
    meta = {"method": f"core:{getattr(core, 'method', 'unknown')}", **{k: v for k, v in dict(getattr(core, "provenance", {}) or {}).items()
                                                                       if isinstance(v, (str, int, float, bool, type(None)))}}
    return Axis(u / u.norm(), core.mean, core.site, proj_mean, proj_std, meta)


def axis_from_vector(vector: Float[Tensor, " d_model"], *, site: str | int, mean: Float[Tensor, " d_model"] | None = None,
                     proj_mean: float = float("nan"), proj_std: float = float("nan"), meta: dict[str, Any] | None = None) -> Axis:
    """An axis along a raw vector (normalised; a zero vector gives a null axis), mean 0 unless given."""
    v = torch.as_tensor(vector).detach().float().cpu()
    norm = float(v.norm())
    u = v / norm if norm > 0 else v
    mu = torch.zeros_like(u) if mean is None else mean
    return Axis(u, mu, site, proj_mean, proj_std, {"method": "vector", "norm": norm, **(meta or {})})


def random_axis(axis: Axis, *, seed: int = 0) -> Axis:
    """A control: a uniformly random unit direction with `axis`'s site, mean and projection stats."""
    g = torch.Generator().manual_seed(seed)
    v = torch.randn(axis.d_model, generator=g)
    return Axis(v / v.norm(), axis.mean, axis.site, axis.proj_mean, axis.proj_std, {"method": "random", "seed": seed})

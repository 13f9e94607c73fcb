"""Axes and the steering intervention as data, and the pure tensor functions that apply them.

See interp.steering for the vocabulary (u, mean, c, strength) and the formula of each mode.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from jaxtyping import Float, Int
from torch import Tensor

from interp.errors import InterpError
from interp.results import Grid, result
from interp.sites import hook_name, layer_of

__all__ = ["MODES", "Axis", "Generation", "Steer", "apply", "axis_from_core", "axis_from_vector", "projection",
           "random_axis"]

Mode = Literal["add", "flip", "project_out", "set"]
MODES: tuple[str, ...] = ("add", "flip", "project_out", "set")


@result
@dataclass(frozen=True)
class Axis:
    """A direction at one site, with the statistics that give its strengths a natural scale.

    direction: unit vector u [d_model] (or exactly zero: a null axis). mean: mu [d_model].
    site: a full hook name, or a short name (interp.sites) with `layer`; stored as the full name,
    and `layer` as that name's layer. proj_mean, proj_std: mean and std of (h - mu) . u over the
    reference set (NaN when unknown, e.g. for an axis from a raw vector; mode "set" needs them).
    meta: provenance (JSON values).
    """

    direction: Float[Tensor, " d_model"]
    mean: Float[Tensor, " d_model"]
    site: str
    proj_mean: float | int = float("nan")
    proj_std: float | int = float("nan")
    meta: dict[str, Any] = field(default_factory=dict)
    layer: int | None = None

    def __post_init__(self) -> None:
        u = torch.as_tensor(self.direction).detach().float().cpu()
        mu = torch.as_tensor(self.mean).detach().float().cpu()
        if u.ndim != 1 or mu.shape != u.shape:
            raise InterpError(f"Axis direction {tuple(u.shape)} and mean {tuple(mu.shape)} must both be [d_model]")
        if not (torch.isfinite(u).all() and torch.isfinite(mu).all()):
            raise InterpError("Axis direction and mean must be finite (found NaN or inf)")
        norm = float(u.norm())
        if norm != 0.0 and abs(norm - 1.0) > 1e-4:
            raise InterpError(f"Axis direction has norm {norm:.6g}; pass a unit vector (or use axis_from_vector)")
        site = hook_name(self.site, self.layer)
        object.__setattr__(self, "direction", u)
        object.__setattr__(self, "mean", mu)
        object.__setattr__(self, "site", site)
        object.__setattr__(self, "layer", layer_of(site))
        object.__setattr__(self, "proj_mean", float(self.proj_mean))
        object.__setattr__(self, "proj_std", float(self.proj_std))
        object.__setattr__(self, "meta", dict(self.meta))

    @property
    def d_model(self) -> int:
        return self.direction.shape[0]

    def __repr__(self) -> str:
        """Site, width and projection statistics; never the vectors."""
        null = ", null" if float(self.direction.norm()) == 0.0 else ""
        meta = f", meta keys={sorted(self.meta)}" if self.meta else ""
        return (f"Axis(site={self.site!r}, d_model={self.d_model}, proj_mean={self.proj_mean:.4g}, "
                f"proj_std={self.proj_std:.4g}{null}{meta})")



@dataclass(frozen=True)
class Steer:
    """An axis with a mode and a strength (formulas in interp.steering), on the intervention protocol.

    where: optional [batch, pos] bool, the positions to steer (absolute positions: a forward that
    starts at position `start` reads columns start.. of it); None steers every position.
    """

    axis: Axis
    mode: str = "flip"  # one of MODES
    strength: float | int = 1.0
    where: Tensor | None = None  # [batch, pos] bool

    def __post_init__(self) -> None:
        if not isinstance(self.axis, Axis):
            raise InterpError(f"Steer needs an Axis, got {type(self.axis).__name__}")
        if self.mode not in MODES:
            raise InterpError(f"mode {self.mode!r} is not one of {MODES}")
        if isinstance(self.strength, bool) or not isinstance(self.strength, (int, float)):
            raise InterpError(f"strength must be a number, got {self.strength!r}")
        if not math.isfinite(self.strength):
            raise InterpError(f"strength must be finite, got {self.strength}")
        if self.mode == "set" and not math.isfinite(self.axis.proj_std):
            raise InterpError(
                "mode 'set' works in units of the axis's natural std, but this axis has none "
                "(proj_std is NaN); build it with axis_from_contrast or give proj_mean/proj_std"
            )
        if self.where is not None and (not isinstance(self.where, Tensor) or self.where.dtype != torch.bool
                                       or self.where.ndim != 2):
            raise InterpError("where must be a [batch, pos] bool tensor (or None: every position)")
        object.__setattr__(self, "strength", float(self.strength))

    @property
    def sites(self) -> tuple[str, ...]:
        return (self.axis.site,)

    @property
    def first_pos(self) -> int:
        if self.where is None:
            return 0
        steered = self.where.any(0).nonzero()
        return int(steered[0, 0]) if len(steered) else int(self.where.shape[1])

    def __str__(self) -> str:
        return f"{self.mode}({self.strength:g}) at {self.axis.site}"

    def __repr__(self) -> str:
        where = "" if self.where is None else f", where={int(self.where.sum())} of {tuple(self.where.shape)} positions"
        return f"Steer({self.mode!r}, strength={self.strength:g}, site={self.axis.site!r}{where})"

    def __call__(self, act: Float[Tensor, "batch pos d_model"], *, site: str, start: int = 0) -> Tensor:
        out = apply(act, self)
        if self.where is None:
            return out
        if act.ndim != 3 or start + act.shape[1] > self.where.shape[1] or act.shape[0] != self.where.shape[0]:
            raise InterpError(f"steering positions {tuple(self.where.shape)} do not cover the activation "
                              f"{tuple(act.shape)} at {site} from position {start}")
        where = self.where[:, start: start + act.shape[1]].to(act.device)
        return torch.where(where[..., None], out, act)


@result
@dataclass(frozen=True)
class Generation:
    """What `generate` produced, one row per prompt.

    tokens: [batch, pos] left-padded prompt tokens then generated tokens (pad after a row's EOS).
    prompt_len: real prompt tokens per row; n_generated: generated tokens per row (EOS included).
    projections: [steer, batch, step] projection c = (h - mu) . u of each steer's axis, read at
    the position that predicts step `step`, before that steer acts (NaN once a row has finished);
    None when not recorded. Step 0 reads the last prompt token. meta["interventions"] names the
    steers.
    """

    prompts: tuple[str, ...]
    completions: tuple[str, ...]
    tokens: Int[Tensor, "batch pos"]
    prompt_len: Int[Tensor, " batch"]
    n_generated: Int[Tensor, " batch"]
    projections: Float[Tensor, "n_steer batch step"] | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "prompts", tuple(self.prompts))
        object.__setattr__(self, "completions", tuple(self.completions))

    def __repr__(self) -> str:
        first = f", first={self.prompts[0]!r} -> {self.completions[0]!r}" if self.prompts else ""
        steers = self.meta.get("interventions")
        return (f"Generation({len(self.prompts)} prompts, {int(self.n_generated.sum())} tokens generated"
                f"{f', steers={list(steers)}' if steers else ''}{first})")

    @property
    def texts(self) -> tuple[str, ...]:
        """Prompt and completion joined by a space, per row."""
        return tuple(f"{p} {c}".strip() for p, c in zip(self.prompts, self.completions))

    def to_grid(self) -> Grid:
        """The recorded projections as a lines chart: x = step, one line per prompt, one panel per steer."""
        if self.projections is None:
            raise InterpError("no projections were recorded; call generate(..., record=True)")
        n_steer, batch, steps = self.projections.shape
        units = tuple(self.meta.get("interventions", range(n_steer)))
        meta = {k: v for k, v in self.meta.items() if k != "interventions"}
        return Grid(self.projections.permute(2, 1, 0), ("step", "batch", "unit"),
                    (tuple(range(steps)), self.prompts, units),
                    {**meta, "chart": "lines", "metric": "projection (h - mean) . u before the steer acts",
                     "title": "projection on the axis per generation step"})

    def to_dataframe(self):
        """One row per prompt: prompt, completion and generated-token count."""
        import pandas as pd

        return pd.DataFrame({"prompt": self.prompts, "completion": self.completions,
                             "n_generated": self.n_generated.tolist()})


# ---------------------------------------------------------------------------------------------
# layer 1: pure tensor functions


def projection(h: Float[Tensor, "*rest d_model"], axis: Axis) -> Float[Tensor, "*rest"]:
    """c = (h - mean) . u, the coordinate of h along the axis."""
    u, mu = axis.direction.to(h), axis.mean.to(h)
    return (h - mu) @ u


def apply(h: Float[Tensor, "*rest d_model"], steer: Steer) -> Float[Tensor, "*rest d_model"]:
    """The steered activation at every position (interp.steering has the formula of each mode);
    `steer.where` is not read here (Steer's __call__ applies it)."""
    axis, s = steer.axis, steer.strength
    if h.shape[-1] != axis.d_model:
        raise InterpError(f"activation width {h.shape[-1]} but the axis has {axis.d_model} dims")
    u = axis.direction.to(h)
    if steer.mode == "add":
        return h + s * u
    c = projection(h, axis)[..., None]  # [*rest, 1]
    if steer.mode == "flip":
        return h - (2.0 * s) * c * u
    if steer.mode == "project_out":
        return h - s * c * u
    return h + (axis.proj_mean + s * axis.proj_std - c) * u


def axis_from_core(core: Any, *, proj_mean: float = float("nan"), proj_std: float = float("nan")) -> Axis:
    """The axis of a 1-D `interp.cores.Core` (any object with `basis` [d_model, 1], `mean`, `site`).

    A core carries no projection statistics; pass proj_mean/proj_std to use mode "set".
    """
    basis = torch.as_tensor(core.basis).detach().float().cpu()
    if basis.ndim != 2 or basis.shape[1] != 1:
        raise InterpError(f"axis_from_core needs a 1-D core (basis [d_model, 1]), got basis {tuple(basis.shape)}; "
                          "extract it with k=1 or take one column")
    u = basis[:, 0]
    extra = dict(getattr(core, "meta", None) or getattr(core, "provenance", None) or {})
    meta = {"method": f"core:{getattr(core, 'method', 'unknown')}",
            **{k: v for k, v in extra.items() if isinstance(v, (str, int, float, bool, type(None)))}}
    return Axis(u / u.norm(), core.mean, core.site, proj_mean, proj_std, meta)


def axis_from_vector(vector: Float[Tensor, " d_model"], *, site: str, layer: int | None = None,
                     mean: Float[Tensor, " d_model"] | None = None, proj_mean: float = float("nan"),
                     proj_std: float = float("nan"), meta: dict[str, Any] | None = None) -> Axis:
    """An axis along a raw vector (normalised; a zero vector gives a null axis), mean 0 unless given."""
    v = torch.as_tensor(vector).detach().float().cpu()
    norm = float(v.norm())
    u = v / norm if norm > 0 else v
    mu = torch.zeros_like(u) if mean is None else mean
    return Axis(u, mu, site, proj_mean, proj_std, {"method": "vector", "norm": norm, **(meta or {})}, layer)


def random_axis(axis: Axis, *, seed: int = 0) -> Axis:
    """A control: a uniformly random unit direction with `axis`'s site, mean and projection stats."""
    g = torch.Generator().manual_seed(seed)
    v = torch.randn(axis.d_model, generator=g)
    return Axis(v / v.norm(), axis.mean, axis.site, axis.proj_mean, axis.proj_std, {"method": "random", "seed": seed})

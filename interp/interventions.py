"""The intervention protocol: interventions are data that name their sites and transform activations.

An *activation intervention* is a frozen dataclass with

    sites      the full hook names it touches (interp.sites resolves short names)
    first_pos  the first position it may change (0: any); a causal forward may begin there
    __call__(act, *, site, start) -> act
               the new activation at one of its sites. `start` is the absolute position of
               act's first position along its position axis (non-zero when the runner resumed a
               forward, or a generator runs one new token on a KV cache); rows are the rows of
               the input that the runner was given.

`interp.run` is the one place that turns interventions into hooks, runs many side by side in one
batched forward, and removes its hooks. Capabilities define their own interventions on the same
protocol (`interp.steering.Steer`, the simplifiers); the generic ones live here:

    Patch       write a source activation at a position and/or head (activation patching)
    Mask        act * m + ref * (1 - m) per head or for the whole site (ablation, head masks)
    Project     keep / remove / flip a subspace (algorithmic cores), at all or chosen positions

An *ablation style* says what an ablated activation is replaced by: an `AblationStyle` subclass
registered where it is defined (`@ablation_style`: zero, mean and resample here), which every
`ablation=` argument finds by name; a `Reference` holds its values at one site (`interp.run.reference`).

A *weight edit* changes parameters instead, applied by the runner for the duration of a forward
(`interp.run.runner.edited`: each edited parameter leaves its module's parameter dict and the edited
tensor stands in its place as a plain attribute; the original goes back on exit, even on error, so the
model's own tensors are never written):

    WeightDelta   w + scale * delta for named parameters (fine-tune deltas, grafting)
    WeightMask    w * mask for named parameters (parameter probing, pruning)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from collections.abc import Sequence
from typing import Callable, ClassVar, Mapping, Protocol, runtime_checkable

import torch
from torch import Tensor

from interp.errors import InterpError
from interp.sites import check_position, hook_name, kind_of, position_axis

__all__ = [
    "ABLATIONS", "Ablation", "AblationStyle", "AtOneSite", "Intervention", "Mask", "Patch", "Project", "Reference", "StyleNames",
    "WeightDelta", "WeightEdit", "WeightMask", "ablation_style", "project",
]

Ablation = str  # the name of a registered ablation style: one of ABLATIONS
PROJECTIONS: tuple[str, ...] = ("core_only", "core_removed", "core_flipped")


@runtime_checkable
class Intervention(Protocol):
    """What the runner needs of an activation intervention (see the module docstring)."""

    @property
    def sites(self) -> tuple[str, ...]: ...

    @property
    def first_pos(self) -> int: ...

    def __call__(self, act: Tensor, *, site: str, start: int = 0) -> Tensor: ...


@runtime_checkable
class WeightEdit(Protocol):
    """What the runner needs of a parameter intervention: names and the new value of each."""

    @property
    def params(self) -> tuple[str, ...]: ...

    def weight(self, name: str, value: Tensor) -> Tensor: ...


class AtOneSite:
    """A base for an intervention with one `site` field: it touches that site and may change any
    position; a subclass that leaves early positions alone overrides `first_pos`."""

    site: str

    @property
    def sites(self) -> tuple[str, ...]:
        return (self.site,)

    @property
    def first_pos(self) -> int:
        return 0


def _from(x: Tensor, axis: int, start: int) -> Tensor:
    return x.narrow(axis, start, x.shape[axis] - start) if start else x


def _check_shape(what: str, got: Tensor, want: torch.Size, site: str) -> None:
    if got.shape != want:
        raise InterpError(f"{what} has shape {tuple(got.shape)} but the activation at {site} has {tuple(want)}")


def _check_finite(what: str, t: Tensor) -> None:
    """InterpError unless `t` is a tensor with no NaN or infinity: one would turn every logit
    downstream into NaN, and the refusal would come far from its cause."""
    if not isinstance(t, Tensor):
        raise InterpError(f"{what} must be a tensor, got {type(t).__name__}")
    if t.is_floating_point() and t.numel() and not bool(torch.isfinite(t).all()):
        raise InterpError(f"{what} holds NaN or infinity; pass finite values")


def _index(x: int | None) -> slice | int:
    return slice(None) if x is None else x


# ---------------------------------------------------------------------------------------------
# activation interventions


@dataclass(frozen=True)
class Patch(AtOneSite):
    """Overwrite the activation at `site` with `source` ([batch, ...], the full activation of
    another run), at one position (`pos`; the destination position for attention maps) and/or
    one head, or whole when both are None."""

    site: str
    source: Tensor
    pos: int | None = None
    head: int | None = None
    layer: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "site", hook_name(self.site, self.layer))
        if not isinstance(self.source, Tensor):
            raise InterpError(f"Patch source must be a tensor (another run's activation at {self.site}), "
                              f"got {type(self.source).__name__}")
        if self.head is not None and kind_of(self.site) not in ("head", "pattern"):
            raise InterpError(f"head={self.head} needs a per-head site (z, q, k, v, pattern), not {self.site}")
        axis = position_axis(self.site)
        if self.pos is not None and self.source.ndim > axis:
            object.__setattr__(self, "pos", check_position(self.pos, self.source.shape[axis], "Patch pos"))

    @property
    def first_pos(self) -> int:
        return self.pos or 0

    def __call__(self, act: Tensor, *, site: str, start: int = 0) -> Tensor:
        axis = position_axis(self.site)
        source = _from(self.source, axis, start)
        _check_shape("patch source", source, act.shape, self.site)
        if self.head is not None:
            n = act.shape[1 if kind_of(self.site) == "pattern" else 2]
            if not -n <= self.head < n:
                raise InterpError(f"head {self.head} is out of range at {site}: it has heads 0..{n - 1}")
        pos = None
        if self.pos is not None:  # absolute position (negative counts from the end) -> index into act
            absolute = self.pos if self.pos >= 0 else start + act.shape[axis] + self.pos
            if not start <= absolute < start + act.shape[axis]:
                return act  # not among the positions this forward computes (a KV cache holds it)
            pos = absolute - start
        out = act.clone()
        if kind_of(self.site) == "pattern":  # [batch, head, dest, src]
            out[:, _index(self.head), _index(pos)] = source[:, _index(self.head), _index(pos)].to(act)
        elif self.head is not None:  # [batch, pos, head, d_head]
            out[:, _index(pos), self.head] = source[:, _index(pos), self.head].to(act)
        else:
            out[:, _index(pos)] = source[:, _index(pos)].to(act)
        return out


@dataclass(frozen=True)
class Reference:
    """What an ablated unit is replaced by at one site (built by `interp.run.reference`), in the
    shape its ablation style (`AblationStyle`, by name) builds and reads it.

    zero: `values` is a 0-d zero. mean: `values` is the activation less its batch axis, [pos, ...]
    ([head, dest, src] for attention maps: per destination position), the mean over reference rows
    (padding excluded), and `pooled` the same less its position axis, the mean over all their
    positions, used past the reference width. resample: `values` is [batch, pos, ...], one row per
    input row.
    """

    ablation: str
    values: Tensor
    pooled: Tensor | None = None

    def __post_init__(self) -> None:
        AblationStyle.of(self.ablation)

    def like(self, act: Tensor, start: int = 0, axis: int = 1) -> Tensor:
        """The reference for `act` [batch, ...] whose first position (along `axis`, the site's
        `position_axis`: 2 for attention maps) is `start`."""
        return AblationStyle.of(self.ablation).like(self, act, start, axis)

    def rows(self, index: Tensor) -> Reference:
        """The reference for a subset of input rows (only a paired style's references have rows)."""
        if not AblationStyle.of(self.ablation).paired:
            return self
        return Reference(self.ablation, self.values[index], self.pooled)


# ---------------------------------------------------------------------------------------------
# ablation styles: what an ablated activation is replaced by, one registered class each


class AblationStyle:
    """One way to ablate. A style is a subclass, registered where it is defined with
    `@ablation_style`; every `ablation=` argument finds it by `name` (`interp.run.reference`, the
    masking analyses, sweeps, and circuits' faithfulness when it reads rows).

        name    what `ablation=` says
        reads   the task rows (a `Task` field: "clean", "corrupt") its reference is built from when
                the caller gives none; None: it reads no rows (`build` gets no activations)
        paired  its reference holds one row per input row (each input's own counterfactual), so it
                is built from rows of the input's shape, per input, never shared between inputs
    """

    name: ClassVar[str]
    reads: ClassVar[str | None] = "clean"
    paired: ClassVar[bool] = False

    def build(self, acts: Tensor | None, valid: Tensor | None, axis: int) -> Reference:
        """The reference at one site from the reference rows' activations `acts` [batch, pos, ...]
        (`valid` [batch, pos] bool: not padding; `axis`: the site's position axis); None and None
        for a style that reads no rows."""
        raise NotImplementedError(f"{type(self).__name__} does not say how its reference is built")

    def like(self, ref: Reference, act: Tensor, start: int, axis: int) -> Tensor:
        """What replaces `act` [batch, ...], whose first position along `axis` is `start`: a tensor
        that broadcasts to it."""
        raise NotImplementedError(f"{type(self).__name__} does not say what replaces an activation")

    @staticmethod
    def of(name: str) -> AblationStyle:
        """The registered style called `name`; InterpError naming the registered ones otherwise."""
        if name not in ABLATION_STYLES:
            raise InterpError(f"ablation {name!r} is not one of {ABLATIONS}")
        return ABLATION_STYLES[name]


# name -> its style, in registration order (filled by @ablation_style where each style is defined)
ABLATION_STYLES: dict[str, AblationStyle] = {}


def ablation_style(cls: type[AblationStyle]) -> type[AblationStyle]:
    """Register the decorated `AblationStyle` subclass under its `name`."""
    old = ABLATION_STYLES.get(cls.name)
    if old is not None and (type(old).__module__, type(old).__qualname__) != (cls.__module__, cls.__qualname__):
        raise InterpError(f"ablation {cls.name!r} is already {type(old).__module__}.{type(old).__qualname__}; "
                          f"{cls.__module__}.{cls.__qualname__} needs another name")
    ABLATION_STYLES[cls.name] = cls()
    return cls


class StyleNames(Sequence):
    """The names of the registered ablation styles that `keep` accepts (all by default), read each time
    it is used, so a style registered later is in it; shown as a tuple."""

    def __init__(self, keep: Callable[[AblationStyle], bool] | None = None) -> None:
        self.keep = keep

    def __getitem__(self, i):
        return tuple(n for n, s in ABLATION_STYLES.items() if self.keep is None or self.keep(s))[i]

    def __len__(self) -> int:
        return len(self[:])

    def __repr__(self) -> str:
        return repr(self[:])


ABLATIONS = StyleNames()


@ablation_style
class ZeroAblation(AblationStyle):
    """Zero: the activation replaced by zeros."""

    name, reads = "zero", None

    def build(self, acts: Tensor | None, valid: Tensor | None, axis: int) -> Reference:
        return Reference("zero", torch.zeros(()))  # cpu: a 0-dim zero meets any device

    def like(self, ref: Reference, act: Tensor, start: int, axis: int) -> Tensor:
        return ref.values


@ablation_style
class MeanAblation(AblationStyle):
    """Mean: per position, the mean over the reference rows (padding excluded); past their width,
    the mean over all their positions."""

    name, reads = "mean", "clean"

    def build(self, acts: Tensor | None, valid: Tensor | None, axis: int) -> Reference:
        shape = [1] * acts.ndim
        shape[0], shape[axis] = valid.shape
        w = valid.to(acts).view(shape)  # [batch, 1.., pos, 1...]
        pooled = (acts * w).sum((0, axis)) / w.sum((0, axis))
        count = w.sum(0)  # [1.., pos, 1...]
        per_pos = torch.where(count > 0, (acts * w).sum(0) / count.clamp_min(1), pooled.unsqueeze(axis - 1))
        return Reference("mean", per_pos, pooled)

    def like(self, ref: Reference, act: Tensor, start: int, axis: int) -> Tensor:
        ax = axis - 1  # mean values have no batch axis
        end, have = start + act.shape[axis], ref.values.shape[ax]
        if end <= have:
            return ref.values.narrow(ax, start, end - start)
        shape = list(ref.pooled.shape)
        shape.insert(ax, end - max(have, start))
        extra = ref.pooled.unsqueeze(ax).expand(shape)
        return torch.cat([ref.values.narrow(ax, start, have - start), extra], ax) if start < have else extra


@ablation_style
class ResampleAblation(AblationStyle):
    """Resample: each input row's activation on its own reference row (the paired counterfactual)."""

    name, reads, paired = "resample", "corrupt", True

    def build(self, acts: Tensor | None, valid: Tensor | None, axis: int) -> Reference:
        return Reference("resample", acts)

    def like(self, ref: Reference, act: Tensor, start: int, axis: int) -> Tensor:
        values = _from(ref.values, axis, start)
        if values.shape != act.shape:
            raise InterpError(
                f"resample reference has shape {tuple(ref.values.shape)} but the activation has "
                f"{tuple(act.shape)}; pass reference token rows of the same shape as the input")
        return values


@dataclass(frozen=True)
class Mask(AtOneSite):
    """act * m + ref * (1 - m) at one site: exact at m = 1 (unchanged) and m = 0 (ablated).

    `mask` is [head] on a per-head site ([batch, pos, head, d_head]) or a 0-d value on any other
    site; with a leading batch axis ([batch, head], [batch]) each input row has its own mask (many
    masks learned in one forward). It may require grad (learned masks). `reference` is what m = 0 means.
    """

    site: str
    mask: Tensor
    reference: Reference = field(default_factory=lambda: Reference("zero", torch.zeros(())))  # cpu: a 0-dim zero
    layer: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "site", hook_name(self.site, self.layer))
        if not isinstance(self.mask, Tensor):
            raise InterpError(f"a mask on {self.site} must be a tensor, got {type(self.mask).__name__}")
        if not self.mask.requires_grad:  # a learned mask's gates are finite by construction: no sync per step
            _check_finite(f"the mask on {self.site}", self.mask)
        per_head = kind_of(self.site) in ("head", "pattern")
        if per_head and self.mask.ndim not in (1, 2):
            raise InterpError(f"a mask on {self.site} is one value per head ([head], or [batch, head] per row), "
                              f"got shape {tuple(self.mask.shape)}")
        if not per_head and not (self.mask.numel() == 1 or self.mask.ndim == 1):
            raise InterpError(f"a mask on {self.site} is one value (0-d, or [batch] per row), got shape {tuple(self.mask.shape)}")

    @classmethod
    def ablate(cls, site: str, heads=None, reference: Reference | None = None, *, n_heads: int | None = None,
               layer: int | None = None) -> Mask:
        """Ablate chosen heads (an int or a list; `n_heads` is the site's head count) or the whole site."""
        ref = reference if reference is not None else Reference("zero", torch.zeros(()))  # cpu: a 0-dim zero meets any device
        if heads is None:
            return cls(site, torch.zeros(()), ref, layer)  # cpu: a 0-dim zero meets any device
        if n_heads is None:
            raise InterpError("ablating chosen heads needs n_heads, the number of heads at the site")
        m = torch.ones(n_heads)  # cpu: applied with .to(act)
        idx = [heads] if isinstance(heads, int) else list(heads)
        for h in idx:
            if not 0 <= h < n_heads:
                raise InterpError(f"head {h} is out of range: the site has heads 0..{n_heads - 1}")
        m[idx] = 0.0
        return cls(site, m, ref, layer)

    def __call__(self, act: Tensor, *, site: str, start: int = 0) -> Tensor:
        ref = self.reference.like(act, start, position_axis(self.site)).to(act)
        kind = kind_of(self.site)
        rows = self.mask.ndim == (2 if kind in ("head", "pattern") else 1)
        if rows and self.mask.shape[0] != act.shape[0]:
            raise InterpError(f"per-row mask has {self.mask.shape[0]} rows but the activation at {site} has {act.shape[0]}")
        m = self.mask.to(act)
        if kind in ("head", "pattern"):
            heads = act.shape[1 if kind == "pattern" else 2]
            if m.shape[-1] != heads:
                raise InterpError(f"head mask has shape {tuple(self.mask.shape)} but {site} has {heads} heads {tuple(act.shape)}")
            if kind == "pattern":  # [batch, head, dest, src]
                m = m[..., None, None]
            else:  # [batch, pos, head, d_head]
                m = m[:, None, :, None] if rows else m[:, None]
        else:
            m = m.view(-1, *[1] * (act.ndim - 1)) if rows else m.reshape(())
        return act * m + ref * (1 - m)


def project(h: Tensor, basis: Tensor, mean: Tensor, mode: str) -> Tensor:
    """The subspace interventions with projector P = B B^T and mean mu: "core_only" mu + P(h - mu);
    "core_removed" h - P(h - mu); "core_flipped" h - 2 P(h - mu)."""
    b, mu = basis.to(h), mean.to(h)
    inside = ((h - mu) @ b) @ b.T
    if mode == "core_only":
        return mu + inside
    if mode == "core_removed":
        return h - inside
    if mode == "core_flipped":
        return h - 2 * inside
    raise InterpError(f"mode={mode!r} is not one of {PROJECTIONS}")


@dataclass(frozen=True)
class Project(AtOneSite):
    """`project(h, basis, mean, mode)` on a [batch, pos, d] activation: at every position, or at
    one position per row (`positions` [batch], e.g. a task's answer positions)."""

    site: str
    basis: Tensor  # [d, k], orthonormal columns
    mean: Tensor  # [d]
    mode: str = "core_removed"
    positions: Tensor | None = None
    layer: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "site", hook_name(self.site, self.layer))
        if self.mode not in PROJECTIONS:
            raise InterpError(f"mode={self.mode!r} is not one of {PROJECTIONS}")
        _check_finite("Project basis", self.basis)
        _check_finite("Project mean", self.mean)
        if self.basis.ndim != 2 or self.mean.shape != (self.basis.shape[0],):
            raise InterpError(f"basis {tuple(self.basis.shape)} must be [d, k] and mean {tuple(self.mean.shape)} [d]")
        if self.positions is not None and (not isinstance(self.positions, Tensor) or self.positions.ndim != 1
                                           or self.positions.dtype not in (torch.long, torch.int32)):
            raise InterpError(f"positions must be a [batch] tensor of integer positions, one per row, got "
                              f"{getattr(self.positions, 'dtype', type(self.positions).__name__)} "
                              f"{tuple(getattr(self.positions, 'shape', ()))}")

    @property
    def first_pos(self) -> int:
        return 0 if self.positions is None or not len(self.positions) else int(self.positions.min())

    def __call__(self, act: Tensor, *, site: str, start: int = 0) -> Tensor:
        if act.shape[-1] != self.basis.shape[0]:
            raise InterpError(f"basis is [{self.basis.shape[0]}, k] but {site} has width {act.shape[-1]}")
        if self.positions is None:
            return project(act, self.basis, self.mean, self.mode)
        if self.positions.shape != (act.shape[0],):
            raise InterpError(f"positions {tuple(self.positions.shape)} must be one per row of the activation {tuple(act.shape)}")
        pos = self.positions.to(act.device)
        end = start + act.shape[1]  # the prompt's length: a forward always runs to its last position
        pos = torch.where(pos < 0, pos + end, pos)  # absolute positions
        if bool(((pos < 0) | (pos >= end)).any()):  # else it would silently project nothing in those rows
            raise InterpError(f"Project positions {self.positions.tolist()[:8]} are past the prompt: it has {end} "
                              f"positions; pass positions in -{end}..{end - 1}")
        pos = pos - start  # index into act's positions (negative: before a resumed forward's start, held by its cache)
        rows = torch.arange(act.shape[0], device=act.device)
        inside = (pos >= 0) & (pos < act.shape[1])  # rows whose position this forward computes
        rows, pos = rows[inside], pos[inside]
        out = act.clone()
        out[rows, pos] = project(act[rows, pos], self.basis, self.mean, self.mode)
        return out


# ---------------------------------------------------------------------------------------------
# weight edits


def _tensors(what: str, values: Mapping[str, Tensor]) -> dict[str, Tensor]:
    if not values:
        raise InterpError(f"{what} names no parameters")
    out = {}
    for name, t in values.items():
        _check_finite(f"{what}[{name!r}]", t)
        out[name] = t
    return out


@dataclass(frozen=True)
class WeightDelta:
    """w + scale * delta[name] for each named parameter (a fine-tuning delta, a graft)."""

    deltas: Mapping[str, Tensor]
    scale: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "deltas", _tensors("WeightDelta", self.deltas))
        if isinstance(self.scale, bool) or not isinstance(self.scale, (int, float)) or not math.isfinite(self.scale):
            raise InterpError(f"WeightDelta scale={self.scale!r} must be a finite number")

    @property
    def params(self) -> tuple[str, ...]:
        return tuple(self.deltas)

    def weight(self, name: str, value: Tensor) -> Tensor:
        delta = self.deltas[name]
        if delta.shape != value.shape:
            raise InterpError(f"delta for {name} has shape {tuple(delta.shape)} but the parameter has {tuple(value.shape)}")
        return value + self.scale * delta.to(value)


@dataclass(frozen=True)
class WeightMask:
    """w * mask[name] for each named parameter (1 keeps a weight, 0 prunes it; shapes broadcast)."""

    masks: Mapping[str, Tensor]

    def __post_init__(self) -> None:
        object.__setattr__(self, "masks", _tensors("WeightMask", self.masks))

    @property
    def params(self) -> tuple[str, ...]:
        return tuple(self.masks)

    def weight(self, name: str, value: Tensor) -> Tensor:
        mask = self.masks[name]
        try:
            torch.broadcast_shapes(mask.shape, value.shape)
        except RuntimeError:
            raise InterpError(f"mask for {name} has shape {tuple(mask.shape)}, which does not broadcast to {tuple(value.shape)}") from None
        return value * mask.to(value)

"""Sparse dictionaries over one site: sparse autoencoders (read and rebuild the same site) and
transcoders (read the MLP's input, rebuild its output).

`Dictionary` is the one type every feature-level capability reads (training, feature sites,
attribution graphs, SAELens import); it holds weights and the sites only, so it saves through the
one result format (safetensors + JSON).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from interp.errors import InterpError
from interp.sites import hook_name
from interp.storage import result

__all__ = ["Dictionary"]


@result
@dataclass(frozen=True)
class Dictionary:
    """f = act(x @ W_enc + b_enc); x_hat = f @ W_dec + b_dec.

    site_in: the full hook name read (x); site_out: the full hook name rebuilt (x_hat). The same site
    makes a sparse autoencoder; the MLP's input and output sites make a transcoder.
    threshold: JumpReLU thresholds per feature (a feature fires only above it); None is ReLU.
    model: the name of the model the dictionary was trained on. meta: provenance (JSON values).
    """

    W_enc: Float[Tensor, "d_in n_features"]
    b_enc: Float[Tensor, " n_features"]
    W_dec: Float[Tensor, "n_features d_out"]
    b_dec: Float[Tensor, " d_out"]
    site_in: str
    site_out: str
    threshold: Float[Tensor, " n_features"] | None = None
    model: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    # fields a file must hold finite (interp.storage.load refuses a NaN weight: it would poison every feature)
    _finite_fields = ("W_enc", "b_enc", "W_dec", "b_dec", "threshold")

    def __post_init__(self) -> None:
        d_in, n = tuple(self.W_enc.shape) if self.W_enc.ndim == 2 else (None, None)
        if d_in is None or self.b_enc.shape != (n,) or self.W_dec.ndim != 2 or self.W_dec.shape[0] != n \
                or self.b_dec.shape != (self.W_dec.shape[1],):
            raise InterpError(
                f"Dictionary shapes disagree: W_enc {tuple(self.W_enc.shape)}, b_enc {tuple(self.b_enc.shape)}, "
                f"W_dec {tuple(self.W_dec.shape)}, b_dec {tuple(self.b_dec.shape)}; want [d_in, n], [n], [n, d_out], [d_out]")
        if self.threshold is not None and self.threshold.shape != (n,):
            raise InterpError(f"Dictionary threshold has shape {tuple(self.threshold.shape)}; want [{n}] (one per feature)")
        object.__setattr__(self, "site_in", hook_name(self.site_in))
        object.__setattr__(self, "site_out", hook_name(self.site_out))

    @property
    def kind(self) -> str:
        """"sae" when it rebuilds the site it reads, else "transcoder"."""
        return "sae" if self.site_in == self.site_out else "transcoder"

    @property
    def n_features(self) -> int:
        return self.W_enc.shape[1]

    def flat(self, x: Tensor, side: str = "in") -> Tensor:
        """`x` with its heads axis folded into its last when `side`'s site ("in": site_in, "out":
        site_out) is an attention hook_z site and `x` arrives as [..., n_heads, d_head], as
        SAELens's reshape_activations="hook_z" does; else `x` as it is."""
        site, width = (self.site_in, self.W_enc.shape[0]) if side == "in" else (self.site_out, self.W_dec.shape[1])
        if site.endswith("hook_z") and x.ndim >= 2 and (x.ndim == 4 or x.shape[-1] != width):
            return x.flatten(-2)
        return x

    def pre(self, x: Float[Tensor, "... d_in"], features: Tensor | None = None) -> Float[Tensor, "... n_features"]:
        """The encoder's pre-activations x @ W_enc + b_enc (of `features` only, when given); a
        hook_z input [..., n_heads, d_head] is flattened first."""
        x = self.flat(x)
        if x.ndim == 0 or x.shape[-1] != self.W_enc.shape[0]:
            raise InterpError(f"{self.site_in} activations have shape {tuple(x.shape)}; this dictionary reads "
                              f"[..., {self.W_enc.shape[0]}]")
        W_enc, b_enc = self.W_enc.to(x.device), self.b_enc.to(x.device)  # no copy when already there
        if features is not None:
            W_enc, b_enc = W_enc[:, features.to(x.device)], b_enc[features.to(x.device)]
        return x.to(W_enc.dtype) @ W_enc + b_enc

    def activation(self, h: Float[Tensor, "... k"], features: Tensor | None = None) -> Float[Tensor, "... k"]:
        """Feature activations from pre-activations `h` (of `features` only, when given): ReLU, or
        JumpReLU relu(h) * (h > threshold) when thresholds are set -- SAELens's definition, so a
        threshold below zero still passes no negative activation."""
        if self.threshold is None:
            return torch.relu(h)
        t = self.threshold.to(h.device)
        return torch.relu(h) * (h > (t if features is None else t[features.to(h.device)]))

    def encode(self, x: Float[Tensor, "... d_in"]) -> Float[Tensor, "... n_features"]:
        """Feature activations (ReLU, or JumpReLU when thresholds are set)."""
        return self.activation(self.pre(x))

    def decode(self, f: Float[Tensor, "... n_features"]) -> Float[Tensor, "... d_out"]:
        return f @ self.W_dec.to(f.device) + self.b_dec.to(f.device)

    def to(self, device: str | torch.device) -> "Dictionary":
        """This dictionary with its tensors on `device` (itself when they are there already). Its
        methods follow their input's device anyway; moving it once saves a copy per call."""
        device = torch.device(device)
        if self.W_enc.device.type == device.type and device.index in (None, self.W_enc.device.index):
            return self
        move = {k: getattr(self, k).to(device) for k in ("W_enc", "b_enc", "W_dec", "b_dec")}
        return replace(self, **move, threshold=None if self.threshold is None else self.threshold.to(device))

    def __call__(self, x: Float[Tensor, "... d_in"]) -> Float[Tensor, "... d_out"]:
        """The reconstruction of `x`; an SAE at hook_z given [..., n_heads, d_head] returns that shape."""
        out = self.decode(self.encode(x))
        if self.kind == "sae" and self.flat(x) is not x:
            return out.unflatten(-1, x.shape[-2:])
        return out

    def to_grid(self):
        """Its training history (meta["history"], written by interp's trainer) as a Grid [step,
        dictionary, metric]: `plot.render(d)` draws loss, AuxK loss, L0 and dead fraction per step."""
        from interp.results import Grid

        rows = self.meta.get("history") or []
        if not rows:
            raise InterpError(f"{self!r} has no training history (meta['history']); dictionaries trained here "
                              "carry one, loaded ones (SAELens, older files) do not")
        keys = ("nmse", "aux", "l0", "dead")
        values = torch.tensor([[[float(r[k]) for k in keys]] for r in rows], device="cpu")  # a result
        return Grid(values, ("step", "dictionary", "metric"),
                    (tuple(int(r["step"]) for r in rows), (f"{self.kind} {self.site_out}",),
                     ("loss (NMSE)", "AuxK loss", "L0", "dead fraction")),
                    {"title": f"training: {self!r}", "model": self.model, "chart": "lines", "metric": "value"})

    def __repr__(self) -> str:
        name = f" of {self.model}" if self.model else ""
        return f"Dictionary({self.kind}{name}, {self.site_in} -> {self.site_out}, {self.n_features} features)"

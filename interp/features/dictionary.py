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
from interp.files.storage import result

__all__ = ["Dictionary"]


@result
@dataclass(frozen=True)
class Dictionary:
    """f = act(x @ W_enc + b_enc); x_hat = f @ W_dec + b_dec (+ x @ W_skip).

    site_in: the full hook name read (x); site_out: the full hook name rebuilt (x_hat). The same site
    makes a sparse autoencoder; the MLP's input and output sites make a transcoder.
    threshold: JumpReLU thresholds per feature (a feature fires only above it); None is ReLU.
    k: a TopK dictionary's number of features kept per token (its k largest activations, the rest
    zeroed, after the threshold when both are set); None keeps every feature that fires.
    model: the name of the model the dictionary was trained on. meta: provenance (JSON values).
    W_skip: a skip transcoder's linear path from its input to its output [d_in, d_out], added to
    the features' reconstruction (EleutherAI's and SAELens's skip transcoders); None has none.
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
    k: int | None = None
    W_skip: Float[Tensor, "d_in d_out"] | None = None

    # fields a file must hold finite (interp.files.storage.load refuses a NaN weight: it would poison every feature)
    _finite_fields = ("W_enc", "b_enc", "W_dec", "b_dec", "threshold", "W_skip")

    def __post_init__(self) -> None:
        d_in, n = tuple(self.W_enc.shape) if self.W_enc.ndim == 2 else (None, None)
        if d_in is None or self.b_enc.shape != (n,) or self.W_dec.ndim != 2 or self.W_dec.shape[0] != n \
                or self.b_dec.shape != (self.W_dec.shape[1],):
            raise InterpError(
                f"Dictionary shapes disagree: W_enc {tuple(self.W_enc.shape)}, b_enc {tuple(self.b_enc.shape)}, "
                f"W_dec {tuple(self.W_dec.shape)}, b_dec {tuple(self.b_dec.shape)}; want [d_in, n], [n], [n, d_out], [d_out]")
        if self.threshold is not None and self.threshold.shape != (n,):
            raise InterpError(f"Dictionary threshold has shape {tuple(self.threshold.shape)}; want [{n}] (one per feature)")
        if self.W_skip is not None and tuple(self.W_skip.shape) != (d_in, self.W_dec.shape[1]):
            raise InterpError(f"Dictionary W_skip has shape {tuple(self.W_skip.shape)}; want [d_in, d_out] = "
                              f"[{d_in}, {self.W_dec.shape[1]}] (input to output)")
        if self.k is not None and (isinstance(self.k, bool) or not isinstance(self.k, int) or not 1 <= self.k <= n):
            raise InterpError(f"Dictionary k={self.k!r} must be None or an int from 1 to n_features={n} (features kept per token)")
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
        threshold below zero still passes no negative activation -- then, for a TopK dictionary,
        each token's k largest (which needs every feature's pre-activation: pass no `features`)."""
        if self.k is not None and features is not None:
            raise InterpError(f"{self!r} keeps each token's top {self.k} features, which depends on all "
                              f"{self.n_features}: take encode(x)[..., features] instead of a subset's activation")
        if self.threshold is None:
            f = torch.relu(h)
        else:
            t = self.threshold.to(h.device)
            f = torch.relu(h) * (h > (t if features is None else t[features.to(h.device)]))
        if self.k is None:
            return f
        top = f.topk(self.k, dim=-1)
        return torch.zeros_like(f).scatter(-1, top.indices, top.values)

    def encode(self, x: Float[Tensor, "... d_in"]) -> Float[Tensor, "... n_features"]:
        """Feature activations (ReLU, or JumpReLU when thresholds are set)."""
        return self.activation(self.pre(x))

    def decode(self, f: Float[Tensor, "... n_features"], x: Tensor | None = None) -> Float[Tensor, "... d_out"]:
        """f @ W_dec + b_dec, plus x @ W_skip for a skip transcoder (which needs its input `x`)."""
        out = f @ self.W_dec.to(f.device) + self.b_dec.to(f.device)
        if self.W_skip is None:
            return out
        if x is None:
            raise InterpError(f"{self!r} adds its input's skip path x @ W_skip to the reconstruction: call decode(f, x)")
        return out + self.flat(x).to(out) @ self.W_skip.to(f.device)

    def to(self, device: str | torch.device) -> "Dictionary":
        """This dictionary with its tensors on `device` (itself when they are there already). Its
        methods follow their input's device anyway; moving it once saves a copy per call."""
        device = torch.device(device)
        if self.W_enc.device.type == device.type and device.index in (None, self.W_enc.device.index):
            return self
        move = {k: getattr(self, k).to(device) for k in ("W_enc", "b_enc", "W_dec", "b_dec")}
        move.update({k: getattr(self, k).to(device) for k in ("threshold", "W_skip") if getattr(self, k) is not None})
        return replace(self, **move)

    def __call__(self, x: Float[Tensor, "... d_in"]) -> Float[Tensor, "... d_out"]:
        """The reconstruction of `x`; an SAE at hook_z given [..., n_heads, d_head] returns that shape."""
        out = self.decode(self.encode(x), x)
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
        top = (f", top {self.k}" if self.k is not None else "") + (", skip" if self.W_skip is not None else "")
        return f"Dictionary({self.kind}{name}, {self.site_in} -> {self.site_out}, {self.n_features} features{top})"

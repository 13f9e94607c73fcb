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

    def pre(self, x: Float[Tensor, "... d_in"]) -> Float[Tensor, "... n_features"]:
        """The encoder's pre-activations x @ W_enc + b_enc."""
        if x.shape[-1] != self.W_enc.shape[0]:
            raise InterpError(f"{self.site_in} activations have width {x.shape[-1]}; this dictionary reads width {self.W_enc.shape[0]}")
        W_enc, b_enc = self.W_enc.to(x.device), self.b_enc.to(x.device)  # no copy when already there
        return x.to(W_enc.dtype) @ W_enc + b_enc

    def encode(self, x: Float[Tensor, "... d_in"]) -> Float[Tensor, "... n_features"]:
        """Feature activations (ReLU, or JumpReLU when thresholds are set)."""
        h = self.pre(x)
        if self.threshold is None:
            return torch.relu(h)
        return h * (h > self.threshold.to(h.device))

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
        return self.decode(self.encode(x))

    def __repr__(self) -> str:
        name = f" of {self.model}" if self.model else ""
        return f"Dictionary({self.kind}{name}, {self.site_in} -> {self.site_out}, {self.n_features} features)"

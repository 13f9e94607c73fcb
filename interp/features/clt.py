"""Cross-layer transcoders (Ameisen et al. 2025, "Circuit Tracing"): one dictionary over every
layer's MLP, whose features read one layer's MLP input and write to that MLP's output and every
later one's.

    f_l   = act(x_l @ W_enc[l] + b_enc[l])                     x_l: layer l's MLP input
    y_m   = sum_{l <= m} f_l @ W_dec[l][:, m - l] + b_dec[m]   (+ x_m @ W_skip[m])
    act   ReLU, or JumpReLU relu(h) * (h > threshold) when thresholds are set (as `Dictionary`)

`CrossLayerTranscoder` saves through the one result format; `save_circuit_tracer` /
`load_circuit_tracer` read and write the folder layout circuit-tracer loads (`W_enc_{l}` and
`W_dec_{l}` safetensors per layer), `load_gemmascope2` the per-layer files of GemmaScope-2's
multi-layer JumpReLU transcoders. `fit_clt` trains one on activations in memory (resumable from
a checkpoint) with two of `interp.features.train`'s architectures: BatchTopK, the top k x tokens
x layers pre-activations of a batch kept across all layers together, at inference the running
mean of the smallest kept activation every feature's threshold; or JumpReLU, thresholds per layer
and feature trained through train.py's straight-through estimator with its L0 penalty. Either
way each feature's decoder has unit norm over all the layers it writes.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

import torch
from jaxtyping import Float
from safetensors.torch import save_file
from torch import Tensor

from interp.errors import InterpError
from interp.features.train import THRESHOLD_START, Recipe, JumpReLUFunction, StepFunction, mlp_sites, read_checkpoint  # the JumpReLU trainer's pieces
from interp.run import cache
from interp.sites import check_tokens, hook_name, layer_of
from interp.files import validate
from interp.files.storage import atomic_dir, check_replaceable, check_writable, result, write_tensors_atomic

__all__ = ["CrossLayerTranscoder", "activations", "fit_clt", "load_circuit_tracer", "load_gemmascope2", "save_circuit_tracer"]


def _check_sites(sites: Sequence[str], n_layers: int, name: str) -> None:
    if len(sites) != n_layers or [layer_of(hook_name(s)) for s in sites] != list(range(n_layers)):
        raise InterpError(f"CrossLayerTranscoder {name} must name one site in each of blocks 0..{n_layers - 1}, in "
                          f"order, got {tuple(sites)}")


@result
@dataclass(frozen=True)
class CrossLayerTranscoder:
    """A cross-layer transcoder over layers 0..n_layers-1 (module docstring for the function).

    W_dec[l]: [n_features, n_layers - l, d_out], layer l's features' writes to layers l, l+1, ...
    sites_in[l] / sites_out[l]: layer l's MLP input and output hooks (`train.mlp_sites`).
    threshold: JumpReLU thresholds [layer, n_features], or None (ReLU). W_skip: an optional
    linear path [layer, d_in, d_out] from each MLP's input to its output (skip transcoders).
    """

    W_enc: Float[Tensor, "layer d_in n_features"]
    b_enc: Float[Tensor, "layer n_features"]
    W_dec: Sequence[Tensor]  # kept as a tuple
    b_dec: Float[Tensor, "layer d_out"]
    sites_in: Sequence[str]  # kept as tuples
    sites_out: Sequence[str]
    threshold: Float[Tensor, "layer n_features"] | None = None
    W_skip: Float[Tensor, "layer d_in d_out"] | None = None
    model: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    _finite_fields = ("W_enc", "b_enc", "b_dec", "threshold", "W_skip")

    def __post_init__(self) -> None:
        object.__setattr__(self, "W_dec", tuple(self.W_dec))
        object.__setattr__(self, "sites_in", tuple(hook_name(s) for s in self.sites_in))
        object.__setattr__(self, "sites_out", tuple(hook_name(s) for s in self.sites_out))
        if self.W_enc.ndim != 3:
            raise InterpError(f"CrossLayerTranscoder W_enc has shape {tuple(self.W_enc.shape)}; want [layer, d_in, n_features]")
        L, d_in, n = self.W_enc.shape
        d_out = self.b_dec.shape[-1] if self.b_dec.ndim == 2 else -1
        want = {"b_enc": (L, n), "b_dec": (L, d_out), "threshold": (L, n), "W_skip": (L, d_in, d_out)}
        for name, shape in want.items():
            got = getattr(self, name)
            if got is not None and tuple(got.shape) != shape:
                raise InterpError(f"CrossLayerTranscoder {name} has shape {tuple(got.shape)}; want {list(shape)} "
                                  f"(W_enc is [{L}, {d_in}, {n}], b_dec [layer, d_out])")
        if len(self.W_dec) != L or any(tuple(w.shape) != (n, L - l, d_out) for l, w in enumerate(self.W_dec)):
            raise InterpError(f"CrossLayerTranscoder W_dec has shapes {[tuple(w.shape) for w in self.W_dec]}; want "
                              f"[{n}, {L} - l, {d_out}] for each layer l in 0..{L - 1}")
        for name in ("sites_in", "sites_out"):
            _check_sites(getattr(self, name), L, name)

    @property
    def n_layers(self) -> int:
        return self.W_enc.shape[0]

    @property
    def n_features(self) -> int:
        return self.W_enc.shape[2]

    def pre(self, x: Float[Tensor, "... d_in"], layer: int, features: Tensor | None = None) -> Tensor:
        """Layer `layer`'s pre-activations x @ W_enc[layer] + b_enc[layer] (of `features` only)."""
        if x.ndim == 0 or x.shape[-1] != self.W_enc.shape[1]:
            raise InterpError(f"{self.sites_in[layer]} activations have shape {tuple(x.shape)}; this transcoder "
                              f"reads [..., {self.W_enc.shape[1]}]")
        W, b = self.W_enc[layer].to(x.device), self.b_enc[layer].to(x.device)
        if features is not None:
            W, b = W[:, features.to(x.device)], b[features.to(x.device)]
        return x.to(W.dtype) @ W + b

    def activation(self, h: Tensor, layer: int, features: Tensor | None = None) -> Tensor:
        """ReLU, or JumpReLU relu(h) * (h > threshold) (a threshold below zero passes no negative value)."""
        if self.threshold is None:
            return torch.relu(h)
        t = self.threshold[layer].to(h.device)
        return torch.relu(h) * (h > (t if features is None else t[features.to(h.device)]))

    def encode(self, x: Float[Tensor, "... layer d_in"]) -> Float[Tensor, "... layer n_features"]:
        """Every layer's feature activations from every layer's MLP input."""
        return torch.stack([self.activation(self.pre(x[..., l, :], l), l) for l in range(self.n_layers)], -2)

    def decode(self, f: Float[Tensor, "... layer n_features"], x: Tensor | None = None) -> Float[Tensor, "... layer d_out"]:
        """Every layer's MLP output from the features of it and the layers below (+ the skip path
        from `x`, the MLP inputs, which a transcoder with W_skip needs)."""
        out = self.b_dec.to(f.device).expand(*f.shape[:-2], -1, -1).clone()
        for l in range(self.n_layers):
            out[..., l:, :] += torch.einsum("...n,nmd->...md", f[..., l, :], self.W_dec[l].to(f.device))
        if self.W_skip is not None:
            if x is None:
                raise InterpError("this cross-layer transcoder has a skip path (W_skip): decode(f, x) needs the MLP inputs x")
            out = out + torch.einsum("...li,lio->...lo", x.to(f.dtype), self.W_skip.to(f.device))
        return out

    def __call__(self, x: Float[Tensor, "... layer d_in"]) -> Float[Tensor, "... layer d_out"]:
        return self.decode(self.encode(x), x)

    def to(self, device: str | torch.device) -> CrossLayerTranscoder:
        """This transcoder with its tensors on `device`."""
        move = lambda t: None if t is None else t.to(device)  # noqa: E731
        return replace(self, W_enc=move(self.W_enc), b_enc=move(self.b_enc), W_dec=tuple(move(w) for w in self.W_dec),
                       b_dec=move(self.b_dec), threshold=move(self.threshold), W_skip=move(self.W_skip))

    def __repr__(self) -> str:
        name = f" of {self.model}" if self.model else ""
        skip = " with skip" if self.W_skip is not None else ""
        return f"CrossLayerTranscoder({self.n_layers} layers{name}, {self.n_features} features a layer{skip})"


# ---------------------------------------------------------------------------------------------
# circuit-tracer's folder layout and GemmaScope-2's per-layer files


def _sites(n_layers: int, sites_in: Sequence[str] | None, sites_out: Sequence[str] | None) -> tuple[list[str], list[str]]:
    return ([mlp_sites(l)[0] for l in range(n_layers)] if sites_in is None else list(sites_in),
            [mlp_sites(l)[1] for l in range(n_layers)] if sites_out is None else list(sites_out))


def _check_thresholds(threshold: Tensor | None, source: str) -> None:
    # circuit-tracer's JumpReLU is h * (h > t), interp's relu(h) * (h > t): the same function only
    # when no threshold is negative, so a file with one is refused rather than read differently
    if threshold is not None and bool((threshold < 0).any()):
        raise InterpError(f"{source} has negative JumpReLU thresholds (min {float(threshold.min()):.4g}); interp reads "
                          "JumpReLU as relu(h) * (h > t), which equals circuit-tracer's h * (h > t) only for t >= 0")


def save_circuit_tracer(clt: CrossLayerTranscoder, folder: str | Path) -> Path:
    """Write `clt` in circuit-tracer's CLT folder layout: per layer l, W_enc_{l}.safetensors holding
    W_enc_{l} [n_features, d_in], b_enc_{l}, b_dec_{l} (and threshold_{l}), and W_dec_{l}.safetensors
    holding W_dec_{l} [n_features, n_layers - l, d_out]. The folder appears whole or not at all; an
    existing one is replaced only when it holds nothing but a CLT folder's files."""
    if clt.W_skip is not None:
        raise InterpError("circuit-tracer's CLT folder layout holds no skip weights; save this transcoder with "
                          "clt.save(path) (interp's format) instead")
    _check_thresholds(clt.threshold, repr(clt))
    folder = check_replaceable(folder, lambda name: re.fullmatch(r"W_(enc|dec)_\d+\.safetensors|interp\.json", name) is not None,
                               "a circuit-tracer CLT")
    with atomic_dir(folder) as tmp:
        for l in range(clt.n_layers):
            enc = {f"W_enc_{l}": clt.W_enc[l].T, f"b_enc_{l}": clt.b_enc[l], f"b_dec_{l}": clt.b_dec[l]}
            if clt.threshold is not None:
                enc[f"threshold_{l}"] = clt.threshold[l]
            save_file({k: v.detach().cpu().contiguous() for k, v in enc.items()}, str(tmp / f"W_enc_{l}.safetensors"))
            save_file({f"W_dec_{l}": clt.W_dec[l].detach().cpu().contiguous()}, str(tmp / f"W_dec_{l}.safetensors"))
        (tmp / "interp.json").write_text(json.dumps({"sites_in": list(clt.sites_in), "sites_out": list(clt.sites_out),
                                                      "model": clt.model}))
    return Path(folder)


def _read(path: Path, keys: Sequence[str], source: str) -> dict[str, Tensor]:
    """The tensors of one layer's file: whole (a truncated file is refused), holding `keys`, each
    floating and finite."""
    _, got = validate.read_safetensors(path, f"a {source} layer file", f"the per-layer safetensors file {source} wrote")
    missing = [k for k in keys if k not in got]
    if missing:
        raise InterpError(f"{path} lacks {missing}; it holds {sorted(got)[:8]}")
    return {k: validate.tensor(t, path, k, floating=True) for k, t in got.items()}


def _stack(parts: Sequence[Tensor | None], name: str, source: Any) -> Tensor | None:
    """One tensor [layer, ...] from each layer's `name`, refused unless every layer has one of the
    same shape (None when no layer has one)."""
    if all(t is None for t in parts):
        return None
    shapes = [None if t is None else list(t.shape) for t in parts]
    if any(s != shapes[0] for s in shapes):
        bad = next(l for l, s in enumerate(shapes) if s != shapes[0])
        raise validate.refuse(source, name, f"has shape {shapes[0]} at layer 0 but {shapes[bad]} at layer {bad}",
                     "present at every layer, of one shape")
    return torch.stack([t.float() for t in parts])


def _interp_sites(path: Path) -> tuple[list[str], list[str], str]:
    """(sites_in, sites_out, model) of the interp.json save_circuit_tracer writes beside the weights."""
    info = validate.read_object(path, "the interp.json of a CLT folder", "the interp.json save_circuit_tracer wrote (or delete it)")
    sites = [validate.field(info, k, list, path) for k in ("sites_in", "sites_out")]
    return sites[0], sites[1], validate.field(info, "model", str, path, default="")


def load_circuit_tracer(folder: str | Path, *, sites_in: Sequence[str] | None = None,
                        sites_out: Sequence[str] | None = None, model: str = "") -> CrossLayerTranscoder:
    """A CLT from circuit-tracer's folder layout (see `save_circuit_tracer`). The layout names no
    hooks: `sites_in` / `sites_out` default to `train.mlp_sites` (or the folder's interp.json).
    Every layer's files are checked: whole, holding their keys, finite, of one shape across layers."""
    folder = Path(folder)
    n = len(list(folder.glob("W_enc_*.safetensors")))
    if not n:
        raise InterpError(f"{folder} holds no W_enc_<layer>.safetensors; it is not a circuit-tracer CLT folder")
    extra = folder / "interp.json"
    if extra.is_file() and sites_in is None and sites_out is None:
        sites_in, sites_out, saved = _interp_sites(extra)
        model = model or saved
    enc, dec = [], []
    for l in range(n):
        enc.append(_read(folder / f"W_enc_{l}.safetensors", [f"W_enc_{l}", f"b_enc_{l}", f"b_dec_{l}"], "circuit-tracer CLT"))
        dec.append(_read(folder / f"W_dec_{l}.safetensors", [f"W_dec_{l}"], "circuit-tracer CLT")[f"W_dec_{l}"].float())
    layer = lambda key: _stack([e.get(f"{key}_{l}") for l, e in enumerate(enc)], f"{key}_<layer>", folder)  # noqa: E731
    threshold = layer("threshold")
    _check_thresholds(threshold, str(folder))
    s_in, s_out = _sites(n, sites_in, sites_out)
    W_enc, b_enc, b_dec = layer("W_enc"), layer("b_enc"), layer("b_dec")
    W_enc = W_enc.transpose(1, 2) if W_enc.ndim == 3 else W_enc  # [layer, n, d_in] -> [layer, d_in, n]; else refused below
    try:
        return CrossLayerTranscoder(
            W_enc=W_enc, b_enc=b_enc, W_dec=tuple(dec), b_dec=b_dec, sites_in=s_in, sites_out=s_out, threshold=threshold, model=model,
            meta={"source": {"format": "circuit-tracer CLT", "path": str(folder)}})
    except InterpError as err:
        raise InterpError(f"{folder}: {str(err)[:220]}") from None


def load_gemmascope2(paths: Sequence[str | Path], *, sites_in: Sequence[str] | None = None,
                     sites_out: Sequence[str] | None = None, model: str = "") -> CrossLayerTranscoder:
    """A CLT from GemmaScope-2's multi-layer JumpReLU files, one per layer in order: w_enc [d_in,
    n_features], b_enc, b_dec, threshold and w_dec [n_features, n_layers, d_out] (the writes to
    layers below the file's own are unused), and an optional affine_skip_connection [d_in, d_out]."""
    if isinstance(paths, (str, Path)):
        raise InterpError(f"load_gemmascope2 takes a list of per-layer files, one per layer in order; got one path {str(paths)!r}")
    files = [_read(Path(p), ["w_enc", "b_enc", "b_dec", "threshold", "w_dec"], "GemmaScope-2 CLT") for p in paths]
    n = len(files)
    if not n or any(f["w_dec"].ndim != 3 or f["w_dec"].shape[1] != n for f in files):
        raise InterpError(f"GemmaScope-2 CLT: want one file per layer whose w_dec is [n_features, {n}, d_out]; got "
                          f"{[tuple(f['w_dec'].shape) for f in files]}")
    layer = lambda key: _stack([f.get(key) for f in files], key, "GemmaScope-2 CLT")  # noqa: E731
    threshold = layer("threshold")
    _check_thresholds(threshold, "GemmaScope-2 CLT")
    s_in, s_out = _sites(n, sites_in, sites_out)
    W_enc, b_enc, b_dec, W_skip = (layer(k) for k in ("w_enc", "b_enc", "b_dec", "affine_skip_connection"))
    try:
        return CrossLayerTranscoder(
            W_enc=W_enc, b_enc=b_enc, W_dec=tuple(f["w_dec"][:, l:].float() for l, f in enumerate(files)),
            b_dec=b_dec, sites_in=s_in, sites_out=s_out, threshold=threshold, W_skip=W_skip, model=model,
            meta={"source": {"format": "GemmaScope-2 CLT", "paths": [str(p) for p in paths]}})
    except InterpError as err:
        raise InterpError(f"GemmaScope-2 CLT: {str(err)[:220]}") from None


# ---------------------------------------------------------------------------------------------
# training (BatchTopK across layers, or JumpReLU)


class _CLTTrainee:
    """The parameters of a CLT in scaled units (each layer's input and output scaled to E|v|^2 = d)."""

    def __init__(self, x: Tensor, y: Tensor, recipe: Recipe, gen: torch.Generator, skip: bool):
        L, d_in, d_out, n, device = x.shape[1], x.shape[2], y.shape[2], recipe.n_features, x.device
        self.s_in = (d_in / x.pow(2).sum(-1).mean(0)).sqrt()  # [layer]
        self.s_out = (d_out / y.pow(2).sum(-1).mean(0)).sqrt()
        # drawn by the CPU generator, then moved: one seed, one start on every device
        dec = [torch.randn(n, L - l, d_out, generator=gen) for l in range(L)]
        self.W_dec = [(w / w.flatten(1).norm(dim=1)[:, None, None]).to(device).requires_grad_(True) for w in dec]
        self.W_enc = (torch.randn(L, d_in, n, generator=gen) / d_in ** 0.5).to(device).requires_grad_(True)
        self.b_enc = torch.zeros(L, n, device=device, requires_grad=True)
        self.b_dec = (y.mean(0) * self.s_out[:, None]).float().clone().requires_grad_(True)
        self.W_skip = torch.zeros(L, d_in, d_out, device=device, requires_grad=True) if skip else None
        self.jump = getattr(recipe, "architecture", "batchtopk") == "jumprelu"
        # the JumpReLU trainer's start (train.py): a pre-activation has variance about 1 at first
        self.log_threshold = torch.full((L, n), math.log(THRESHOLD_START), device=device, requires_grad=True) \
            if self.jump else None
        self.opt = torch.optim.Adam(self.params, lr=recipe.lr)
        self.since = torch.zeros(L, n, dtype=torch.long, device=device)  # tokens since each feature last fired
        self.threshold = torch.zeros((), device=device)

    def forward(self, x: Tensor, h: Tensor) -> Tensor:
        """Scaled outputs [T, layer, d_out] from kept activations h [T, layer, n] (and scaled inputs x)."""
        parts = [self.b_dec[m].expand(h.shape[0], -1) for m in range(h.shape[1])]  # [T, d_out] per output layer
        for l, w in enumerate(self.W_dec):
            writes = torch.einsum("tn,nmd->tmd", h[:, l], w)
            for j in range(w.shape[1]):
                parts[l + j] = parts[l + j] + writes[:, j]
        y_hat = torch.stack(parts, 1)
        return y_hat + torch.einsum("tli,lio->tlo", x, self.W_skip) if self.W_skip is not None else y_hat

    def step(self, x: Tensor, y: Tensor, recipe: Recipe, first: bool) -> dict[str, float]:
        x, y = x * self.s_in[:, None], y * self.s_out[:, None]
        T, L, _ = x.shape
        pre = torch.einsum("tli,lin->tln", x, self.W_enc) + self.b_enc
        h = torch.relu(pre)
        if self.jump:  # train.py's straight-through JumpReLU: thresholds per (layer, feature), an L0 penalty
            f = JumpReLUFunction.apply(pre, self.log_threshold.exp(), recipe.bandwidth)
            kept = None
        else:
            kept = h.flatten().topk(recipe.k * T * L, sorted=False)
            f = torch.zeros_like(h).flatten().scatter(0, kept.indices, kept.values).view_as(h)
        err = y - self.forward(x, f)
        var = (y - y.mean(0)).pow(2).sum(-1).mean(0)  # [layer]
        loss = (err.pow(2).sum(-1).mean(0) / var).mean()
        if self.jump:  # per token and layer, as a per-layer dictionary's L0
            loss = loss + recipe.l0_coefficient * StepFunction.apply(pre, self.log_threshold.exp(), recipe.bandwidth).sum(-1).mean()
        dead = self.since > recipe.dead_after
        aux = torch.zeros((), device=x.device)
        if dead.any() and not self.jump:  # AuxK (train.py's): dead features rebuild the error from their own top aux_k per token
            vals = pre if recipe.aux_values == "signed" else h  # Recipe.aux_values
            hd = vals.masked_fill(~dead, float("-inf")).flatten(1)  # chosen among the dead only
            top = hd.topk(min(recipe.aux_k, int(dead.sum())), dim=1)
            fd = torch.zeros_like(hd).scatter(1, top.indices, top.values).view_as(h)
            e = err.detach()
            e_hat = self.forward(x, fd) - self.forward(x, torch.zeros_like(fd))
            aux = ((e - e_hat).pow(2).sum(-1).mean(0) / (e - e.mean(0)).pow(2).sum(-1).mean(0).clamp_min(1e-12)).mean()
        self.opt.zero_grad(set_to_none=True)
        (loss + aux / 32).backward()
        with torch.no_grad():
            for w in self.W_dec:  # move along the unit sphere only: each feature's decoder over all its layers
                w.grad -= (w.grad * w).sum((1, 2), keepdim=True) * w
            self.opt.step()
            for w in self.W_dec:
                w /= w.flatten(1).norm(dim=1)[:, None, None]
            self.since += T
            self.since[(f > 0).any(0)] = 0
            if kept is not None:
                smallest = kept.values[kept.values > 0].min() if (kept.values > 0).any() else torch.zeros((), device=x.device)
                m = 0.0 if first else recipe.threshold_momentum
                self.threshold = m * self.threshold + (1 - m) * smallest
        return {"nmse": float(loss.detach()), "aux": float(aux.detach()), "l0": float((f > 0).sum((1, 2)).float().mean()) / L,
                "dead": float(dead.float().mean())}

    @property
    def params(self) -> list[Tensor]:
        extra = [t for t in (self.W_skip, self.log_threshold) if t is not None]
        return [self.W_enc, self.b_enc, self.b_dec, *self.W_dec, *extra]

    def state(self) -> dict[str, Tensor]:
        """Weights, Adam moments and counters, for a checkpoint."""
        out = {f"p{i}": p.detach() for i, p in enumerate(self.params)}
        for i, p in enumerate(self.params):
            for key, v in self.opt.state.get(p, {}).items():
                out[f"adam{i}.{key}"] = torch.as_tensor(v).detach().clone()  # cpu: keeps the state's device
        return {**out, "since": self.since, "threshold": self.threshold, "s_in": self.s_in, "s_out": self.s_out}

    def restore(self, t: dict[str, Tensor]) -> None:
        with torch.no_grad():
            for i, p in enumerate(self.params):
                p.copy_(t[f"p{i}"])
        for i, p in enumerate(self.params):  # Adam keeps `step` on the CPU, its moments beside their parameter
            if f"adam{i}.exp_avg" in t:
                self.opt.state[p] = {k: t[f"adam{i}.{k}"].clone().to(p.device if k != "step" else "cpu")
                                     for k in ("exp_avg", "exp_avg_sq", "step")}
        device = self.b_enc.device
        self.since, self.threshold = t["since"].to(device), t["threshold"].to(device)
        self.s_in, self.s_out = t["s_in"].to(device), t["s_out"].to(device)

    def transcoder(self, sites_in: Sequence[str], sites_out: Sequence[str], model_name: str, meta: dict) -> CrossLayerTranscoder:
        """The trained CLT on raw activations: the scales folded into the weights, on the CPU (a result)."""
        out = lambda t: t.detach().to("cpu", copy=True).contiguous()  # noqa: E731
        s_in, s_out = self.s_in, self.s_out
        with torch.no_grad():
            return CrossLayerTranscoder(
                W_enc=out(self.W_enc * s_in[:, None, None]), b_enc=out(self.b_enc),
                W_dec=tuple(out(w / s_out[l:, None]) for l, w in enumerate(self.W_dec)), b_dec=out(self.b_dec / s_out[:, None]),
                sites_in=sites_in, sites_out=sites_out,
                threshold=out(self.log_threshold.exp() if self.jump else self.threshold.expand_as(self.b_enc)),
                W_skip=None if self.W_skip is None else out(self.W_skip * s_in[:, None, None] / s_out[:, None, None]),
                model=model_name, meta=meta)


def _check_acts(x: Tensor, y: Tensor) -> None:
    if x.ndim != 3 or y.ndim != 3 or x.shape[:2] != y.shape[:2]:
        raise InterpError(f"fit_clt needs x [tokens, layer, d_in] and y [tokens, layer, d_out] with the same tokens and "
                          f"layers; got {tuple(x.shape)}, {tuple(y.shape)}")
    for name, t in (("x", x), ("y", y)):
        if not t.dtype.is_floating_point or t.numel() == 0 or not bool(torch.isfinite(t).all()):
            raise InterpError(f"fit_clt's {name} ({t.dtype}, shape {tuple(t.shape)}) must be non-empty finite floats")
        if not bool((t != t[:1]).any()):
            raise InterpError(f"fit_clt's {name} is the same in all {len(t)} tokens (no variance to explain)")


def _resume(ckpt: Path, identity: str, t: _CLTTrainee, gen: torch.Generator) -> tuple[int, int, list]:
    """Restore `t` and `gen` from `ckpt` when it is this run's: (step, tokens seen, history)."""
    meta, saved = read_checkpoint(ckpt)
    if meta["identity"] != identity:
        raise InterpError(f"{ckpt} was written by another run (recipe, activations or options differ); use another "
                          "folder or delete it")
    t.restore(saved)
    gen.set_state(saved["generator"])
    return int(meta["step"]), int(meta["tokens"]), json.loads(meta["history"])


def fit_clt(x: Float[Tensor, "tokens layer d_in"], y: Float[Tensor, "tokens layer d_out"], *, recipe: Recipe = Recipe(),
            batch: int = 1024, skip: bool = False, sites_in: Sequence[str] | None = None,
            sites_out: Sequence[str] | None = None, model_name: str = "", out: str | Path | None = None) -> CrossLayerTranscoder:
    """A cross-layer transcoder trained on every layer's MLP inputs `x` and outputs `y` (one row per
    token; `activations` collects them from a model): `recipe.tokens` tokens in shuffled batches of
    `batch`: BatchTopK (`recipe.k` features a layer per token on average, across layers) or
    JumpReLU (`recipe.l0_coefficient`, `recipe.bandwidth`), by `recipe.architecture`. `skip`:
    also learn a linear skip path W_skip per layer. `out`: a folder for out/checkpoint.safetensors,
    written atomically every `recipe.checkpoint_every` steps; a run with the same recipe, options
    and activations (a digest of them) resumes from it, and a larger `recipe.tokens` extends a
    finished one."""
    _check_acts(x, y)
    if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
        raise InterpError(f"batch={batch!r} must be an int >= 1")
    arch = getattr(recipe, "architecture", "batchtopk")
    if arch not in ("batchtopk", "jumprelu"):
        raise InterpError(f"fit_clt trains BatchTopK or JumpReLU cross-layer transcoders; Recipe.architecture={arch!r} "
                          "is not supported here (use 'batchtopk' or 'jumprelu')")
    s_in, s_out = _sites(x.shape[1], sites_in, sites_out)
    for sites, name in ((s_in, "sites_in"), (s_out, "sites_out")):
        _check_sites(sites, x.shape[1], name)  # before training, not after it
    if out is not None:
        check_writable(out, folder=True)
    gen = torch.Generator().manual_seed(recipe.seed)
    t = _CLTTrainee(x.float(), y.float(), recipe, gen, skip)
    seen, step, history = 0, 0, []
    ckpt = None if out is None else Path(out) / "checkpoint.safetensors"
    identity = json.dumps({"recipe": {**asdict(recipe), "tokens": None}, "batch": batch, "skip": skip,
                           "data": validate.tensors_digest({"x": x, "y": y})}, sort_keys=True)
    if ckpt is not None and ckpt.exists():
        step, seen, history = _resume(ckpt, identity, t, gen)
    while seen < recipe.tokens:
        idx = torch.randint(len(x), (batch,), generator=gen).to(x.device)
        stats = t.step(x[idx].float(), y[idx].float(), recipe, first=step == 0)
        seen, step = seen + batch, step + 1
        if step % recipe.checkpoint_every == 0 or seen >= recipe.tokens:
            history.append({"step": step, "tokens": seen, **{k: round(v, 6) for k, v in stats.items()}})
            if ckpt is not None:
                tensors = {k: v.contiguous() for k, v in {**t.state(), "generator": gen.get_state()}.items()}
                write_tensors_atomic(ckpt, tensors, {"identity": identity, "step": str(step), "tokens": str(seen),
                                                     "history": json.dumps(history)})
    meta = {"trainer": f"interp {'JumpReLU' if arch == 'jumprelu' else 'BatchTopK'} CLT", "recipe": asdict(recipe),
            "tokens": seen, "steps": step, "history": history}
    return t.transcoder(s_in, s_out, model_name, meta)


def activations(model, tokens: Tensor, *, valid: Tensor | None = None, chunk: int = 32) -> tuple[Tensor, Tensor]:
    """(x [tokens, layer, d_in], y [tokens, layer, d_out]): every layer's MLP input and output
    (`train.mlp_sites`) at the positions of `tokens` [rows, pos] where `valid` is True (default:
    all but position 0), gathered `chunk` rows per forward, for `fit_clt`."""
    check_tokens(tokens, model=model)
    if valid is None:
        valid = torch.ones(tokens.shape, dtype=torch.bool, device=tokens.device)
        valid[:, 0] = False
    if valid.shape != tokens.shape or valid.dtype != torch.bool:
        raise InterpError(f"valid must be a bool tensor shaped like tokens {tuple(tokens.shape)}, got {valid.dtype} "
                          f"{tuple(valid.shape)}")
    sites = [mlp_sites(l) for l in range(model.cfg.n_layers)]
    xs, ys = [], []
    for i in range(0, len(tokens), chunk):
        _, acts = cache(model, tokens[i:i + chunk], [s for pair in sites for s in pair])
        keep = valid[i:i + chunk].to(acts[sites[0][0]].device)
        xs.append(torch.stack([acts[a][keep] for a, _ in sites], 1).float())
        ys.append(torch.stack([acts[b][keep] for _, b in sites], 1).float())
    return torch.cat(xs), torch.cat(ys)

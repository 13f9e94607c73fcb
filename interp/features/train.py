"""Training sparse dictionaries (SAEs and transcoders) on activations streamed from a model.

Why not SAELens: SAELens 6.x requires transformer-lens < 4 (it cannot install beside interp, which
runs on TransformerLens 4's bridge) and reads activations through HookedTransformer; its file
format is still read and written here (`interp.features.saelens`).

One trainer, five architectures (`Recipe.architecture`; `interp.features.truth` scores them
against features known by construction). Each step, per token (x scaled so that E|x|^2 = d_in):

    pre = x W_enc + b_enc
    f = sparse(pre)                       relu, topk, batchtopk, jumprelu or matryoshka (see Recipe)
    y_hat = f W_dec + b_dec               y = x for an SAE, the MLP's output for a transcoder
    loss = |y - y_hat|^2 / |y - mean y|^2 + the architecture's sparsity term + aux / 32

Decoder rows are unit-norm (their gradient's parallel part removed before each Adam step) except
for ReLU + L1, whose penalty weighs each activation by its row's norm instead. The top-k
architectures add the AuxK loss of Gao et al. 2024 (dead features, none firing for `dead_after`
tokens, rebuild the residual error from their own top `aux_k`), which keeps features alive without
resampling; k sets their L0 directly. By default (`aux_values="signed"`) the dead features' top
pre-activations enter AuxK as they are, below zero included: Gao et al. pass them through a relu
(`"relu"`), which gives no gradient to a feature whose pre-activations have all fallen below zero, and
on SmolLM2's MLPs (16,384 features, 100 steps of 1,024 tokens) that left 87 % of a layer's features dead
against 36 % signed (docs/features_budget.md says how it was measured). Every architecture saves as a `Dictionary`: ReLU with no
threshold; TopK with its k (kept per token at inference); JumpReLU with its trained thresholds;
BatchTopK and Matryoshka as a JumpReLU with one threshold for every feature (the running mean of
the smallest kept activation). The input and output scales are folded into the weights, so a
dictionary reads and rebuilds raw activations.

Many dictionaries train at once from one model forward per step (all 30 layers of SmolLM2 read
one pass); activations come through `interp.run.cache`. Each step is one forward's trainable
tokens (`corpus.token_rows`: not BOS, not padding), rows drawn in a seeded order, epoch after
epoch. A checkpoint (one safetensors file: weights, Adam state, counters; the recipe in its
metadata) is written atomically every `checkpoint_every` steps, and `train_dictionaries` resumes
from it when the run is the same: recipe (but the token budget), sites, model, a digest of the
tokens and of `valid`, and the trainer's code version (`CODE_VERSION`, a digest of the code that
sets the weights: the step and the data order). The training history (per `checkpoint_every`
steps: mean loss, aux loss, L0 and dead fraction) travels in the checkpoint and lands in each
dictionary's `meta["history"]`.

`train_dictionaries` was called `train` before; `interp.features.train` is this module (so
`interp.features.train.Recipe` works), and calling the module or `train.train` still runs
`train_dictionaries`, with a DeprecationWarning.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
import sys
import time
import types
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import torch
from torch import Tensor
from tqdm.auto import tqdm

from interp.errors import InterpError
from interp.features.dictionary import Dictionary
from interp.run import cache
from interp.sites import check_tokens, hook_name
from interp.files.storage import check_writable, write_tensors_atomic
from interp.files.validate import read_safetensors, refuse
from interp.memory import records_peak

__all__ = ["ARCHITECTURES", "CODE_VERSION", "Recipe", "fit", "fit_each", "from_checkpoint", "mlp_sites", "read_checkpoint",
           "train_dictionaries"]


ARCHITECTURES = ("relu", "topk", "batchtopk", "jumprelu", "matryoshka")
AUX_VALUES = ("signed", "relu")
THRESHOLD_START = 0.5  # JumpReLU's thresholds at step 0, in scaled units


@dataclass(frozen=True)
class Recipe:
    """How one set of dictionaries trains. `tokens`: the budget in trainable tokens (each
    dictionary sees all of them); `rows`: token rows per model forward (= per step).

    `architecture` says how activations are made sparse (pre = x W_enc + b_enc, x scaled):
    "relu": relu(pre), loss + l1_coefficient * sum_i f_i |W_dec_i| / var(y) (Anthropic, April 2024;
    decoder rows free in norm); "topk": each token's k largest; "batchtopk": the batch's k * tokens
    largest; "jumprelu": pre * (pre > theta_i), per-feature thresholds trained through the
    rectangle-kernel pseudo-derivative of width `bandwidth` with loss + l0_coefficient * L0
    (Rajamanoharan et al. 2024); "matryoshka": BatchTopK whose nested prefixes `prefixes` (feature
    counts, the last = n_features; () halves n_features three times) each rebuild y, the loss their
    mean (Bussmann et al. 2025). k is used by the three top-k architectures only.

    `aux_values`: how the dead features' top `aux_k` pre-activations enter the top-k architectures'
    AuxK loss: "signed" as they are, "relu" through a relu (Gao et al. 2024; see the module docstring)."""

    n_features: int = 2048
    k: int = 32
    lr: float = 1e-3
    tokens: int = 1_000_000
    rows: int = 16
    aux_k: int = 256
    dead_after: int = 20_000
    seed: int = 0
    checkpoint_every: int = 50
    threshold_momentum: float = 0.9
    architecture: str = "batchtopk"
    l1_coefficient: float = 5.0
    l0_coefficient: float = 1e-3
    bandwidth: float = 0.05
    prefixes: Sequence[int] = ()
    aux_values: str = "signed"

    def __post_init__(self) -> None:
        for name in ("n_features", "k", "tokens", "rows", "aux_k", "dead_after", "checkpoint_every"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InterpError(f"Recipe.{name}={v!r} must be an int >= 1")
        if self.k > self.n_features:
            raise InterpError(f"Recipe.k={self.k} must be at most n_features={self.n_features}")
        if self.aux_values not in AUX_VALUES:
            raise InterpError(f"Recipe.aux_values={self.aux_values!r} is not one of {AUX_VALUES}")
        if self.architecture not in ARCHITECTURES:
            raise InterpError(f"Recipe.architecture={self.architecture!r} is not one of {ARCHITECTURES}")
        for name in ("l1_coefficient", "l0_coefficient", "bandwidth", "lr", "threshold_momentum"):
            v, positive = getattr(self, name), name in ("bandwidth", "lr")
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < math.inf or (positive and v == 0) \
                    or (name == "threshold_momentum" and v > 1):
                raise InterpError(f"Recipe.{name}={v!r} must be a finite number " + (
                    "> 0" if positive else "in [0, 1]" if name == "threshold_momentum" else ">= 0"))
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < 2**32:
            raise InterpError(f"Recipe.seed={self.seed!r} must be an int in [0, 2**32)")
        if isinstance(self.prefixes, (str, bytes)) or not hasattr(self.prefixes, "__iter__"):
            raise InterpError(f"Recipe.prefixes={self.prefixes!r} must be a sequence of feature counts (or ())")
        prefixes = tuple(self.prefixes)
        if prefixes and (any(isinstance(m, bool) or not isinstance(m, int) for m in prefixes)
                         or list(prefixes) != sorted(set(prefixes)) or prefixes[0] < 1 or prefixes[-1] != self.n_features):
            raise InterpError(f"Recipe.prefixes={self.prefixes!r} must be increasing feature counts >= 1 ending at "
                              f"n_features={self.n_features} (or () for halvings of n_features)")
        object.__setattr__(self, "prefixes", prefixes)  # a saved recipe (a JSON list) reads back as the same tuple

    @property
    def nested(self) -> tuple[int, ...]:
        """The matryoshka prefixes trained: `prefixes`, or n_features halved up to three times."""
        return self.prefixes or tuple(sorted({max(1, self.n_features >> j) for j in range(4)}))


def mlp_sites(layer: int) -> tuple[str, str]:
    """A transcoder's (site_in, site_out) at `layer`: the MLP's input after its norm, and the
    block's MLP output (on Gemma-3 after the post-MLP norm, which the transcoder then includes)."""
    return f"blocks.{layer}.ln2.hook_normalized", hook_name("mlp_out", layer)


class JumpReLUFunction(torch.autograd.Function):
    """z * (z > theta); in z its true derivative (z > theta), in theta the rectangle-kernel
    pseudo-derivative -(theta / eps) K((z - theta) / eps), K(u) = 1 for |u| < 1/2 (Rajamanoharan et al. 2024)."""

    @staticmethod
    def forward(ctx, z: Tensor, theta: Tensor, eps: float) -> Tensor:
        ctx.save_for_backward(z, theta)
        ctx.eps = eps
        return z * (z > theta)

    @staticmethod
    def backward(ctx, g: Tensor):
        z, theta = ctx.saved_tensors
        near = (z - theta).abs() < ctx.eps / 2
        return g * (z > theta), -(theta / ctx.eps) * (g * near).sum(0), None


class StepFunction(torch.autograd.Function):
    """The step (z > theta) as a number: no gradient in z, in theta -(1 / eps) K((z - theta) / eps)."""

    @staticmethod
    def forward(ctx, z: Tensor, theta: Tensor, eps: float) -> Tensor:
        ctx.save_for_backward(z, theta)
        ctx.eps = eps
        return (z > theta).to(z.dtype)

    @staticmethod
    def backward(ctx, g: Tensor):
        z, theta = ctx.saved_tensors
        near = (z - theta).abs() < ctx.eps / 2
        return None, -(g * near).sum(0) / ctx.eps, None


def _keep(h: Tensor, top) -> Tensor:
    """`h` with only `top`'s (topk of h, flattened or per row) entries kept."""
    flat = h.flatten() if top.indices.ndim == 1 else h
    return torch.zeros_like(flat).scatter(-1, top.indices, top.values).view_as(h)


class _Trainee:
    """One dictionary's parameters, optimizer and counters (in scaled units)."""

    NAMES = ("W_enc", "b_enc", "W_dec", "b_dec")

    def __init__(self, d_in: int, d_out: int, recipe: Recipe, gen: torch.Generator, y_mean: Tensor,
                 s_in: float, s_out: float):
        n, device = recipe.n_features, y_mean.device  # trained where the activations are
        # drawn by the CPU generator, then moved: one seed, one start on every device
        w = torch.randn(n, d_out, generator=gen)
        w = (w / w.norm(dim=1, keepdim=True)).to(device)
        self.W_dec = w.clone().requires_grad_(True)
        # encoder starts as the decoder's transpose (Gao et al.); scaled for a transcoder's other space
        self.W_enc = (w.T.clone() if d_in == d_out else (torch.randn(d_in, n, generator=gen) / d_in ** 0.5).to(device)) \
            .contiguous().requires_grad_(True)
        self.b_enc = torch.zeros(n, device=device, requires_grad=True)
        self.b_dec = (y_mean * s_out).float().clone().requires_grad_(True)
        if recipe.architecture == "jumprelu":  # at the start a pre-activation has variance about 1 (unit rows, E|x|^2 = d_in)
            self.log_threshold = torch.full((n,), math.log(THRESHOLD_START), device=device, requires_grad=True)
        self.recipe = recipe
        self.opt = torch.optim.Adam(self.params, lr=recipe.lr, betas=(0.9, 0.999))
        self.since = torch.zeros(n, dtype=torch.long, device=device)  # tokens since each feature last fired
        self.threshold = torch.zeros((), device=device)
        self.s_in, self.s_out = s_in, s_out

    @property
    def names(self) -> tuple[str, ...]:
        return self.NAMES + (("log_threshold",) if self.recipe.architecture == "jumprelu" else ())

    @property
    def params(self) -> list[Tensor]:
        return [getattr(self, n) for n in self.names]

    def sparse(self, pre: Tensor) -> tuple[Tensor, Tensor | None]:
        """(feature activations, the kept values whose smallest sets a batch-top-k threshold) of pre [T, n]."""
        r = self.recipe
        if r.architecture == "jumprelu":
            return JumpReLUFunction.apply(pre, self.log_threshold.exp(), r.bandwidth), None
        h = torch.relu(pre)
        if r.architecture == "relu":
            return h, None
        if r.architecture == "topk":
            return _keep(h, h.topk(r.k, dim=1, sorted=False)), None
        kept = h.flatten().topk(r.k * h.shape[0], sorted=False)  # batchtopk, matryoshka
        return _keep(h, kept), kept.values

    def decode(self, f: Tensor, width: int | None = None) -> Tensor:
        """y_hat [T, d_out] from the first `width` features of f (all when None)."""
        return f[:, :width] @ self.W_dec[:width] + self.b_dec

    def losses(self, pre: Tensor, f: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        """(the loss minimised, the full dictionary's normalised reconstruction error)."""
        r = self.recipe
        var = (y - y.mean(0)).pow(2).sum(-1).mean()
        nmse = (y - self.decode(f)).pow(2).sum(-1).mean() / var
        if r.architecture == "relu":  # L1 weighted by decoder norms: shrinking a row buys nothing
            return nmse + r.l1_coefficient * (f * self.W_dec.norm(dim=1)).sum(-1).mean() / var, nmse
        if r.architecture == "jumprelu":
            l0 = StepFunction.apply(pre, self.log_threshold.exp(), r.bandwidth).sum(-1).mean()
            return nmse + r.l0_coefficient * l0, nmse
        if r.architecture == "matryoshka":  # each nested prefix rebuilds y on its own
            inner = [(y - self.decode(f, m)).pow(2).sum(-1).mean() / var for m in r.nested[:-1]]
            return torch.stack(inner + [nmse]).mean(), nmse
        return nmse, nmse

    def auxk(self, pre: Tensor, err: Tensor) -> Tensor:
        """Gao et al.'s AuxK loss (top-k architectures): dead features rebuild the residual error
        from their own top aux_k pre-activations (signed, or relu'd: Recipe.aux_values)."""
        dead = self.since > self.recipe.dead_after
        if self.recipe.architecture in ("relu", "jumprelu") or not dead.any():
            return torch.zeros((), device=pre.device)
        hd = pre[:, dead] if self.recipe.aux_values == "signed" else torch.relu(pre[:, dead])
        e_hat = _keep(hd, hd.topk(min(self.recipe.aux_k, hd.shape[1]), dim=1)) @ self.W_dec[dead]
        return (err - e_hat).pow(2).sum(-1).mean() / (err - err.mean(0)).pow(2).sum(-1).mean().clamp_min(1e-12)

    def step(self, x: Tensor, y: Tensor, recipe: Recipe, first: bool) -> dict[str, float]:
        x, y = x * self.s_in, y * self.s_out
        pre = x @ self.W_enc + self.b_enc  # [T, n]
        f, kept = self.sparse(pre)
        loss, nmse = self.losses(pre, f, y)
        aux = self.auxk(pre, (y - self.decode(f)).detach())
        self.opt.zero_grad(set_to_none=True)
        (loss + aux / 32).backward()
        with torch.no_grad():
            if recipe.architecture != "relu":  # unit-norm decoder rows: move along the sphere only
                w, g = self.W_dec, self.W_dec.grad
                g -= (g * w).sum(1, keepdim=True) * w
            self.opt.step()
            if recipe.architecture != "relu":
                self.W_dec /= self.W_dec.norm(dim=1, keepdim=True)
            fired = (f > 0).any(0)
            dead = float((self.since > recipe.dead_after).float().mean())
            self.since += x.shape[0]
            self.since[fired] = 0
            if kept is not None:  # the inference threshold: a running mean of the smallest kept activation
                smallest = kept[kept > 0].min() if (kept > 0).any() else torch.zeros((), device=x.device)
                m = 0.0 if first else recipe.threshold_momentum
                self.threshold = m * self.threshold + (1 - m) * smallest
            l0 = float((f > 0).sum(1).float().mean())
        return {"nmse": float(nmse.detach()), "aux": float(aux.detach()), "l0": l0, "dead": dead}

    def state(self, i: int) -> dict[str, Tensor]:
        out = {f"{i}.{n}": t.detach() for n, t in zip(self.names, self.params)}
        for j, p in enumerate(self.params):
            st = self.opt.state.get(p, {})
            for key in ("exp_avg", "exp_avg_sq", "step"):
                if key in st:
                    out[f"{i}.adam{j}.{key}"] = torch.as_tensor(st[key]).detach().clone()  # cpu: keeps the state's device
        out[f"{i}.since"] = self.since
        out[f"{i}.threshold"] = self.threshold
        out[f"{i}.scales"] = torch.tensor([self.s_in, self.s_out])  # cpu: a checkpoint
        return out

    def restore(self, i: int, t: dict[str, Tensor]) -> None:
        with torch.no_grad():
            for n, p in zip(self.names, self.params):
                p.copy_(t[f"{i}.{n}"])
        for j, p in enumerate(self.params):
            if f"{i}.adam{j}.exp_avg" in t:  # moments beside their parameter; Adam keeps `step` on the CPU
                self.opt.state[p] = {k: t[f"{i}.adam{j}.{k}"].clone().to(p.device if k != "step" else "cpu")
                                     for k in ("exp_avg", "exp_avg_sq", "step")}
        self.since = t[f"{i}.since"].to(self.b_enc.device)
        self.threshold = t[f"{i}.threshold"].to(self.b_enc.device)
        self.s_in, self.s_out = (float(v) for v in t[f"{i}.scales"])

    @classmethod
    def saved(cls, i: int, t: dict[str, Tensor], recipe: Recipe) -> "_Trainee":
        """Trainee `i` of checkpoint tensors `t`, enough to make its dictionary (no optimizer)."""
        self = cls.__new__(cls)
        self.recipe = recipe
        for n in self.names:
            setattr(self, n, t[f"{i}.{n}"])
        self.threshold = t[f"{i}.threshold"]
        self.s_in, self.s_out = (float(v) for v in t[f"{i}.scales"])
        return self

    def dictionary(self, site_in: str, site_out: str, model_name: str, meta: dict) -> Dictionary:
        """The trained dictionary on raw activations: scales folded into the weights (the
        pre-activations, and so the thresholds, are unchanged by them)."""
        def out(t: Tensor) -> Tensor:  # a result lives on the CPU, as every result (Dictionary.to moves it)
            return t.detach().to("cpu", copy=True).contiguous()

        arch, n = self.recipe.architecture, self.W_enc.shape[1]
        threshold = {"relu": None, "topk": None, "jumprelu": getattr(self, "log_threshold", None)}.get(arch, self.threshold)
        with torch.no_grad():
            if arch == "jumprelu":
                threshold = threshold.exp()
            return Dictionary(
                W_enc=out(self.W_enc * self.s_in), b_enc=out(self.b_enc),
                W_dec=out(self.W_dec / self.s_out), b_dec=out(self.b_dec / self.s_out),
                site_in=site_in, site_out=site_out, threshold=None if threshold is None else out(threshold.expand(n)),
                model=model_name, meta={"trainer": f"interp {arch}", **meta}, k=self.recipe.k if arch == "topk" else None)


class _History:
    """Each dictionary's training history: per interval of steps, the mean of its step stats."""

    KEYS = ("nmse", "aux", "l0", "dead")

    def __init__(self, n: int, rows: list[list[dict]] | None = None):
        self.rows = rows if rows is not None else [[] for _ in range(n)]
        self.sums = [dict.fromkeys(self.KEYS, 0.0) for _ in range(n)]
        self.steps = 0

    def add(self, stats: list[dict[str, float]]) -> None:
        for acc, st in zip(self.sums, stats):
            for k in self.KEYS:
                acc[k] += st[k]
        self.steps += 1

    def close(self, step: int, tokens: int) -> None:
        """End the interval at `step` (`tokens` seen so far), if it holds a step."""
        if self.steps:
            for rows, acc in zip(self.rows, self.sums):
                rows.append({"step": step, "tokens": tokens, **{k: round(v / self.steps, 6) for k, v in acc.items()}})
            self.sums = [dict.fromkeys(self.KEYS, 0.0) for _ in self.sums]
            self.steps = 0


def _pairs(pairs: Sequence[tuple[str, str] | str]) -> list[tuple[str, str]]:
    out = []
    for p in pairs:
        site_in, site_out = (p, p) if isinstance(p, str) else p
        out.append((hook_name(site_in), hook_name(site_out)))
    if not out:
        raise InterpError("train needs at least one site (an SAE) or (site_in, site_out) pair (a transcoder)")
    return out


def _batch(model, rows: Tensor, valid: Tensor, names: list[str]) -> dict[str, Tensor]:
    """Activations at `names` of the trainable tokens of `rows`, [tokens, d] each."""
    last = torch.full((rows.shape[0],), rows.shape[1] - 1)  # cpu: run.cache moves it; logits at one position: skips most of the unembedding
    _, acts = cache(model, rows, names, answer_pos=last)
    return {n: acts[n][valid.to(acts[n].device)].float() for n in names}  # trained on the model's device


def _order(n_rows: int, seed: int, epoch: int) -> Tensor:
    return torch.randperm(n_rows, generator=torch.Generator().manual_seed(seed * 1_000_003 + epoch))


def _rows_of_step(step: int, n_rows: int, recipe: Recipe) -> Tensor:
    """Row indices of step `step`: consecutive slices of one seeded order per epoch."""
    per_epoch = max(1, n_rows // recipe.rows)
    epoch, i = divmod(step, per_epoch)
    return _order(n_rows, recipe.seed, epoch)[i * recipe.rows : (i + 1) * recipe.rows]


def _digest(*tensors: Tensor) -> str:
    """sha256 (first 16 hex) of the tensors' shapes, dtypes and values."""
    h = hashlib.sha256()
    for t in tensors:
        t = t.detach().to("cpu").contiguous()
        h.update(f"{tuple(t.shape)} {t.dtype};".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.dtype != torch.bool else t.numpy().tobytes())
    return h.hexdigest()[:16]


# the trainer's code version: a digest of the code that decides the weights (the step, its data
# order and activations), so a checkpoint is not resumed by changed training code
CODE_VERSION = hashlib.sha256("".join(inspect.getsource(f) for f in (JumpReLUFunction, StepFunction, _keep, _Trainee, _batch, _order,
                                                                      _rows_of_step))
                              .encode()).hexdigest()[:12]


def _trainable_rows(model, tokens: Tensor, valid: Tensor) -> tuple[Tensor, Tensor]:
    """`tokens` and `valid` checked, without the rows that hold no trainable position."""
    check_tokens(tokens, model=model)
    if not isinstance(valid, Tensor) or valid.dtype != torch.bool or tokens.shape != valid.shape or tokens.ndim != 2:
        raise InterpError(f"tokens {tuple(tokens.shape)} and valid {tuple(getattr(valid, 'shape', ()))} must be the same "
                          "[rows, pos], valid a bool tensor (True: a position to train on)")
    trainable = valid.sum(1)  # [rows]
    if not bool((trainable > 0).any()):
        raise InterpError(f"valid marks no trainable position in the {len(tokens)} token rows; pass rows with at least "
                          "one True position (corpus.token_rows marks every position but BOS and padding)")
    if not bool((trainable > 0).all()):  # a step of such rows alone would train on zero tokens (NaN losses)
        tokens, valid = tokens[(trainable > 0).to(tokens.device)], valid[trainable > 0]
    return tokens, valid


def read_checkpoint(ckpt: Path) -> tuple[dict[str, str], dict[str, Tensor]]:
    """(metadata, tensors) of a training checkpoint, refused naming the file when it is not a whole
    one (truncated, another file, or missing the identity, step and tokens every checkpoint carries)."""
    meta, saved = read_safetensors(ckpt, "a training checkpoint", "the checkpoint.safetensors a trainer wrote, or delete it to start over")
    missing = [k for k in ("identity", "step", "tokens") if k not in meta]
    if missing:
        raise refuse(ckpt, "its metadata", f"lacks {missing}", "a trainer's checkpoint (delete it to start over)")
    return meta, saved


def _resume(ckpt: Path, base: dict, identity: str, trainees: list[_Trainee]) -> tuple[int, int, float, float, list | None]:
    """Restore `trainees` from `ckpt` when it is this run's (identity; a checkpoint from before
    digests matches `base` and resumes with a warning): step, tokens, seconds, forward seconds, history."""
    meta, saved = read_checkpoint(ckpt)
    if meta["identity"] == json.dumps(base, sort_keys=True):
        warnings.warn(f"{ckpt} predates token digests and code versions; resuming it as the same run", stacklevel=3)
    elif meta["identity"] != identity:
        raise InterpError(f"{ckpt} was written by another run (recipe, sites, model, tokens or trainer code "
                          f"{CODE_VERSION} differ); use another output folder or delete it")
    for i, t in enumerate(trainees):
        t.restore(i, saved)
    history = json.loads(meta["history"]) if meta.get("history") else None
    return int(meta["step"]), int(meta["tokens"]), float(meta["seconds"]), float(meta["forward_seconds"]), history


DATA_FIELDS = ("tokens", "rows", "seed", "checkpoint_every")  # what recipes trained in one pass share


def _recipes(recipe: Recipe | Sequence[Recipe]) -> list[Recipe]:
    """One recipe, or several that differ only beyond DATA_FIELDS (widths, k, lr, ...)."""
    recipes = [recipe] if isinstance(recipe, Recipe) else list(recipe)
    if not recipes or not all(isinstance(r, Recipe) for r in recipes):
        raise InterpError(f"recipe must be a Recipe or a non-empty list of Recipes, got {recipe!r:.80}")
    for name in DATA_FIELDS:
        if len({getattr(r, name) for r in recipes}) > 1:
            raise InterpError(f"recipes trained in one pass share the data: their {name} differ "
                              f"({[getattr(r, name) for r in recipes]}); {DATA_FIELDS} must be equal")
    return recipes


def _trainees(first: dict[str, Tensor], pairs: list[tuple[str, str]], recipes: list[Recipe]) -> list[_Trainee]:
    """One trainee per (recipe, pair), recipe-major; each recipe draws its start from its own seeded
    generator, so a dictionary starts as it would in a run of its recipe alone."""
    out = []
    for recipe in recipes:
        gen = torch.Generator().manual_seed(recipe.seed)
        for site_in, site_out in pairs:
            x, y = first[site_in], first[site_out]
            s_in = (x.shape[1] / x.pow(2).sum(1).mean()).sqrt().item()
            s_out = (y.shape[1] / y.pow(2).sum(1).mean()).sqrt().item()
            out.append(_Trainee(x.shape[1], y.shape[1], recipe, gen, y.mean(0), s_in, s_out))
    return out


@records_peak
def train_dictionaries(model, pairs: Sequence[tuple[str, str] | str], tokens: Tensor, valid: Tensor, out: str | Path, *,
                       recipe: Recipe | Sequence[Recipe] = Recipe(), model_name: str = "", source: dict | None = None,
                       progress: bool = True) -> dict[tuple, Dictionary]:
    """Train one dictionary per entry of `pairs` (a site: an SAE; (site_in, site_out): a
    transcoder) on `tokens` [rows, pos] (positions where `valid` is True), all from the same
    forwards. Checkpoints to `out`/checkpoint.safetensors and resumes from it (the same run only:
    see the module docstring); the finished dictionaries, their training history in
    meta["history"], are saved as `out`/<i>.safetensors (interp's result format) and returned.

    Several recipes (a list; they may differ in n_features, k, lr and the rest, not in
    DATA_FIELDS) train side by side from the same forwards: the result is then keyed
    (site_in, site_out, recipe), the files numbered recipe-major."""
    pairs, recipes = _pairs(pairs), _recipes(recipe)
    recipe = recipes[0]  # the data side (tokens, rows, seed, checkpoint_every) all share
    tokens, valid = _trainable_rows(model, tokens, valid)
    out = check_writable(out, folder=True)  # refused now, not at the first checkpoint
    names = list(dict.fromkeys(n for p in pairs for n in p))
    ckpt = out / "checkpoint.safetensors"
    # what must match to resume: everything but the token budget (a finished run can be extended)
    plain = [{**asdict(r), "tokens": None} for r in recipes]
    base = {"recipe": plain[0] if len(plain) == 1 else plain, "pairs": pairs, "model": model_name, "rows": list(tokens.shape),
            "source": source or {}}
    identity = json.dumps({**base, "tokens_digest": _digest(tokens, valid), "code": CODE_VERSION}, sort_keys=True)
    step, seen, seconds, forward_s = 0, 0, 0.0, 0.0
    t0 = time.perf_counter()
    idx = _rows_of_step(0, len(tokens), recipe)
    first = _batch(model, tokens[idx], valid[idx], names)  # sets the scales; also step 0's batch
    first_s = time.perf_counter() - t0
    trainees = _trainees(first, pairs, recipes)
    jobs = [(r, pair) for r in recipes for pair in pairs]  # trainee i's recipe and sites
    rows = None
    if ckpt.exists():
        step, seen, seconds, forward_s, rows = _resume(ckpt, base, identity, trainees)
    history = _History(len(jobs), rows)
    bar = tqdm(total=recipe.tokens, initial=min(seen, recipe.tokens), desc="dictionary tokens", unit="tok",
               disable=not progress)
    while seen < recipe.tokens:
        t0 = time.perf_counter()
        idx = _rows_of_step(step, len(tokens), recipe)
        acts = first if step == 0 else _batch(model, tokens[idx], valid[idx], names)
        t1 = time.perf_counter()
        stats = [t.step(acts[a], acts[b], r, first=step == 0) for t, (r, (a, b)) in zip(trainees, jobs)]
        history.add(stats)
        n_tok = next(iter(acts.values())).shape[0]
        step, seen = step + 1, seen + n_tok
        seconds += time.perf_counter() - t0
        forward_s += first_s if step == 1 else t1 - t0
        seconds += first_s if step == 1 else 0.0
        bar.update(n_tok)
        bar.set_postfix(nmse=f"{sum(s['nmse'] for s in stats) / len(stats):.3f}",
                        l0=f"{sum(s['l0'] for s in stats) / len(stats):.0f}")
        if step % recipe.checkpoint_every == 0 or seen >= recipe.tokens:
            history.close(step, seen)
            tensors = {k: v for i, t in enumerate(trainees) for k, v in t.state(i).items()}
            write_tensors_atomic(ckpt, {k: v.contiguous() for k, v in tensors.items()}, {
                "identity": identity, "step": str(step), "tokens": str(seen), "seconds": str(seconds),
                "forward_seconds": str(forward_s), "history": json.dumps(history.rows)})
    bar.close()
    result = {}
    for i, (t, (r, pair)) in enumerate(zip(trainees, jobs)):
        meta = {"code": CODE_VERSION, "recipe": asdict(r), "tokens": seen,
                "steps": step, "seconds": round(seconds, 1), "forward_seconds": round(forward_s, 1),
                "source": source or {}, "history": history.rows[i]}
        d = t.dictionary(*pair, model_name, meta)
        d.save(out / f"{i}.safetensors")
        result[pair if len(recipes) == 1 else (*pair, r)] = d
    return result


def _check_fit(x: Tensor, y: Tensor, batch: int) -> None:
    for name, t in (("x", x), ("y", y)):
        if not isinstance(t, Tensor):
            raise InterpError(f"fit's {name} is a {type(t).__name__}; pass a torch tensor [tokens, width] (torch.as_tensor(...))")
    if x.ndim != 2 or y.ndim != 2 or len(x) != len(y):
        raise InterpError(f"fit needs x [tokens, d_in] and y [tokens, d_out] of equal length; got {tuple(x.shape)}, {tuple(y.shape)}")
    for name, t in (("x", x), ("y", y)):
        if not t.dtype.is_floating_point:
            raise InterpError(f"fit's {name} has dtype {t.dtype}; activations must be floats: pass {name}.float()")
        if t.numel() == 0:
            raise InterpError(f"fit's {name} is empty, shape {tuple(t.shape)}; pass at least one token's activation")
        if not bool(torch.isfinite(t).all()):
            raise InterpError(f"fit's {name} holds NaN or infinite values; pass finite activations (drop those rows)")
        if not bool((t != t[:1]).any()):
            raise InterpError(f"fit's {name} is the same in all {len(t)} rows (no variance to explain); pass the "
                              "activations of many tokens")
    if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
        raise InterpError(f"batch={batch!r} must be an int >= 1")


@records_peak
def fit_each(x: Tensor, y: Tensor | None = None, *, site_in: str, recipes: Sequence[Recipe], batch: int = 1024,
             site_out: str | None = None, model_name: str = "") -> list[Dictionary]:
    """One dictionary per recipe, all trained from one stream of batches of activations in memory:
    `x` [tokens, d_in] (and `y` [tokens, d_out] for a transcoder; an SAE rebuilds x),
    `tokens` tokens in shuffled batches of `batch`. The recipes may differ in anything but
    DATA_FIELDS; each starts from its own seeded generator, so each dictionary is the one `fit`
    trains from its recipe alone. For activations a user already has (and planted tests); no checkpoints."""
    y = x if y is None else y
    _check_fit(x, y, batch)
    recipes = _recipes(recipes)
    site_in, site_out = hook_name(site_in), hook_name(site_out or site_in)  # a bad name is refused before training
    first = recipes[0]
    s_in = (x.shape[1] / x.pow(2).sum(1).mean()).sqrt().item()
    s_out = (y.shape[1] / y.pow(2).sum(1).mean()).sqrt().item()
    trainees = [_Trainee(x.shape[1], y.shape[1], r, torch.Generator().manual_seed(r.seed), y.mean(0), s_in, s_out)
                for r in recipes]
    order = torch.Generator().manual_seed(first.seed * 1_000_003 + 1)  # the batches' own stream, apart from the starts
    seen, step, history = 0, 0, _History(len(recipes))
    while seen < first.tokens:
        idx = torch.randint(len(x), (batch,), generator=order)
        xb, yb = x[idx.to(x.device)].float(), y[idx.to(y.device)].float()
        history.add([t.step(xb, yb, r, first=step == 0) for t, r in zip(trainees, recipes)])
        seen, step = seen + batch, step + 1
        if step % first.checkpoint_every == 0 or seen >= first.tokens:
            history.close(step, seen)
    return [t.dictionary(site_in, site_out, model_name, {"code": CODE_VERSION, "recipe": asdict(r),
                                                                     "tokens": seen, "steps": step, "history": h})
            for t, r, h in zip(trainees, recipes, history.rows)]


def fit(x: Tensor, y: Tensor | None = None, *, site_in: str, recipe: Recipe = Recipe(), batch: int = 1024,
        site_out: str | None = None, model_name: str = "") -> Dictionary:
    """One dictionary trained on activations in memory (`fit_each` of one recipe)."""
    return fit_each(x, y, site_in=site_in, recipes=[recipe], batch=batch, site_out=site_out, model_name=model_name)[0]


def from_checkpoint(out: str | Path) -> dict[tuple, Dictionary]:
    """The dictionaries of a run's latest checkpoint in `out` (a run stopped before its budget
    still gives usable dictionaries; their meta says how many tokens they saw)."""
    ckpt = Path(out) / "checkpoint.safetensors"
    if not ckpt.exists():
        raise InterpError(f"no checkpoint at {ckpt}; train_dictionaries(..., out={str(out)!r}) writes one")
    meta, saved = read_checkpoint(ckpt)
    try:
        return _checkpoint_dictionaries(meta, saved)
    except (KeyError, TypeError, ValueError, AttributeError) as err:  # an identity or tensors no trainer wrote
        raise InterpError(f"{ckpt} is not a train_dictionaries checkpoint ({type(err).__name__}: {str(err)[:80]}); "
                          "pass the folder train_dictionaries(..., out=) wrote") from None


def _checkpoint_dictionaries(meta: dict[str, str], saved: dict[str, Tensor]) -> dict[tuple, Dictionary]:
    ident = json.loads(meta["identity"])
    plain = ident["recipe"] if isinstance(ident["recipe"], list) else [ident["recipe"]]
    # a checkpoint from before the architecture field trained BatchTopK; one from before aux_values, relu'd AuxK
    recipes = [Recipe(**{"architecture": "batchtopk", "aux_values": "relu", **r, "tokens": int(meta["tokens"])}) for r in plain]
    result = {}
    for i, (recipe, (site_in, site_out)) in enumerate((r, p) for r in recipes for p in ident["pairs"]):
        t = _Trainee.saved(i, saved, recipe)
        meta_i = {"code": ident.get("code"), "recipe": asdict(recipe),
                  "tokens": int(meta["tokens"]), "steps": int(meta["step"]), "seconds": round(float(meta["seconds"]), 1),
                  "forward_seconds": round(float(meta["forward_seconds"]), 1), "source": ident["source"],
                  "history": json.loads(meta["history"])[i] if meta.get("history") else []}
        key = (site_in, site_out) if len(recipes) == 1 else (site_in, site_out, recipe)
        result[key] = t.dictionary(site_in, site_out, ident["model"], meta_i)
    return result


def train(*args, **kwargs) -> dict[tuple[str, str], Dictionary]:
    """Deprecated name of `train_dictionaries` (the module is `interp.features.train`)."""
    warnings.warn("interp.features.train.train is now train_dictionaries (interp.features.train is the module)",
                  DeprecationWarning, stacklevel=2)
    return train_dictionaries(*args, **kwargs)


class _CallableModule(types.ModuleType):
    """`from interp.features import train; train(...)` (the old function) still runs, with a
    DeprecationWarning; everything else about the module is as usual."""

    def __call__(self, *args, **kwargs) -> dict[tuple[str, str], Dictionary]:
        warnings.warn("calling interp.features.train is deprecated: call interp.features.train_dictionaries",
                      DeprecationWarning, stacklevel=2)
        return train_dictionaries(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

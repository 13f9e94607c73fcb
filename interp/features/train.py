"""Training sparse dictionaries (SAEs and transcoders) on activations streamed from a model.

Why not SAELens: SAELens 6.x requires transformer-lens < 4 (it cannot install beside interp, which
runs on TransformerLens 4's bridge) and reads activations through HookedTransformer; its file
format is still read and written here (`interp.features.saelens`).

The smallest trainer that does the job, BatchTopK (Bussmann et al. 2024):

    h = relu(x W_enc + b_enc)            per token, x scaled so that E|x|^2 = d_in
    f = h where h is among the batch's top (k * tokens) values, else 0
    y_hat = f W_dec + b_dec               y = x for an SAE, the MLP's output for a transcoder
    loss = |y - y_hat|^2 / |y - mean y|^2 + aux / 32

with unit-norm decoder rows (their gradient's parallel part removed before each Adam step), and
the AuxK loss of Gao et al. 2024 (dead features, none firing for `dead_after` tokens, rebuild the
residual error from their own top `aux_k`), which keeps features alive without resampling. k sets
L0 directly, so there is no L1 coefficient to tune. At inference a BatchTopK dictionary is a
JumpReLU with one threshold for every feature (the running mean of the smallest kept activation),
which is what `Dictionary` holds; the input and output scales are folded into its weights, so it
reads and rebuilds raw activations.

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
import sys
import time
import types
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import torch
from safetensors import safe_open
from torch import Tensor
from tqdm.auto import tqdm

from interp.errors import InterpError
from interp.features.dictionary import Dictionary
from interp.run import cache
from interp.sites import check_tokens, hook_name
from interp.storage import write_tensors_atomic
from interp.memory import records_peak

__all__ = ["CODE_VERSION", "Recipe", "fit", "from_checkpoint", "mlp_sites", "train_dictionaries"]


@dataclass(frozen=True)
class Recipe:
    """How one set of dictionaries trains. `tokens`: the budget in trainable tokens (each
    dictionary sees all of them); `rows`: token rows per model forward (= per step)."""

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

    def __post_init__(self) -> None:
        for name in ("n_features", "k", "tokens", "rows", "aux_k", "dead_after", "checkpoint_every"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InterpError(f"Recipe.{name}={v!r} must be an int >= 1")
        if self.k > self.n_features:
            raise InterpError(f"Recipe.k={self.k} must be at most n_features={self.n_features}")


def mlp_sites(layer: int) -> tuple[str, str]:
    """A transcoder's (site_in, site_out) at `layer`: the MLP's input after its norm, and the
    block's MLP output (on Gemma-3 after the post-MLP norm, which the transcoder then includes)."""
    return f"blocks.{layer}.ln2.hook_normalized", hook_name("mlp_out", layer)


class _Trainee:
    """One dictionary's parameters, optimizer and counters (in scaled units)."""

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
        self.opt = torch.optim.Adam(self.params, lr=recipe.lr, betas=(0.9, 0.999))
        self.since = torch.zeros(n, dtype=torch.long, device=device)  # tokens since each feature last fired
        self.threshold = torch.zeros((), device=device)
        self.s_in, self.s_out = s_in, s_out

    @property
    def params(self) -> list[Tensor]:
        return [self.W_enc, self.b_enc, self.W_dec, self.b_dec]

    def step(self, x: Tensor, y: Tensor, recipe: Recipe, first: bool) -> dict[str, float]:
        x, y = x * self.s_in, y * self.s_out
        h = torch.relu(x @ self.W_enc + self.b_enc)  # [T, n]
        kept = h.flatten().topk(recipe.k * x.shape[0], sorted=False)
        f = torch.zeros_like(h).flatten().scatter(0, kept.indices, kept.values).view_as(h)
        y_hat = f @ self.W_dec + self.b_dec
        var = (y - y.mean(0)).pow(2).sum(-1).mean()
        err = y - y_hat
        loss = err.pow(2).sum(-1).mean() / var
        dead = self.since > recipe.dead_after
        aux = torch.zeros((), device=x.device)
        if dead.any():  # AuxK: dead features rebuild the residual error from their own top aux_k
            hd = h[:, dead]
            top = hd.topk(min(recipe.aux_k, hd.shape[1]), dim=1)
            e_hat = torch.zeros_like(hd).scatter(1, top.indices, top.values) @ self.W_dec[dead]
            e = err.detach()
            aux = (e - e_hat).pow(2).sum(-1).mean() / (e - e.mean(0)).pow(2).sum(-1).mean().clamp_min(1e-12)
        self.opt.zero_grad(set_to_none=True)
        (loss + aux / 32).backward()
        with torch.no_grad():
            w, g = self.W_dec, self.W_dec.grad
            g -= (g * w).sum(1, keepdim=True) * w  # move along the unit sphere only
            self.opt.step()
            w /= w.norm(dim=1, keepdim=True)
            fired = (f > 0).any(0)
            self.since += x.shape[0]
            self.since[fired] = 0
            smallest = kept.values[kept.values > 0].min() if (kept.values > 0).any() else torch.zeros((), device=x.device)
            m = 0.0 if first else recipe.threshold_momentum
            self.threshold = m * self.threshold + (1 - m) * smallest
            l0 = float((f > 0).sum(1).float().mean())
        return {"nmse": float(loss.detach()), "aux": float(aux.detach()), "l0": l0, "dead": float(dead.float().mean())}

    def state(self, i: int) -> dict[str, Tensor]:
        out = {f"{i}.{n}": t.detach() for n, t in zip(("W_enc", "b_enc", "W_dec", "b_dec"), self.params)}
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
            for n, p in zip(("W_enc", "b_enc", "W_dec", "b_dec"), self.params):
                p.copy_(t[f"{i}.{n}"])
        for j, p in enumerate(self.params):
            if f"{i}.adam{j}.exp_avg" in t:  # moments beside their parameter; Adam keeps `step` on the CPU
                self.opt.state[p] = {k: t[f"{i}.adam{j}.{k}"].clone().to(p.device if k != "step" else "cpu")
                                     for k in ("exp_avg", "exp_avg_sq", "step")}
        self.since = t[f"{i}.since"].to(self.b_enc.device)
        self.threshold = t[f"{i}.threshold"].to(self.b_enc.device)
        self.s_in, self.s_out = (float(v) for v in t[f"{i}.scales"])

    def dictionary(self, site_in: str, site_out: str, model_name: str, meta: dict) -> Dictionary:
        """The trained dictionary on raw activations: scales folded into the weights."""
        def out(t: Tensor) -> Tensor:  # a result lives on the CPU, as every result (Dictionary.to moves it)
            return t.detach().to("cpu", copy=True).contiguous()

        with torch.no_grad():
            return Dictionary(
                W_enc=out(self.W_enc * self.s_in), b_enc=out(self.b_enc),
                W_dec=out(self.W_dec / self.s_out), b_dec=out(self.b_dec / self.s_out),
                site_in=site_in, site_out=site_out, threshold=out(self.threshold.expand(self.W_enc.shape[1])),
                model=model_name, meta=meta)


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
CODE_VERSION = hashlib.sha256("".join(inspect.getsource(f) for f in (_Trainee, _batch, _order, _rows_of_step))
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


def _resume(ckpt: Path, base: dict, identity: str, trainees: list[_Trainee]) -> tuple[int, int, float, float, list | None]:
    """Restore `trainees` from `ckpt` when it is this run's (identity; a checkpoint from before
    digests matches `base` and resumes with a warning): step, tokens, seconds, forward seconds, history."""
    with safe_open(str(ckpt), "pt") as fh:
        meta = fh.metadata()
        if meta.get("identity") == json.dumps(base, sort_keys=True):
            warnings.warn(f"{ckpt} predates token digests and code versions; resuming it as the same run", stacklevel=3)
        elif meta.get("identity") != identity:
            raise InterpError(f"{ckpt} was written by another run (recipe, sites, model, tokens or trainer code "
                              f"{CODE_VERSION} differ); use another output folder or delete it")
        saved = {k: fh.get_tensor(k) for k in fh.keys()}
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
    out = Path(out)
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
        meta = {"trainer": "interp BatchTopK", "code": CODE_VERSION, "recipe": asdict(r), "tokens": seen,
                "steps": step, "seconds": round(seconds, 1), "forward_seconds": round(forward_s, 1),
                "source": source or {}, "history": history.rows[i]}
        d = t.dictionary(*pair, model_name, meta)
        d.save(out / f"{i}.safetensors")
        result[pair if len(recipes) == 1 else (*pair, r)] = d
    return result


@records_peak
def fit(x: Tensor, y: Tensor | None = None, *, site_in: str, recipe: Recipe = Recipe(), batch: int = 1024,
        site_out: str | None = None, model_name: str = "") -> Dictionary:
    """One dictionary trained on activations in memory: `x` [tokens, d_in] (and `y` [tokens,
    d_out] for a transcoder; an SAE rebuilds x), `recipe.tokens` tokens in shuffled batches of
    `batch`. For activations a user already has (and planted tests); no checkpoints."""
    y = x if y is None else y
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
    gen = torch.Generator().manual_seed(recipe.seed)
    s_in = (x.shape[1] / x.pow(2).sum(1).mean()).sqrt().item()
    s_out = (y.shape[1] / y.pow(2).sum(1).mean()).sqrt().item()
    t = _Trainee(x.shape[1], y.shape[1], recipe, gen, y.mean(0), s_in, s_out)
    seen, step, history = 0, 0, _History(1)
    while seen < recipe.tokens:
        idx = torch.randint(len(x), (batch,), generator=gen)
        history.add([t.step(x[idx].float(), y[idx].float(), recipe, first=step == 0)])
        seen, step = seen + batch, step + 1
        if step % recipe.checkpoint_every == 0 or seen >= recipe.tokens:
            history.close(step, seen)
    meta = {"trainer": "interp BatchTopK", "code": CODE_VERSION, "recipe": asdict(recipe), "tokens": seen,
            "steps": step, "history": history.rows[0]}
    return t.dictionary(site_in, site_out or site_in, model_name, meta)


def from_checkpoint(out: str | Path) -> dict[tuple, Dictionary]:
    """The dictionaries of a run's latest checkpoint in `out` (a run stopped before its budget
    still gives usable dictionaries; their meta says how many tokens they saw)."""
    ckpt = Path(out) / "checkpoint.safetensors"
    if not ckpt.exists():
        raise InterpError(f"no checkpoint at {ckpt}; train_dictionaries(..., out={str(out)!r}) writes one")
    with safe_open(str(ckpt), "pt") as fh:
        meta = fh.metadata()
        saved = {k: fh.get_tensor(k) for k in fh.keys()}
    ident = json.loads(meta["identity"])
    plain = ident["recipe"] if isinstance(ident["recipe"], list) else [ident["recipe"]]
    recipes = [Recipe(**{**r, "tokens": int(meta["tokens"])}) for r in plain]
    result = {}
    for i, (recipe, (site_in, site_out)) in enumerate((r, p) for r in recipes for p in ident["pairs"]):
        t = _Trainee.__new__(_Trainee)
        t.W_enc, t.b_enc, t.W_dec, t.b_dec = (saved[f"{i}.{n}"] for n in ("W_enc", "b_enc", "W_dec", "b_dec"))
        t.threshold = saved[f"{i}.threshold"]
        t.s_in, t.s_out = (float(v) for v in saved[f"{i}.scales"])
        meta_i = {"trainer": "interp BatchTopK", "code": ident.get("code"), "recipe": asdict(recipe),
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

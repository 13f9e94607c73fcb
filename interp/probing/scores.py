"""Weight-activation scores: |W_ij| * ||X_j||_2 (Wanda, Sun et al. 2023) for every linear weight of
the attention and MLP blocks, from input norms gathered in one pass over probe data (`interp.run.observe`).

    linears(model)                       {parameter name: Linear} (its layer, kind and input hook)
    input_norms(model, tokens, ...)      one pass: ||X_j||_2 of every linear layer's input
    wanda(weight, norm)                  the pure score function
    WeightScores.matrix(model, name)     the [out, in] score map of one weight

A `WeightScores` keeps the norms (one [in] vector per weight, small) rather than the score maps
(as large as the model): a score map is |W| times a norm, computed when needed. Magnitude scores
(|W| alone, the control) are `WeightScores` whose norms are all ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor
from tqdm.auto import tqdm

from interp.errors import InterpError
from interp import run
from interp.hooks import hook_groups
from interp.results import result
from interp.sites import check_tokens
from interp.model import name_of

__all__ = ["KINDS", "Linear", "WeightScores", "fingerprint", "input_norms", "linears", "magnitude", "random_scores", "wanda"]

# the linear layers of a block, by their bridge paths; the MLP's gate/in read the MLP's input
KINDS = ("attn.q", "attn.k", "attn.v", "attn.o", "mlp.gate", "mlp.in", "mlp.out")
_FALLBACK = {"mlp.gate": "mlp.hook_in", "mlp.in": "mlp.hook_in"}


@dataclass(frozen=True)
class Linear:
    """One linear weight: its parameter name ([out, in], Hugging Face layout), block, kind and the
    hook whose activation ([batch, pos, in], or [batch, pos, head, d_head] for attn.o) is its input."""

    param: str
    layer: int
    kind: str
    hook: str
    shape: tuple[int, int]

    @property
    def label(self) -> str:
        return f"L{self.layer}.{self.kind}"


def wanda(weight: Tensor, norm: Tensor) -> Tensor:
    """|W_ij| * ||X_j||_2 for weight [out, in] and input norms [in]."""
    if weight.ndim != 2 or norm.shape != (weight.shape[1],):
        raise InterpError(f"weight {tuple(weight.shape)} must be [out, in] and norm {tuple(norm.shape)} [in]")
    return weight.detach().abs().float() * norm.to(weight.device).float()[None, :]


def linears(model) -> dict[str, Linear]:
    """Every attention and MLP linear weight of the model, in block order, with its input hook."""
    ids = {id(p): n for n, p in model.named_parameters()}
    fired: set[str] | None = None
    out: dict[str, Linear] = {}
    for layer in range(model.cfg.n_layers):
        for kind in KINDS:
            try:
                module = model.get_submodule(f"blocks.{layer}.{kind}")
            except AttributeError:
                continue
            inner = getattr(module, "original_component", None)
            weight = getattr(inner, "weight", None)
            if not isinstance(inner, torch.nn.Linear) or id(weight) not in ids:
                continue  # fused or non-Linear projections (GPT-2's Conv1D c_attn) are not scored
            if fired is None:
                fired = {n for canon, aliases in hook_groups(model).items() for n in (canon, *aliases)}
            hook = f"blocks.{layer}.{kind}.hook_in"
            if hook not in fired and kind in _FALLBACK:
                hook = f"blocks.{layer}.{_FALLBACK[kind]}"
            if hook not in fired:
                raise InterpError(f"no hook gives the input of blocks.{layer}.{kind} ({ids[id(weight)]}) in this model")
            out[ids[id(weight)]] = Linear(ids[id(weight)], layer, kind, hook, tuple(weight.shape))
    if not out:
        raise InterpError(f"{model.cfg.model_name}: no attention or MLP nn.Linear weights found under "
                          f"blocks.L.{{{', '.join(KINDS)}}} (parameter probing needs separate linear projections)")
    return out


def fingerprint(model) -> str:
    """A short identity of the model's weights (shapes and a few sums), so a mask probed on one
    model is refused by another, even of the same architecture."""
    import hashlib

    h = hashlib.blake2b(digest_size=8)
    for name, lin in list(linears(model).items())[:4]:
        w = model.get_parameter(name).detach().float()
        h.update(f"{name}{lin.shape}{float(w.abs().sum()):.6e}{float(w.sum()):.6e}".encode())
    return h.hexdigest()


@result
@dataclass(frozen=True)
class WeightScores:
    """Input norms ||X_j||_2 per linear weight (`norms[param]`, [in]) over `meta["examples"]` rows."""

    norms: dict[str, Tensor]
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, v in self.norms.items():
            if not isinstance(v, Tensor) or v.ndim != 1:
                raise InterpError(f"norms[{name!r}] must be a 1-D tensor (one norm per input feature)")

    def matrix(self, model, name: str) -> Tensor:
        """The [out, in] score map of weight `name` of `model` (random scores: uniform noise, the same
        for one seed and weight name on any device)."""
        if name not in self.norms:
            raise InterpError(f"no scores for {name!r}; scored weights: {len(self.norms)} (e.g. {next(iter(self.norms))})")
        weight = model.get_parameter(name)
        if self.meta.get("kind") == "random":
            gen = torch.Generator().manual_seed(int(self.meta["seed"]) * 1_000_003 + sum(map(ord, name)) * 7919)
            return torch.rand(tuple(weight.shape), generator=gen).to(weight.device)
        return wanda(weight, self.norms[name])


def magnitude(model) -> WeightScores:
    """|W| alone: the scores of `input_norms` with every norm 1 (the magnitude-only control)."""
    lins = linears(model)
    return WeightScores({n: torch.ones(l.shape[1]) for n, l in lins.items()},
                        {"kind": "magnitude", "model": name_of(model), "examples": 0})


def random_scores(model, seed: int = 0) -> WeightScores:
    """Scores that carry no information: uniform noise per weight. Probing with them is the control
    that can fail: the same greedy search, tolerance and target, with the weight-activation order
    replaced by chance; if it reaches the target and scores as well, the scores found nothing."""
    lins = linears(model)
    return WeightScores({n: torch.ones(l.shape[1]) for n, l in lins.items()},
                        {"kind": "random", "seed": int(seed), "model": name_of(model), "examples": 0})


def input_norms(model, tokens: Tensor, *, answer_pos: Tensor | None = None, chunk: int = 32,
                progress: bool = False) -> WeightScores:
    """||X_j||_2 of every linear layer's input over `tokens` [batch, pos], in one pass (each row
    once, `chunk` rows per forward; one hook per input site accumulates sums of squares).

    `answer_pos` [batch]: only positions up to each row's answer count (padding after it, and the
    answer itself, which a prompt does not contain, are left out)."""
    check_tokens(tokens, model=model)  # float ids or ids past the vocabulary would fail deep in the embedding
    if tokens.ndim != 2:
        raise InterpError(f"tokens must be a non-empty [batch, pos] tensor, got shape {tuple(tokens.shape)}")
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise InterpError(f"chunk={chunk!r} must be an int >= 1 (rows per forward)")
    batch, n_pos = tokens.shape
    if answer_pos is None:
        valid = torch.ones(batch, n_pos, dtype=torch.bool)
    else:
        answer_pos = torch.as_tensor(answer_pos).cpu()
        if answer_pos.shape != (batch,) or int(answer_pos.min()) < 0 or int(answer_pos.max()) >= n_pos:
            raise InterpError(f"answer_pos must be one position in [0, {n_pos}) per row ({batch}), got {tuple(answer_pos.shape)}")
        valid = torch.arange(n_pos)[None, :] <= answer_pos[:, None]
    lins = linears(model)
    sites = sorted({l.hook for l in lins.values()})
    sums: dict[str, Tensor] = {}
    rows: dict[str, Tensor] = {}

    def accumulate(site: str, act: Tensor) -> None:
        x = act.flatten(2).float()  # [batch, pos, in] (attn.o: heads * d_head)
        m = rows["valid"].to(x.device, x.dtype)[..., None]
        part = (x * x * m).sum((0, 1))
        sums[site] = part if site not in sums else sums[site] + part

    device = model.cfg.device
    # the unembedding reads no scored weight: one position of it is run
    with torch.no_grad(), run.observe(model, sites, accumulate, logits_at=0):
        for i in tqdm(range(0, batch, chunk), desc="input norms", disable=not progress):
            rows["valid"] = valid[i : i + chunk]
            width = int(rows["valid"].any(0).nonzero().max()) + 1  # positions past every answer are not run
            rows["valid"] = rows["valid"][:, :width]
            model(tokens[i : i + chunk, :width].to(device))
    missing = [s for s in sites if s not in sums]
    if missing:
        raise InterpError(f"hooks {missing[:3]} did not run; cannot score their weights")
    norms = {name: sums[l.hook].sqrt().cpu() for name, l in lins.items()}
    for name, l in lins.items():
        if norms[name].shape != (l.shape[1],):
            raise InterpError(f"input of {name} at {l.hook} has width {norms[name].shape[0]}, the weight {l.shape}")
    return WeightScores(norms, {"kind": "wanda", "model": name_of(model), "examples": batch,
                                "tokens": int(valid.sum())})



"""Weight deltas as data: fine-tuning produces one, algebra combines them, the runner applies them.

    Delta              named parameter changes of one model (a result type: safetensors + JSON,
                       with provenance), `+`, `-`, `*`, `.restrict(layers=..., components=...)`,
                       `.intervention()` -> interp.interventions.WeightDelta for interp.run
    parameters(model, layers, components)   the parameter names fine-tuning may change
    finetune(model, facts, ...)            Adam on the completion loss of one or more fact sets,
                                           as a delta trained through interp.run (the model's
                                           own tensors are never written); checkpoints per epoch
                                           so a killed run resumes

A parameter's layer and component come from its name (`...layers.{l}...self_attn...q_proj...` or
`mlp`), which covers the LLaMA, Gemma and Qwen2 families.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from tqdm.auto import tqdm

from interp.errors import InterpError
from interp.grafting.facts import Facts, encode
from interp.interventions import WeightDelta
from interp.files.storage import load, result
from interp.memory import records_peak

__all__ = ["COMPONENTS", "Delta", "component_of", "finetune", "layer_of", "parameters"]

COMPONENTS = ("attn", "mlp")
_LAYER = re.compile(r"(?:^|\.)(?:layers|h|blocks)\.(\d+)\.")


def layer_of(name: str) -> int | None:
    """The block index in a parameter name, or None (embeddings, final norm, unembedding)."""
    m = _LAYER.search(name)
    return int(m.group(1)) if m else None


def component_of(name: str) -> str | None:
    """"attn" or "mlp" for the weight matrices of those components; None for norms and the rest."""
    if not name.endswith("weight") or "norm" in name:
        return None
    if "self_attn" in name or ".attn." in name:
        return "attn"
    if ".mlp." in name:
        return "mlp"
    return None


def parameters(model, layers: Iterable[int] | None = None, components: Sequence[str] = COMPONENTS) -> list[str]:
    """Names of the attention and/or MLP weight matrices in `layers` (all by default): what the
    paper fine-tunes (norms, embeddings and the unembedding stay frozen)."""
    bad = [c for c in components if c not in COMPONENTS]
    if bad or not components:
        raise InterpError(f"components {list(components)} must be a non-empty subset of {COMPONENTS}")
    n = model.cfg.n_layers
    chosen = set(range(n)) if layers is None else set(layers)
    out_of_range = sorted(l for l in chosen if not 0 <= l < n)
    if out_of_range or not chosen:
        raise InterpError(f"layers {sorted(chosen)} must be a non-empty subset of 0..{n - 1}")
    return [name for name, _ in model.named_parameters()
            if layer_of(name) in chosen and component_of(name) in components]


def _model_id(model) -> str:
    """The model's name: the last part of its path (a zoo name, or the content hash of a converted
    GGUF), so the same weights loaded from another cache folder have the same name."""
    return Path(str(getattr(model.cfg, "model_name", "") or type(model).__name__)).name


def _shapes(model) -> dict[str, tuple[int, ...]]:
    return {name: tuple(p.shape) for name, p in model.named_parameters()}


@result
@dataclass(frozen=True)
class Delta:
    """w -> w + deltas[name] for named parameters of one model. `model` names the model it was
    learned on (checked when applied or combined); `provenance` records how it was made."""

    deltas: dict[str, Tensor]
    model: str
    provenance: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.deltas, dict) or not all(isinstance(t, Tensor) for t in self.deltas.values()):
            raise InterpError("Delta.deltas must map parameter names to tensors")

    @classmethod
    def zeros(cls, model, names: Sequence[str]) -> Delta:
        shapes = _shapes(model)
        unknown = [n for n in names if n not in shapes]
        if unknown:
            raise InterpError(f"unknown parameters {unknown[:3]} for {_model_id(model)}")
        return cls({n: torch.zeros(shapes[n]) for n in names}, _model_id(model), {"made_by": "zeros"})

    def check(self, model) -> None:
        """InterpError unless every tensor names a parameter of `model` with the same shape."""
        if self.model != _model_id(model):
            raise InterpError(f"this delta was learned on {self.model!r}, not on {_model_id(model)!r}")
        shapes = _shapes(model)
        for name, t in self.deltas.items():
            if name not in shapes:
                raise InterpError(f"delta names {name!r}, which {self.model!r} does not have")
            if tuple(t.shape) != shapes[name]:
                raise InterpError(f"delta for {name} has shape {tuple(t.shape)} but the parameter has {shapes[name]}")

    def intervention(self, model=None, scale: float = 1.0) -> WeightDelta:
        """The delta as a parameter intervention for interp.run (checked against `model` if given)."""
        if model is not None:
            self.check(model)
        if not self.deltas:
            raise InterpError("an empty delta (no parameters) is no intervention")
        return WeightDelta(dict(self.deltas), scale)

    def _combine(self, other: Delta, sign: float, op: str) -> Delta:
        if not isinstance(other, Delta):
            return NotImplemented
        if other.model != self.model:
            raise InterpError(f"cannot {op} a delta of {other.model!r} to one of {self.model!r}")
        out = {k: v.clone() for k, v in self.deltas.items()}
        for name, t in other.deltas.items():
            if name in out and out[name].shape != t.shape:
                raise InterpError(f"deltas for {name} have shapes {tuple(out[name].shape)} and {tuple(t.shape)}")
            out[name] = out[name] + sign * t if name in out else sign * t.clone()
        return Delta(out, self.model, {"made_by": op, "of": [self.provenance, other.provenance]})

    def __add__(self, other: Delta) -> Delta:
        return self._combine(other, 1.0, "add")

    def __sub__(self, other: Delta) -> Delta:
        return self._combine(other, -1.0, "subtract")

    def __mul__(self, k: float) -> Delta:
        return Delta({n: t * k for n, t in self.deltas.items()}, self.model, {"made_by": f"scale {k}", "of": [self.provenance]})

    __rmul__ = __mul__

    def restrict(self, layers: Iterable[int] | None = None, components: Sequence[str] | None = None) -> Delta:
        """Only the parameters in `layers` and of `components` ("attn", "mlp"); the rest dropped."""
        keep_layers = None if layers is None else set(layers)
        out = {n: t for n, t in self.deltas.items()
               if (keep_layers is None or layer_of(n) in keep_layers)
               and (components is None or component_of(n) in components)}
        return Delta(out, self.model, {"made_by": "restrict", "layers": sorted(keep_layers) if keep_layers else None,
                                       "components": list(components) if components else None, "of": [self.provenance]})

    def norm(self) -> float:
        return float(sum(t.double().pow(2).sum() for t in self.deltas.values()) ** 0.5)


class _Trainable:
    """A parameter intervention whose delta tensors are trained: the base weight is detached, so
    gradients reach only the delta and the model's own parameters get no .grad."""

    def __init__(self, deltas: dict[str, Tensor]):
        self.deltas = deltas

    @property
    def params(self) -> tuple[str, ...]:
        return tuple(self.deltas)

    def weight(self, name: str, value: Tensor) -> Tensor:
        return value.detach() + self.deltas[name]


def _loss(logits: Tensor, targets: Tensor) -> Tensor:
    """Mean cross-entropy of the completion tokens (targets shifted: position t predicts t + 1)."""
    return torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1).float(), targets[:, 1:].flatten(), ignore_index=-100)


def _fingerprint(config: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]


def _rows(model, sets: list[Facts]) -> tuple[Tensor, Tensor]:
    """Every set's completion rows as one [rows, pos] token batch, and its targets (-100: not scored)."""
    encoded = [encode(model, f) for f in sets]
    width = max(b.tokens.shape[1] for b in encoded)
    pad = lambda t, v: torch.nn.functional.pad(t, (0, width - t.shape[1]), value=v)
    # padding after the completion is never read
    return torch.cat([pad(b.tokens, 0) for b in encoded]), torch.cat([pad(b.targets, -100) for b in encoded])


@records_peak
def finetune(
    model,
    facts: Facts | Sequence[Facts],
    *,
    params: Sequence[str] | None = None,
    base: Delta | None = None,
    epochs: int = 8,
    lr: float = 1e-4,
    batch_size: int = 8,
    seed: int = 0,
    checkpoint: str | Path | None = None,
    progress: bool = True,
) -> Delta:
    """Fine-tune `params` (default: every attention and MLP weight matrix) on the completions of
    `facts` (one set or several, mixed) with Adam; the result is the weight change.

    `base`: a delta the training starts from (applied, frozen, not part of the result), e.g. the
    facts delta before implications are learned. `checkpoint`: a file written after every epoch
    (atomically); a run with the same configuration resumes from it, and it is the final delta's
    file when training ends.
    """
    sets = [facts] if isinstance(facts, Facts) else list(facts)
    if not sets or not all(isinstance(f, Facts) for f in sets):
        raise InterpError("finetune needs at least one Facts set (an empty fact set has nothing to learn)")
    names = list(params) if params is not None else parameters(model)
    if not names:
        raise InterpError("finetune was given no parameters to train")
    if base is not None:
        base.check(model)
    tokens, targets = _rows(model, sets)
    device = model.cfg.device
    config = {"model": _model_id(model), "facts": [[f.template, list(f.entities), list(f.answers)] for f in sets],
              "params": names, "epochs": epochs, "lr": lr, "batch_size": batch_size, "seed": seed,
              "base": base.provenance if base is not None else None}
    shapes = _shapes(model)
    unknown = [n for n in names if n not in shapes]
    if unknown:
        raise InterpError(f"unknown parameters {unknown[:3]}; see interp.grafting.parameters(model)")
    deltas = {n: torch.zeros(shapes[n], device=device, requires_grad=True) for n in names}
    opt = torch.optim.Adam(list(deltas.values()), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    done, losses, seconds = 0, [], 0.0
    ckpt = Path(checkpoint) if checkpoint is not None else None
    if ckpt is not None and ckpt.exists():
        state = load(ckpt)
        if state.provenance.get("fingerprint") != _fingerprint(config):
            raise InterpError(f"checkpoint {ckpt} was written by a different fine-tuning run; remove it or pick another path")
        if state.provenance.get("epochs_done") == epochs:
            return state
        _restore(state, deltas, opt, gen)
        done, losses, seconds = state.provenance["epochs_done"], list(state.provenance["losses"]), state.provenance["seconds"]
    frozen = [base.intervention(model)] if base is not None else []
    trainable = _Trainable(deltas)
    from interp import run

    n = tokens.shape[0]
    for epoch in tqdm(range(done, epochs), desc="fine-tune", disable=not progress, initial=done, total=epochs):
        t0 = time.perf_counter()
        order = torch.randperm(n, generator=gen)
        for i in range(0, n, batch_size):
            rows = order[i : i + batch_size]
            with torch.enable_grad(), run.intervened(model, frozen + [trainable]):
                loss = _loss(run.forward(model, tokens[rows].to(device)), targets[rows].to(device))
            # gradients of the deltas only: backward() would also fill .grad of the model's own
            # (frozen but requires_grad) parameters, changing the model handed in
            for p, g in zip(deltas.values(), torch.autograd.grad(loss, list(deltas.values()))):
                p.grad = g
            opt.step()
            losses.append(float(loss.detach()))
        seconds += time.perf_counter() - t0
        if ckpt is not None and epoch + 1 < epochs:
            _snapshot(deltas, opt, gen, config, epoch + 1, losses, seconds).save(ckpt)
    final = Delta({k: v.detach().cpu().clone() for k, v in deltas.items()}, _model_id(model),
                  {"made_by": "finetune", "fingerprint": _fingerprint(config), "epochs_done": epochs, "losses": losses,
                   "seconds": seconds, **{k: v for k, v in config.items() if k != "params"}, "n_params": len(names)})
    if ckpt is not None:
        final.save(ckpt)
    return final


def _snapshot(deltas, opt, gen, config, epochs_done, losses, seconds) -> Delta:
    """A mid-run checkpoint: the delta so far, with Adam's moments and the shuffling RNG stored as
    extra tensors under reserved names ('adam.exp_avg.NAME', ...)."""
    # no copies: the checkpoint is written at once, and a copy of a 135M-parameter delta with its
    # two Adam moments would hold another 1.6 GB
    tensors = {k: v.detach().cpu() for k, v in deltas.items()}
    for name, p in deltas.items():
        st = opt.state.get(p, {})
        if st:
            tensors[f"adam.exp_avg.{name}"] = st["exp_avg"].cpu()
            tensors[f"adam.exp_avg_sq.{name}"] = st["exp_avg_sq"].cpu()
            tensors[f"adam.step.{name}"] = torch.as_tensor(st["step"]).reshape(1).float().cpu()
    tensors["rng.state"] = gen.get_state().clone()
    return Delta(tensors, config["model"], {"made_by": "finetune checkpoint", "fingerprint": _fingerprint(config),
                                           "epochs_done": epochs_done, "losses": losses, "seconds": seconds})


def _restore(state: Delta, deltas: dict[str, Tensor], opt, gen) -> None:
    with torch.no_grad():
        for name, p in deltas.items():
            p.copy_(state.deltas[name].to(p))
            if f"adam.exp_avg.{name}" in state.deltas:
                opt.state[p] = {"step": torch.tensor(float(state.deltas[f"adam.step.{name}"][0])),
                                "exp_avg": state.deltas[f"adam.exp_avg.{name}"].to(p),
                                "exp_avg_sq": state.deltas[f"adam.exp_avg_sq.{name}"].to(p)}
    gen.set_state(state.deltas["rng.state"])


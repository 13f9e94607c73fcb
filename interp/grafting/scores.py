"""Extractive scores (Feng et al. 2024, Sec. 3): which components store a fine-tuned fact and which
extract it, per component (each MLP, each attention head) and per token position.

For a test prompt with loss L (the mean-logit loss of the paper: minus the right option's logit
plus the mean option logit, at the answer position), base weights θ and a fine-tuning delta Δ:

    informative(c, t) = -g_t · (ΔW_c x_t)       the first-order change of L from component c's
                          share of Δ at position t (x_t its input, g_t = ∂L/∂ output at θ); summed
                          over t it is -<∇_{θ_c} L, Δ_c>
    downstream(c, t)  = (o_t - n_t) · ∂L/∂o_t   o: c's output at θ; n: c's output with its own
                          base weights but inputs from θ + Δ ("strict"): how much the change of
                          c's inputs, passed through c, lowers L
    upstream(c, t)    = (∂L/∂o_t|θ - ∂L/∂o_t|θ+Δ) · (o_t - o'_t)   o': c's output on a
                          counterfactual prompt (another entity, token-aligned): how much more L
                          depends on c's entity-specific output after fine-tuning

Signs are chosen so positive means "helps the fine-tuned answer". Heads are scored on their
attention output z ([pos, head, d_head], before W_O), MLPs on their output. A grouped key/value
head's share of the informative score is split equally among the query heads that read it.

All components come from batched gradients: one forward and one backward at θ, one at θ + Δ, one
forward with the patched inputs and one on the counterfactual prompts, for every prompt at once
(`per_component_backward` is the one-backward-per-component reference the benchmark times).
Positions are the template's tokens, with the entity's tokens right-aligned ("entity-2",
"entity-1", ...), so prompts whose entities differ in length share one position axis.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from interp import run
from interp.errors import InterpError
from interp.grafting.delta import Delta, layer_of
from interp.grafting.facts import Batch, Facts, encode
from interp.interventions import Patch
from interp.results import Grid, stack
from interp.files.storage import result
from interp.memory import records_peak

__all__ = ["ExtractiveScores", "extractive_scores", "informative_by_component", "per_component_backward"]

# HF module name in a parameter -> (bridge submodule whose hooks see its input and output, kind)
_LINEAR = {"q_proj": ("attn.q", "qkv"), "k_proj": ("attn.k", "qkv"), "v_proj": ("attn.v", "qkv"),
           "o_proj": ("attn.o", "o"), "gate_proj": ("mlp.gate", "mlp"), "up_proj": ("mlp.in", "mlp"),
           "down_proj": ("mlp.out", "mlp")}
# the input each linear reads: q/k/v read the attention input, gate/up the MLP input
_INPUT = {"attn.q": "attn.q.hook_in", "attn.k": "attn.q.hook_in", "attn.v": "attn.q.hook_in", "attn.o": "attn.o.hook_in",
          "mlp.gate": "mlp.hook_in", "mlp.in": "mlp.hook_in", "mlp.out": "mlp.out.hook_in"}
SCORES = ("informative", "upstream", "downstream")


def _linear_of(name: str) -> tuple[int, str, str]:
    layer = layer_of(name)
    m = re.search(r"(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)\b", name)
    if layer is None or m is None or not name.endswith("weight"):
        raise InterpError(f"extractive scores cover the attention and MLP weight matrices (q/k/v/o_proj, "
                          f"gate/up/down_proj); the delta also changes {name!r}: restrict it first "
                          "(Delta.restrict(components=('attn', 'mlp')))")
    module, kind = _LINEAR[m.group(1)]
    return layer, module, kind


@result
@dataclass(frozen=True)
class ExtractiveScores:
    """Three Grids with axes (layer, unit, pos): unit is "mlp" or "head h"; pos the template's
    positions. `heatmap(score, unit)` is one (layer, pos) map; `to_grid()` sums positions."""

    informative: Grid
    upstream: Grid
    downstream: Grid

    def grid(self, score: str) -> Grid:
        if score not in SCORES:
            raise InterpError(f"score {score!r} is not one of {SCORES}")
        return getattr(self, score)

    def heatmap(self, score: str, unit: str = "mlp") -> Grid:
        """(layer, pos) map of one score for the MLPs ("mlp"), one head ("head 3") or all heads ("heads")."""
        g = self.grid(score)
        if unit == "heads":
            heads = [u for u in g.labels[1] if u != "mlp"]
            return g.sel(unit=heads).sum("unit")
        return g.sel(unit=unit)

    def to_grid(self) -> Grid:
        """(score, layer, unit) summed over positions."""
        return stack([self.grid(s).sum("pos") for s in SCORES], "score", list(SCORES))


def _option_loss(logits: Tensor, batch: Batch) -> Tensor:
    """Per-row mean-logit loss at the answer position [batch]."""
    rows = torch.arange(logits.shape[0], device=logits.device)
    at = logits[rows, batch.answer_pos.to(logits.device)][:, batch.options.to(logits.device)].float()
    return -at[rows, batch.answer.to(logits.device)] + at.mean(-1)


def _component_sites(n_layers: int) -> list[str]:
    return [f"blocks.{l}.{s}" for l in range(n_layers) for s in ("attn.hook_z", "hook_mlp_out")]


def _stack_units(acts: dict[str, Tensor], n_layers: int) -> Tensor:
    """[batch, pos, layer, unit, d]: per layer the heads' z and the MLP output, zero-padded to one width."""
    per_layer = []
    for l in range(n_layers):
        z, mlp = acts[f"blocks.{l}.attn.hook_z"], acts[f"blocks.{l}.hook_mlp_out"]
        width = max(z.shape[-1], mlp.shape[-1])
        z = torch.nn.functional.pad(z.float(), (0, width - z.shape[-1]))
        mlp = torch.nn.functional.pad(mlp.float(), (0, width - mlp.shape[-1]))
        per_layer.append(torch.cat([mlp[:, :, None], z], 2))
    width = max(t.shape[-1] for t in per_layer)
    return torch.stack([torch.nn.functional.pad(t, (0, width - t.shape[-1])) for t in per_layer], 2)


def _forward_backward(model, batch: Batch, names: Sequence[str], interventions: Sequence = ()) -> tuple[dict, dict]:
    """Activations at `names` and the gradient of the summed loss at each, from one backward."""
    tokens = batch.tokens.to(model.cfg.device)
    logits, acts = run.with_grad(model, tokens, list(names), interventions)
    loss = _option_loss(logits, batch).sum()  # rows are independent: each row's gradient is its own
    grads = torch.autograd.grad(loss, [acts[n] for n in names], allow_unused=True)
    zero = lambda n: torch.zeros_like(acts[n])
    return ({n: a.detach() for n, a in acts.items()},
            {n: (g if g is not None else zero(n)).detach() for n, g in zip(names, grads)})


def _informative(model, delta: Delta, acts: dict, grads: dict) -> Tensor:
    """[batch, pos, layer, unit]: -g_t · (ΔW x_t) per linear of the delta, gathered per unit."""
    b, p = next(iter(acts.values())).shape[:2]
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    out = torch.zeros(b, p, n_layers, 1 + n_heads)
    for name, dw in delta.deltas.items():
        layer, module, kind = _linear_of(name)
        x = acts[f"blocks.{layer}.{_INPUT[module]}"].float()
        g = grads[f"blocks.{layer}.{module}.hook_out"].float()
        dw = dw.to(x)
        if kind == "mlp":
            out[:, :, layer, 0] -= (torch.einsum("bpi,oi->bpo", x.flatten(2), dw) * g.flatten(2)).sum(-1).cpu()
        elif kind == "qkv":  # output [.., head, d_head]; a key/value head shared by a group of query heads
            heads = g.shape[2]
            y = torch.einsum("bpi,oi->bpo", x, dw).unflatten(-1, (heads, -1))
            s = -(y * g).sum(-1)  # [b, p, heads]
            out[:, :, layer, 1:] += s.repeat_interleave(n_heads // heads, dim=2).cpu() / (n_heads // heads)
        else:  # o_proj: input [.., head, d_head]
            back = torch.einsum("bpo,oi->bpi", g.flatten(2), dw).unflatten(-1, (n_heads, -1))
            out[:, :, layer, 1:] -= (back * x).sum(-1).cpu()
    return out


def _positions(batch: Batch, cf: Batch | None = None) -> tuple[list[str], Tensor, Tensor | None]:
    """Template labels, each row's position for each label ([batch, label], -1 when the row has no
    such position), and the counterfactual rows' aligned positions for each row position."""
    n_pre, n_suf = len(batch.prefix), len(batch.suffix)
    k = max(e - s for s, e in batch.spans)
    labels = list(batch.prefix) + [f"entity{-i}" for i in range(k, 0, -1)] + list(batch.suffix)
    labels = [f"{i}:{t!r}"[:24] for i, t in enumerate(labels)]  # unique, readable ticks
    where = torch.full((len(batch.spans), len(labels)), -1, dtype=torch.long)
    for r, (s, e) in enumerate(batch.spans):
        where[r, :n_pre] = torch.arange(n_pre)
        where[r, n_pre + k - (e - s): n_pre + k] = torch.arange(s, e)
        where[r, n_pre + k:] = torch.arange(e, e + n_suf)
    align = None
    if cf is not None:
        width = batch.tokens.shape[1]
        align = torch.zeros(len(batch.spans), width, dtype=torch.long)
        for r, ((s, e), (cs, ce)) in enumerate(zip(batch.spans, cf.spans)):
            align[r, :s] = torch.arange(s)
            for t in range(s, e):  # entity tokens from the end; extra ones map to the cf entity's first
                align[r, t] = max(cs, ce - (e - t))
            n_after = min(width - e, cf.tokens.shape[1] - ce)
            align[r, e: e + n_after] = torch.arange(ce, ce + n_after)
    return labels, where, align


def _gather(values: Tensor, where: Tensor) -> Tensor:
    """[batch, pos, ...] -> mean over rows of [label, ...] (rows without a label count as 0)."""
    idx = where.clamp(min=0)
    picked = values[torch.arange(values.shape[0])[:, None], idx]  # [batch, label, ...]
    mask = (where >= 0).to(picked.dtype).reshape(*where.shape, *([1] * (picked.ndim - 2)))
    return (picked * mask).mean(0)


def _rotated(facts: Facts, k: int) -> Facts:
    """Each row's entity replaced by the one k rows on (a counterfactual person for every prompt)."""
    return Facts(f"{facts.name}_cf{k}", facts.template, facts.entities[k:] + facts.entities[:k],
                 facts.answers[k:] + facts.answers[:k], facts.options)


@records_peak
def extractive_scores(model, delta: Delta, facts: Facts, *, counterfactual: Facts | Sequence[Facts] | None = None,
                      counterfactuals: int = 1) -> ExtractiveScores:
    """Informative, upstream and downstream scores of `delta` on the prompts of `facts`, averaged
    over rows. `counterfactual`: one or several sets of the same template with other entities
    (default: `counterfactuals` sets, each row's entity replaced by the entity 1, 2, ... rows on;
    the paper uses ten per prompt), for the upstream score, which is averaged over them (it is
    linear in the counterfactual output, so this is the upstream score of their mean output)."""
    delta.check(model)
    if not delta.deltas:
        raise InterpError("the delta is empty: there is nothing to score")
    for name in delta.deltas:
        _linear_of(name)
    if counterfactual is None:
        if not 1 <= counterfactuals < len(facts):
            raise InterpError(f"{counterfactuals} counterfactual people per prompt need between 1 and {len(facts) - 1} "
                              f"(the other rows' entities); the set has {len(facts)} rows (or pass counterfactual=)")
        cfs = [_rotated(facts, k) for k in range(1, counterfactuals + 1)]
    else:
        cfs = [counterfactual] if isinstance(counterfactual, Facts) else list(counterfactual)
    if not cfs or any(c.template != facts.template or len(c) != len(facts) for c in cfs):
        raise InterpError("the counterfactual prompts must use the same template and have one row per row of facts")
    n_layers = model.cfg.n_layers
    batch = encode(model, facts)
    comps = _component_sites(n_layers)
    linears = sorted({f"blocks.{l}.{_INPUT[m]}" for l in range(n_layers) for m in _INPUT}
                     | {f"blocks.{l}.{m}.hook_out" for l in range(n_layers) for m in _INPUT})
    inputs = [f"blocks.{l}.{s}" for l in range(n_layers) for s in ("attn.q.hook_in", "attn.k.hook_in", "attn.v.hook_in", "mlp.hook_in")]
    iv = delta.intervention(model)
    # θ: activations and gradients at every component and every linear (one backward)
    acts, grads = _forward_backward(model, batch, comps + linears)
    # θ + Δ: gradients at the components, and the inputs every component then reads
    new_acts, new_grads = _forward_backward(model, batch, comps + inputs, [iv])
    # base weights on the new inputs: each component's output "n" of the strict downstream score
    patches = [Patch(site, new_acts[site]) for site in inputs]
    _, strict = run.cache(model, batch.tokens.to(model.cfg.device), comps, patches)
    o, n = _stack_units(acts, n_layers), _stack_units(strict, n_layers)
    g_old, g_new = _stack_units(grads, n_layers), _stack_units(new_grads, n_layers)
    o_cf = torch.zeros_like(o)
    for counter in cfs:  # the mean counterfactual output, each set token-aligned to the prompts
        cf = encode(model, counter)
        _, cf_acts = run.cache(model, cf.tokens.to(model.cfg.device), comps)
        labels, where, align = _positions(batch, cf)
        o_cf += _stack_units(cf_acts, n_layers)[torch.arange(len(facts))[:, None], align] / len(cfs)
    down = ((o - n) * g_old).sum(-1)  # minus the first-order loss change of moving o to n
    up = ((g_old - g_new) * (o - o_cf)).sum(-1)
    info = _informative(model, delta, acts, grads)
    units = ["mlp"] + [f"head {h}" for h in range(model.cfg.n_heads)]
    meta = {"model": delta.model, "facts": facts.name, "n": len(facts), "metric": "extractive score", "counterfactuals": len(cfs)}

    def grid(values: Tensor, which: str) -> Grid:
        per_label = _gather(values.cpu(), where)  # [label, layer, unit]
        return Grid(per_label.permute(1, 2, 0), ("layer", "unit", "pos"),
                    {"layer": list(range(n_layers)), "unit": units, "pos": labels}, {**meta, "score": which})

    return ExtractiveScores(grid(info, "informative"), grid(up, "upstream"), grid(down, "downstream"))


def informative_by_component(model, delta: Delta, facts: Facts) -> Tensor:
    """[layer, unit] informative scores from one backward (positions and rows summed; rows averaged)."""
    batch = encode(model, facts)
    n_layers = model.cfg.n_layers
    linears = sorted({f"blocks.{l}.{_INPUT[m]}" for l in range(n_layers) for m in _INPUT}
                     | {f"blocks.{l}.{m}.hook_out" for l in range(n_layers) for m in _INPUT})
    acts, grads = _forward_backward(model, batch, linears)
    return _informative(model, delta, acts, grads).sum(1).mean(0)


class _Leaves:
    """A parameter intervention that puts fresh leaf tensors (copies of the weights) in place, so a
    backward gives the gradient of those parameters alone and the model's own get no .grad."""

    def __init__(self, leaves: dict[str, Tensor]):
        self.leaves = leaves

    @property
    def params(self) -> tuple[str, ...]:
        return tuple(self.leaves)

    def weight(self, name: str, value: Tensor) -> Tensor:
        return self.leaves[name]


def per_component_backward(model, delta: Delta, facts: Facts) -> Tensor:
    """The reference: [layer, unit] informative scores with one backward per component, each the
    gradient of the loss with respect to that component's parameters only, dotted with its delta
    (heads through their slices of q/k/v/o; grouped key/value heads split as above)."""
    batch = encode(model, facts)
    tokens = batch.tokens.to(model.cfg.device)
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    params = dict(model.named_parameters())
    out = torch.zeros(n_layers, 1 + n_heads)
    by_unit: dict[tuple[int, int], list[tuple[str, str]]] = {}
    for name in delta.deltas:
        layer, _, kind = _linear_of(name)
        units = [0] if kind == "mlp" else range(1, 1 + n_heads)
        for u in units:
            by_unit.setdefault((layer, u), []).append((name, kind))
    for (layer, u), members in by_unit.items():
        names = [nm for nm, _ in members]
        leaves = {nm: params[nm].detach().clone().requires_grad_(True) for nm in names}
        with torch.enable_grad(), run.intervened(model, [_Leaves(leaves)]):
            loss = _option_loss(model(tokens), batch).sum() / len(facts)
            grads = torch.autograd.grad(loss, [leaves[nm] for nm in names])
        total = 0.0
        for (nm, kind), g in zip(members, grads):
            dw = delta.deltas[nm].to(g)
            if kind == "mlp":
                total += float((g * dw).sum())
                continue
            h = u - 1
            if "o_proj" in nm:
                d = g.shape[1] // n_heads
                total += float((g[:, h * d:(h + 1) * d] * dw[:, h * d:(h + 1) * d]).sum())
            else:
                rows = g.shape[0]
                group = n_heads // (rows // model.cfg.d_head)
                kv = h // group
                d = model.cfg.d_head
                total += float((g[kv * d:(kv + 1) * d] * dw[kv * d:(kv + 1) * d]).sum()) / group
        out[layer, u] = -total
    return out

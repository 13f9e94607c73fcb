"""The attribution graph of one prompt: the `AttributionGraph` result, influence, pruning, scores.

Nodes come in four kinds, stored in this order (circuit-tracer's order):

    feature  an active transcoder feature: layer, position, feature id, activation
    error    what a layer's transcoder misses at a position (true MLP output - reconstruction)
    token    the input embedding of the prompt token at a position
    logit    an output logit at the last position (vocab id; `prob` is its probability)

`adjacency[t, s]` is the direct linear effect of source s on target t in the prompt's local
replacement model (attention patterns and norm scales frozen from the clean run, transcoders in
place of MLPs, errors added back; `interp.features.attribute`): the change of t's input (a
feature's pre-activation, or the logit) per unit of s, times s's activation. Tokens and errors have
no inputs (zero rows). Where `meta["baseline"] == "mean"` a logit node is the logit minus the mean
logit over the vocabulary (circuit-tracer's demeaned unembedding); a token baseline makes it the
logit difference to that token.

Influence, pruning and the two scores follow circuit-tracer (`graph.py`) and Ameisen et al. 2025
("Circuit Tracing"): with Â the row-normalised |adjacency| (each target's inputs sum to 1) and w
the logit nodes' probabilities, a node's influence is w (Â + Â² + ...) at that node (the share of
the logits it reaches through every path). The replacement score is the token nodes' influence
over that of tokens and errors together (1: tokens reach the logits only through features);
the completeness score is the influence-weighted mean, over all nodes, of the share of each node's
inputs that does not come from error nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor

from interp.errors import InterpError
from interp.results import Grid
from interp.files.storage import result
from interp.files.validate import tensor

__all__ = ["KINDS", "AttributionGraph", "cumulative", "influence", "normalized", "threshold_of"]

KINDS: tuple[str, ...] = ("feature", "error", "token", "logit")
FEATURE, ERROR, TOKEN, LOGIT = range(4)


# ---------------------------------------------------------------------------------------------
# pure tensor functions


def normalized(adjacency: Float[Tensor, "node node"]) -> Float[Tensor, "node node"]:
    """|adjacency| with each row (a target's inputs) summing to 1; all-zero rows stay zero."""
    a = adjacency.abs()
    return a / a.sum(1, keepdim=True).clamp(min=1e-10)


def influence(norm: Float[Tensor, "node node"], weights: Float[Tensor, " node"], max_iter: int = 1000) -> Float[Tensor, " node"]:
    """weights @ (Â + Â² + ...): every node's influence on the weighted targets through all paths.
    Â of a graph without cycles is nilpotent, so the series ends (after at most its depth)."""
    step = weights.to(norm.dtype) @ norm
    total = step.clone()
    for _ in range(max_iter):
        if not bool(step.any()):
            return total
        step = step @ norm
        total += step
    raise InterpError(f"influence did not converge in {max_iter} steps: the adjacency has a cycle (a graph must be acyclic)")


def cumulative(scores: Float[Tensor, " node"]) -> Float[Tensor, " node"]:
    """Each node's cumulative share of the total score when nodes are taken largest first
    (Neuronpedia's `influence` field): the top node has its own share, the last has 1."""
    order = torch.argsort(scores, descending=True)
    total = scores.sum()
    share = torch.cumsum(scores[order], 0) / (total if total > 0 else 1.0)
    out = torch.zeros_like(scores)
    out[order] = share
    return out


def threshold_of(scores: Float[Tensor, "..."], fraction: float) -> float:
    """The smallest score among the top scores that together hold `fraction` of the total: keeping
    every score >= it keeps that share (circuit-tracer's find_threshold)."""
    ordered = torch.sort(scores.flatten(), descending=True).values
    total = ordered.sum()
    if total <= 0:
        return float("inf")  # nothing carries influence: keep nothing by score
    share = torch.cumsum(ordered, 0) / total
    i = min(int(torch.searchsorted(share, torch.tensor(fraction, dtype=share.dtype))), len(ordered) - 1)
    return float(ordered[i])


# ---------------------------------------------------------------------------------------------
# the result


@result
@dataclass(frozen=True, eq=False)
class AttributionGraph:
    """Nodes (one entry per node in each vector, kinds in KINDS order) and their direct effects.

    adjacency [target, source]; kind: index into KINDS; layer: -1 for tokens, n_layers for logits;
    pos: prompt position; index: feature id (features), vocab id (tokens, logits), -1 (errors);
    activation: a feature's activation (0 elsewhere); prob: a logit's probability, the weight it
    carries in influence (0 elsewhere); tokens: the prompt's token strings; model: the model's
    name; influence: each node's cumulative influence in the unpruned graph (set by `prune`);
    labels: node id -> a feature's label (Neuronpedia's "clerp"); meta: n_layers, prompt, baseline,
    thresholds, timings.
    """

    adjacency: Float[Tensor, "node node"]
    kind: Int[Tensor, " node"]
    layer: Int[Tensor, " node"]
    pos: Int[Tensor, " node"]
    index: Int[Tensor, " node"]
    activation: Float[Tensor, " node"]
    prob: Float[Tensor, " node"]
    tokens: tuple[str, ...]
    model: str = ""
    influence: Float[Tensor, " node"] | None = None
    labels: dict[str, str] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = self.kind.shape[0] if self.kind.ndim == 1 else -1
        if self.adjacency.shape != (n, n):
            raise InterpError(f"adjacency has shape {tuple(self.adjacency.shape)}; want [{n}, {n}] for {n} nodes")
        for name in ("layer", "pos", "index", "activation", "prob") + (("influence",) if self.influence is not None else ()):
            got = getattr(self, name)
            if got.shape != (n,):
                raise InterpError(f"{name} has shape {tuple(got.shape)}; want [{n}] (one entry per node)")
        if n and (int(self.kind.min()) < 0 or int(self.kind.max()) >= len(KINDS) or bool((self.kind.diff() < 0).any())):
            raise InterpError(f"kind must hold codes 0..3 ({', '.join(KINDS)}) in that order, got {self.kind.tolist()[:20]}")
        n_layers = self.meta.get("n_layers")
        if isinstance(n_layers, bool) or not isinstance(n_layers, int) or n_layers < 0:
            raise InterpError(f"meta needs 'n_layers' (the model's layer count: logit nodes sit above the last layer), "
                              f"an int >= 0; got {n_layers!r}")
        self._check_values(n, n_layers)
        object.__setattr__(self, "tokens", tuple(self.tokens))

    def _check_values(self, n: int, n_layers: int) -> None:
        """Every number finite, ids integers, positions inside the prompt, layers inside the model:
        so a graph read from a file cannot break a view or a score later."""
        for name in ("adjacency", "activation", "prob") + ("influence",) * (self.influence is not None):
            tensor(getattr(self, name), "AttributionGraph", name, floating=True)
        for name in ("kind", "layer", "pos", "index"):
            got = getattr(self, name)
            if got.is_floating_point() or got.is_complex():
                raise InterpError(f"AttributionGraph: {name} has dtype {got.dtype}; want an integer dtype")
        if not isinstance(self.tokens, (tuple, list)) or not all(isinstance(t, str) for t in self.tokens):
            raise InterpError("AttributionGraph: tokens must be a sequence of strings (the prompt's tokens)")
        named = [self.meta.get("logit_tokens", {}), self.labels]
        if not all(isinstance(d, dict) and all(isinstance(v, str) for v in d.values()) for d in named):
            raise InterpError("AttributionGraph: meta['logit_tokens'] and labels must be dicts (id -> string)")
        if n and (int(self.pos.min()) < 0 or (self.tokens and int(self.pos.max()) >= len(self.tokens))):
            raise InterpError(f"AttributionGraph: positions run {int(self.pos.min())}..{int(self.pos.max())}; want "
                              f"0..{len(self.tokens) - 1} (inside the prompt of {len(self.tokens)} tokens)")
        if n and (int(self.layer.min()) < -1 or int(self.layer.max()) > n_layers):
            raise InterpError(f"AttributionGraph: layers run {int(self.layer.min())}..{int(self.layer.max())}; want "
                              f"-1 (tokens) .. {n_layers} (logits) for a model of {n_layers} layers")

    # -- nodes

    def __len__(self) -> int:
        return self.kind.shape[0]

    def of(self, kind: str) -> Tensor:
        """Indices of the nodes of one kind (feature, error, token, logit)."""
        if kind not in KINDS:
            raise InterpError(f"kind {kind!r} is not one of {KINDS}")
        return torch.nonzero(self.kind == KINDS.index(kind)).flatten()

    @cached_property
    def ids(self) -> list[str]:
        """Neuronpedia node ids: feature "{layer}_{feature}_{pos}", error "0_{layer}_{pos}",
        token "E_{vocab id}_{pos}", logit "{n_layers + 1}_{vocab id}_{pos}" (circuit-tracer's). An
        error id that equals a layer-0 feature's (feature number = the error's layer) becomes
        "err_{layer}_{pos}", so ids stay unique."""
        top = self.meta["n_layers"] + 1
        fmt = {FEATURE: "{l}_{i}_{p}", ERROR: "0_{l}_{p}", TOKEN: "E_{i}_{p}", LOGIT: str(top) + "_{i}_{p}"}
        rows = list(zip(self.kind.tolist(), self.layer.tolist(), self.index.tolist(), self.pos.tolist()))
        out = [fmt[k].format(l=l, i=i, p=p) for k, l, i, p in rows]
        features = {x for x, (k, *_) in zip(out, rows) if k == FEATURE}
        return [f"err_{l}_{p}" if k == ERROR and x in features else x for x, (k, l, i, p) in zip(out, rows)]

    def find(self, node_id: str) -> int:
        """The index of the node with this Neuronpedia id."""
        try:
            return self.ids.index(node_id)
        except ValueError:
            raise InterpError(f"no node {node_id!r} in this graph; e.g. {self.ids[:3]} ... {self.ids[-2:]}") from None

    def feature(self, layer: int, feature: int, pos: int) -> int:
        """The index of a feature node, or InterpError when it is not in the graph."""
        return self.find(f"{layer}_{feature}_{pos}")

    def describe(self, i: int) -> str:
        """A short readable name: "L3 #123 @5 'Paris'", "err L3 @5", "tok @5 'Paris'", "logit ' Paris' p=0.41"."""
        k, layer, p, idx = int(self.kind[i]), int(self.layer[i]), int(self.pos[i]), int(self.index[i])
        tok = repr(self.tokens[p]) if 0 <= p < len(self.tokens) else "?"
        if k == FEATURE:
            label = self.labels.get(self.ids[i])
            return f"L{layer} #{idx} @{p} {tok}" + (f" ({label})" if label else "")
        if k == ERROR:
            return f"err L{layer} @{p} {tok}"
        if k == TOKEN:
            return f"tok @{p} {tok}"
        name = self.meta.get("logit_tokens", {}).get(str(idx), str(idx))
        return f"logit {name!r} p={float(self.prob[i]):.3g}"

    # -- influence, scores, pruning, paths

    def node_influence(self) -> Tensor:
        """Every node's influence on the logits (weighted by their probabilities) in this graph."""
        return influence(normalized(self.adjacency), self.prob)

    def scores(self) -> dict[str, float]:
        """circuit-tracer's replacement and completeness scores of this graph (module docstring)."""
        norm = normalized(self.adjacency)
        inf = influence(norm, self.prob)
        err, tok = self.kind == ERROR, self.kind == TOKEN
        token_inf, error_inf = float(inf[tok].sum()), float(inf[err].sum())
        out_inf = inf + self.prob
        unexplained = norm[:, err].sum(1)
        return {
            "replacement": token_inf / (token_inf + error_inf) if token_inf + error_inf > 0 else float("nan"),
            "completeness": float(((1 - unexplained) * out_inf).sum() / out_inf.sum()),
        }

    def prune(self, node_threshold: float = 0.8, edge_threshold: float = 0.98) -> AttributionGraph:
        """The subgraph circuit-tracer keeps: nodes holding `node_threshold` of the total influence
        (tokens and logits always), then edges holding `edge_threshold` of the edge influence among
        them, then, until nothing changes, features and errors with no kept outgoing edge and
        features with no kept incoming edge dropped. `influence` is set to every kept node's
        cumulative influence in this graph (Neuronpedia's field)."""
        for name, v in (("node_threshold", node_threshold), ("edge_threshold", edge_threshold)):
            if not isinstance(v, (int, float)) or not 0.0 <= v <= 1.0:
                raise InterpError(f"{name} must be a fraction in [0, 1], got {v!r}")
        a = self.adjacency
        node_inf = influence(normalized(a), self.prob)
        always = (self.kind == TOKEN) | (self.kind == LOGIT)
        keep = (node_inf >= threshold_of(node_inf, node_threshold)) | always
        kept = a * keep[:, None] * keep[None, :]
        norm = normalized(kept)
        edge_scores = norm * (influence(norm, self.prob) + self.prob)[:, None]
        edges = (edge_scores >= threshold_of(edge_scores, edge_threshold)) & (kept != 0)
        inner, feats = ~always, self.kind == FEATURE
        while True:
            before = keep.clone()
            keep &= ~inner | edges.any(0)  # features and errors need a kept outgoing edge
            keep &= ~feats | edges.any(1)  # features need a kept incoming edge
            edges &= keep[:, None] & keep[None, :]
            if bool((keep == before).all()):
                break
        idx = torch.nonzero(keep).flatten()
        sub = (a * edges)[idx][:, idx]
        meta = {**self.meta, "node_threshold": node_threshold, "edge_threshold": edge_threshold,
                "nodes_before_pruning": len(self)}
        return replace(self, adjacency=sub, kind=self.kind[idx], layer=self.layer[idx], pos=self.pos[idx],
                       index=self.index[idx], activation=self.activation[idx], prob=self.prob[idx],
                       influence=cumulative(node_inf)[idx], labels={k: v for k, v in self.labels.items()
                                                                   if k in {self.ids[i] for i in idx.tolist()}},
                       meta=meta)

    def path(self, target: int | None = None) -> list[int]:
        """The strongest path into `target` (a node index; default the most probable logit): the
        token- or error-started path whose product of normalised edge weights (its share of the
        target's influence) is largest. Node indices, source first."""
        if target is None:
            logits = self.of("logit")
            if not len(logits):
                raise InterpError("the graph has no logit node; pass a target node index")
            target = int(logits[self.prob[logits].argmax()])
        norm = normalized(self.adjacency)
        # nodes in layer order are in topological order: an edge always climbs at least one layer
        order = sorted(range(len(self)), key=lambda i: (int(self.layer[i]), int(self.kind[i])))
        score = torch.full((len(self),), float("-inf"), dtype=torch.float64)
        back = [-1] * len(self)
        logn = torch.log(norm.double())
        for t in order:
            row = logn[t] + score
            s = int(row.argmax())
            if bool(norm[t].any()) and torch.isfinite(row[s]):
                score[t], back[t] = row[s], s
            else:
                score[t] = 0.0  # a start: tokens, errors (no inputs)
        out, node = [], int(target)
        while node != -1:
            out.append(node)
            node = back[node]
        return out[::-1]

    # -- views

    def to_grid(self, n: int = 30) -> Grid:
        """The n nodes of largest influence on the logits, as bars."""
        inf = self.node_influence()
        top = torch.argsort(inf, descending=True)[: min(n, len(self))]
        labels = tuple(self.describe(int(i)) for i in top)
        return Grid(inf[top], ("node",), (labels,), {"model": self.model, "chart": "bar",
                                                     "title": f"influence on the logits ({self.model or 'model'})"})

    def __repr__(self) -> str:
        counts = ", ".join(f"{int((self.kind == c).sum())} {k}s" for c, k in enumerate(KINDS))
        prompt = self.meta.get("prompt") or "".join(self.tokens)
        return (f"AttributionGraph({self.model or 'model'}, {prompt!r}: {counts}, "
                f"{int((self.adjacency != 0).sum())} edges)")

    def __eq__(self, other: object) -> bool:
        """Same nodes, edges (to float32 precision), tokens, model, labels and meta."""
        if not isinstance(other, AttributionGraph) or len(self) != len(other):
            return False
        same = all(torch.equal(getattr(self, k), getattr(other, k)) for k in ("kind", "layer", "pos", "index"))
        close = all(torch.allclose(getattr(self, k).float(), getattr(other, k).float(), rtol=1e-6, atol=1e-7)
                    for k in ("adjacency", "activation", "prob"))
        inf = (self.influence is None) == (other.influence is None) and (
            self.influence is None or torch.allclose(self.influence.float(), other.influence.float(), rtol=1e-6, atol=1e-7))
        return bool(same and close and inf and self.tokens == other.tokens and self.model == other.model
                    and self.labels == other.labels and self.meta == other.meta)

    __hash__ = None  # type: ignore[assignment]

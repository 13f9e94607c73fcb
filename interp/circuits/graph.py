"""The computational graph of a transformer as edges with scores: the `Graph` result.

Nodes (the names are a small grammar that the circuit view parses; keep it exactly):

    senders    "embed"             token + positional embeddings
               "a{L}.h{H}"         attention head H of layer L (query-head index)
               "m{L}"              the MLP of layer L
    receivers  "a{L}.h{H}.q"       the query input of head H
               "a{L}.g{G}.k"       the key input of KV group G     (G = H on non-GQA models,
               "a{L}.g{G}.v"       the value input of KV group G    G = H // (n_heads // n_kv_heads))
               "m{L}"              the MLP input
               "logits"            the unembedding input (after the final norm)

An edge is one sender's output reaching one receiver's input through the residual stream, so
every sender feeds every receiver downstream of it: a head of layer L feeds the MLP of layer L
and everything of later layers; an MLP of layer L feeds layers > L and the logits.

`Graph.scores` are signed: the (estimated or exact) change of the task metric when the sender's
corrupt output reaches only that receiver on the clean run, metric(clean, edge corrupted) −
metric(clean) (`meta["convention"]`). On IOI (logit difference) the important edges are negative.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache
from typing import Any, NamedTuple

import torch
from jaxtyping import Float
from torch import Tensor

from interp.errors import InterpError
from interp.results import Grid, result

__all__ = ["CONVENTION", "Graph", "Node", "edge_list", "nearest", "node", "receiver_nodes", "sender_nodes"]

CONVENTION = "metric(clean with the edge's sender output corrupted toward that receiver only) - metric(clean)"

_PATTERNS = (
    ("embed", re.compile(r"embed")),
    ("head", re.compile(r"a(\d+)\.h(\d+)")),
    ("q", re.compile(r"a(\d+)\.h(\d+)\.q")),
    ("k", re.compile(r"a(\d+)\.g(\d+)\.k")),
    ("v", re.compile(r"a(\d+)\.g(\d+)\.v")),
    ("mlp", re.compile(r"m(\d+)")),
    ("logits", re.compile(r"logits")),
)


class Node(NamedTuple):
    """A parsed node name: its role (embed/head/q/k/v/mlp/logits), its layer (-1 for embed,
    n_layers for logits when known, else a large number), and index (head H for head/q, group G
    for k/v). "role", not "kind": in interp "kind" means a site's activation layout (interp.sites)."""

    name: str
    role: str
    layer: int
    index: int | None

    @property
    def order(self) -> float:
        """Position in the forward pass: everything of layer L's attention reads before any head of
        layer L writes; the MLP of layer L reads after them. An edge needs order(s) < order(r)."""
        if self.role == "embed":
            return -1.0
        if self.role == "logits":
            return float("inf")
        if self.role == "head":
            return 2 * self.layer + 0.5
        if self.role == "mlp":
            return 2 * self.layer + 1.0  # as a receiver it reads after the heads; as a sender it writes at +1.5
        return 2 * self.layer + 0.0  # q, k, v inputs


@lru_cache(maxsize=65536)
def _parse(name: str) -> Node | None:
    for role, pat in _PATTERNS:
        m = pat.fullmatch(name)
        if m:
            nums = [int(x) for x in m.groups()]
            layer = -1 if role == "embed" else (10**9 if role == "logits" else nums[0])
            return Node(name, role, layer, nums[1] if len(nums) > 1 else None)
    return None


def node(name: str) -> Node:
    """Parse a node name of the grammar above; InterpError naming the grammar if it is not one."""
    parsed = _parse(name) if isinstance(name, str) else None
    if parsed is not None:
        return parsed
    raise InterpError(
        f"{name!r} is not a node name; nodes are 'embed', 'a{{L}}.h{{H}}' (head), 'm{{L}}' (MLP), "
        f"'a{{L}}.h{{H}}.q', 'a{{L}}.g{{G}}.k', 'a{{L}}.g{{G}}.v' (head inputs) and 'logits'"
    )


def _sender_order(n: Node) -> float:
    return 2 * n.layer + 1.5 if n.role == "mlp" else n.order


def _check_shape(n_layers: int, n_heads: int, n_kv_heads: int) -> None:
    if not (isinstance(n_layers, int) and isinstance(n_heads, int) and isinstance(n_kv_heads, int)):
        raise InterpError(f"n_layers, n_heads, n_kv_heads must be ints, got {n_layers!r}, {n_heads!r}, {n_kv_heads!r}")
    if n_layers < 1 or n_heads < 1 or n_kv_heads < 1 or n_heads % n_kv_heads:
        raise InterpError(
            f"n_layers={n_layers}, n_heads={n_heads}, n_kv_heads={n_kv_heads}: need positive counts and "
            f"n_heads a multiple of n_kv_heads"
        )


def sender_nodes(n_layers: int, n_heads: int, n_kv_heads: int | None = None) -> list[str]:
    """All senders in forward order: embed, then per layer its heads and its MLP."""
    _check_shape(n_layers, n_heads, n_kv_heads or n_heads)
    out = ["embed"]
    for layer in range(n_layers):
        out += [f"a{layer}.h{h}" for h in range(n_heads)] + [f"m{layer}"]
    return out


def receiver_nodes(n_layers: int, n_heads: int, n_kv_heads: int | None = None) -> list[str]:
    """All receivers in forward order: per layer, grouped by head (per KV group G: the q inputs of
    its query heads, then its k and v), then the layer's MLP; last the logits."""
    n_kv_heads = n_kv_heads or n_heads
    _check_shape(n_layers, n_heads, n_kv_heads)
    per = n_heads // n_kv_heads
    out = []
    for layer in range(n_layers):
        for g in range(n_kv_heads):
            out += [f"a{layer}.h{h}.q" for h in range(g * per, (g + 1) * per)]
            out += [f"a{layer}.g{g}.k", f"a{layer}.g{g}.v"]
        out.append(f"m{layer}")
    return out + ["logits"]


def edge_list(n_layers: int, n_heads: int, n_kv_heads: int | None = None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(senders, receivers) of every edge of the full graph, grouped by receiver in forward order
    and, within one receiver, senders in forward order."""
    senders = [node(s) for s in sender_nodes(n_layers, n_heads, n_kv_heads)]
    snd, rcv = [], []
    for r in receiver_nodes(n_layers, n_heads, n_kv_heads):
        ro = node(r).order
        ups = [s.name for s in senders if _sender_order(s) < ro]
        snd += ups
        rcv += [r] * len(ups)
    return tuple(snd), tuple(rcv)


def nearest(name: str, valid: list[str] | tuple[str, ...], what: str = "node") -> InterpError:
    """The error for an unknown name, listing the closest valid ones."""
    close = difflib.get_close_matches(str(name), list(valid), n=5, cutoff=0.3) or list(valid)[:5]
    return InterpError(f"unknown {what} {name!r}; nearest valid: {', '.join(close)}")


@result
@dataclass(frozen=True)
class Graph:
    """Edges of a model's computational graph with one signed score each (see the module doc).

    `meta`: n_layers, n_heads, n_kv_heads, method ("eap", "eap-ig", "exact"), steps, metric,
    clean_metric, corrupt_metric, model, task, n_examples, convention, peak_memory (what the run
    took on its device, `interp.memory.peak`; EAP's also batch_size and pos_chunk); optionally
    "example": {"tokens": [...]} for the view. `patterns`: optional [layer, head, dest, src]
    attention of that example prompt.

        g.top(50)            the 50 edges with the largest |score|, as a Graph
        g.score("a0.h1", "a2.h3.q"), g.nodes, len(g), g.to_frame(), g.heads(), g.to_grid()
    """

    senders: tuple[str, ...]
    receivers: tuple[str, ...]
    scores: Float[Tensor, " edge"]
    meta: dict[str, Any] = field(default_factory=dict)
    patterns: Float[Tensor, "layer head dest src"] | None = None

    def __post_init__(self) -> None:
        senders, receivers = tuple(self.senders), tuple(self.receivers)
        object.__setattr__(self, "senders", senders)
        object.__setattr__(self, "receivers", receivers)
        scores = torch.as_tensor(self.scores).detach().float().cpu()  # cpu: a result
        if scores.ndim != 1 or not (len(senders) == len(receivers) == scores.shape[0]):
            raise InterpError(
                f"Graph needs one sender, receiver and score per edge; got {len(senders)} senders, "
                f"{len(receivers)} receivers, scores of shape {tuple(scores.shape)}"
            )
        object.__setattr__(self, "scores", scores)
        for k in ("n_layers", "n_heads", "n_kv_heads"):
            if k not in self.meta:
                raise InterpError(f"Graph meta needs {k!r} (has {sorted(self.meta)})")
        _check_shape(self.meta["n_layers"], self.meta["n_heads"], self.meta["n_kv_heads"])
        s_order = {s: _sender_order(node(s)) for s in self._senders_all}
        r_order = {r: node(r).order for r in self._receivers_all}
        for s, r in zip(senders, receivers):
            if s not in s_order:
                raise nearest(s, self._senders_all, "sender")
            if r not in r_order:
                raise nearest(r, self._receivers_all, "receiver")
            if s_order[s] >= r_order[r]:
                raise InterpError(f"edge {s} -> {r} goes backwards: {r} reads before {s} writes")
        if len(set(zip(senders, receivers))) != len(senders):
            from collections import Counter

            (s, r), _ = Counter(zip(senders, receivers)).most_common(1)[0]
            raise InterpError(f"edge {s} -> {r} appears twice")
        if self.patterns is not None:
            p = torch.as_tensor(self.patterns).detach().float().cpu()  # cpu: a result
            nl, nh = self.meta["n_layers"], self.meta["n_heads"]
            if p.ndim != 4 or p.shape[:2] != (nl, nh) or p.shape[2] != p.shape[3]:
                raise InterpError(f"patterns {tuple(p.shape)} must be [layer={nl}, head={nh}, dest, src] with dest == src")
            object.__setattr__(self, "patterns", p)

    # ---- the model's nodes --------------------------------------------------------------------

    @cached_property
    def _senders_all(self) -> list[str]:
        return sender_nodes(self.meta["n_layers"], self.meta["n_heads"], self.meta["n_kv_heads"])

    @cached_property
    def _receivers_all(self) -> list[str]:
        return receiver_nodes(self.meta["n_layers"], self.meta["n_heads"], self.meta["n_kv_heads"])

    @property
    def nodes(self) -> list[str]:
        """All node names of the model: senders in forward order, then the head inputs grouped by
        head (the MLPs are senders and receivers and are listed once), then "logits"."""
        senders = self._senders_all
        inputs = [r for r in self._receivers_all if node(r).role in ("q", "k", "v")]
        return senders + inputs + ["logits"]

    def __len__(self) -> int:
        return len(self.senders)

    def __repr__(self) -> str:
        m = self.meta
        what = ", ".join(f"{k}={m[k]!r}" for k in ("method", "model", "task") if k in m)
        shape = f"{m['n_layers']} layers x {m['n_heads']} heads" + (
            f" ({m['n_kv_heads']} KV)" if m["n_kv_heads"] != m["n_heads"] else "")
        if len(self):
            i = int(self.scores.abs().argmax())
            top = f"; top {self.senders[i]} -> {self.receivers[i]} {float(self.scores[i]):+.4g}"
        else:
            top = ""
        return f"Graph({len(self)} edges, {shape}{', ' + what if what else ''}{top})"

    # ---- selection ----------------------------------------------------------------------------

    def index(self, sender: str, receiver: str) -> int:
        """Position of edge sender -> receiver; InterpError naming the nearest nodes if absent."""
        for name, valid in ((sender, self._senders_all), (receiver, self._receivers_all)):
            if name not in valid:
                raise nearest(name, valid, "sender" if valid is self._senders_all else "receiver")
        for i, (s, r) in enumerate(zip(self.senders, self.receivers)):
            if s == sender and r == receiver:
                return i
        raise InterpError(f"edge {sender} -> {receiver} is not in this graph ({len(self)} edges)")

    def score(self, sender: str, receiver: str) -> float:
        return float(self.scores[self.index(sender, receiver)])

    def order(self) -> Tensor:
        """Edge indices by descending |score| (ties by position, so the order is deterministic)."""
        return torch.sort(self.scores.abs(), descending=True, stable=True).indices

    def select(self, idx: Tensor | list[int]) -> Graph:
        """The graph restricted to these edge indices (in this order)."""
        idx = torch.as_tensor(idx, dtype=torch.long).reshape(-1)  # cpu: indices
        if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= len(self)):
            raise InterpError(f"edge indices must be in 0..{len(self) - 1}")
        pick = idx.tolist()
        return replace(self, senders=tuple(self.senders[i] for i in pick),
                       receivers=tuple(self.receivers[i] for i in pick), scores=self.scores[idx])

    def top(self, n: int) -> Graph:
        """The n edges with the largest |score| (all of them if n >= len)."""
        if not isinstance(n, int) or n < 0:
            raise InterpError(f"top(n) needs a non-negative int, got {n!r}")
        return self.select(self.order()[:n])

    # ---- views --------------------------------------------------------------------------------

    def to_frame(self):
        """pandas DataFrame: one row per edge, columns sender, receiver, score."""
        import pandas as pd

        return pd.DataFrame({"sender": list(self.senders), "receiver": list(self.receivers),
                             "score": self.scores.tolist()})

    edges_frame = to_frame

    def heads(self) -> Grid:
        """Per head, the summed |score| of the edges that touch it: as a sender, into its q input,
        and into its KV group's k and v inputs (shared evenly by the group's query heads, so on
        GQA models the total is not counted twice). A Grid [layer, head]."""
        nl, nh, nkv = self.meta["n_layers"], self.meta["n_heads"], self.meta["n_kv_heads"]
        per = nh // nkv
        out = torch.zeros(nl, nh)  # cpu: a result
        for s, r, v in zip(self.senders, self.receivers, self.scores.abs().tolist()):
            a, b = node(s), node(r)
            if a.role == "head":
                out[a.layer, a.index] += v
            if b.role == "q":
                out[b.layer, b.index] += v
            elif b.role in ("k", "v"):
                out[b.layer, b.index * per:(b.index + 1) * per] += v / per
        meta = {k: self.meta[k] for k in ("model", "task", "method", "metric") if k in self.meta}
        return Grid(out, ("layer", "head"), meta={**meta, "chart": "heatmap", "title": "summed |edge score| per head"})

    def to_grid(self, n: int = 30) -> Grid:
        """The n largest-|score| edges as bars (labels "sender->receiver")."""
        t = self.top(n)
        labels = tuple(f"{s}->{r}" for s, r in zip(t.senders, t.receivers))
        meta = {k: self.meta[k] for k in ("model", "task", "method", "metric") if k in self.meta}
        return Grid(t.scores, ("edge",), (labels,), {**meta, "chart": "bar",
                                                    "title": f"top {len(t)} of {len(self)} edges ({self.meta.get('method', '?')})"})

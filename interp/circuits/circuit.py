"""Circuits: a subset of a Graph's edges, selected by score, and how faithful it is.

    greedy(graph, n)               n edges grown from the logits (Hanna et al. 2024)
    graph.top(n)                   the n edges with the largest |score|
    faithfulness(model, task, c)   fraction of the clean-minus-corrupt metric the circuit recovers
    faithfulness_curve(...)        the same over circuit sizes, with the least edges for 80 / 90 %

Faithfulness runs the model on the clean inputs with every edge outside the circuit ablated: each
receiver's input loses the current outputs of its out-of-circuit senders and gets their reference
outputs instead (`AblateOutside`). "mean": the sender's output averaged over the corrupt inputs
(per position); "resample": the sender's output on each row's own corrupt input (the paired
counterfactual, so the empty circuit gives exactly the corrupt run); any other registered ablation
style that reads rows (`interp.interventions.AblationStyle`), built from the corrupt inputs. The
fraction recovered is

    (m(circuit) - m(corrupt)) / (m(clean) - m(corrupt))

(1: the circuit does all of the clean run's work; 0: no better than the corrupt run). With mean
ablation the empty circuit need not sit at 0; `meta["empty_recovered"]` says where it sits.
"""

from __future__ import annotations

import heapq
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from interp import run
from interp.circuits.eap import edge_index, task_baselines
from interp.circuits.graph import Graph, node
from interp.circuits.mib import MIB_FRACTIONS, areas, mib_sizes
from interp.circuits.wiring import Wiring, check_task, split_inputs
from interp.errors import InterpError
from interp.interventions import AblationStyle, StyleNames
from interp.metrics import for_task
from interp.results import Grid, result
from interp.tasks.base import Task, pad_id

__all__ = ["ABLATIONS", "AblateOutside", "Faithfulness", "Runner", "check_graph", "faithfulness", "faithfulness_curve", "greedy", "has_path", "prune"]

# the registered ablation styles that read rows (their reference is built from the corrupt rows here)
ABLATIONS = StyleNames(lambda style: style.reads is not None)


def _node_of(name: str, per: int) -> list[str]:
    """The graph nodes a receiver belongs to (a KV group's k and v belong to all its heads)."""
    n = node(name)
    if n.role == "q":
        return [f"a{n.layer}.h{n.index}"]
    if n.role in ("k", "v"):
        return [f"a{n.layer}.h{h}" for h in range(n.index * per, (n.index + 1) * per)]
    return [name]  # m{L}, logits


def has_path(graph: Graph) -> bool:
    """Whether the graph's edges connect the embeddings to the logits."""
    per = graph.meta["n_heads"] // graph.meta["n_kv_heads"]
    reached = {"embed"}
    # edges sorted by the receiver's forward position: one pass propagates reachability
    for s, r in sorted(zip(graph.senders, graph.receivers), key=lambda e: node(e[1]).order):
        if s in reached:
            reached.update(_node_of(r, per))
    return "logits" in reached


def prune(graph: Graph) -> Graph:
    """The edges of `graph` that lie on a path from the embeddings to the logits, in their order.
    An edge whose sender no edge of the graph reaches from `embed` carries a sender fed only
    ablated inputs, and one whose receiver's node reaches no logits cannot move the output; MIB
    prunes every circuit so before it evaluates it (its `apply_topn(..., prune=True)`)."""
    per = graph.meta["n_heads"] // graph.meta["n_kv_heads"]
    reached, useful = {"embed"}, {"logits"}
    for i in sorted(range(len(graph)), key=lambda i: node(graph.receivers[i]).order):  # forward
        if graph.senders[i] in reached:
            reached.update(_node_of(graph.receivers[i], per))
    for i in sorted(range(len(graph)), key=lambda i: -node(graph.senders[i]).order):  # backward
        if any(o in useful for o in _node_of(graph.receivers[i], per)):
            useful.add(graph.senders[i])
    keep = [i for i in range(len(graph))
            if graph.senders[i] in reached and any(o in useful for o in _node_of(graph.receivers[i], per))]
    return graph.select(keep)


def greedy(graph: Graph, n: int) -> Graph:
    """n edges chosen greedily from the logits backwards: each step adds the largest-|score| edge
    whose receiver belongs to a node already in the circuit (Hanna et al. 2024)."""
    if not isinstance(n, int) or n < 0:
        raise InterpError(f"greedy(graph, n) needs a non-negative int n, got {n!r}")
    per = graph.meta["n_heads"] // graph.meta["n_kv_heads"]
    into: dict[str, list[int]] = {}  # node -> edges into its receivers
    for i, r in enumerate(graph.receivers):
        for owner in _node_of(r, per):
            into.setdefault(owner, []).append(i)
    score = graph.scores.abs().tolist()
    heap: list[tuple[float, int]] = []
    inside, chosen, queued = set(), [], set()

    def enter(name: str) -> None:
        if name in inside:
            return
        inside.add(name)
        for i in into.get(name, ()):
            if i not in queued:
                queued.add(i)
                heapq.heappush(heap, (-score[i], i))

    enter("logits")
    while heap and len(chosen) < n:
        _, i = heapq.heappop(heap)
        chosen.append(i)
        enter(graph.senders[i])
    return graph.select(chosen)


@dataclass(frozen=True)
class AblateOutside:
    """Every edge not in `keep` ablated: each receiver's input gets, for each out-of-circuit
    sender, its reference output instead of its live one (see the module docstring).

    `keep` [sender, receiver] bool over the model's full sender/receiver lists (entries that are
    not edges are ignored); `reference` the senders' reference outputs, [pos, sender, d_model]
    (mean: one for every row) or [batch, pos, sender, d_model] (resample: one per row).

    A receiver's input is the sum of its upstream senders' live outputs (plus biases), so with
    diff_s = live_s - reference_s and D the running sum of diff over the senders so far,

        ablated input = input - D + sum over kept senders s of diff_s

    which costs one subtraction per receiver site plus one term per kept edge, however large the
    model. The running forward's diffs are kept in `state` as the forward passes the senders (a
    forward meets every sender before the receivers it feeds)."""

    wiring: Wiring
    keep: Tensor
    reference: Tensor
    state: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def sites(self) -> tuple[str, ...]:
        return (*self.wiring.sender_hooks, *self.wiring.receiver_hooks)

    @property
    def first_pos(self) -> int:
        return 0

    def _first_sender(self, site: str) -> int:
        """Index in `wiring.senders` of the first sender written at a sender site (embed 0, then
        per layer its heads and its MLP), or the number of senders upstream of a receiver site."""
        w = self.wiring
        if site == "blocks.0.hook_resid_pre":
            return 0
        if site.endswith("resid_post") and site in w.receiver_hooks:
            return len(w.senders)
        layer = int(site.split(".")[1])
        before = 1 + layer * (w.n_heads + 1)  # embed and every earlier layer
        return before + w.n_heads if site.endswith(("hook_mlp_out", "hook_mlp_in")) else before

    def _write(self, first: int, writes: Tensor) -> None:
        """Record senders first.. (writes [b, p, k, d]): their diffs and the running sum."""
        ref = self.reference[..., first:first + writes.shape[2], :].to(writes)
        diff = writes - ref
        st = self.state
        if "diff" not in st:
            st["diff"] = torch.zeros(*writes.shape[:2], len(self.wiring.senders), writes.shape[-1],
                                     dtype=writes.dtype, device=writes.device)
            st["sum"] = torch.zeros_like(writes[:, :, 0])
        st["diff"][:, :, first:first + writes.shape[2]] = diff
        st["sum"] = st["sum"] + diff.sum(2)

    def _kept(self, site: str, n_up: int) -> tuple[Tensor, Tensor]:
        """(rows, weights): the upstream senders kept toward any receiver of `site`, and which."""
        cache = self.state.setdefault("plans", {})
        if site not in cache:
            sub = self.keep[:n_up][:, self.wiring.slots(site)]  # [n_up, slots]
            rows = sub.any(1).nonzero().squeeze(1)
            cache[site] = (rows, sub[rows].float())
        return cache[site]

    def __call__(self, act: Tensor, *, site: str, start: int = 0) -> Tensor:
        w = self.wiring
        if start:
            raise InterpError("AblateOutside needs the whole forward (start=0)")
        if site == "blocks.0.hook_resid_pre":  # a new forward
            plans = self.state.get("plans")
            self.state.clear()
            if plans is not None:
                self.state["plans"] = plans
        if site in w.sender_hooks:  # record (not change) this sender's output
            if site.endswith("hook_z"):
                layer = int(site.split(".")[1])
                writes = w.head_out(layer, act)
                if w.post_norm:  # Gemma: the writes pass the post-attention norm, whose scale comes next
                    self.state["pending"] = writes
                else:
                    self._write(self._first_sender(site), writes)
            elif site.endswith("ln1_post.hook_scale"):
                layer = int(site.split(".")[1])
                self._write(1 + layer * (w.n_heads + 1), w.post_scaled(layer, self.state.pop("pending"), act))
            else:
                self._write(self._first_sender(site), act[:, :, None])
            return act
        n_up = self._first_sender(site)
        out = act - (self.state["sum"][:, :, None] if act.ndim == 4 else self.state["sum"])
        rows, weights = self._kept(site, n_up)
        if len(rows):
            back = torch.einsum("bpkd,kr->bprd", self.state["diff"][:, :, rows.to(act.device)], weights.to(act))
            out = out + (back if act.ndim == 4 else back[:, :, 0])
        return out


@result
@dataclass(frozen=True)
class Faithfulness:
    """Fraction of the clean-minus-corrupt metric recovered by the first `edges[i]` edges of a
    Graph's order, with every other edge ablated. `meta`: ablation, order ("top" / "signed" /
    "greedy"), clean_metric, corrupt_metric, empty_recovered, area_under and area_from_1 (MIB's
    areas of this curve, see `faithfulness_curve`), edges_80 and edges_90 (secondary: the least
    edges whose circuit recovers 80 / 90 %, None if no size does), total_edges, method."""

    edges: Tensor  # [size] int
    recovered: Tensor  # [size] float
    metric: Tensor  # [size] the metric itself
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        e, r, m = (torch.as_tensor(x) for x in (self.edges, self.recovered, self.metric))  # cpu: a result
        if not (e.ndim == r.ndim == m.ndim == 1 and len(e) == len(r) == len(m)):
            raise InterpError(f"edges {tuple(e.shape)}, recovered {tuple(r.shape)} and metric {tuple(m.shape)} must be one value per size")
        object.__setattr__(self, "edges", e.long())
        object.__setattr__(self, "recovered", r.float())
        object.__setattr__(self, "metric", m.float())

    def __repr__(self) -> str:
        m = self.meta
        area = lambda k: "–" if m.get(k) is None else f"{m[k]:.3f}"  # noqa: E731
        return (f"Faithfulness({len(self.edges)} sizes up to {int(self.edges.max()) if len(self.edges) else 0} edges, "
                f"{m.get('ablation')} ablation, {m.get('order')} order: area under f {area('area_under')}, "
                f"between f and 1 {area('area_from_1')})")

    def to_grid(self) -> Grid:
        meta = {k: self.meta[k] for k in ("model", "task", "method", "ablation", "order") if k in self.meta}
        return Grid(self.recovered[:, None], ("edges", "series"), (tuple(self.edges.tolist()), ("recovered",)),
                    {**meta, "chart": "lines", "title": "fraction of the clean-corrupt metric recovered",
                     "metric": "recovered"})


class Runner:
    """What every faithfulness measurement of one model and task shares: references, baselines.
    `measure(keeps)` runs the clean inputs once per keep matrix ([sender, receiver] bool, from
    `keep`) with every other edge ablated (`AblateOutside`), variants batched by `interp.run`."""

    def __init__(self, model, task: Task, ablation: str, progress: bool):
        if ablation not in ABLATIONS:
            raise InterpError(f"ablation={ablation!r} must be one of {ABLATIONS}")
        check_task(model, task)
        self.model, self.task, self.ablation, self.progress = model, task.to(model.cfg.device), ablation, progress
        self.wiring = Wiring(model)
        _, _, self.s_idx, self.r_idx = edge_index(self.wiring)
        self.metric = for_task(self.task)
        w = self.wiring
        with split_inputs(model):
            clean_logits, clean_acts = run.cache(model, self.task.clean, [*w.check_hooks, *w.split_check_hooks], answer_pos=self.task.answer_pos)
            w.check_additive(model, clean_acts)
            corrupt_logits, acts = run.cache(model, self.task.corrupt, w.sender_hooks, answer_pos=self.task.answer_pos)
        self.clean = run.scalar(self.metric, clean_logits, "clean")
        self.corrupt = run.scalar(self.metric, corrupt_logits, "corrupt")
        task_baselines(self.clean, self.corrupt)
        outs = w.sender_outputs(acts)  # [b, p, S, d]
        # the style's reference from the corrupt rows (padding excluded), as every position of the clean run reads it
        pad = pad_id(model)
        valid = torch.ones(self.task.corrupt.shape, dtype=torch.bool, device=outs.device)
        if pad is not None:
            valid = self.task.corrupt != pad
        valid[:, 0] = True
        style = AblationStyle.of(ablation)
        values = style.like(style.build(outs, valid, 1), outs, 0, 1)  # mean [p, S, d], resample [b, p, S, d]
        self.reference = values if values.ndim >= 3 else values.expand(outs.shape[1:])

    def keep(self, graph: Graph, n: int, order: Tensor) -> Tensor:
        """[sender, receiver] bool: the first n edges of `graph` in `order`."""
        w = self.wiring
        s_at, r_at = self._at()
        chosen = order[:n].tolist()
        rows = torch.tensor([s_at[graph.senders[i]] for i in chosen], dtype=torch.long, device=self.reference.device)
        cols = torch.tensor([r_at[graph.receivers[i]] for i in chosen], dtype=torch.long, device=self.reference.device)
        keep = torch.zeros(len(w.senders), len(w.receivers), dtype=torch.bool, device=self.reference.device)
        keep[rows, cols] = True  # one write, on the device the ablation runs on
        return keep

    def keep_heads(self, dropped: list[tuple[int, int]]) -> Tensor:
        """[sender, receiver] bool: every edge but those out of the `dropped` (layer, head)s, which
        ablates those heads' outputs (a node circuit, as MIB scores node-level circuits)."""
        w = self.wiring
        s_at, _ = self._at()
        rows = torch.tensor([s_at[f"a{layer}.h{head}"] for layer, head in dropped], dtype=torch.long,
                            device=self.reference.device)
        keep = torch.ones(len(w.senders), len(w.receivers), dtype=torch.bool, device=self.reference.device)
        keep[rows] = False
        return keep

    def _at(self) -> tuple[dict[str, int], dict[str, int]]:
        w = self.wiring
        return {s: i for i, s in enumerate(w.senders)}, {r: i for i, r in enumerate(w.receivers)}

    def measure(self, keeps: list[Tensor]) -> Tensor:
        variants = [[AblateOutside(self.wiring, k, self.reference)] for k in keeps]
        with split_inputs(self.model), warnings.catch_warnings():
            # the batched runner hands back a copy at every site it hooks, Gemma's hook_scale included;
            # TL then recomputes that norm from the (equal) hooked values and warns about rounding
            warnings.filterwarnings("ignore", message="A forward hook edited hook_scale")
            return run.evaluate(self.model, self.task.clean, variants, self.metric, answer_pos=self.task.answer_pos,
                                variants_per_forward=min(8, max(1, len(keeps))), progress=self.progress,
                                desc="faithfulness")

    def recovered(self, values: Tensor) -> Tensor:
        return (values - self.corrupt) / (self.clean - self.corrupt)


def check_graph(model, graph: Graph) -> None:
    w = Wiring(model)
    if not isinstance(graph, Graph):
        raise InterpError(f"a circuit is a Graph (e.g. graph.top(n)), got {type(graph).__name__}")
    if (graph.meta["n_layers"], graph.meta["n_heads"], graph.meta["n_kv_heads"]) != (w.n_layers, w.n_heads, w.n_kv):
        raise InterpError(f"the graph is of a model with {graph.meta['n_layers']} layers x {graph.meta['n_heads']} heads "
                          f"({graph.meta['n_kv_heads']} KV), not this one ({w.n_layers} x {w.n_heads}, {w.n_kv} KV)")


def faithfulness(model, task: Task, circuit: Graph, *, ablation: str = "mean", progress: bool = False) -> float:
    """Fraction of the clean-minus-corrupt metric that `circuit` (every edge of the Graph) recovers
    with every other edge ablated. InterpError if no path joins the embeddings to the logits."""
    check_graph(model, circuit)
    if not has_path(circuit):
        raise InterpError(f"the circuit's {len(circuit)} edges have no path from 'embed' to 'logits', so it computes "
                          "nothing from the input; add edges (e.g. a larger graph.top(n) or greedy(graph, n))")
    r = Runner(model, task, ablation, progress)
    return float(r.recovered(r.measure([r.keep(circuit, len(circuit), torch.arange(len(circuit)))]))[0])  # cpu: graph order


def faithfulness_curve(model, task: Task, graph: Graph, *, ablation: str = "mean", order: str = "top",
                       sizes: list[int] | None = None, targets: tuple[float, ...] = (0.8, 0.9),
                       progress: bool = True) -> Faithfulness:
    """Fraction recovered by the first n edges of `graph` (by |score| for order="top", by signed
    score toward the corrupt run for "signed", in greedy order for "greedy") for each n in `sizes`
    (default 0 and MIB's sizes, floor(p * edges) for p in `scores.MIB_FRACTIONS`). The headline,
    MIB's areas of this one curve: meta["area_under"] (trapezoids of f = (m - m(empty)) /
    (m(clean) - m(empty)) over MIB's fractions: CPR when order="signed") and meta["area_from_1"]
    (of |1 - f|: CMD when order="top"); None unless the curve has every MIB size. MIB prunes its
    circuits (`prune`) and this curve does not: `scores.circuit_scores` gives MIB's numbers.
    Secondary, kept for saved files and scripts: the least n reaching each of `targets`
    (meta["edges_80"], meta["edges_90"], ...), the first crossing refined by bisection (one
    forward per step; the sizes it measured join the curve). `targets=()` measures the sizes only."""
    check_graph(model, graph)
    t0 = time.perf_counter()
    if order == "top":
        idx = graph.order()
    elif order == "signed":
        sign = 1.0 if graph.meta.get("corrupt_metric", 0.0) > graph.meta.get("clean_metric", 0.0) else -1.0
        idx = torch.sort(graph.scores * sign, descending=True, stable=True).indices
    elif order == "greedy":
        chosen = greedy(graph, len(graph))
        at = {(s, r): i for i, (s, r) in enumerate(zip(graph.senders, graph.receivers))}
        idx = torch.tensor([at[e] for e in zip(chosen.senders, chosen.receivers)], dtype=torch.long)  # cpu: graph indices
    else:
        raise InterpError(f"order={order!r} must be 'top', 'signed' or 'greedy'")
    total = len(idx)
    mib = mib_sizes(total)
    sizes = sorted({0, *mib}) if sizes is None else sorted({int(s) for s in sizes})
    if not sizes or sizes[0] < 0 or sizes[-1] > total:
        raise InterpError(f"sizes must be edge counts in 0..{total}, got {sizes}")
    r = Runner(model, task, ablation, progress)
    values = r.measure([r.keep(graph, n, idx) for n in sizes])
    found = dict(zip(sizes, values.tolist()))

    def least(target: float) -> int | None:
        ks = sorted(found)
        above = [k for k in ks if r.recovered(torch.tensor(found[k])) >= target]  # cpu: host floats
        if not above:
            return None
        hi = above[0]
        lo = max([k for k in ks if k < hi], default=-1)
        while hi - lo > 1:  # invariant: lo is below target (or -1), hi reaches it
            mid = (lo + hi) // 2
            if mid not in found:
                found[mid] = float(r.measure([r.keep(graph, mid, idx)])[0])
            if r.recovered(torch.tensor(found[mid])) >= target:  # cpu: a host float
                hi = mid
            else:
                lo = mid
        return hi

    least_edges = {f"edges_{round(100 * t):d}": least(t) for t in targets}
    ks = sorted(found)
    vals = torch.tensor([found[k] for k in ks])  # cpu: host floats
    under = from_1 = None
    if 0 in found and all(n in found for n in mib):
        f = [(found[n] - found[0]) / (r.clean - found[0]) for n in mib]
        under, from_1 = areas(MIB_FRACTIONS, f)
    meta = {k: graph.meta[k] for k in ("model", "task", "method", "steps", "metric", "n_examples") if k in graph.meta}
    meta.update({"ablation": ablation, "order": order, "clean_metric": r.clean, "corrupt_metric": r.corrupt,
                 "empty_recovered": float(r.recovered(vals[0:1])[0]) if ks[0] == 0 else None,
                 "area_under": under, "area_from_1": from_1,
                 "edges_80": None, "edges_90": None, **least_edges, "total_edges": total,
                 "seconds": time.perf_counter() - t0})
    return Faithfulness(torch.tensor(ks), r.recovered(vals), vals, meta)  # cpu: a result

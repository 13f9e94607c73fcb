"""Circuit scores as the Mechanistic Interpretability Benchmark reports them (MIB; Mueller et al. 2025).

    grid = circuits.circuit_scores(model, task, {"eap": g1, "eap-ig": g2, "exact": g3}, random=3)
    grid.meta["cpr"]["eap-ig"], grid.meta["cmd"]["eap-ig"]      # and plot.render(grid): f vs circuit size
    grid = circuits.head_circuit_scores(model, task, {"mask": log_alpha})   # heads ranked by a score

The rules are MIB's circuit track (`MIB_circuit_track/evaluation.py`, `print_results.py`):

- sizes: for each fraction p of `MIB_FRACTIONS` (0.1 %, 0.2 %, 0.5 %, 1 %, 2 %, 5 %, 10 %, 20 %,
  50 %, 100 %) the circuit is the first floor(p * N) of the model's N edges (of its heads, for
  head rankings) in the ranking, and an edge circuit is pruned to the edges on a path from the
  embeddings to the logits (`circuit.prune`);
- faithfulness f(C) = (m(C) - m(empty)) / (m(N) - m(empty)): m the task's metric (logit difference
  on IOI) averaged over the examples, m(N) the unablated model on the clean inputs, m(empty) the
  empty circuit under the same ablation;
- ablation: an edge outside the circuit carries its sender's output on the row's own counterfactual
  (corrupt) input, MIB's "patching" (here `ablation="resample"`, the default; "mean" is offered);
- CPR: the area under f over the fractions by the trapezoid rule (x linear, 0.001 to 1), of the
  circuits ranked by signed score; higher is better. MIB's scores are of the loss (the negated
  logit difference), so its descending signed order puts first the edges whose corruption moves
  the metric furthest toward the corrupt run: here, the scores times sign(corrupt - clean);
- CMD: the area between f and 1, the trapezoids of |1 - f|, of the circuits ranked by |score|;
  lower is better.

The control beside every method: `random` seeded random orders of all the model's edges (heads),
measured at the same sizes and pruned alike; the Grid's "random" series is their mean and
meta["random"] has each draw's CPR and CMD. A Graph with fewer edges than the model (e.g. exact
scores of a candidate pool) is measured at the sizes it has; its areas cover those fractions only
(meta["upto"]) and `areas` over a common prefix compares it with the others.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import torch
from torch import Tensor

from interp.circuits.circuit import Runner, check_graph, prune
from interp.circuits.eap import edge_index, model_label
from interp.circuits.graph import Graph
from interp.circuits.mib import MIB_FRACTIONS, areas, mib_sizes
from interp.errors import InterpError
from interp.results import Grid
from interp.tasks.base import Task

__all__ = ["circuit_scores", "head_circuit_scores"]


def _check_scores(name: str, scores: Tensor, what: str) -> None:
    """InterpError unless a ranking has something to rank and every score is a finite number."""
    if scores.numel() == 0:
        raise InterpError(f"{name!r} has no {what}, so there is nothing to rank; pass a scored Graph "
                          "(e.g. circuits.eap_ig(model, task))")
    if scores.dtype.is_complex:
        raise InterpError(f"{name!r} has complex scores; pass real ones (e.g. scores.real)")
    bad = int((~torch.isfinite(scores.float())).sum())
    if bad:
        raise InterpError(f"{name!r} has {bad} NaN or infinite scores of {scores.numel()} {what}, which rank "
                          "nowhere; pass finite scores (recompute them, or drop those edges)")


def _faithful(r: Runner, values: Tensor, empty: float) -> Tensor:
    return (values - empty) / (r.clean - empty)


def _edge_curve(r: Runner, graph: Graph, order: Tensor, sizes: list[int]) -> list[float]:
    """f at each size (NaN past the graph's own edges) for circuits of `graph`'s first edges in `order`, pruned."""
    keeps, at = [], []
    for k, n in enumerate(sizes):
        if n <= len(graph):
            c = prune(graph.select(order[:n]))
            keeps.append(r.keep(c, len(c), torch.arange(len(c))))  # cpu: graph order
            at.append(k)
    values = r.measure(keeps) if keeps else torch.zeros(0)  # cpu: a result
    out = [float("nan")] * len(sizes)
    for k, v in zip(at, values.tolist()):
        out[k] = v
    return out


def _grid(curves: dict[str, dict[str, list[float]]], orders: tuple[str, ...], fractions, sizes, meta) -> Grid:
    names = list(curves)
    values = torch.tensor([[[curves[s][o][k] for o in orders] for s in names] for k in range(len(sizes))])  # cpu: a result
    return Grid(values, ("fraction", "series", "order"), (tuple(fractions), tuple(names), orders),
                {**meta, "chart": "lines", "log_x": True, "metric": "faithfulness f",
                 "title": "faithfulness f = (m(C) - m(empty)) / (m(N) - m(empty)) by circuit size (MIB)"})


def _random_orders(total: int, random: int, seed: int) -> list[Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randperm(total, generator=gen) for _ in range(random)]


def _summary(curves, fractions, cpr_order: str, cmd_order: str) -> tuple[dict, dict, dict]:
    cpr, cmd, upto = {}, {}, {}
    for name, c in curves.items():
        cpr[name] = areas(fractions, c[cpr_order])[0]
        cmd[name] = areas(fractions, c[cmd_order])[1]
        n = next((i for i, v in enumerate(c[cmd_order]) if math.isnan(v)), len(fractions))
        upto[name] = fractions[n - 1] if n else None
    return cpr, cmd, upto


def circuit_scores(model, task: Task, graphs: Mapping[str, Graph], *, random: int = 3, seed: int = 0,
                   fractions: Sequence[float] = MIB_FRACTIONS, ablation: str = "resample",
                   progress: bool = True) -> Grid:
    """MIB's faithfulness curves, CPR and CMD of each named edge ranking (see the module docstring):
    a Grid [fraction, series, order] of f, series the graphs' names then "random" (when random > 0),
    order "signed" (the curve CPR integrates) and "absolute" (CMD's); meta "cpr", "cmd", "upto"
    (the last fraction each series reaches), "random" (each draw's CPR and CMD), "sizes", "total_edges",
    "clean_metric", "empty_metric", "ablation"."""
    if not graphs:
        raise InterpError("circuit_scores needs at least one named Graph, e.g. {'eap-ig': graph}")
    if isinstance(random, bool) or not isinstance(random, int) or random < 0:
        raise InterpError(f"random={random!r} must be an int >= 0 (seeded random rankings as the control)")
    for name, g in graphs.items():
        check_graph(model, g)
        _check_scores(name, g.scores, "edges")
    r = Runner(model, task, ablation, progress)
    total = int(len(r.s_idx))  # every edge of the model
    sizes = mib_sizes(total, fractions)
    empty = float(r.measure([r.keep(next(iter(graphs.values())), 0, torch.arange(0))])[0])  # cpu: graph order
    sign = 1.0 if r.corrupt > r.clean else -1.0  # toward the corrupt run
    curves: dict[str, dict[str, list[float]]] = {}
    for name, g in graphs.items():
        signed = torch.sort(g.scores * sign, descending=True, stable=True).indices
        curves[name] = {o: _faithful(r, torch.tensor(_edge_curve(r, g, idx, sizes)), empty).tolist()  # cpu: host floats
                        for o, idx in (("signed", signed), ("absolute", g.order()))}
    draws = []
    if random:
        senders, receivers, _, _ = edge_index(r.wiring)
        full = Graph(senders, receivers, torch.zeros(total), {**next(iter(graphs.values())).meta, "method": "random"})  # cpu: a result
        for idx in _random_orders(total, random, seed):
            draws.append(_faithful(r, torch.tensor(_edge_curve(r, full, idx, sizes)), empty).tolist())  # cpu: host floats
        mean = torch.tensor(draws).mean(0).tolist()  # cpu: host floats
        curves["random"] = {"signed": mean, "absolute": mean}
    cpr, cmd, upto = _summary(curves, list(fractions), "signed", "absolute")
    meta = _meta(r, task, ablation, sizes, total, empty)
    meta.update({"total_edges": total, "cpr": cpr, "cmd": cmd, "upto": upto, "random": _draws(draws, fractions, seed, cpr, cmd)})
    return _grid(curves, ("signed", "absolute"), fractions, sizes, meta)


def _draws(draws: list[list[float]], fractions, seed: int, cpr: dict, cmd: dict) -> dict:
    """Each random draw's CPR and CMD; the "random" series' scores become their means (the mean
    curve's CMD would not be: |1 - f| is not linear)."""
    out = {"seed": seed, "draws": len(draws), "cpr": [areas(fractions, d)[0] for d in draws],
           "cmd": [areas(fractions, d)[1] for d in draws]}
    if draws:
        cpr["random"], cmd["random"] = sum(out["cpr"]) / len(draws), sum(out["cmd"]) / len(draws)
    return out


def _meta(r: Runner, task: Task, ablation: str, sizes: list[int], total: int, empty: float) -> dict:
    return {"model": model_label(r.model), "task": task.name, "ablation": ablation, "sizes": sizes,
            "clean_metric": r.clean, "corrupt_metric": r.corrupt, "empty_metric": empty,
            "rules": "MIB (Mueller et al. 2025): f = (m(C) - m(empty)) / (m(N) - m(empty)); CPR = trapezoid area "
                     "of f over the fractions, signed order; CMD = area of |1 - f|, |score| order"}


def head_circuit_scores(model, task: Task, rankings: Mapping[str, Tensor], *, random: int = 3, seed: int = 0,
                        fractions: Sequence[float] = MIB_FRACTIONS, ablation: str = "resample",
                        progress: bool = True) -> Grid:
    """MIB's curves, CPR and CMD of head circuits: each ranking is a [layer, head] score (e.g. a
    learned mask's logits, `HeadMask.meta["log_alpha"]`), the circuit at fraction p keeps the
    floor(p * heads) highest-scoring heads and ablates every other head's output (every edge out of
    it); embeddings and MLPs stay. One order per ranking ("score"), read by both CPR and CMD.
    A Grid [fraction, series, order] with meta as `circuit_scores`' ("total_heads" for its total)."""
    if not rankings:
        raise InterpError("head_circuit_scores needs at least one named [layer, head] ranking")
    if isinstance(random, bool) or not isinstance(random, int) or random < 0:
        raise InterpError(f"random={random!r} must be an int >= 0 (seeded random rankings as the control)")
    L, H = model.cfg.n_layers, model.cfg.n_heads
    for name, s in rankings.items():
        if tuple(torch.as_tensor(s).shape) != (L, H):  # cpu: a shape check
            raise InterpError(f"ranking {name!r} has shape {tuple(torch.as_tensor(s).shape)}; the model's heads are ({L}, {H})")  # cpu: a message
        _check_scores(name, torch.as_tensor(s), "heads")  # cpu: a check
    r = Runner(model, task, ablation, progress)
    sizes = mib_sizes(L * H, fractions)
    empty = float(r.measure([r.keep_heads([(l, h) for l in range(L) for h in range(H)])])[0])

    def curve(order: Tensor) -> list[float]:
        keeps = [r.keep_heads([divmod(int(i), H) for i in order[n:]]) for n in sizes]
        return _faithful(r, r.measure(keeps), empty).tolist()

    curves = {name: {"score": curve(torch.sort(torch.as_tensor(s).float().flatten(), descending=True, stable=True).indices)}  # cpu: host ranking
              for name, s in rankings.items()}
    draws = [curve(idx) for idx in _random_orders(L * H, random, seed)]
    if draws:
        curves["random"] = {"score": torch.tensor(draws).mean(0).tolist()}  # cpu: host floats
    cpr, cmd, upto = _summary(curves, list(fractions), "score", "score")
    meta = _meta(r, task, ablation, sizes, L * H, empty)
    meta.update({"total_heads": L * H, "cpr": cpr, "cmd": cmd, "upto": upto, "random": _draws(draws, fractions, seed, cpr, cmd)})
    return _grid(curves, ("score",), fractions, sizes, meta)

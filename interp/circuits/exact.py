"""Exact edge patching: the true effect of one edge, for checking the attribution estimates.

The effect of edge u -> v is the metric of the clean run in which only receiver v's input gets
the sender's corrupt output instead of its clean one, in_v + (out_u(corrupt) - out_u(clean)),
minus the clean metric (the same convention as EAP, which estimates it to first order). Every
edge is one `AddTo` variant; `interp.run.evaluate` runs many side by side in one batched forward
that begins at the receiver's block (and at the first position where the sender's output differs).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from torch import Tensor

from interp import run
from interp.interventions import AtOneSite
from interp.circuits.eap import edge_index, model_label, task_baselines
from interp.circuits.graph import CONVENTION, Graph
from interp.circuits.wiring import Wiring, check_task, split_inputs
from interp.errors import InterpError
from interp.memory import peak
from interp.metrics import for_task
from interp.tasks.base import Task

__all__ = ["AddTo", "exact"]


@dataclass(frozen=True)
class AddTo(AtOneSite):
    """act + delta at `site` ([batch, pos, d_model]), at index `slot` of its head axis when the
    site is split per head ([batch, pos, head, d_model]); nothing else changes."""

    site: str
    delta: Tensor
    slot: int | None = None
    start_pos: int = field(default=-1)

    def __post_init__(self) -> None:
        if self.delta.ndim != 3:
            raise InterpError(f"AddTo delta must be [batch, pos, d_model], got {tuple(self.delta.shape)}")
        if self.start_pos < 0:  # the first position where the delta is non-zero: a forward may begin there
            moved = (self.delta != 0).any(-1).any(0).nonzero()
            object.__setattr__(self, "start_pos", int(moved[0]) if len(moved) else self.delta.shape[1])

    @property
    def first_pos(self) -> int:
        return self.start_pos

    def __call__(self, act: Tensor, *, site: str, start: int = 0) -> Tensor:
        delta = self.delta[:, start:].to(act)
        target = act if self.slot is None else act[:, :, self.slot]
        if target.shape != delta.shape:
            raise InterpError(f"AddTo delta {tuple(delta.shape)} does not fit {site} {tuple(act.shape)} (slot {self.slot})")
        out = act.clone()
        if self.slot is None:
            return out + delta
        out[:, :, self.slot] += delta
        return out


def exact(model, task: Task, edges: Graph | Sequence[tuple[str, str]] | None = None, *,
          variants_per_forward: int | None = None, progress: bool = True) -> Graph:
    """The exact effect of each edge (all of the model's edges when `edges` is None; or those of a
    Graph, or a list of (sender, receiver) names), as a Graph with method "exact"."""
    check_task(model, task)
    wiring = Wiring(model)
    all_s, all_r, s_idx, _ = edge_index(wiring)
    at = {(s, r): i for i, (s, r) in enumerate(zip(all_s, all_r))}
    if edges is None:
        pairs = list(zip(all_s, all_r))
    else:
        pairs = list(zip(edges.senders, edges.receivers)) if isinstance(edges, Graph) else [tuple(e) for e in edges]
    for s, r in pairs:
        if (s, r) not in at:
            from interp.circuits.graph import nearest

            if s not in wiring.senders:
                raise nearest(s, wiring.senders, "sender")
            if r not in wiring.receivers:
                raise nearest(r, wiring.receivers, "receiver")
            raise InterpError(f"{s} -> {r} is not an edge: {r} reads before {s} writes")
    device = model.cfg.device
    task = task.to(device)
    metric = for_task(task)
    t0 = time.perf_counter()
    with peak(device) as seen, split_inputs(model):
        clean_logits, clean_acts = run.cache(model, task.clean, [*wiring.sender_hooks, *wiring.check_hooks,
                                                                 *wiring.split_check_hooks], answer_pos=task.answer_pos)
        wiring.check_additive(model, clean_acts)
        corrupt_logits, corrupt_acts = run.cache(model, task.corrupt, wiring.sender_hooks, answer_pos=task.answer_pos)
        clean_m, corrupt_m = run.scalar(metric, clean_logits, "clean"), run.scalar(metric, corrupt_logits, "corrupt")
        task_baselines(clean_m, corrupt_m)
        # [S, b, p, d] in the model's dtype, built sender by sender (no [b, p, S, d] per run);
        # each edge's AddTo holds a view of its sender's row, so memory is senders x positions
        deltas = wiring.sender_deltas(corrupt_acts, clean_acts)
        dtype = clean_acts["blocks.0.hook_resid_pre"].dtype
        del clean_acts, corrupt_acts
        delta = wiring.expand(deltas, 0, task.clean.shape[1], dtype=dtype)
        del deltas
        variants = []
        for s, r in pairs:
            site, slot = wiring.receiver_site(r)
            variants.append([AddTo(site, delta[int(s_idx[at[s, r]])], slot)])
        values = run.evaluate(model, task.clean, variants, metric, answer_pos=task.answer_pos,
                              variants_per_forward=variants_per_forward, progress=progress, desc="exact edges")
    meta = {
        **wiring.meta(), "method": "exact", "steps": 0, "metric": task.metric, "clean_metric": clean_m,
        "corrupt_metric": corrupt_m, "model": model_label(model), "task": task.name, "split": task.split,
        "n_examples": len(task), "convention": CONVENTION, "seconds": time.perf_counter() - t0,
        "peak_memory": seen.record(),
    }
    return Graph(tuple(s for s, _ in pairs), tuple(r for _, r in pairs), (values - clean_m).float(), meta)

"""The whole circuit workflow on one model, as the CLI and the study run it.

    task = task_for(model, "ioi", n=64)       the zoo's own IOI for zoo models, bpe.ioi for real ones
    graph = scores(model, task, "eap-ig", steps=5)
    graph = with_example(model, task, graph)  attention patterns of one prompt, for the circuit view
    summary(graph, curve)                     JSON-ready: top heads, top edges, the curve and MIB's areas of it
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from interp import run
from interp.circuits.circuit import Faithfulness
from interp.circuits.eap import eap, eap_ig
from interp.circuits.exact import exact
from interp.circuits.graph import Graph
from interp.errors import InterpError
from interp.tasks.base import Task

__all__ = ["METHODS", "is_zoo_english", "scores", "summary", "task_for", "with_example"]

METHODS = ("eap", "eap-ig", "exact")


def is_zoo_english(model) -> bool:
    """Whether the model speaks the zoo's synthetic English (its own word vocabulary)."""
    from interp.tasks import english
    from interp.tasks.base import BOS_ID, EOS_ID, MASK_ID, PAD_ID, UNK_ID

    return int(model.cfg.d_vocab) == len({BOS_ID, EOS_ID, MASK_ID, PAD_ID, UNK_ID}) + len(english.WORDS)


def task_for(model, name: str = "ioi", *, n: int = 64, seed: int = 0, split: str | None = None) -> Task:
    """`name` ("ioi" or "sva") for this model: the zoo's synthetic-English task for zoo models
    (split "train" / "sva_id" by default), `interp.tasks.bpe` over its tokenizer for real models
    ("mixed" / "none")."""
    from interp import tasks

    if name not in ("ioi", "sva"):
        raise InterpError(f"task {name!r}: circuits resolve 'ioi' or 'sva' per model; build other tasks with "
                          "interp.tasks.make and pass the Task")
    if is_zoo_english(model):
        return tasks.make(name, split=split or ("train" if name == "ioi" else "sva_id"), n=n, seed=seed)
    return tasks.make(name, split=split or ("mixed" if name == "ioi" else "none"), n=n, seed=seed, model=model)


def scores(model, task: Task, method: str, *, steps: int = 5, batch_size: int = 32, pos_chunk: int | None = None,
           progress: bool = True) -> Graph:
    """Edge scores by `method`: "eap", "eap-ig" (`steps` interpolations) or "exact" (every edge);
    `batch_size` and `pos_chunk` bound EAP's memory (see `interp.circuits.eap`)."""
    if method == "eap":
        return eap(model, task, batch_size=batch_size, pos_chunk=pos_chunk, progress=progress)
    if method == "eap-ig":
        return eap_ig(model, task, steps=steps, batch_size=batch_size, pos_chunk=pos_chunk, progress=progress)
    if method == "exact":
        return exact(model, task, progress=progress)
    raise InterpError(f"method={method!r} must be one of {', '.join(METHODS)}")


def with_example(model, task: Task, graph: Graph, row: int = 0) -> Graph:
    """The graph with the attention patterns [layer, head, dest, src] of one clean prompt and its
    token strings (meta["example"]), which the circuit view shows when a head is clicked."""
    tokens = task.clean[row:row + 1].to(model.cfg.device)
    width = int(task.answer_pos[row]) + 1  # the prompt up to the answer position, no padding
    names = [f"blocks.{l}.attn.hook_pattern" for l in range(model.cfg.n_layers)]
    _, acts = run.cache(model, tokens[:, :width], names)
    patterns = torch.stack([acts[n][0] for n in names]).float().cpu()
    words = [str(t) for t in model.to_str_tokens(tokens[0, :width])]
    return replace(graph, patterns=patterns, meta={**graph.meta, "example": {"tokens": words, "text": task.text[row]}})


def summary(graph: Graph, curve: Faithfulness | None = None, *, heads: int = 10, edges: int = 20) -> dict[str, Any]:
    """JSON-ready digest: baselines, top heads (summed |score|), top edges, and the curve."""
    per_head = graph.heads()
    out: dict[str, Any] = {
        k: graph.meta.get(k) for k in ("model", "task", "split", "method", "steps", "metric", "clean_metric",
                                        "corrupt_metric", "n_examples", "seconds")
    }
    out["edges"] = len(graph)
    out["top_heads"] = [{"head": f"a{w['layer']}.h{w['head']}", "score": round(v, 6)} for w, v in per_head.top(heads)]
    top = graph.top(edges)
    out["top_edges"] = [{"sender": s, "receiver": r, "score": round(float(v), 6)}
                        for s, r, v in zip(top.senders, top.receivers, top.scores)]
    if curve is not None:
        out["faithfulness"] = {
            **{k: curve.meta.get(k) for k in ("ablation", "order", "area_under", "area_from_1", "edges_80", "edges_90",
                                              "total_edges", "empty_recovered")},
            "edges": curve.edges.tolist(), "recovered": [round(x, 6) for x in curve.recovered.tolist()],
        }
    return out

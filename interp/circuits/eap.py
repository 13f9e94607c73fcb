"""Edge attribution patching (EAP) and its integrated-gradients form (EAP-IG), for every edge at once.

For an edge u -> v (see `interp.circuits.graph`), the effect of the sender's corrupt output reaching
only v, on the clean run, is to first order

    score(u -> v) = sum over batch, pos of (out_u(corrupt) - out_u(clean)) . d metric / d in_v

with the metric the task's metric (mean over examples; Syed et al. 2023). EAP-IG (Hanna et al.
2024) replaces the gradient on the clean run by its mean over `steps` runs whose input embeddings
are interpolated between corrupt and clean, at alpha = k / steps, k = 1..steps (steps = 1 is EAP).

The work is one clean and one corrupt forward (sender outputs) and `steps` forward + backward
passes (receiver gradients), batched over examples. Memory is bounded by two knobs: `batch_size`
examples share a forward + backward (its autograd graph and the senders' deltas grow with
batch_size x positions), and the scores are accumulated `pos_chunk` positions at a time: per
chunk one float32 matrix product [sender, batch*pos_chunk*d_model] @ [.., receiver], summed in
float64 per batch. No gradient for every receiver at every position is kept: the backward keeps
only the gradients at hook_q/k/v and the MLPs' inputs (about three residual streams per layer),
and a head's receiver gradient is recovered per layer and chunk through ln1
(`Wiring.receiver_grads`), so the model runs without split inputs.
Senders' deltas are kept compactly (z per head, not its d_model write) and expanded per chunk.
`meta["peak_memory"]` records the peak (`interp.memory.peak`) on the model's device.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

import torch
from torch import Tensor
from tqdm.auto import tqdm

from interp import run
from interp.interventions import AtOneSite
from interp.circuits.graph import CONVENTION, Graph, edge_list
from interp.circuits.wiring import Wiring, check_task, split_inputs
from interp.errors import InterpError
from interp.memory import peak
from interp.metrics import for_task
from interp.tasks.base import Task

__all__ = ["Interpolate", "eap", "eap_ig", "edge_index", "model_label", "task_baselines"]


@dataclass(frozen=True)
class Interpolate(AtOneSite):
    """The activation at `site` replaced by start + alpha (end - start), as a fresh leaf that
    requires grad (so gradients flow from there even though the embeddings above it are cut)."""

    site: str
    start_values: Tensor
    end_values: Tensor
    alpha: float

    def __call__(self, act: Tensor, *, site: str, start: int = 0) -> Tensor:
        a, b = self.start_values[:, start:].to(act), self.end_values[:, start:].to(act)
        if a.shape != act.shape:
            raise InterpError(f"interpolation endpoints {tuple(a.shape)} do not match {site} {tuple(act.shape)}")
        return (a + self.alpha * (b - a)).detach().requires_grad_(True)


def edge_index(wiring: Wiring) -> tuple[tuple[str, ...], tuple[str, ...], Tensor, Tensor]:
    """(senders, receivers, sender index, receiver index) of every edge of the full graph, the
    indices into `wiring.senders` / `wiring.receivers`."""
    senders, receivers = edge_list(wiring.n_layers, wiring.n_heads, wiring.n_kv)
    s_at = {s: i for i, s in enumerate(wiring.senders)}
    r_at = {r: i for i, r in enumerate(wiring.receivers)}
    return senders, receivers, torch.tensor([s_at[s] for s in senders]), torch.tensor([r_at[r] for r in receivers])  # cpu: indices


def model_label(model) -> str:
    """A short model name for meta: a real model's name (smollm2-135m, not its cache folder's
    sha256), a zoo or local folder's name, else the config's model name."""
    import json
    from pathlib import Path

    from interp.model.gguf import REAL_MODELS

    name = str(getattr(model.cfg, "model_name", None) or "")
    folder = Path(name)
    if "/" not in name or not folder.exists():
        return name
    marker = folder / "interp-gguf.json"  # a dequantized GGUF: name it after the file it came from
    if marker.exists():
        source = json.loads(marker.read_text()).get("source", "")
        return next((k for k, m in REAL_MODELS.items() if m.file == source), source.removesuffix(".gguf") or folder.name)
    return folder.name


def _chunks(task: Task, batch_size: int) -> list[Task]:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InterpError(f"batch_size={batch_size!r} must be an int >= 1")
    return [task[i:i + batch_size] for i in range(0, len(task), batch_size)]


def task_baselines(clean: float, corrupt: float) -> None:
    """InterpError when clean and corrupt metrics are equal: nothing to attribute or recover."""
    if not abs(clean - corrupt) > 1e-6 * max(1.0, abs(clean), abs(corrupt)):
        raise InterpError(
            f"the task's clean metric ({clean:.6g}) equals its corrupt metric ({corrupt:.6g}): there is no "
            "clean-minus-corrupt difference for edges to explain; use a task whose corrupt inputs change the answer"
        )


CHUNK_BYTES = 256 * 2**20  # the default pos_chunk keeps one chunk's deltas and gradients under this


def _gradients(model, part: Task, wiring: Wiring, ivs: list, metric, w: float,
               recorded: Sequence[str]) -> tuple[Tensor, dict[str, Tensor], dict[str, Tensor]]:
    """One forward on the clean tokens (under `ivs`) and one backward: the logits, the recorded
    activations (`recorded` and the blocks' inputs, detached) and d metric / d `wiring.grad_hooks`."""
    names = list(dict.fromkeys([*wiring.grad_hooks, *wiring.block_inputs, *recorded]))
    logits, acts = run.with_grad(model, part.clean, names, ivs, answer_pos=part.answer_pos)
    with torch.enable_grad():
        value = metric(logits) * w
        grads = torch.autograd.grad(value, [acts[h] for h in wiring.grad_hooks], allow_unused=True)
    missing = [h for h, g in zip(wiring.grad_hooks, grads) if g is None]
    if missing:
        raise InterpError(f"{missing[:3]} do not reach the metric; cannot attribute edges into them")
    keep = {h: acts[h].detach() for h in dict.fromkeys([*wiring.block_inputs, *recorded])}
    return logits.detach(), keep, dict(zip(wiring.grad_hooks, grads))


def _accumulate(acc: Tensor, model, wiring: Wiring, deltas: list[Tensor], grads: dict[str, Tensor],
                inputs: dict[str, Tensor], pos_chunk: int, weight: float) -> None:
    """acc[sender, receiver] += weight * sum over batch, pos, d_model of delta . gradient, for
    every edge, `pos_chunk` positions at a time: per chunk one float32 matrix product
    [S, b*p*d] @ [b*p*d, R] (einsum would not fuse it). acc is float32 on the model's device."""
    n_pos = deltas[0].shape[1]
    last = f"blocks.{wiring.n_layers - 1}.hook_resid_post"
    for start in range(0, n_pos, pos_chunk):
        stop = min(start + pos_chunk, n_pos)
        sent = wiring.expand(deltas, start, stop)  # [S, b, p, d]
        received = torch.empty(len(wiring.receivers), *sent.shape[1:], dtype=torch.float32, device=sent.device)
        for layer in range(wiring.n_layers):
            slots = torch.tensor(wiring.attn_slots(layer), device=sent.device)
            received[slots] = wiring.receiver_grads(model, layer, grads, inputs, start, stop).to(received.device)
            received[wiring.slots(f"blocks.{layer}.hook_mlp_in")[0]] = grads[f"blocks.{layer}.ln2.hook_in"][:, start:stop]
        received[wiring.slots(last)[0]] = grads[last][:, start:stop]
        acc += (sent.flatten(1) @ received.flatten(1).T) * weight


def _pos_chunk(pos_chunk: int | None, wiring: Wiring, batch: int, d_model: int) -> int:
    if pos_chunk is None:
        return max(1, CHUNK_BYTES // (4 * (len(wiring.senders) + len(wiring.receivers)) * batch * d_model))
    if isinstance(pos_chunk, bool) or not isinstance(pos_chunk, int) or pos_chunk < 1:
        raise InterpError(f"pos_chunk={pos_chunk!r} must be an int >= 1 (positions per score product) or None")
    return pos_chunk


def _attribute(model, task: Task, steps: int, method: str, batch_size: int, pos_chunk: int | None,
               progress: bool) -> Graph:
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise InterpError(f"steps={steps!r} must be an int >= 1 (1 is plain EAP)")
    check_task(model, task)
    with split_inputs(model):  # refuses a model TL has no per-head inputs for (BERT's post-LN blocks), as
        pass                   # exact edges and faithfulness would; the gradients below need none
    wiring = Wiring(model)
    _pos_chunk(pos_chunk, wiring, 1, 1)  # checked before any forward
    senders, receivers, s_idx, r_idx = edge_index(wiring)
    device = model.cfg.device
    full = torch.zeros(len(wiring.senders), len(wiring.receivers), dtype=torch.float64)  # cpu: scores summed on the host
    clean_m = corrupt_m = 0.0
    n = len(task)
    t0 = time.perf_counter()
    embed = "blocks.0.hook_resid_pre"
    parts = _chunks(task, batch_size)
    with peak(device) as seen:
        for part in tqdm(parts, desc=method, disable=not progress or len(parts) < 2):
            part = part.to(device)
            metric, pos, w = for_task(part), part.answer_pos, len(part) / n
            chunk = _pos_chunk(pos_chunk, wiring, len(part), int(model.cfg.d_model))
            recorded = [*wiring.sender_hooks, *wiring.check_hooks]
            if steps == 1:  # the clean forward that takes the gradient records the clean senders too
                clean_logits, clean_acts, grads = _gradients(model, part, wiring, [], metric, w, recorded)
            else:
                clean_logits, clean_acts = run.cache(model, part.clean, recorded, answer_pos=pos)
            wiring.check_additive(model, clean_acts)
            corrupt_logits, corrupt_acts = run.cache(model, part.corrupt, wiring.sender_hooks, answer_pos=pos)
            clean_m += w * run.scalar(metric, clean_logits, "clean")
            corrupt_m += w * run.scalar(metric, corrupt_logits, "corrupt")
            deltas = wiring.sender_deltas(corrupt_acts, clean_acts)  # compact, [b, p, ...] each
            ends = (corrupt_acts[embed], clean_acts[embed])
            del corrupt_acts, corrupt_logits
            acc = torch.zeros(full.shape, dtype=torch.float32, device=device)
            if steps == 1:
                _accumulate(acc, model, wiring, deltas, grads, clean_acts, chunk, 1.0)
            del clean_acts
            for k in range(1, steps + 1) if steps > 1 else ():
                ivs = [Interpolate(embed, *ends, k / steps)]
                _, inputs, grads = _gradients(model, part, wiring, ivs, metric, w, ())
                _accumulate(acc, model, wiring, deltas, grads, inputs, chunk, 1.0 / steps)
                del inputs, grads
            full += acc.double().cpu()
    task_baselines(clean_m, corrupt_m)
    meta = {
        **wiring.meta(), "method": method, "steps": steps, "metric": task.metric, "clean_metric": clean_m,
        "corrupt_metric": corrupt_m, "model": model_label(model), "task": task.name,
        "split": task.split, "n_examples": n, "convention": CONVENTION, "seconds": time.perf_counter() - t0,
        "batch_size": batch_size, "pos_chunk": chunk, "peak_memory": seen.record(),
    }
    return Graph(senders, receivers, full[s_idx, r_idx].float(), meta)


def eap(model, task: Task, *, batch_size: int = 32, pos_chunk: int | None = None, progress: bool = True) -> Graph:
    """Edge attribution patching: every edge's first-order effect (see the module docstring).

    Memory: `batch_size` examples per forward + backward (the autograd graph and the senders'
    deltas grow with batch_size x positions: lower it for long prompts or large models);
    `pos_chunk` positions per score product (None: as many as keep one chunk's sender deltas and
    receiver gradients under 256 MiB). Neither changes the scores beyond float rounding. The peak is in
    `meta["peak_memory"]`."""
    return _attribute(model, task, 1, "eap", batch_size, pos_chunk, progress)


def eap_ig(model, task: Task, *, steps: int = 5, batch_size: int = 32, pos_chunk: int | None = None,
           progress: bool = True) -> Graph:
    """EAP with integrated gradients over `steps` input interpolations (Hanna et al. 2024);
    `batch_size`, `pos_chunk` bound memory as in `eap`."""
    return _attribute(model, task, steps, "eap-ig", batch_size, pos_chunk, progress)

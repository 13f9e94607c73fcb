"""Edge attribution patching (EAP) and its integrated-gradients form (EAP-IG), for every edge at once.

For an edge u -> v (see `interp.circuits.graph`), the effect of the sender's corrupt output reaching
only v, on the clean run, is to first order

    score(u -> v) = sum over batch, pos of (out_u(corrupt) - out_u(clean)) . d metric / d in_v

with the metric the task's metric (mean over examples; Syed et al. 2023). EAP-IG (Hanna et al.
2024) replaces the gradient on the clean run by its mean over `steps` runs whose input embeddings
are interpolated between corrupt and clean, at alpha = k / steps, k = 1..steps (steps = 1 is EAP).

The work is one clean and one corrupt forward (sender outputs) and `steps` forward + backward
passes (receiver gradients), batched over examples, then one matrix product
[sender, batch*pos*d_model] @ [batch*pos*d_model, receiver]. Receiver gradients are taken at the
bridge's split inputs, so a KV group's k and v inputs are one receiver each (no repeated KV heads).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

import torch
from torch import Tensor
from tqdm.auto import tqdm

from interp import run
from interp.circuits.graph import CONVENTION, Graph, edge_list
from interp.circuits.wiring import Wiring, check_task, split_inputs
from interp.errors import InterpError
from interp.metrics import for_task
from interp.tasks.base import Task

__all__ = ["Interpolate", "eap", "eap_ig", "edge_index", "model_label", "task_baselines"]


@dataclass(frozen=True)
class Interpolate:
    """The activation at `site` replaced by start + alpha (end - start), as a fresh leaf that
    requires grad (so gradients flow from there even though the embeddings above it are cut)."""

    site: str
    start_values: Tensor
    end_values: Tensor
    alpha: float

    @property
    def sites(self) -> tuple[str, ...]:
        return (self.site,)

    @property
    def first_pos(self) -> int:
        return 0

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
    return senders, receivers, torch.tensor([s_at[s] for s in senders]), torch.tensor([r_at[r] for r in receivers])


def model_label(model) -> str:
    """A short model name for meta: a real model's name (smollm2-135m, not its cache folder's
    sha256), a zoo or local folder's name, else the config's model name."""
    import json
    from pathlib import Path

    from interp.gguf import REAL_MODELS

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


def _receiver_grads(model, part: Task, wiring: Wiring, ivs: list, metric, w: float,
                    recorded: Sequence[str]) -> tuple[Tensor, dict[str, Tensor], Tensor]:
    """One clean forward (under `ivs`) and one backward: the logits, the activations at the
    receivers and `recorded`, and d metric / d receiver input at every receiver ([b, p, R, d])."""
    names = list(dict.fromkeys([*wiring.receiver_hooks, *recorded]))
    logits, acts = run.with_grad(model, part.clean, names, ivs, answer_pos=part.answer_pos)
    with torch.enable_grad():
        value = metric(logits) * w
        grads = torch.autograd.grad(value, [acts[h] for h in wiring.receiver_hooks], allow_unused=True)
    missing = [h for h, g in zip(wiring.receiver_hooks, grads) if g is None]
    if missing:
        raise InterpError(f"{missing[:3]} do not reach the metric; cannot attribute edges into them")
    return logits, acts, wiring.receiver_values(dict(zip(wiring.receiver_hooks, grads)))


def _attribute(model, task: Task, steps: int, method: str, batch_size: int, progress: bool) -> Graph:
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise InterpError(f"steps={steps!r} must be an int >= 1 (1 is plain EAP)")
    check_task(model, task)
    wiring = Wiring(model)
    senders, receivers, s_idx, r_idx = edge_index(wiring)
    device = model.cfg.device
    full = torch.zeros(len(wiring.senders), len(wiring.receivers), dtype=torch.float64)
    clean_m = corrupt_m = 0.0
    n = len(task)
    t0 = time.perf_counter()
    embed = "blocks.0.hook_resid_pre"
    parts = _chunks(task, batch_size)
    with split_inputs(model):
        for part in tqdm(parts, desc=method, disable=not progress or len(parts) < 2):
            part = part.to(device)
            metric, pos, w = for_task(part), part.answer_pos, len(part) / n
            recorded = [*wiring.sender_hooks, *wiring.check_hooks]
            if steps == 1:  # the clean forward that takes the gradient records the clean senders too
                clean_logits, acts, grad_sum = _receiver_grads(model, part, wiring, [], metric, w, recorded)
                clean_acts = {h: acts[h].detach() for h in recorded}
            else:
                clean_logits, clean_acts = run.cache(model, part.clean, recorded, answer_pos=pos)
            wiring.check_additive(model, clean_acts)
            corrupt_logits, corrupt_acts = run.cache(model, part.corrupt, wiring.sender_hooks, answer_pos=pos)
            clean_m += w * run.scalar(metric, clean_logits.detach(), "clean")
            corrupt_m += w * run.scalar(metric, corrupt_logits, "corrupt")
            delta = wiring.sender_outputs(corrupt_acts) - wiring.sender_outputs(clean_acts)  # [b, p, S, d]
            for k in range(1, steps + 1) if steps > 1 else ():
                ivs = [Interpolate(embed, corrupt_acts[embed], clean_acts[embed], k / steps)]
                g = _receiver_grads(model, part, wiring, ivs, metric, w, ())[2]
                grad_sum = g if k == 1 else grad_sum + g  # [b, p, R, d]
            # [S, b*p*d] @ [b*p*d, R]: one float32 matrix product for every edge (einsum would not
            # fuse it); chunks add up in float64
            lhs = delta.permute(2, 0, 1, 3).reshape(delta.shape[2], -1).float()
            rhs = (grad_sum / steps).permute(2, 0, 1, 3).reshape(grad_sum.shape[2], -1).float()
            full += (lhs @ rhs.T).double().cpu()
    task_baselines(clean_m, corrupt_m)
    meta = {
        **wiring.meta(), "method": method, "steps": steps, "metric": task.metric, "clean_metric": clean_m,
        "corrupt_metric": corrupt_m, "model": model_label(model), "task": task.name,
        "split": task.split, "n_examples": n, "convention": CONVENTION, "seconds": time.perf_counter() - t0,
    }
    return Graph(senders, receivers, full[s_idx, r_idx].float(), meta)


def eap(model, task: Task, *, batch_size: int = 32, progress: bool = True) -> Graph:
    """Edge attribution patching: every edge's first-order effect (see the module docstring)."""
    return _attribute(model, task, 1, "eap", batch_size, progress)


def eap_ig(model, task: Task, *, steps: int = 5, batch_size: int = 32, progress: bool = True) -> Graph:
    """EAP with integrated gradients over `steps` input interpolations (Hanna et al. 2024)."""
    return _attribute(model, task, steps, "eap-ig", batch_size, progress)

"""interp.circuits vs TransformerLens 4.3's edge attribution, side by side in one process.

    OMP_NUM_THREADS=1 python benchmarks/circuits.py [--repeats 2] [--out benchmarks/circuits.json]

1. EAP on the same model and inputs as `transformer_lens.tools.analysis.attribution_patch` with
   `EdgeAttributionConfig(granularity="edge")` (TL scores per position and one example at a time;
   its clean/corrupt swapped gives interp's convention, and its per-position scores summed give
   interp's edges): zoo:lm-gpt2 on IOI, and a GPT-2-shaped random-weight model of realistic size.
   Seconds (best of the repeats), the ratio TL / interp and the largest |difference| of the scores.
2. SmolLM2-135M (grouped-query; TL refuses edges there): seconds per edge set (EAP) against one
   forward + one backward of the same batch.
3. EAP-IG with 5 steps: seconds, and Pearson / Spearman with exact edge patching against plain EAP's,
   on zoo:lm-llama (GQA) and zoo:lm-gpt2.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
from pathlib import Path

import torch
from scipy.stats import pearsonr, spearmanr

import interp
from interp import metrics, run, tasks
from interp.circuits import eap, eap_ig, exact
from interp.circuits.pipeline import task_for
from interp.files.storage import write_text_atomic
from interp.tasks.base import Task

sys.path.insert(0, str(Path(__file__).parent))
from timing import best_of


def _tl_name(n) -> str:
    k = n.kind
    if k == "embed":
        return "embed"
    if k == "attn_head_out":
        return f"a{n.layer}.h{n.head}"
    if k in ("mlp_out", "mlp_in"):
        return f"m{n.layer}"
    if k == "q_input":
        return f"a{n.layer}.h{n.head}.q"
    if k in ("k_input", "v_input"):
        return f"a{n.layer}.g{n.head}.{k[0]}"
    return "logits"


def tl_edges(model, task: Task) -> dict[tuple[str, str], float]:
    """TL's edge scores for the task, in interp's convention and edges."""
    from transformer_lens.tools.analysis.attribution_patching import (
        EdgeAttributionConfig,
        attribution_patch,
    )

    calls = [0]

    def metric_fn(logits):  # TL runs example i's clean forward, then its corrupt forward + backward
        i = calls[0] // 2
        calls[0] += 1
        return metrics.logit_diff(logits, task.correct[i:i + 1], task.incorrect[i:i + 1], task.answer_pos[i:i + 1]).mean()

    res = attribution_patch(model, task.corrupt, task.clean, metric_fn, EdgeAttributionConfig(granularity="edge"))
    out: dict[tuple[str, str], float] = {}
    for (u, v), s in res.edge_scores.items():
        key = (_tl_name(u), _tl_name(v))
        out[key] = out.get(key, 0.0) + s
    return out


def random_task(model, n: int, length: int, seed: int = 0) -> Task:
    """Random tokens; corrupt rows differ from clean at position 1; logit diff of two tokens at the end."""
    g = torch.Generator().manual_seed(seed)
    clean = torch.randint(5, model.cfg.d_vocab, (n, length), generator=g)
    corrupt = clean.clone()
    corrupt[:, 1] = torch.randint(5, model.cfg.d_vocab, (n,), generator=g)
    a, b = torch.randint(5, model.cfg.d_vocab, (2, n), generator=g)
    return Task("random", "x", clean, corrupt, a, b, torch.full((n,), length - 1), ("",) * n)


def versus_tl(label: str, model, task: Task, repeats: int) -> dict:
    t_tl, theirs = best_of(lambda: tl_edges(model, task), repeats)
    t_us, ours = best_of(lambda: eap(model, task, progress=False), repeats)
    want = torch.tensor([theirs[e] for e in zip(ours.senders, ours.receivers)], dtype=torch.float64)
    diff = float((ours.scores.double() - want).abs().max())
    row = {"model": label, "examples": len(task), "positions": task.clean.shape[1], "edges": len(ours),
           "same_edges": set(theirs) == set(zip(ours.senders, ours.receivers)),
           "tl_s": round(t_tl, 3), "interp_s": round(t_us, 3), "ratio": round(t_tl / t_us, 1),
           "max_abs_diff": float(f"{diff:.2g}"), "max_abs_score": round(float(want.abs().max()), 4)}
    print(row, flush=True)
    return row


def gqa_cost(model, task: Task, repeats: int) -> dict:
    names = ["blocks.0.hook_resid_pre"]
    metric = metrics.for_task(task)

    def fwd_bwd():
        logits, acts = run.with_grad(model, task.clean, names, answer_pos=task.answer_pos)
        with torch.enable_grad():
            torch.autograd.grad(metric(logits), [acts[names[0]]])

    t_fb, _ = best_of(fwd_bwd, repeats)
    t_eap, g = best_of(lambda: eap(model, task, progress=False), repeats)
    row = {"model": "smollm2-135m", "examples": len(task), "positions": task.clean.shape[1], "edges": len(g),
           "eap_s": round(t_eap, 3), "forward_backward_s": round(t_fb, 3), "ratio": round(t_eap / t_fb, 2)}
    print(row, flush=True)
    return row


def ig_agreement(spec: str, n: int) -> dict:
    model = interp.load(spec)
    task = tasks.make("ioi", split="train", n=n, seed=1)
    t_eap, g = best_of(lambda: eap(model, task, progress=False), 1)
    t_ig, gi = best_of(lambda: eap_ig(model, task, steps=5, progress=False), 1)
    t_x, x = best_of(lambda: exact(model, task, progress=False), 1)

    def corr(a):
        return {"pearson": round(float(pearsonr(a.scores, x.scores)[0]), 4),
                "spearman": round(float(spearmanr(a.scores, x.scores)[0]), 4)}

    row = {"model": spec, "examples": n, "edges": len(g), "eap_s": round(t_eap, 3), "eap_ig5_s": round(t_ig, 3),
           "exact_s": round(t_x, 3), "eap": corr(g), "eap_ig": corr(gi)}
    print(row, flush=True)
    return row


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--out", default=str(Path(__file__).parent / "circuits.json"))
    args = p.parse_args()
    out = {"machine": f"{platform.machine()}, {torch.get_num_threads()} CPU threads", "torch": torch.__version__,
           "command": f"OMP_NUM_THREADS={torch.get_num_threads()} python benchmarks/circuits.py", "versus_tl": []}
    zoo = interp.load("zoo:lm-gpt2")
    out["versus_tl"].append(versus_tl("zoo:lm-gpt2 IOI", zoo, tasks.make("ioi", split="train", n=8, seed=0), args.repeats))
    with tempfile.TemporaryDirectory() as tmp:  # GPT-2 small's shape: 12 layers, d_model 768, 12 heads
        path = interp.build_tiny("gpt2", Path(tmp) / "g", d_model=768, n_layers=12, n_heads=12, n_ctx=64)
        big = interp.load(path)
        out["versus_tl"].append(versus_tl("random gpt2 12L d768 12H", big, random_task(big, 4, 12), 1))
    smol = interp.load("smollm2-135m")
    out["gqa"] = gqa_cost(smol, task_for(smol, "ioi", n=8), args.repeats)
    out["eap_ig"] = [ig_agreement(s, 32) for s in ("zoo:lm-llama", "zoo:lm-gpt2")]
    write_text_atomic(args.out, json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

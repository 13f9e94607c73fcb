"""Attribution patching, resid_pre x position and head x all-position patching on SmolLM2-135M
against their limits and against TransformerLens, CPU, one process (the IOI task of
benchmarks/real.py, batch 8).

    OMP_NUM_THREADS=1 python benchmarks/limits.py [--only attr,resid,z] [--repeats N]
        [--resid-repeats N] [--resid-every K] [--z-every K] [--out FILE.json]

Attribution. The limit is the least any implementation does: one clean forward (no grad) and one
corrupt forward with autograd from the embeddings plus one backward of the metric, on the same
bridge with no other hook, each forward unembedding the answer position only. interp
(`patching.attribution_patch(task, site="z")`), the limit and TL's `attribution_patching`
(per-example forwards and backwards, all nodes) alternate, best of N each.

Sweeps: resid_pre x pos (450 cells) and head x all pos (z, 270 cells). The limit: each cell redoes
blocks L.. at positions p.. (every position for a head cell) at batch 8 and the unembedding at one
position, at the per-block-position cost of one full batch-8 forward (benchmarks/real.py
`limit_costs`, timed before each interp sweep and after the last, median of those; its blocks are
the bridge's wrappers, so the JSON also prices the limit at the native body's cost). interp runs
them natively (`interp.run.packed`; "path" in the JSON says which path ran). TL runs one full
forward per cell: timed on every K-th cell right after interp's sweep (--resid-repeats times,
best of) and scaled by the cell count; agreement over those cells.

With --only, the sections of an existing --out not measured in this run are kept (under "run", the
date and load of the run that measured them).
"""

from __future__ import annotations

import json
import os
import sys

import torch

import interp
from interp import patching

sys.path.insert(0, os.path.dirname(__file__))
from real import MODEL, ioi_with_text, limit_costs, make_metric, make_task, sample, sequential_metric, tl_cells  # noqa: E402
from generate import finish, header, options  # noqa: E402
from timing import best_of  # noqa: E402


def attribution_limit(model, task):
    """One clean forward, one corrupt forward from embeddings that require grad, one backward; both
    forwards unembed the last position only (the metric's)."""
    io, s = task.correct, task.incorrect
    emb = {}

    def leaf(act, hook):
        emb["x"] = act.detach().requires_grad_(True)
        return emb["x"]

    def last(act, hook):  # the unembedding at the one position the metric reads, as interp does
        return act[:, -1:]

    with torch.no_grad():
        model.run_with_hooks(task.clean, fwd_hooks=[("unembed.hook_in", last)])
    with torch.enable_grad():
        logits = model.run_with_hooks(task.corrupt, fwd_hooks=[("hook_embed", leaf), ("unembed.hook_in", last)])
        last = logits[:, -1]
        value = (last.gather(1, io[:, None]) - last.gather(1, s[:, None])).mean()
        torch.autograd.grad(value, emb["x"])


def attribution(model, task, io, s, repeats: int, tl: bool) -> dict:
    from transformer_lens.tools.analysis import attribution_patching as tl_attr

    best = {"interp": float("inf"), "limit": float("inf"), "tl": float("inf")}
    ours = theirs = None
    for _ in range(repeats):
        t, ours = best_of(lambda: patching.attribution_patch(model, task, site="z"), 1)
        best["interp"] = min(best["interp"], t)
        best["limit"] = min(best["limit"], best_of(lambda: attribution_limit(model, task), 1)[0])
        if tl:
            t, theirs = best_of(lambda: tl_attr.attribution_patch(model, task.clean, task.corrupt, sequential_metric(io, s)), 1)
            best["tl"] = min(best["tl"], t)
    out = {"interp_s": best["interp"], "limit_s": best["limit"], "interp / limit": best["interp"] / best["limit"]}
    if tl:
        heads = torch.zeros_like(ours.values)
        for node, score in theirs.node_scores.items():
            if node.kind == "attn_head_out":
                heads[node.layer, node.head] += score
        out.update({"tl_s": best["tl"], "tl / interp": best["tl"] / best["interp"],
                    "max_abs_diff_vs_tl": float((heads - ours.values).abs().max())})
    print(json.dumps({"attribution": out}), flush=True)
    return out


def native_block_position(model, clean, reps: int = 5) -> float:
    """s per block-position of the HF decoder body at batch 8 with none of the bridge's components
    (`interp.model.native.unwrapped`: what the packed path runs on), best of `reps`. The limit above is
    priced through `model.original_model.model`, whose blocks are the bridge's wrappers."""
    from interp.model import native

    body = native.unwrapped(model).model
    with torch.no_grad():
        t = best_of(lambda: body(clean), reps)[0]
    return t / (clean.shape[1] * model.cfg.n_layers)


def sweeps(model):
    """key -> (JSON key, activation_patch keywords, cells, TL function, TL cell columns)."""
    from transformer_lens import patching as tlp

    L, H = model.cfg.n_layers, model.cfg.n_heads
    return {
        "resid": ("resid_pre x pos", dict(site="resid_pre", by_pos=True), lambda P: [(l, p, None) for l in range(L) for p in range(P)],
                  tlp.get_act_patch_resid_pre, (True, True, False)),
        "z": ("head x all pos (z)", dict(site="z"), lambda P: [(l, None, h) for l in range(L) for h in range(H)],
              tlp.get_act_patch_attn_head_out_all_pos, (True, False, True)),
    }


def sweep_vs_limit(model, task, metric, key: str, repeats: int, every: int) -> dict:
    """One patching sweep against its limit (each cell: blocks L.. at positions p.., all positions for
    a head cell, plus the one-position unembedding) and against TL on every `every`-th cell."""
    name, kw, cells, tl_fn, cols = sweeps(model)[key]
    L, P = model.cfg.n_layers, task.clean.shape[1]
    todo = cells(P)
    idx = sample(todo, every)
    _, clean_cache = model.run_with_cache(task.clean)
    t_i = t_t = float("inf")
    # the limit's unit costs are timed before each interp sweep and after the last (the load of this
    # shared machine moves over minutes; each timing is a best of 5, the limit uses their median)
    costs, natives = [], []
    for _ in range(repeats):
        costs.append(limit_costs(model, task.clean))
        natives.append(native_block_position(model, task.clean))
        t, g = best_of(lambda: patching.activation_patch(model, task, progress=False, **kw), 1)
        t_i = min(t_i, t)
        t, theirs = best_of(lambda: tl_cells(model, task.corrupt, clean_cache, metric, tl_fn, cols, [todo[i] for i in idx]), 1)
        t_t = min(t_t, t)
    costs.append(limit_costs(model, task.clean))
    natives.append(native_block_position(model, task.clean))
    per_bp, head1, full, body = sorted(costs)[len(costs) // 2]  # the median by per-block-position cost
    native_bp = sorted(natives)[len(natives) // 2]
    lim = sum(per_bp * (L - l) * (P - (p or 0)) + head1 for l, p, _ in todo)
    lim_native = sum(native_bp * (L - l) * (P - (p or 0)) + head1 for l, p, _ in todo)
    tl_full = t_t * len(todo) / len(idx)
    out = {"cells": len(todo), "path": g.meta["path"], "interp_s": t_i, "limit_s": lim, "interp / limit": t_i / lim,
           "limit_native_s": lim_native, "interp / native limit": t_i / lim_native,
           "per_block_position_us_timings": [c[0] * 1e6 for c in costs],
           "per_block_position_native_us_timings": [n * 1e6 for n in natives],
           "per_block_position_native_us": native_bp * 1e6, "tl_s (scaled)": tl_full,
           "tl / interp": tl_full / t_i, "tl_cells_timed": len(idx),
           "max_abs_diff_vs_tl": float((g.values.flatten()[idx] - theirs.flatten()).abs().max()),
           "per_block_position_us": per_bp * 1e6, "unembed_1pos_ms": head1 * 1e3, "full_forward_ms": full * 1e3}
    print(json.dumps({name: out}), flush=True)
    return out


def main() -> None:
    args = options(("--resid-repeats", dict(type=int, default=1)), ("--resid-every", dict(type=int, default=10)),
                   ("--z-every", dict(type=int, default=5)),
                   ("--no-tl", dict(action="store_true")), ("--only", dict(default="attr,resid")))
    res = header()
    model = interp.load(MODEL)
    clean, corrupt, io, s, text = ioi_with_text(model, 8)
    task = make_task(clean, corrupt, io, s, text)
    if "attr" in args.only.split(","):
        res["attribution"] = attribution(model, task, io, s, args.repeats, not args.no_tl)
    for key, (name, *_) in sweeps(model).items():
        if key in args.only.split(","):
            every = args.resid_every if key == "resid" else args.z_every
            res[name] = sweep_vs_limit(model, task, make_metric(io, s), key, args.resid_repeats, every)
    finish(keep_other_sections(res, args.out), args.out)


def keep_other_sections(res: dict, out: str) -> dict:
    """`res` plus the sections of an earlier `out` this run did not measure (--only), each with
    the date and load of the run that measured it under "run"."""
    if not out or not os.path.exists(out):
        return res
    with open(out) as f:
        old = json.load(f)
    run = {k: old[k] for k in ("date", "threads", "torch", "load_average_start", "load_average_end") if k in old}
    for key in ("attribution", "resid_pre x pos", "head x all pos (z)"):
        if key in old and key not in res:
            res[key] = {**old[key], "run": old[key].get("run", run)}
    return res

if __name__ == "__main__":
    main()

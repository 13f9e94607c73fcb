"""The rows of benchmarks/gpu.py. Each function measures one row and returns it as a dict; the timing
rows name their reference (`ref`: TransformerLens or Hugging Face) with `ref_s` and `interp / ref`,
and their limit (the least any implementation does) with `limit_s` and `interp / limit`, both
measured in the same process. Patching and its limits reuse benchmarks/limits.py (IOI prompts of
benchmarks/real.py, the answer at the last position); generation's limit is HF `generate` itself.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

import torch

import interp
from interp import circuits, masking, patching, run, simplify, steering

sys.path.insert(0, os.path.dirname(__file__))
import limits  # noqa: E402
import real  # noqa: E402
from real import GEN_PROMPTS, ioi_with_text, make_metric, make_task  # noqa: E402
from timing import best_of  # noqa: E402


def synced_best_of(fn, repeats: int):
    """timing.best_of that waits for the GPU before and after each call (kernels run asynchronously)."""
    def call():
        out = fn()
        if torch.cuda.is_initialized():
            torch.cuda.synchronize()
        return out

    if torch.cuda.is_initialized():
        torch.cuda.synchronize()
    return best_of(call, repeats)


# limits.py and real.py time with timing.best_of, written for the CPU: on a GPU their timings must wait
# for the kernels too, so their module-level name is pointed at the synchronizing one (benchmark
# scripts only; on the CPU it is the same timing)
real.best_of = limits.best_of = synced_best_of


def ioi(model, batch: int, device: str):
    """(task, io, s) for `batch` IOI prompts with their tokens on `device`."""
    clean, corrupt, io, s, text = ioi_with_text(model, batch)
    io, s = io.to(device), s.to(device)
    return make_task(clean.to(device), corrupt.to(device), io, s, text), io, s


def _with_ref(out: dict, ref: str, ref_s: float) -> dict:
    return {**out, "ref": ref, "ref_s": ref_s, "interp / ref": out["interp_s"] / ref_s}


def exact(model, task, io, s, key: str, repeats: int, every: int) -> dict:
    """limits.sweep_vs_limit: interp's sweep vs TL's (every `every`-th cell, scaled) and vs its limit."""
    out = limits.sweep_vs_limit(model, task, make_metric(io, s), key, repeats, every)
    tl = {"z": "get_act_patch_attn_head_out_all_pos", "resid": "get_act_patch_resid_pre"}[key]
    return _with_ref(out, f"TransformerLens patching.{tl} (every {every}th cell, scaled)", out["tl_s (scaled)"])


def attribution(model, task, io, s, repeats: int) -> dict:
    """limits.attribution: interp (site z) vs its limit and TL's attribution_patch, whose metric is
    called one example at a time (real.sequential_metric)."""
    out = limits.attribution(model, task, io, s, repeats, True)
    return _with_ref(out, "TransformerLens attribution_patch (all nodes, per example)", out["tl_s"])


def _steer(model, strength: float = 1.0) -> steering.Steer:
    d = model.cfg.d_model
    v = torch.randn(d, generator=torch.Generator().manual_seed(0))
    axis = steering.Axis(v / v.norm(), torch.zeros(d), f"blocks.{model.cfg.n_layers // 2}.hook_resid_post")
    return steering.Steer(axis, "flip", strength)


def _hf_generate(hf, model, prompts, n: int):
    tokens, mask, _ = steering.encode(model, prompts)
    dev = hf.device
    pad = model.tokenizer.pad_token_id if model.tokenizer.pad_token_id is not None else 0
    with torch.no_grad():
        return hf.generate(input_ids=tokens.to(dev), attention_mask=mask.to(dev), do_sample=False, max_new_tokens=n,
                           pad_token_id=pad, eos_token_id=None).cpu()


def generation(model, hf, batch: int, n: int, repeats: int) -> dict:
    """Greedy `n` tokens for `batch` prompts: interp unsteered, steered (flip along a random axis at the
    middle block) and the bridge's own loop, vs HF generate (KV cache; its time is the limit); equality
    of interp at strength 0 with HF's tokens, in the same run."""
    prompts = (GEN_PROMPTS * 2)[:batch]
    ours = lambda steers, **kw: lambda: steering.generate(model, prompts, steers, max_new_tokens=n,  # noqa: E731
                                                         stop_at_eos=False, **kw)
    runs = {"hf": lambda: _hf_generate(hf, model, prompts, n), "unsteered": ours(()), "interp": ours(_steer(model)),
            "bridge steered": ours(_steer(model), native=False)}
    zero = ours(_steer(model, 0.0))()
    same = float((zero.tokens == runs["hf"]()).float().mean())
    best = {k: float("inf") for k in runs}
    for _ in range(repeats):  # alternate, so a burst of load hits all alike
        for k, fn in runs.items():
            best[k] = min(best[k], synced_best_of(fn, 1)[0])
    out = {"batch": batch, "new_tokens": n, "native": bool(zero.meta["native"]), "same_tokens_at_strength_0": same,
           "interp_s": best["interp"], "unsteered_s": best["unsteered"], "bridge_steered_s": best["bridge steered"],
           "limit_s": best["hf"], "interp / limit": best["interp"] / best["hf"]}
    return _with_ref(out, "Hugging Face generate (KV cache)", best["hf"])


def decode_step(model, hf, batch: int, k: int, repeats: int) -> dict:
    """One greedy decode step (KV cache) at `batch` rows: (generate 1 + k tokens - generate 1) / k,
    steered interp vs HF generate."""
    prompts = (GEN_PROMPTS * 2)[:batch]
    step, raw = {}, {}
    for name, fn in {"hf": lambda m: _hf_generate(hf, model, prompts, m),
                     "interp": lambda m: steering.generate(model, prompts, _steer(model), max_new_tokens=m,
                                                           stop_at_eos=False, record=False)}.items():
        raw[f"{name}_1_token_s"] = synced_best_of(lambda: fn(1), repeats + 1)[0]
        raw[f"{name}_{1 + k}_tokens_s"] = synced_best_of(lambda: fn(1 + k), repeats + 1)[0]
        step[name] = (raw[f"{name}_{1 + k}_tokens_s"] - raw[f"{name}_1_token_s"]) / k  # <= 0: k steps drown in noise
    out = {"batch": batch, "steps_timed": k, **raw, "interp_s": step["interp"], "limit_s": step["hf"],
           "interp / limit": step["interp"] / step["hf"]}
    return _with_ref(out, "Hugging Face generate, one step (KV cache)", step["hf"])


def bridge_forward(model, hf, batch: int, repeats: int) -> dict:
    """One forward of the bridge (compatibility mode, every hook point) at `batch` x 1 token vs the
    HF model's: ms, and what interp/data/gpu_calibration.json reads (ops, weight bytes, FLOPs; kernels
    on a GPU)."""
    from torch.profiler import ProfilerActivity, profile
    from torch.utils.flop_counter import FlopCounterMode

    dev = next(model.parameters()).device
    tokens = torch.randint(0, int(model.cfg.d_vocab), (batch, 1), generator=torch.Generator().manual_seed(0)).to(dev)
    with torch.no_grad():
        t = {"interp": synced_best_of(lambda: model(tokens), 1)[0], "hf": synced_best_of(lambda: hf(tokens), 1)[0]}
        for _ in range(repeats):
            t["interp"] = min(t["interp"], synced_best_of(lambda: model(tokens), 5)[0])
            t["hf"] = min(t["hf"], synced_best_of(lambda: hf(tokens), 5)[0])
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
        with profile(activities=acts) as prof:
            model(tokens)
            if dev.type == "cuda":
                torch.cuda.synchronize()
        with FlopCounterMode(display=False) as flops:
            model(tokens)
    kernels = sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA) if dev.type == "cuda" else None
    out = {"batch": batch, "seq": 1, "interp_s": t["interp"], "ms": 1e3 * t["interp"], "hf_ms": 1e3 * t["hf"],
           "ops": _leaf_ops()(prof), "kernels": kernels, "flops": int(flops.get_total_flops()),
           "weight_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
           "limit_s": t["hf"], "interp / limit": t["interp"] / t["hf"]}
    return _with_ref(out, "the HF model's forward", t["hf"])


def _leaf_ops():
    """interp.studies.gpu_estimate.leaf_ops (the calibration's op count), loaded from its file alone, so
    nothing else of interp.studies is imported (the studies need scipy, which the GPU pack leaves out)."""
    import importlib.util
    from pathlib import Path

    path = Path(interp.__file__).parent / "studies" / "gpu_estimate.py"
    spec = importlib.util.spec_from_file_location("gpu_estimate_alone", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.leaf_ops


def device_map_auto(spec: str, dtype: str, n: int) -> dict:
    """interp.load(device_map="auto"), one forward and a steered generation of `n` tokens, vs HF
    loaded and generating the same way."""
    from transformers import AutoModelForCausalLM

    t0 = time.perf_counter()
    model = interp.load(spec, device_map="auto", dtype=dtype)
    load_s = time.perf_counter() - t0
    tokens, _, _ = steering.encode(model, GEN_PROMPTS[:4])
    forward_s = synced_best_of(lambda: run.logits(model, tokens), 2)[0]
    gen_s, g = synced_best_of(lambda: steering.generate(model, GEN_PROMPTS[:4], _steer(model), max_new_tokens=n,
                                                        stop_at_eos=False), 2)
    hf = AutoModelForCausalLM.from_pretrained(interp.model.resolve(spec), device_map="auto", dtype=getattr(torch, dtype))
    hf_s = synced_best_of(lambda: _hf_generate(hf, model, GEN_PROMPTS[:4], n), 2)[0]
    out = {"load_s": load_s, "forward_s": forward_s, "interp_s": gen_s, "native": bool(g.meta["native"]),
           "placement": interp.describe(model)["placement"], "limit_s": hf_s, "interp / limit": gen_s / hf_s}
    return _with_ref(out, "Hugging Face generate, device_map='auto'", hf_s)


def entry_points(model, task) -> dict:
    """name -> a call of one public entry point on `model` (the calls of tests/test_device_lane.py);
    each returns a few numbers that say it computed something finite."""
    from interp.features import attribute, train_dictionaries
    from interp.features.train import Recipe, fit

    def finite(t) -> dict:
        t = torch.as_tensor(t).float()
        return {"finite": bool(torch.isfinite(t).all()), "numel": t.numel()}

    def edges():
        g = circuits.eap(model, task, progress=False)
        exact = circuits.exact(model, task, g.top(20), progress=False)
        return {**finite(exact.scores), "scores": finite(circuits.circuit_scores(model, task, {"eap": g}, random=0,
                                                                                 progress=False).values)}

    def dictionaries():
        site = "blocks.1.hook_resid_post"
        x = run.cache(model, task.clean, [site])[1][site].flatten(0, 1)
        sae = fit(x, site_in=site, recipe=Recipe(n_features=32, k=4, tokens=2048, seed=0))
        pairs = [(f"blocks.{l}.ln2.hook_normalized", f"blocks.{l}.hook_mlp_out") for l in range(model.cfg.n_layers)]
        with tempfile.TemporaryDirectory() as tmp:
            tcs = train_dictionaries(model, pairs, task.clean, task.clean != 0, tmp, progress=False,
                        recipe=Recipe(n_features=32, k=4, tokens=512, rows=4, seed=0, checkpoint_every=2))
            graph = attribute(model, "the keys to the cabinet", list(tcs.values()), progress=False, max_feature_nodes=20)
        return {**finite(graph.adjacency), "sae": finite(sae(x))}

    axis = lambda: steering.axis_from_contrast(model, ["the cat sat"], ["a dog ran"], site="resid_pre", layer=1)  # noqa: E731
    recipe = dict(steps=4, batch_size=4)
    return {
        "patching: exact, heads (z)": lambda: finite(patching.activation_patch(model, task, site="z", progress=False).values),
        "patching: exact, resid_pre by position": lambda: finite(patching.activation_patch(
            model, task, site="resid_pre", by_pos=True, positions="mean", progress=False).values),
        "patching: attribution (z)": lambda: finite(patching.attribution_patch(model, task, site="z").values),
        "patching: path": lambda: finite(patching.path_patch(model, task, progress=False).values),
        "circuits: EAP-IG": lambda: finite(circuits.eap_ig(model, task, steps=2, progress=False).scores),
        "circuits: EAP, exact edges, circuit scores": edges,
        "masking.learn_mask": lambda: finite(masking.learn_mask(model, task, sparsity=0.5, progress=False, **recipe).heads),
        "masking.subnetworks": lambda: finite(masking.subnetworks(model, task, sparsity=0.5, seeds=[0, 1], progress=False,
                                                                  **recipe)[1].heads),
        "steering: steered generation": lambda: finite(steering.generate(
            model, ["the keys to the", "a man"], steering.Steer(axis(), "add", 2.0), max_new_tokens=4).tokens),
        "simplify: one-hot attention": lambda: finite(run.logits(model, task.clean, [simplify.onehot(model, (1, 0))])),
        "features: dictionary fit + attribution graph": dictionaries,
    }

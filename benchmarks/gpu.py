"""GPU timings on smollm2-135m in bfloat16 (run by benchmarks/gpu.sh; works on CPU too, slowly).

    python benchmarks/gpu.py [--spec smollm2-135m] [--device cuda] [--dtype bfloat16] [--out gpu.json]

* exact activation patching (every head, site z; every layer x position, resid_pre) vs
  TransformerLens `patching.get_act_patch_attn_head_out_all_pos` / `get_act_patch_resid_pre`
* attribution patching (site z) vs TransformerLens' `attribution_patch`
* greedy generation, unsteered and with one flip steer (the native path, interp.run.natively, and
  the bridge's own loop), vs Hugging Face `generate` (KV cache on)

Each timing is the best of --repeats after one warm-up, with torch.cuda.synchronize() around it;
max |difference| against the reference is recorded beside each timing (bf16: expect ~1e-2).
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import torch
from transformer_lens import patching as tlp
from transformer_lens.tools.analysis import attribution_patching as tl_attr

import interp
from interp import patching, steering, tasks
from interp.metrics import for_task


def timed(fn, repeats: int, device: str):
    def sync():
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    out = fn()  # warm-up (kernels, caches)
    best = float("inf")
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        out = fn()
        sync()
        best = min(best, time.perf_counter() - start)
    return best, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spec", default="smollm2-135m")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--n", type=int, default=32, help="IOI examples")
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="benchmarks/gpu.json")
    args = ap.parse_args()
    dev = args.device
    t0 = time.perf_counter()
    model = interp.load(args.spec, device=dev, dtype=args.dtype)
    load_s = time.perf_counter() - t0
    task = tasks.make("ioi", split="abba", n=args.n, model=model)
    clean, corrupt = task.clean.to(dev), task.corrupt.to(dev)
    metric = for_task(task)
    rows = []
    with torch.no_grad():
        _, cache = model.run_with_cache(clean)
    for label, site, by_pos, tl_fn in [
        ("heads z, all positions", "z", False, tlp.get_act_patch_attn_head_out_all_pos),
        ("resid_pre, layer x position", "resid_pre", True, tlp.get_act_patch_resid_pre),
    ]:
        t_ours, ours = timed(lambda: patching.activation_patch(model, clean, corrupt, metric=metric, site=site,
                                                               by_pos=by_pos, progress=False), args.repeats, dev)
        with torch.no_grad():
            t_tl, theirs = timed(lambda: tl_fn(model, corrupt, cache, metric), 1, dev)
        diff = float((ours.values.float() - theirs.detach().float().cpu()).abs().max())
        rows.append({"what": f"exact patching, {label}", "interp_s": t_ours, "tl_s": t_tl, "speedup": t_tl / t_ours,
                     "max_abs_diff": diff})
        print(rows[-1], flush=True)
    t_ours, ours = timed(lambda: patching.attribution_patch(model, clean, corrupt, metric=metric, site="z"), args.repeats, dev)
    t_tl, _ = timed(lambda: tl_attr.attribution_patch(model, clean, corrupt, metric), 1, dev)
    rows.append({"what": "attribution patching (TL: all nodes; interp: site z)", "interp_s": t_ours, "tl_s": t_tl,
                 "speedup": t_tl / t_ours})
    print(rows[-1], flush=True)

    from transformers import AutoModelForCausalLM

    from interp.model import resolve

    hf = AutoModelForCausalLM.from_pretrained(resolve(args.spec), torch_dtype=getattr(torch, args.dtype)).to(dev).eval()
    hf.generation_config.eos_token_id = None
    prompts = ["The capital of France is", "Once upon a time, there was", "My favourite food is",
               "The weather today is"] * 4
    axis = steering.axis_from_contrast(model, ["I love this.", "What a great day."], ["I hate this.", "What an awful day."],
                                       site="resid_pre", layer=model.cfg.n_layers // 2)
    flip = steering.Steer(axis, "flip")
    n = args.new_tokens
    for batch in (1, 16):
        ps = prompts[:batch]
        tokens, mask, _ = steering.encode(model, ps)
        with torch.no_grad():
            t_hf, _ = timed(lambda: hf.generate(tokens.to(dev), attention_mask=mask.to(dev), max_new_tokens=n,
                                                min_new_tokens=n, do_sample=False), args.repeats, dev)
        t_plain, _ = timed(lambda: steering.generate(model, ps, (), max_new_tokens=n, stop_at_eos=False, record=False),
                           args.repeats, dev)
        t_flip, g = timed(lambda: steering.generate(model, ps, flip, max_new_tokens=n, stop_at_eos=False), args.repeats, dev)
        # the bridge's own loop (every forward through TransformerLens's wrappers), for comparison
        t_bridge, _ = timed(lambda: steering.generate(model, ps, flip, max_new_tokens=n, stop_at_eos=False, native=False),
                            args.repeats, dev)
        rows.append({"what": f"generate {n} tokens, batch {batch}", "hf_s": t_hf, "interp_s": t_plain,
                     "interp_steered_s": t_flip, "steered_over_hf": t_flip / t_hf, "native": g.meta["native"],
                     "bridge_steered_s": t_bridge, "bridge_steered_over_hf": t_bridge / t_hf})
        print(rows[-1], flush=True)
    result = {"spec": args.spec, "device": dev, "dtype": args.dtype, "n": args.n, "load_s": load_s,
              "gpu": torch.cuda.get_device_name(0) if dev.startswith("cuda") else platform.processor(),
              "torch": torch.__version__, "placement": interp.describe(model)["placement"], "rows": rows}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

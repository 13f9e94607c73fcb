"""Generation speed: plain Hugging Face, TransformerBridge, and interp's steering generator, in one run.

    python benchmarks/steering.py [--spec zoo:lm-llama] [--new-tokens 24] [--repeats 3] [--device cpu]

Same model weights, same left-padded prompts, greedy, no early stop (every row generates exactly
--new-tokens tokens), at batch 1 and batch 16. Rows:

* hf:           transformers `generate` on the model loaded with plain HF (KV cache on, no EOS stop)
* bridge:       `TransformerBridge.generate`, unsteered, KV cache on (its default)
* bridge_nokv:  `TransformerBridge.generate`, unsteered, use_past_kv_cache=False
* interp:       `interp.steering.generate`, unsteered (KV cache on)
* interp_flip:  `interp.steering.generate` with one `Steer(axis, "flip")`, projections recorded

It also reports whether each bridge/interp row's tokens equal the uncached bridge's (the
reference): on TransformerLens 4.3 with transformers 5 the bridge's cached path decodes with an
empty cache (see interp/steering/__init__.py), so its tokens can differ.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform

import torch

import interp
from interp import steering
from interp.studies.steering import sva_contrast
from interp.tasks import english
from timing import best_of  # benchmarks/timing.py, beside this script


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spec", default="zoo:lm-llama")
    ap.add_argument("--new-tokens", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    from transformers import AutoModelForCausalLM

    from interp.model import resolve

    bridge = interp.load(args.spec, device=args.device)
    hf = AutoModelForCausalLM.from_pretrained(resolve(args.spec)).to(args.device).eval()
    hf.generation_config.eos_token_id = None  # generate through EOS like the others (stop_at_eos=False)
    prompts = english.prefixes(16, seed=3)
    sg, pl = sva_contrast(256, set(prompts), seed=1)
    axis = steering.axis_from_contrast(bridge, sg, pl, site="resid_pre", layer=2)
    flip = steering.Steer(axis, "flip")
    tok = bridge.tokenizer
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id  # what steering.encode pads with
    n = args.new_tokens
    print(f"{args.spec} on {args.device}, {n} new tokens, best of {args.repeats}, torch threads {torch.get_num_threads()}")
    results = {}
    for batch in (1, 16):
        ps = prompts[:batch]
        tokens, mask, _ = steering.encode(bridge, ps)
        runs = {
            "hf": lambda: hf.generate(tokens, attention_mask=mask, max_new_tokens=n, do_sample=False,
                                      pad_token_id=pad_id),
            "bridge": lambda: bridge.generate(tokens, attention_mask=mask if batch > 1 else None, max_new_tokens=n,
                                              do_sample=False, stop_at_eos=False, verbose=False),
            "bridge_nokv": lambda: bridge.generate(tokens, attention_mask=mask if batch > 1 else None, max_new_tokens=n,
                                                   do_sample=False, stop_at_eos=False, verbose=False, use_past_kv_cache=False),
            "interp": lambda: steering.generate(bridge, ps, (), max_new_tokens=n, stop_at_eos=False).tokens,
            "interp_flip": lambda: steering.generate(bridge, ps, flip, max_new_tokens=n, stop_at_eos=False).tokens,
        }
        row = {}
        for name, fn in runs.items():
            fn()  # warm-up
            seconds, out = best_of(fn, args.repeats)
            row[name] = (seconds, out.cpu())
        ref = row["bridge_nokv"][1]
        print(f"\nbatch {batch}")
        print(f"{'run':<12} {'seconds':>8} {'tokens/s':>9}  same tokens as bridge_nokv")
        for name, (seconds, out) in row.items():
            same = torch.equal(out, ref) if name != "interp_flip" else "(steered)"
            print(f"{name:<12} {seconds:8.3f} {batch * n / seconds:9.1f}  {same}")
        t = {k: v[0] for k, v in row.items()}
        print(f"ratios: interp_flip / bridge = {t['interp_flip'] / t['bridge']:.2f}, interp_flip / interp = "
              f"{t['interp_flip'] / t['interp']:.2f}, interp / hf = {t['interp'] / t['hf']:.2f}, "
              f"bridge / hf = {t['bridge'] / t['hf']:.2f}, interp_flip / bridge_nokv = {t['interp_flip'] / t['bridge_nokv']:.2f}")
        results[batch] = t
    print(f"\n{datetime.date.today()}, {platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}")


if __name__ == "__main__":
    main()

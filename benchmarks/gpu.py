"""interp on one GPU against TransformerLens, Hugging Face and the limit of the work, run by
benchmarks/gpu.sh from a bare machine (works on the CPU too, at a small size):

    python benchmarks/gpu.py --spec MODEL [--label NAME] [--out gpu.json] [--device cuda]
        [--dtypes float32,bfloat16] [--batches 1,16] [--new-tokens 32] [--repeats 2] [--every 3]
        [--zoo lm-llama,lm-gpt2] [--decode-zoo lm-llama,lm-qwen2,lm-gemma2,lm-gpt2] [--only SECTIONS]

Sections (--only, comma-separated; all by default), each row per dtype:
  entry     every public entry point once on each --zoo model (tests/test_device_lane.py's calls):
            pass/fail, with the error
  patching  per batch: exact head patching (z, all positions) and resid_pre x position vs
            TransformerLens and vs their limit; attribution patching vs TL and its limit (limits.py)
  generate  per batch: steered generation of --new-tokens vs HF generate (the limit), tokens compared
  decode    one decode step at batch 20 (KV cache) vs HF generate, on MODEL and the --decode-zoo models
  forward   one bridge forward at batch 20 x 1 token vs HF: ms, ops, kernels, FLOPs (the row
            interp/data/gpu_calibration.json reads to calibrate the docs' GPU estimates)
  device_map  interp.load(device_map="auto") + forward + steered generation vs HF the same way
            (in the first dtype only)

Every row is appended to --out as soon as it finishes (a whole new file each time, written
atomically), so a run cut off keeps what it measured; a row that fails records its error and the
run goes on. Timings are best of --repeats after a warm-up, with the GPU synchronized around each.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import traceback

import torch

import interp

sys.path.insert(0, os.path.dirname(__file__))
import gpu_rows as rows  # noqa: E402

SECTIONS = ("entry", "patching", "generate", "decode", "forward", "device_map")


class Recorder:
    """The run's JSON: its circumstances and the rows so far, rewritten atomically after each row."""

    def __init__(self, out: str, meta: dict):
        self.out, self.result = out, {**meta, "rows": []}
        self._write()

    def row(self, what: str, fn, **keys) -> dict:
        t0 = time.perf_counter()
        try:
            got = fn()
        except Exception as e:  # noqa: BLE001 -- a row that fails is a result: record it and go on
            got = {"error": f"{type(e).__name__}: {e}"[:2000], "where": traceback.format_exc(limit=-3)[-3000:]}
            if isinstance(e, torch.cuda.OutOfMemoryError):
                torch.cuda.empty_cache()
        row = {"what": what, **keys, **got, "wall_s": time.perf_counter() - t0}
        self.result["rows"].append(row)
        self._write()
        print(json.dumps({k: v for k, v in row.items() if k != "where"}, default=str), flush=True)
        return row

    def _write(self) -> None:
        from interp.files.storage import write_text_atomic

        self.result["updated"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
        write_text_atomic(self.out, json.dumps(self.result, indent=1, default=str))


def loaded(rec: Recorder, spec: str, label: str, dev: str, dtype: str):
    """(bridge, HF model) of `spec` on `dev` in `dtype`, their load recorded as a row; None if it failed."""
    from transformers import AutoModelForCausalLM

    got = {}

    def load():
        t0 = time.perf_counter()
        got["model"] = interp.load(spec, device=dev, dtype=dtype)
        load_s = time.perf_counter() - t0
        got["hf"] = AutoModelForCausalLM.from_pretrained(interp.model.resolve(spec), dtype=getattr(torch, dtype)).to(dev).eval()
        return {"load_s": load_s, "placement": interp.describe(got["model"])["placement"]}

    row = rec.row("load", load, model=label, dtype=dtype)
    return None if "error" in row else (got["model"], got["hf"])


def entry_rows(rec: Recorder, family: str, dev: str, dtype: str) -> None:
    """Every public entry point once on zoo:FAMILY (pass/fail, with the error)."""
    got = loaded(rec, f"zoo:{family}", f"zoo:{family}", dev, dtype)
    if got:
        task = interp.tasks.make("ioi", split="train", n=6)
        for name, call in rows.entry_points(got[0], task).items():
            rec.row(f"entry point: {name}", call, model=f"zoo:{family}", dtype=dtype)


def batch_rows(rec: Recorder, args, got, label: str, dtype: str, batch: int, only: set) -> None:
    """Patching (exact x 2, attribution) vs TL and the limit, and generation vs HF, at one batch size."""
    model, hf = got
    keys = dict(model=label, batch=batch, dtype=dtype)
    made = {}

    def prompts():
        made["ioi"] = rows.ioi(model, batch, args.device)
        return {"shape": list(made["ioi"][0].clean.shape)}

    if "error" in rec.row("IOI prompts", prompts, **keys):
        return
    task, io, s = made["ioi"]
    if "patching" in only:
        for key, what in (("z", "exact patching, head x all pos (z)"), ("resid", "exact patching, resid_pre x pos")):
            rec.row(what, lambda: rows.exact(model, task, io, s, key, args.repeats, args.every), **keys)
        rec.row("attribution patching (z)", lambda: rows.attribution(model, task, io, s, args.repeats), **keys)
    if "generate" in only:
        rec.row(f"steered generation, {args.new_tokens} tokens",
                lambda: rows.generation(model, hf, batch, args.new_tokens, args.repeats), model=label, dtype=dtype)


def step_rows(rec: Recorder, args, got, name: str, dtype: str, only: set) -> None:
    """One decode step and one bridge forward at --decode-batch rows, each vs HF."""
    if not got:
        return
    if "decode" in only:
        rec.row(f"one decode step, batch {args.decode_batch}", lambda: rows.decode_step(
            got[0], got[1], args.decode_batch, args.decode_steps, args.repeats), model=name, dtype=dtype)
    if "forward" in only:
        rec.row(f"one bridge forward, batch {args.decode_batch} x 1 token",
                lambda: rows.bridge_forward(got[0], got[1], args.decode_batch, args.repeats), model=name, dtype=dtype)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--spec", default="smollm2-135m", help="what interp.load takes: a name, zoo:NAME or a folder")
    ap.add_argument("--label", default="", help="the model's name in the rows (default: --spec)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--note", default="", help="recorded with the run (e.g. that the weights are random)")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--decode-batch", type=int, default=20)
    ap.add_argument("--decode-steps", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--every", type=int, default=3, help="TL's sweeps are timed on every K-th cell and scaled")
    ap.add_argument("--zoo", default="lm-llama,lm-gpt2")
    ap.add_argument("--decode-zoo", default="lm-llama,lm-qwen2,lm-gemma2,lm-gpt2")
    ap.add_argument("--only", default=",".join(SECTIONS))
    ap.add_argument("--out", default="benchmarks/gpu.json")
    args = ap.parse_args()
    dev, label, only = args.device, args.label or args.spec, set(args.only.split(","))
    if only - set(SECTIONS):
        ap.error(f"--only takes {', '.join(SECTIONS)}; got {', '.join(sorted(only - set(SECTIONS)))}")
    from importlib.metadata import version

    import transformers

    gpu = torch.cuda.get_device_name(0) if dev.startswith("cuda") else None
    rec = Recorder(args.out, {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "device": dev, "gpu": gpu,
        "machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(), "torch": torch.__version__,
        "cuda": torch.version.cuda, "transformers": transformers.__version__,
        "transformer_lens": version("transformer-lens"), "spec": args.spec, "model": label, "note": args.note,
        "argv": sys.argv[1:], "ratios": "interp / ref and interp / limit: below 1, interp is faster",
    })
    for dtype in args.dtypes.split(","):
        if "entry" in only:
            for fam in args.zoo.split(","):
                entry_rows(rec, fam, dev, dtype)
        got = loaded(rec, args.spec, label, dev, dtype) if only & {"patching", "generate", "decode", "forward"} else None
        if got and only & {"patching", "generate"}:
            for batch in (int(b) for b in args.batches.split(",")):
                batch_rows(rec, args, got, label, dtype, batch, only)
        zoo = [f"zoo:{f}" for f in args.decode_zoo.split(",") if f and f"zoo:{f}" != args.spec]
        for spec in [args.spec] + zoo if only & {"decode", "forward"} else []:
            step_rows(rec, args, got if spec == args.spec else loaded(rec, spec, spec, dev, dtype),
                      label if spec == args.spec else spec, dtype, only)
            if dev.startswith("cuda"):
                torch.cuda.empty_cache()
        if "device_map" in only and dtype == args.dtypes.split(",")[0]:  # once, early, before a cut-off can take it
            got = None  # this dtype's model is done with: free it before another load
            rec.row("device_map='auto': load, forward, steered generation",
                    lambda: rows.device_map_auto(args.spec, dtype, args.new_tokens), model=label, dtype=dtype)
    failed = [r["what"] for r in rec.result["rows"] if "error" in r]
    print(f"wrote {args.out}: {len(rec.result['rows'])} rows, {len(failed)} failed", flush=True)


if __name__ == "__main__":
    main()

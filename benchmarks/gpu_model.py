"""A model folder with random weights from a real config (config.json + tokenizer files, no weights):
what benchmarks/gpu.sh boots on a machine that cannot download SmolLM2's weights. Timings do not
depend on weight values; every shape, op and kernel is the real model's.

    python benchmarks/gpu_model.py SPEC_DIR OUT_DIR [--layers N] [--seed S]

SPEC_DIR is what benchmarks/gpu_pack.sh writes (benchmarks/gpu_pack/smollm2-135m); --layers keeps
the first N layers (a small, fast model for a CPU smoke run). OUT_DIR gets config.json,
model.safetensors (float32) and the tokenizer files, which `interp.load(OUT_DIR)` boots.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import torch


def build(spec: str | Path, out: str | Path, layers: int | None = None, seed: int = 0) -> Path:
    """OUT with random weights (HF's own initialisation, seeded) for SPEC's config; returns OUT."""
    from transformers import AutoConfig, AutoModelForCausalLM

    spec, out = Path(spec), Path(out)
    config = AutoConfig.from_pretrained(spec)
    if layers is not None:
        config.num_hidden_layers = layers
        if getattr(config, "layer_types", None):
            config.layer_types = config.layer_types[:layers]
    torch.manual_seed(seed)  # a script's own process: the seed is set once, for this build
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    for f in spec.iterdir():
        if f.name != "config.json" and f.is_file():
            shutil.copy(f, out / f.name)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("spec")
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    out = build(args.spec, args.out, args.layers, args.seed)
    size = sum(f.stat().st_size for f in out.iterdir())
    print(f"random-weight model in {out} ({size / 2**20:.0f} MiB)")


if __name__ == "__main__":
    main()

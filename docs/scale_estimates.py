"""The memory estimates in docs/scale.md, computed from model sizes (not measured): writes scale.json.

    python docs/scale_estimates.py
"""

import json
from pathlib import Path

MODELS = {  # layers, d_model, heads, vocab, d_mlp, parameters
    "7B": dict(L=32, d=4096, H=32, vocab=32000, params=6.74e9),
    "70B": dict(L=80, d=8192, H=64, vocab=128256, params=70.6e9),
}


def estimates(m: dict, pos: int) -> dict:
    L, d, H = m["L"], m["d"], m["H"]
    return {
        "weights_bf16_GB": 2 * m["params"] / 1e9,
        "resid_cache_per_row_MB": 2 * pos * L * d / 1e6,  # one bf16 d_model vector per layer and position
        "attribution_per_row_MB": pos * L * (34 * d + 5 * H * pos) / 1e6,  # forward + backward activations, bf16
        # interp.run._variants_per_forward's budget per row (fp32, ~16 residual-sized tensors per layer,
        # ~4 attention maps per head, plus the logits)
        "patching_budget_per_row_MB": (4 * pos * L * (16 * d + 4 * H * pos) + 4 * pos * m["vocab"]) / 1e6,
    }


if __name__ == "__main__":
    out = {f"{name}, pos {pos}": estimates(m, pos) for name, m in MODELS.items() for pos in (20, 128)}
    path = Path(__file__).with_name("scale.json")
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))

"""Fine-tuning and extractive scores on SmolLM2-135M, timed.

    OMP_NUM_THREADS=1 python benchmarks/grafting.py [--spec smollm2-135m] [--epochs 8] [--reference-layers 3]
                                                    [--delta PATH]

--delta PATH: score a saved first-hop facts delta (e.g. the study's cached
$INTERP_CACHE/extractive/smollm2-135m/first_hop.safetensors) instead of fine-tuning again; the
finetune row then reports the training time recorded in its provenance.

Rows:

* finetune:     Adam on all attention and MLP weight matrices, 20 first-hop facts, --epochs epochs
                (the paper's 8), batch 8, lr 1e-4: wall time, and the facts' mean rank after
* batched:      informative scores of every component (each MLP, each head: 30 x 10) from one
                forward and one backward (`interp.grafting.informative_by_component`)
* all_scores:   informative, upstream and downstream scores per component and position in one
                call (`interp.grafting.extractive_scores`: two backwards, two more forwards)
* per_component: one backward per component (`interp.grafting.per_component_backward`), timed on
                the first --reference-layers layers (10 components each) and scaled to all layers;
                its values are checked against the batched ones on those layers
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import time

import torch

import interp
from interp import grafting
from interp.grafting.facts import assignments


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spec", default="smollm2-135m")
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--reference-layers", type=int, default=3)
    ap.add_argument("--delta", default=None)
    args = ap.parse_args()
    model = interp.load(args.spec)
    one, _ = assignments(20, 0)
    facts, impl = grafting.first_hop(model, 20, assignment=one)
    rows = {}

    t = time.perf_counter()
    if args.delta:
        delta = grafting.Delta.load(args.delta)
        delta.check(model)
        seconds, source = delta.provenance["seconds"], f"recorded in {args.delta}"
    else:
        delta = grafting.finetune(model, facts, epochs=args.epochs, lr=1e-4, batch_size=8, progress=False)
        seconds, source = time.perf_counter() - t, "measured here"
    rows["finetune"] = {"seconds": seconds, "source": source, "epochs": delta.provenance["epochs"],
                        "steps": len(delta.provenance["losses"]),
                        "facts_rank_after": grafting.mean_rank(model, facts, [delta.intervention(model)])}

    t = time.perf_counter()
    batched = grafting.informative_by_component(model, delta, impl)
    rows["batched"] = {"seconds": time.perf_counter() - t, "components": batched.numel()}

    t = time.perf_counter()
    grafting.extractive_scores(model, delta, impl)
    rows["all_scores"] = {"seconds": time.perf_counter() - t}

    k = args.reference_layers
    t = time.perf_counter()
    ref = grafting.per_component_backward(model, delta.restrict(layers=range(k)), impl)
    seconds = time.perf_counter() - t
    scale = model.cfg.n_layers / k
    rows["per_component"] = {"seconds_measured": seconds, "layers_measured": k, "backwards_measured": ref[:k].numel(),
                             "seconds_all_layers_estimated": seconds * scale,
                             "max_abs_diff_vs_batched": float((ref[:k] - batched[:k]).abs().max()),
                             "max_abs_score": float(batched[:k].abs().max())}
    rows["ratio_per_component_over_batched"] = seconds * scale / rows["batched"]["seconds"]
    rows["meta"] = {"spec": args.spec, "torch_threads": torch.get_num_threads(), "machine": platform.machine(),
                    "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()

"""Parameter probing on a real model: scores of every linear weight from 64 probe rows in one pass
against one plain forward of the same rows, and probing one domain end to end.

    python benchmarks/probing.py [--spec smollm2-135m] [--repeats 2] [--probe-task code/operator]

Rows:

* forward:      one forward of the 64 probe rows through the bridge (logits at every position)
* scores:       `probing.input_norms` on the same rows (one pass; hooks accumulate ||X_j||^2 of all
                linear inputs; the unembedding runs at one position), then every score map |W| * norm
* probe:        `probing.probe` of one domain task (32 validation rows, the study's real-model
                settings), with its number of validation checks (each one `run.evaluate`)

Prints one markdown table (machine, threads and load average included: on a shared CPU the
absolute times move with the load, the ratio less so).
"""

from __future__ import annotations

import argparse
import os
import platform

import torch
from timing import best_of  # benchmarks/timing.py, beside this script

import interp
from interp import probing, run
from interp.studies.specialization import SETTINGS
from interp.tasks import domains


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spec", default="smollm2-135m")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--probe-task", default="code/operator")
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    model = interp.load(args.spec)
    rows = domains.task(model, "code", "operator", split="val", n=64)  # 64 probe rows of one length class
    lins = probing.linears(model)
    n_weights = sum(l.shape[0] * l.shape[1] for l in lins.values())
    t_fwd, _ = best_of(lambda: run.logits(model, rows.clean), args.repeats)

    def scores():
        s = probing.input_norms(model, rows.clean, answer_pos=rows.answer_pos, chunk=64)
        return [s.matrix(model, n).sum() for n in lins]

    t_scores, _ = best_of(scores, args.repeats)
    domain, name = args.probe_task.split("/")
    val = domains.task(model, domain, name, split="val", n=32)
    s = SETTINGS["real"]
    norms = probing.input_norms(model, val.clean, answer_pos=val.answer_pos)
    t_probe, p = best_of(lambda: probing.probe(
        model, val.clean, domains.option_accuracy(val), norms, answer_pos=val.answer_pos, tolerance=s["tolerance"],
        sparsity=s["sparsity"], n_groups=s["n_groups"], grouping=s["grouping"], max_checks=s["max_checks"],
        progress=False), 1)
    load = os.getloadavg()[0]
    print(f"## probing ({args.spec}, cpu, {torch.get_num_threads()} threads, {platform.machine()}, load average {load:.1f})\n")
    print("| what | rows x positions | seconds | note |")
    print("|---|---|---|---|")
    print(f"| forward | {tuple(rows.clean.shape)} | {t_fwd:.2f} | logits at every position |")
    print(f"| scores (one pass + {len(lins)} score maps) | {tuple(rows.clean.shape)} | {t_scores:.2f} | "
          f"{n_weights / 1e6:.1f} M weights; {t_scores / t_fwd:.2f} x a forward |")
    print(f"| probe {args.probe_task} | {tuple(val.clean.shape)} | {t_probe:.1f} | {p.meta['checks']} checks, "
          f"sparsity {p.total_sparsity:.3f}, stop: {p.meta['stop']} |")


if __name__ == "__main__":
    main()

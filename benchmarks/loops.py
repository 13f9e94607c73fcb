"""The studies' inner loops against plain torch loops doing the same work.

    OMP_NUM_THREADS=1 python benchmarks/loops.py [--spec smollm2-135m] [--repeats 3] [--checks 6]
                                                 [--epochs 2] [--out FILE.json]

Rows (learn_mask has its own: benchmarks/masking.py):

* probe check: one validation check of `probing.probe` (the specialization study's unit of work):
  build the candidate masks from the weights' quantile groups, run the 32 validation rows under
  the `WeightMask` with `run.evaluate` (logits at the answer positions), read option accuracy. The
  plain loop does the same on the HF model under the bridge (`interp.model.native.unwrapped`: the same
  processed weights, no wrappers) with `torch.func.functional_call` swapping in w * mask, and
  unembeds the answer positions only. Both must give the same accuracy on every check.
* finetune step: one Adam step of `grafting.finetune` (every attention and MLP matrix, batch 8,
  the extractive study's first-hop facts). The plain loop trains the same deltas on the same HF
  modules with functional_call(w + delta), the same row order and loss; both must log the same
  losses.

The two sides alternate within each repeat; best of N each. Prints and writes one JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import torch
from torch.func import functional_call

import interp
from interp import grafting, probing, run
from interp.interventions import WeightMask
from interp.model.native import unwrapped
from interp.probing.probe import levels, linears
from interp.tasks import domains


def _native_names(model, native) -> dict[str, str]:
    """bridge parameter name -> the HF module's name for the same tensor (the copy shares them)."""
    by_id = {id(p): n for n, p in native.named_parameters()}
    return {n: by_id[id(p)] for n, p in model.named_parameters() if id(p) in by_id}


def _answer_logits(native, tokens, answer_pos, params=None):
    body = native.model if hasattr(native, "model") else native.base_model
    kwargs = {"input_ids": tokens}
    hidden = (functional_call(body, params, args=(), kwargs=kwargs) if params else body(**kwargs)).last_hidden_state
    rows = torch.arange(tokens.shape[0])
    return native.lm_head(hidden[rows, answer_pos])  # [batch, vocab]


def probe_checks(model, n_checks: int, repeats: int) -> dict:
    suite = domains.suite(model, split="val", n=32, fmt="default", repeat=True)
    task = suite["arithmetic"]["add"]
    metric = domains.option_accuracy(task)
    scores = probing.input_norms(model, task.clean, answer_pos=task.answer_pos)
    names = list(linears(model))
    group = {n: levels(scores.matrix(model, n), 10, "row") for n in names}
    native = unwrapped(model)
    hf = _native_names(model, native)
    params = dict(model.named_parameters())
    cuts = [(q % 3) + 1 for q in range(n_checks)]  # 1-3 groups pruned everywhere: checks that differ

    def interp_side() -> list[float]:
        out = []
        for cut in cuts:
            mask = WeightMask({n: group[n] >= cut for n in names})
            out.append(float(run.evaluate(model, task.clean, [[mask]], metric, answer_pos=task.answer_pos, progress=False)[0]))
        return out

    def plain_side() -> list[float]:
        out = []
        with torch.no_grad():
            for cut in cuts:
                swapped = {hf[n].removeprefix("model."): params[n] * (group[n] >= cut) for n in names}
                at = _answer_logits(native, task.clean, task.answer_pos, swapped)
                full = torch.full((at.shape[0], task.clean.shape[1], at.shape[1]), float("nan"))
                full[torch.arange(at.shape[0]), task.answer_pos] = at
                out.append(float(metric(full)))
        return out

    return _alternate(interp_side, plain_side, repeats, n_checks, "checks")


def finetune_steps(model, epochs: int, repeats: int) -> dict:
    facts, _ = grafting.first_hop(model, 20)
    names = grafting.parameters(model)
    native = unwrapped(model)
    hf = _native_names(model, native)
    params = dict(model.named_parameters())
    tokens, targets = grafting.delta._rows(model, [facts])
    n, batch = tokens.shape[0], 8
    steps = epochs * -(-n // batch)

    def interp_side() -> list[float]:
        d = grafting.finetune(model, facts, epochs=epochs, lr=1e-4, batch_size=batch, seed=0, progress=False)
        return list(d.provenance["losses"])

    def plain_side() -> list[float]:
        body = native.model
        deltas = {n: torch.zeros_like(params[n], requires_grad=True) for n in names}
        opt = torch.optim.Adam(list(deltas.values()), lr=1e-4)
        gen = torch.Generator().manual_seed(0)
        losses = []
        for _ in range(epochs):
            order = torch.randperm(n, generator=gen)
            for i in range(0, n, batch):
                rows = order[i: i + batch]
                swapped = {hf[k].removeprefix("model."): params[k] + deltas[k] for k in names}
                hidden = functional_call(body, swapped, args=(), kwargs={"input_ids": tokens[rows]}).last_hidden_state
                logits = native.lm_head(hidden)
                loss = grafting.delta._loss(logits, targets[rows])
                for p, g in zip(deltas.values(), torch.autograd.grad(loss, list(deltas.values()))):
                    p.grad = g
                opt.step()
                losses.append(float(loss.detach()))
        return losses

    return _alternate(interp_side, plain_side, repeats, steps, "steps")


def _alternate(interp_side, plain_side, repeats: int, units: int, what: str) -> dict:
    times = {"interp": [], "plain": []}
    values = {}
    for _ in range(repeats):
        for name, fn in (("interp", interp_side), ("plain", plain_side)):
            t0 = time.perf_counter()
            values[name] = fn()
            times[name].append(time.perf_counter() - t0)
    best = {k: min(v) for k, v in times.items()}
    diff = max(abs(a - b) for a, b in zip(values["interp"], values["plain"]))
    return {what: units, "interp_s": best["interp"], "plain_s": best["plain"],
            f"interp {what}/s": units / best["interp"], f"plain {what}/s": units / best["plain"],
            "x plain torch": best["plain"] / best["interp"], "max_abs_diff": diff,
            "interp_values": values["interp"], "plain_values": values["plain"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spec", default="smollm2-135m")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--checks", type=int, default=6)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    res = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": platform.machine(),
           "threads": torch.get_num_threads(), "torch": torch.__version__, "spec": args.spec,
           "load_average_start": os.getloadavg()}
    model = interp.load(args.spec)
    res["probe check"] = probe_checks(model, args.checks, args.repeats)
    print(json.dumps({k: v for k, v in res["probe check"].items() if "values" not in k}), flush=True)
    res["finetune step"] = finetune_steps(model, args.epochs, args.repeats)
    print(json.dumps({k: v for k, v in res["finetune step"].items() if "values" not in k}), flush=True)
    res["load_average_end"] = os.getloadavg()
    if args.out:
        from interp.files.storage import write_text_atomic

        write_text_atomic(args.out, json.dumps(res, indent=1))


if __name__ == "__main__":
    main()

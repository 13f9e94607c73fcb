"""Grokking and its cores (Schiffman 2026, the modular-addition claims) at toy scale: `interp repro grokking`.

Two claims of the cores paper, which our copy states only in its abstract (no p, widths, seeds or
steps): modular-addition transformers "form compact cyclic cores at grokking that later inflate under
continued regularization" (ace.modular_cyclic), and that redundancy "accelerates the transition from
memorization to generalization, yielding an inverse scaling law for grokking time" (ace.inverse_scaling).

One unit per training run (`interp.studies.units`): a one-layer GPT-2 of width d_model (d_mlp = 4 x
width) trained full-batch on `a + b mod p` with the zoo's modadd recipe (AdamW, weight decay 1,
`interp.zoo.train`), evaluated every `eval_every` steps; the checkpoints before / at / after grokking
(`interp.zoo.train.grokking_steps`: at = the first evaluation with test accuracy >= 0.9) each get their
core (`interp.cores.extract` at `blocks.0.hook_resid_post` on the training pairs, k at the largest
spectral gap) and its Fourier concentration: the share of the core coordinates' power, over residues
(a + b) mod p, in its ceil(k/2) strongest frequencies (a cyclic core of k dimensions is k/2 circles,
so 1 is perfectly cyclic). Beside each core, `draws` random subspaces of the same k at the same site,
scored the same way. The weights are trained in a temporary folder and not kept.

Claims, each judged by `interp.studies.verdicts` over the runs that grokked:

- cyclic at grokking: the core's concentration minus its random subspaces' mean, bootstrap over runs
  (null "random subspaces"; not told apart is "forced": the site itself is that periodic).
- inflation: k after minus k at grokking, paired per run, bootstrap over runs (null "baseline").
- inverse scaling: Spearman's rho between redundancy (k at grokking) and grokking step across every
  width and seed, against `perms` shuffles of the grokking steps across runs (null "permutation");
  rho within widths (shuffles inside each width) and the log-log slope are reported beside it.
"""

from __future__ import annotations

import math
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

import torch
from tqdm.auto import tqdm

from interp.errors import InterpError
from interp.studies.grokking.doc import regions
from interp.studies.protocol import study
from interp.studies.units import Units, budget as resolve_budget, budget_record, provenance

__all__ = ["BUDGETS", "NAME", "STUDY", "SITE", "concentration", "departures", "regions", "repro", "spearman"]

NAME = STUDY = "grokking"
SITE = "blocks.0.hook_resid_post"
VERSION = 1  # bump when a unit's code changes what it computes
GROKKED = 0.9  # test accuracy that marks grokking (interp.zoo.train.grokking_steps)
# widths: d_model of each run (d_mlp = 4 x width, 4 heads); seeds per width; steps of full-batch AdamW;
# draws: random subspaces per core; perms / boot: shuffles and bootstrap resamples of the runs; max_k: the
# largest k the spectral gap may pick, the same at every width (at most half the narrowest width: searched
# down to the end of a width-long spectrum, the floored tail makes a spurious last gap, k = width - 1).
BUDGETS: dict[str, dict[str, Any]] = {
    "quick": {"p": 23, "train_frac": 0.6, "widths": [32, 48], "seeds": [0], "steps": 400, "eval_every": 25,
              "lr": 3e-3, "weight_decay": 1.0, "draws": 10, "perms": 200, "boot": 200, "max_k": 16},
    "paper": {"p": 59, "train_frac": 0.3, "widths": [32, 48, 64], "seeds": [0, 1, 2], "steps": 2000, "eval_every": 25,
              "lr": 1e-3, "weight_decay": 1.0, "draws": 20, "perms": 2000, "boot": 2000, "max_k": 16},
}


def departures(values: dict[str, Any]) -> list[dict[str, Any]]:
    """How a budget differs from the paper's set-up. Our copy of the paper is its abstract: it gives no
    p, widths, seeds, steps or optimiser, so each row says so beside our value."""
    unstated = "not stated in our copy of the paper (abstract only)"
    return [
        {"what": "prime p", "ours": values["p"], "paper": unstated, "why": "CPU: every training pair in each full-batch step"},
        {"what": "training fraction", "ours": values["train_frac"], "paper": unstated, "why": "the zoo's modadd recipe"},
        {"what": "widths (d_model; MLP four times as wide, four heads, one layer)", "ours": values["widths"],
         "paper": unstated, "why": "CPU budget (about half a CPU hour); width sixteen did not even fit its training set"},
        {"what": "seeds per width", "ours": len(values["seeds"]), "paper": unstated, "why": "CPU budget"},
        {"what": "training steps", "ours": values["steps"], "paper": unstated,
         "why": "CPU budget: 'continued regularization' here is the steps after grokking up to this count"},
        {"what": "optimiser", "ours": f"AdamW lr {values['lr']:g}, weight decay {values['weight_decay']:g}, full batch",
         "paper": unstated, "why": "the zoo's modadd recipe (Nanda et al.'s set-up)"},
        {"what": "redundancy", "ours": f"core dimension k at grokking (largest spectral gap, k <= {values['max_k']})", "paper": unstated,
         "why": "the abstract names functional redundancy across modes without saying how it is counted"},
    ]


# ---------------------------------------------------------------------------------------------
# pure statistics


def concentration(power: torch.Tensor, k: int) -> float:
    """The share of Fourier power in the ceil(k/2) strongest frequencies (1: every coordinate a circle)."""
    top = min(len(power), max(1, math.ceil(k / 2)))
    total = float(power.sum())
    return float(power.sort(descending=True).values[:top].sum()) / total if total > 0 else 0.0


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rho (ties get average ranks); 0 when either side is constant."""
    from scipy.stats import spearmanr

    if len(set(x)) < 2 or len(set(y)) < 2:
        return 0.0
    return float(spearmanr(x, y)[0])


def _interval(values: list[float]) -> list[float]:
    t = torch.tensor(values, dtype=torch.float64)
    return [float(t.quantile(0.025)), float(t.quantile(0.975))]


def _bootstrap_mean(values: list[float], boot: int, seed: int) -> list[float]:
    gen = torch.Generator().manual_seed(seed)
    t = torch.tensor(values, dtype=torch.float64)
    return _interval([float(t[torch.randint(len(t), (len(t),), generator=gen)].mean()) for _ in range(boot)])


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


# ---------------------------------------------------------------------------------------------
# one unit: one training run and its cores at the three checkpoints


def _recipe(cfg: dict[str, Any]):
    from interp.zoo.train import RECIPES

    w = cfg["width"]
    return replace(RECIPES["modadd"], name=f"grok-w{w}-s{cfg['seed']}", seed=cfg["seed"], steps=cfg["steps"],
                   sizes=dict(d_model=w, n_layers=1, n_heads=4, d_mlp=4 * w, n_ctx=8), lr=cfg["lr"],
                   weight_decay=cfg["weight_decay"], eval_every=cfg["eval_every"],
                   data={"p": cfg["p"], "train_frac": cfg["train_frac"]})


def _checkpoint(path: Path, cfg: dict[str, Any], task, residues: torch.Tensor) -> dict[str, Any]:
    import interp
    from interp.cores import activations, extract, fourier_power
    from interp.cores.linalg import random_basis

    model = interp.load(path)
    p, width = cfg["p"], cfg["width"]
    core = extract(model, task, site=SITE, max_k=cfg["max_k"])
    acts = activations(model, task, core.site).float()
    power = fourier_power(core.coordinates(acts), residues, p)
    centred = acts - core.mean
    rand = [concentration(fourier_power(centred @ random_basis(width, core.k, seed=1000 + i), residues, p), core.k)
            for i in range(cfg["draws"])]
    order = power.argsort(descending=True)[:5]
    return {"k": core.k, "concentration": concentration(power, core.k), "random": rand,
            "top_frequencies": [int(f) + 1 for f in order],
            "top_power_fraction": [float(power[f] / power.sum()) for f in order]}


def _train_unit(cfg: dict[str, Any], progress: bool) -> dict[str, Any]:
    from interp.tasks import modular
    from interp.zoo.train import grokking_steps, train

    task = modular.modular_addition(p=cfg["p"], split="train", train_frac=cfg["train_frac"])
    residues = torch.tensor([(a + b) % cfg["p"] for a, b in zip(task.meta["a"], task.meta["b"])])
    start = time.time()
    with tempfile.TemporaryDirectory(prefix="interp-grokking-") as tmp:
        card = train(_recipe(cfg), tmp, progress=progress, evaluate_after=False)
        train_s = time.time() - start
        history = card["history"]
        marks = grokking_steps(history)
        grokked = any(h["test"] >= GROKKED for h in history)
        checkpoints = {}
        for label, step in marks.items():
            h = next(h for h in history if h["step"] == step)
            checkpoints[label] = {"step": step, "train_acc": h["train"], "test_acc": h["test"],
                                  **_checkpoint(Path(tmp) / "checkpoints" / label, cfg, task, residues)}
    memorized = next((h["step"] for h in history if h["train"] >= GROKKED), None)
    return {"grokked": grokked, "grok_step": marks["at"] if grokked else None, "memorized_step": memorized,
            "final": {"train_acc": history[-1]["train"], "test_acc": history[-1]["test"]},
            "checkpoints": checkpoints, "train_s": round(train_s, 1)}


# ---------------------------------------------------------------------------------------------
# the claims


def claims(runs: list[dict[str, Any]], b: dict[str, Any]) -> dict[str, Any]:
    """The two claims' judgements over the runs that grokked (see the module doc)."""
    from interp.studies.verdicts import judge

    g = [r for r in runs if r["grokked"]]
    out: dict[str, Any] = {"runs_grokked": len(g), "runs": len(runs)}
    if len(g) < 2:
        for key, cid in (("cyclic_at_grokking", "ace.modular_cyclic"), ("inflation", "ace.modular_cyclic"),
                         ("inverse_scaling", "ace.inverse_scaling")):
            out[key] = judge(f"{key}: fewer than two runs grokked", None, 0.0, claim_id=cid, null="baseline")
        return out
    at = [r["checkpoints"]["at"] for r in g]
    after = [r["checkpoints"]["after"] for r in g]
    rand_mean = [_mean(c["random"]) for c in at]
    diffs = [c["concentration"] - m for c, m in zip(at, rand_mean)]
    out["cyclic_at_grokking"] = judge(
        "at grokking the core's Fourier concentration exceeds random subspaces of its k at the same site",
        _mean([c["concentration"] for c in at]), _mean(rand_mean), "greater", diff_ci=_bootstrap_mean(diffs, b["boot"], 1),
        null="random subspaces", draws=b["draws"], setup_control=True, claim_id="ace.modular_cyclic")
    out["cyclic_at_grokking"]["runs_above_every_draw"] = sum(c["concentration"] > max(c["random"]) for c in at)
    out["inflation"] = judge(
        "the core inflates after grokking: k at the last step exceeds k at grokking (paired per run)",
        _mean([float(c["k"]) for c in after]), _mean([float(c["k"]) for c in at]), "greater",
        diff_ci=_bootstrap_mean([float(a["k"] - c["k"]) for a, c in zip(after, at)], b["boot"], 2), null="baseline",
        claim_id="ace.modular_cyclic")
    out["inflation"]["runs_inflated"] = sum(a["k"] > c["k"] for a, c in zip(after, at))
    out["inverse_scaling"] = _inverse_scaling(g, b)
    return out


def _inverse_scaling(g: list[dict[str, Any]], b: dict[str, Any]) -> dict[str, Any]:
    from interp.studies.verdicts import judge

    red = [float(r["checkpoints"]["at"]["k"]) for r in g]
    steps = [float(r["grok_step"]) for r in g]
    rho = spearman(red, steps)
    gen = torch.Generator().manual_seed(3)
    null = [spearman(red, [steps[i] for i in torch.randperm(len(steps), generator=gen).tolist()]) for _ in range(b["perms"])]
    out = judge("grokking step falls with core redundancy (k at grokking): Spearman's rho across runs below shuffles",
                rho, _mean(null), "less", control_ci=_interval(null), null="permutation", draws=b["perms"],
                claim_id="ace.inverse_scaling")
    boots = []
    for _ in range(b["boot"]):
        i = torch.randint(len(g), (len(g),), generator=gen).tolist()
        boots.append(spearman([red[j] for j in i], [steps[j] for j in i]))
    out["rho_bootstrap_ci"] = _interval(boots)
    # within widths: shuffle the grokking steps only among runs of the same width
    widths = [r["width"] for r in g]
    groups = {w: [i for i, x in enumerate(widths) if x == w] for w in dict.fromkeys(widths)}

    def within(order: list[float]) -> float:
        parts = [(spearman([red[i] for i in ix], [order[i] for i in ix]), len(ix)) for ix in groups.values() if len(ix) > 2]
        return sum(r * n for r, n in parts) / sum(n for _, n in parts) if parts else 0.0

    shuffled = []
    for _ in range(b["perms"]):
        order = list(steps)
        for ix in groups.values():
            perm = torch.randperm(len(ix), generator=gen).tolist()
            for dst, src in zip(ix, perm):
                order[dst] = steps[ix[src]]
        shuffled.append(within(order))
    out["within_width"] = {"rho": within(steps), "null_ci": _interval(shuffled)}
    x = torch.tensor(red, dtype=torch.float64).log()
    y = torch.tensor(steps, dtype=torch.float64).log()
    slope = lambda i: float(((x[i] - x[i].mean()) * (y[i] - y[i].mean())).sum() / ((x[i] - x[i].mean()) ** 2).sum().clamp_min(1e-12))  # noqa: E731
    idx = torch.arange(len(g))
    out["loglog_slope"] = slope(idx)
    out["loglog_slope_ci"] = _interval([slope(torch.randint(len(g), (len(g),), generator=gen)) for _ in range(b["boot"])])
    return out


def _per_width(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out = {}
    for w in dict.fromkeys(r["width"] for r in runs):
        mine = [r for r in runs if r["width"] == w]
        g = [r for r in mine if r["grokked"]]
        out[str(w)] = {"runs": len(mine), "grokked": len(g),
                       "grok_step_mean": _mean([float(r["grok_step"]) for r in g]) if g else None,
                       **{f"k_{label}_mean": _mean([float(r["checkpoints"][label]["k"]) for r in g]) if g else None
                          for label in ("before", "at", "after")}}
    return out


# ---------------------------------------------------------------------------------------------
# the study


def _check(b: dict[str, Any], models) -> None:
    if models:
        raise InterpError("the grokking study trains its own models: leave out --model")
    if not b["widths"] or any(w < 8 or w % 4 for w in b["widths"]):
        raise InterpError(f"widths {b['widths']}: give widths >= 8 divisible by 4 (4 heads)")
    if not 1 <= b["max_k"] <= min(b["widths"]) // 2:
        raise InterpError(f"max_k {b['max_k']}: give 1 .. {min(b['widths']) // 2} (half the narrowest width), "
                          "the same cap at every width")
    if b["draws"] < 1 or b["perms"] < 1 or b["boot"] < 1 or b["steps"] < b["eval_every"] or b["eval_every"] < 1:
        raise InterpError(f"budget {b}: draws, perms, boot, eval_every must be >= 1 and steps >= eval_every")


@study("grokking")
def repro(progress: bool = True, models: Sequence[str] | None = None, budget: str = "quick",
          overrides: dict[str, Any] | None = None, units: str | Path | None = None) -> dict[str, Any]:
    """`interp repro grokking`: one unit per (width, seed), then the claims over the runs."""
    start = time.time()
    b = resolve_budget(BUDGETS, budget, overrides)
    _check(b, models)
    store = Units(STUDY, units, version=VERSION)
    keys = ("p", "train_frac", "steps", "eval_every", "lr", "weight_decay", "draws", "max_k")
    # seed-major: a run stopped part-way has every width for its first seeds (aggregate those with --set seeds=...)
    configs = [{"unit": "train", "width": w, "seed": s, **{k: b[k] for k in keys}} for s in b["seeds"] for w in b["widths"]]
    runs = []
    for cfg in tqdm(configs, desc="grokking runs", disable=not progress):
        runs.append({"width": cfg["width"], "seed": cfg["seed"], **store.run(cfg, lambda cfg=cfg: _train_unit(cfg, progress))})
    for r in runs:
        for c in r["checkpoints"].values():
            c["random_mean"] = _mean(c["random"])
            c["random_range"] = [min(c["random"]), max(c["random"])]
    out: dict[str, Any] = {"site": SITE, "grokked_at": GROKKED, "runs": runs, "per_width": _per_width(runs),
                           "claims": claims(runs, b)}
    done, total = store.count(configs)
    out["budget"] = budget_record(budget, b, None, done, total)
    out["budgets"] = BUDGETS
    out["provenance"] = provenance(budget, b, None, time.time() - start, done, total, units_run=store.ran,
                                   units_s={f"width {c['width']} seed {c['seed']}": store.seconds(c) for c in configs})
    return out

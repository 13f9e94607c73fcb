"""Algorithmic cores (Schiffman 2026) at toy scale: the reproduction (`interp repro cores`) and the
demo section. Built from public names of `interp.cores` only. See docs/cores.md.

Site rules (fixed here so every number in the repro is reproducible):

* markov: `ln_final.hook_normalized` (the unembedding's input) with the centred logits of the
  four states as the task output, so the core holds the next-state distribution.
* modular: `blocks.0.hook_resid_post` (the one layer's output) at "=", output the logit difference.
* sva: each family's residual layer (hook_resid_post) with the smallest core dimension, ties
  broken by the lower core-removed accuracy; the axis aligned across families is the core's
  first direction.
* ioi: the two residual layers whose core flip hurts most (lowest core-flipped accuracy), in
  layer order; the operator maps the earlier core's coordinates to the later one's.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from interp.cores import (
    INTERVENTIONS, Alignment, Core, Operator, ValidationBars, activations, align, align_coordinates, extract,
    fit_operator, fourier_power, matched_activations, score_operator, transfer, validate,
)
from interp.cores.linalg import principal_angles
from interp.model import ZOO_DIR, load
from interp.results import Grid, Heading

__all__ = ["DECODERS", "MARKOV_SITE", "demo_section", "repro", "repro_markdown"]

DECODERS = ("gpt2", "llama", "gemma2", "qwen2")
MARKOV_SITE = "ln_final.hook_normalized"


def _round(x: Any, n: int = 4) -> Any:
    if isinstance(x, float):
        return round(x, n)
    if isinstance(x, (list, tuple)):
        return [_round(v, n) for v in x]
    if isinstance(x, dict):
        return {k: _round(v, n) for k, v in x.items()}
    return x


def _validation_dict(grid: Grid) -> dict[str, Any]:
    """{intervention: {metric: {core, random_mean, random_std}}}."""
    out: dict[str, Any] = {}
    for i, method in enumerate(grid.labels[0]):
        out[str(method)] = {
            str(metric): {str(q): float(grid.values[i, j, m]) for j, q in enumerate(grid.labels[1])}
            for m, metric in enumerate(grid.labels[2])
        }
    return out


def _zoo(name: str) -> Path:
    return ZOO_DIR / name


def _load_zoo(name: str):
    if not (_zoo(name) / "config.json").exists():
        return None
    return load(f"zoo:{name}")


def _match_eigenvalues(found: torch.Tensor, true: torch.Tensor) -> tuple[list, float]:
    """Pair found and true eigenvalues (Hungarian on |difference|); (pairs, max abs error)."""
    from scipy.optimize import linear_sum_assignment

    cost = (found[:, None] - true[None, :]).abs().numpy()
    rows, cols = linear_sum_assignment(cost)
    pairs = [[[float(found[r].real), float(found[r].imag)], [float(true[c].real), float(true[c].imag)]] for r, c in zip(rows, cols)]
    worst = float(cost[rows, cols].max()) if len(rows) else float("nan")
    if found.numel() != true.numel():
        worst = float("nan")
    return pairs, worst


# ---------------------------------------------------------------------------------------------
# sections


def markov_section(progress: bool = True, n: int = 512) -> dict[str, Any]:
    from interp.tasks import markov

    chain = markov.random_chain(4, seed=0)
    true = chain.nonunit_eigenvalues.to(torch.complex64)
    out: dict[str, Any] = {"site": MARKOV_SITE, "true_nonunit_eigenvalues": [[float(e.real), float(e.imag)] for e in true], "seeds": {}}
    core_by_seed: dict[str, Core] = {}
    for s in tqdm(range(3), desc="cores: markov seeds", disable=not progress):
        name = f"markov-s{s}"
        model = _load_zoo(name)
        if model is None:
            out["seeds"][name] = {"error": f"zoo model {name} is not shipped"}
            continue
        task = markov.markov(n, chain=chain, length=32, split="test", seed=1)
        core = extract(model, task, site=MARKOV_SITE, output="candidates")
        rows = torch.tensor(markov.sample(chain, 256, 32, seed=7))
        op = fit_operator(model, core, rows, start=4)
        pairs, err = _match_eigenvalues(op.eigenvalues, true)
        grid = validate(model, core, task, n_random=3, progress=False)
        core_by_seed[name] = core
        out["seeds"][name] = {
            "k": core.k, "spectrum": core.spectrum[:6].tolist(),
            "eigenvalues": [[float(e.real), float(e.imag)] for e in op.eigenvalues],
            "matched_found_vs_true": pairs, "max_abs_error": err, "operator_r2": op.r2,
            "validation_accuracy": {m: _validation_dict(grid)[m]["binary_accuracy"] for m in INTERVENTIONS},
        }
    names = sorted(core_by_seed)
    out["principal_angles_rad"] = {
        f"{a}|{b}": principal_angles(core_by_seed[a].basis, core_by_seed[b].basis).tolist()
        for i, a in enumerate(names) for b in names[i + 1 :]
    }
    out["random_3d_subspaces_mean_cos2"] = 3 / 64  # E||U.T V||_F^2 / 3 for random 3-planes in R^64 (TL projection kernel)
    return out


def modular_section(progress: bool = True, top: int = 5, base: Path | None = None) -> dict[str, Any]:
    from interp.tasks import modular

    out: dict[str, Any] = {"site": "blocks.0.hook_resid_post", "checkpoints": {}}
    base = Path(base) if base is not None else _zoo("modadd") / "checkpoints"
    p = 113
    task = modular.modular_addition(p=p, split="train", train_frac=0.3)
    residues = torch.tensor([(a + b) % p for a, b in zip(task.meta["a"], task.meta["b"])])
    for label in tqdm(("before", "at", "after"), desc="cores: modular checkpoints", disable=not progress):
        path = base / label
        if not (path / "config.json").exists():
            out["checkpoints"][label] = {"error": f"checkpoint {path} is not shipped"}
            continue
        model = load(path)
        info = json.loads((path / "checkpoint.json").read_text()) if (path / "checkpoint.json").exists() else {}
        core = extract(model, task, site="blocks.0.hook_resid_post", max_k=32)
        z = core.coordinates(activations(model, task, core.site))
        power = fourier_power(z, residues, p)
        order = power.argsort(descending=True)[:top]
        out["checkpoints"][label] = {
            "step": info.get("step"), "train_acc": info.get("train"), "test_acc": info.get("test"),
            "k": core.k, "spectrum": core.spectrum[:12].tolist(),
            "dominant_frequencies": [int(f) + 1 for f in order],
            "power_fraction": [float(power[f] / power.sum()) for f in order],
        }
    return out


def _scan(model, task, layers, n_random: int = 2) -> list[dict[str, Any]]:
    rows = []
    for layer in layers:
        site = f"blocks.{layer}.hook_resid_post"
        core = extract(model, task, site=site)
        grid = validate(model, core, task, n_random=n_random, progress=False)
        rows.append({"layer": layer, "site": site, "core": core, "grid": grid,
                     "acc": {m: float(grid.values[i, 0, 1]) for i, m in enumerate(INTERVENTIONS)}})
    return rows


def _axis(core: Core) -> Core:
    return core.truncated(1)


def sva_section(models: dict[str, Any], progress: bool = True, n: int = 512) -> dict[str, Any]:
    from interp.tasks import english

    task = english.sva(n, split="sva_id", seed=1)
    out: dict[str, Any] = {"families": {}}
    axes: dict[str, Core] = {}
    for family, model in tqdm(models.items(), desc="cores: sva families", disable=not progress):
        scan = _scan(model, task, range(model.cfg.n_layers))
        best = min(scan, key=lambda r: (r["core"].k, r["acc"]["core_removed"]))
        axes[family] = _axis(best["core"])
        out["families"][family] = {
            "site": best["site"], "k": best["core"].k, "spectrum": best["core"].spectrum[:6].tolist(),
            "validation": _validation_dict(best["grid"]),
            "scan": {r["site"]: {"k": r["core"].k, **{f"{m}_acc": r["acc"][m] for m in INTERVENTIONS[1:]}} for r in scan},
        }
    prompts = english.sva(256, split="sva_id", seed=2).text
    pairs: dict[str, Any] = {}
    for a in axes:
        for b in axes:
            if a != b:
                al = align(models[a], axes[a], models[b], axes[b], prompts, method="procrustes")
                pairs[f"{a}->{b}"] = {"r2": al.r2, "r2_heldout": al.r2_heldout, "canonical_correlation": float(al.canonical[0])}
    out["axis_alignment"] = pairs
    out["alignment_prompts"] = len(prompts)
    return out


def _mismatched(model_a, core_a: Core, model_b, core_b: Core, prompts) -> Alignment:
    """Control: a Procrustes alignment fitted with B's prompts shuffled against A's, so it
    carries the coordinates' scale and means but no prompt-by-prompt correspondence."""
    xa, xb = matched_activations(model_a, model_b, prompts, core_a.site, core_b.site)
    za, zb = core_a.coordinates(xa), core_b.coordinates(xb)
    perm = torch.randperm(len(zb), generator=torch.Generator().manual_seed(0))
    m, b, r2, r2_cv, rho = align_coordinates(za, zb[perm], method="procrustes")
    return Alignment(m, b, "procrustes", r2, r2_cv, rho, torch.zeros(0), core_a.basis, core_b.basis, {"control": "mismatched prompts"})


def ioi_section(models: dict[str, Any], progress: bool = True, n: int = 512) -> dict[str, Any]:
    from interp.tasks import english

    fit_task, test_task = english.ioi(n, split="train", seed=1), english.ioi(n, split="train", seed=3)
    prompts = english.ioi(256, split="train", seed=2).text
    out: dict[str, Any] = {"families": {}}
    chosen: dict[str, tuple[Core, Core, Operator]] = {}
    for family, model in tqdm(models.items(), desc="cores: ioi families", disable=not progress):
        scan = _scan(model, fit_task, range(model.cfg.n_layers))
        two = sorted(sorted(scan, key=lambda r: r["acc"]["core_flipped"])[:2], key=lambda r: r["layer"])
        c_in, c_out = two[0]["core"], two[1]["core"]
        op = fit_operator(model, c_in, fit_task, target=c_out)
        chosen[family] = (c_in, c_out, op)
        out["families"][family] = {
            "sites": [c_in.site, c_out.site], "k": [c_in.k, c_out.k],
            "spectra": [c_in.spectrum[:6].tolist(), c_out.spectrum[:6].tolist()],
            "validation_accuracy": {r["site"]: r["acc"] for r in two},
            "operator_r2_fit": op.r2, "operator_r2_heldout": score_operator(model, op, c_in, c_out, test_task),
            "scan": {r["site"]: {"k": r["core"].k, **{f"{m}_acc": r["acc"][m] for m in INTERVENTIONS}} for r in scan},
        }
    transfers: dict[str, Any] = {}
    for a in chosen:
        for b in chosen:
            if a == b:
                continue
            ca_in, ca_out, op = chosen[a]
            cb_in, cb_out, _ = chosen[b]
            al_in = align(models[a], ca_in, models[b], cb_in, prompts)
            al_out = align(models[a], ca_out, models[b], cb_out, prompts)
            moved = transfer(op, al_in, al_out)
            control = transfer(op, _mismatched(models[a], ca_in, models[b], cb_in, prompts),
                               _mismatched(models[a], ca_out, models[b], cb_out, prompts))
            transfers[f"{a}->{b}"] = {"r2_after_transfer": score_operator(models[b], moved, cb_in, cb_out, test_task),
                                      "r2_control_mismatched_alignment": score_operator(models[b], control, cb_in, cb_out, test_task),
                                      "alignment_in_r2": al_in.r2_heldout, "alignment_out_r2": al_out.r2_heldout}
    out["transfer"] = transfers
    return out


def repro(progress: bool = True) -> dict[str, Any]:
    """The study at toy scale on the zoo; every section records what it measured."""
    start = time.perf_counter()
    result: dict[str, Any] = {}
    result["markov"] = markov_section(progress)
    result["modular"] = modular_section(progress)
    models = {f: m for f in DECODERS if (m := _load_zoo(f"lm-{f}")) is not None}
    missing = [f for f in DECODERS if f not in models]
    result["sva"] = sva_section(models, progress) if models else {"error": "no zoo language models shipped"}
    result["ioi"] = ioi_section(models, progress) if models else {"error": "no zoo language models shipped"}
    if missing:
        result["sva"]["missing_families"] = result["ioi"]["missing_families"] = missing
    result["seconds"] = time.perf_counter() - start
    return _round(result)


# ---------------------------------------------------------------------------------------------
# demo


def demo_section(workdir: Path) -> list:
    """Markov spectra beside the true ones, the SVA axis alignment across families, and
    validation bars with the random control beside each (< 1 min on a CPU)."""
    from interp.tasks import english, markov

    items: list[Any] = [Heading("Algorithmic cores"),
                        "Cores extracted by balanced truncation (activation covariance x task-output gradients); "
                        "`interp repro cores` runs the full study (docs/cores.md)."]
    chain = markov.random_chain(4, seed=0)
    true = chain.nonunit_eigenvalues
    for s in range(3):
        model = _load_zoo(f"markov-s{s}")
        if model is None:
            continue
        task = markov.markov(256, chain=chain, length=32, split="test", seed=1)
        core = extract(model, task, site=MARKOV_SITE, output="candidates")
        op = fit_operator(model, core, torch.tensor(markov.sample(chain, 128, 32, seed=7)), start=4)
        items.append(replace(op, meta={**op.meta, "title": f"markov-s{s}: core k={core.k}, operator eigenvalues vs the chain's",
                                       "reference": [[float(e.real), float(e.imag)] for e in true]}))
    models = {f: m for f in DECODERS if (m := _load_zoo(f"lm-{f}")) is not None}
    if not models:
        return items + ["No zoo language models are shipped yet, so the SVA sections are skipped."]
    task = english.sva(256, split="sva_id", seed=1)
    prompts = english.sva(128, split="sva_id", seed=2).text
    axes = {}
    for family, model in models.items():
        core = extract(model, task, site=f"blocks.{model.cfg.n_layers - 1}.hook_resid_post")
        axes[family] = _axis(core)
        if family == next(iter(models)):
            grid = validate(model, core, task, n_random=3, progress=False)
            items.append(ValidationBars(grid, meta={"title": f"lm-{family} SVA core (k={core.k}) at {core.site}"}))
    names = list(axes)
    r2 = torch.eye(len(names))
    for i, a in enumerate(names):
        for j, b in enumerate(names):
            if i != j:
                r2[i, j] = align(models[a], axes[a], models[b], axes[b], prompts).r2_heldout
    items.append(Grid(r2, ("model", "other"), (tuple(names), tuple(names)),
                      {"title": "SVA axis (last layer) aligned across families: held-out R²", "metric": "R²"}))
    return items


def repro_markdown(result: dict[str, Any]) -> str:
    """The repro's headline numbers as markdown tables beside the paper's findings."""
    out = ["| study | paper | measured here |", "|---|---|---|"]
    m = result.get("markov", {})
    seeds = {s: v for s, v in m.get("seeds", {}).items() if "k" in v}
    if seeds:
        ks = ", ".join(f"{s}: k={v['k']}, max abs eigenvalue error {v['max_abs_error']:.3f}" for s, v in seeds.items())
        angles = [a for v in m.get("principal_angles_rad", {}).values() for a in v]
        out.append(f"| markov | 3-D cores in nearly orthogonal subspaces, same transition spectra | {ks}; principal angles "
                   f"between seeds {min(angles):.2f}-{max(angles):.2f} rad (π/2 = 1.57 is orthogonal) |" if angles else f"| markov | | {ks} |")
    mod = result.get("modular", {}).get("checkpoints", {})
    if mod:
        cells = []
        for label, v in mod.items():
            cells.append(f"{label}: " + (f"k={v['k']}, frequencies {v['dominant_frequencies'][:3]}" if "k" in v else v.get("error", "")))
        out.append(f"| modular | compact cyclic core at grokking, then inflates | {'; '.join(cells)} |")
    sva = result.get("sva", {})
    if "families" in sva:
        fam = "; ".join(
            f"{f}: k={v['k']} at {v['site']}, acc core-only {v['validation']['core_only']['binary_accuracy']['core']:.2f} / removed "
            f"{v['validation']['core_removed']['binary_accuracy']['core']:.2f} (random {v['validation']['core_removed']['binary_accuracy']['random_mean']:.2f})"
            for f, v in sva["families"].items())
        r2 = [v["r2_heldout"] for v in sva.get("axis_alignment", {}).values()]
        align_txt = f"; axis alignment held-out R² {min(r2):.2f}-{max(r2):.2f} over {len(r2)} ordered pairs" if r2 else ""
        out.append(f"| sva | one steerable axis, aligned across architectures | {fam}{align_txt} |")
    ioi = result.get("ioi", {})
    if "families" in ioi:
        fam = "; ".join(f"{f}: {v['sites'][0].split('.')[1]}→{v['sites'][1].split('.')[1]} (k={v['k'][0]}, {v['k'][1]}), "
                        f"held-out R² {v['operator_r2_heldout']:.2f}" for f, v in ioi["families"].items())
        tr = [v["r2_after_transfer"] for v in ioi.get("transfer", {}).values()]
        ctl = [v["r2_control_mismatched_alignment"] for v in ioi.get("transfer", {}).values()]
        tr_txt = (f"; after transfer R² {min(tr):.2f}-{max(tr):.2f} over {len(tr)} ordered pairs (control, alignment fitted on "
                  f"shuffled prompts: {min(ctl):.2f}-{max(ctl):.2f})") if tr else ""
        out.append(f"| ioi | compact cores at two sites, linked by an operator that transfers across families | {fam}{tr_txt} |")
    out.append("")
    out.append(f"Total {result.get('seconds', float('nan')):.0f} s.")
    return "\n".join(out)

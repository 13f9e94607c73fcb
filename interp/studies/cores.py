"""Algorithmic cores (Schiffman 2026) at toy scale: the reproduction (`interp repro cores`) and the
demo section. Built from public names of `interp.cores`. See docs/cores.md.

The study is a set of resumable units (`interp.studies.units`): one per Markov seed, per zoo
family and task, per retrained name-code size, per real model and section, plus the cross-model
alignments and transfers. `BUDGETS` names what each budget runs; `repro(budget=...)` aggregates the
stored units into one JSON with its provenance.

Site rules (fixed here so every number in the repro is reproducible):

* markov: `blocks.0.hook_resid_post` (between the two layers), output the four states' centred
  logits. k = 3 is fixed by the task: a 4-state next-state distribution has 3 free dimensions.
  The operator's eigenvalue error sits beside the same fit on random 3-planes (`draws` of them),
  on PCA and class-mean codes, and on the one-hot state itself (`interp.cores.controls`).
* modular: `blocks.0.hook_resid_post` (the one layer's output) at "=", output the logit difference.
* sva: every residual layer is read; per layer the spectral-gap core and its first direction (k = 1
  at every layer, so layers compare at equal k) are validated against `draws` random subspaces of
  the same k, with the share of the output gradients on one direction (1 at the readout). The
  smallest-k rule (ties: lower core-removed accuracy) picks the layer whose axis is aligned.
* ioi: the two residual layers whose core flip hurts most, in layer order; the operator maps the
  earlier core to the later one, beside the identity map, a shuffled-row fit and random
  subspaces; k is also read on held-out rows (`controls.heldout_k`), and the name-code size the
  zoo imposes is varied by retraining one family with another size (a unit; the weights stay in
  the unit store, never in the repo).
* real models (SmolLM2-135M, Gemma-3-270M): `interp.studies.ace_real`.
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
    INTERVENTIONS, Alignment, Core, ValidationBars, activations, align, align_coordinates, extract, fit_operator,
    fourier_power, gradients, matched_activations, score_operator, transfer, validate,
)
from interp.cores import controls
from interp.cores.linalg import principal_angles, random_basis
from interp.model import ZOO_DIR, load
from interp.results import Grid, Heading
from interp.studies.ace_real import alignment_with_controls, core_verdict

__all__ = ["BUDGETS", "DECODERS", "MARKOV_SITE", "demo_section", "random_plane_angles", "repro", "repro_markdown"]

STUDY = "cores"
DECODERS = ("gpt2", "llama", "gemma2", "qwen2")
MARKOV_SITE = "blocks.0.hook_resid_post"
ZOO_VERSION = 2  # bump when a zoo unit's code changes what it computes
REAL_VERSION = 2
_ZOO = ["markov", "modular", "sva", "ioi"]
BUDGETS: dict[str, dict[str, Any]] = {
    # what the tests run: one Markov seed, one family, no real models, no retraining (seconds)
    "quick": {"sections": ["markov", "sva", "ioi"], "markov_seeds": [0], "markov_rows": 128, "operator_rows": 64,
              "families": ["llama"], "rows": 128, "align_prompts": 64, "draws": 20, "code_sizes": [],
              "real_models": [], "real_sva": [32, 32, 64, 2], "real_ioi": [16, 16, 32, 2]},
    # the committed run (docs/cores_repro.json): 2-core CPU
    "cpu": {"sections": _ZOO + ["real"], "markov_seeds": [0, 1, 2], "markov_rows": 512, "operator_rows": 256,
            "families": list(DECODERS), "rows": 512, "align_prompts": 256, "draws": 20, "code_sizes": ["gpt2:6"],
            "real_models": ["smollm2-135m", "gemma3-270m"], "real_sva": [64, 64, 128, 6], "real_ioi": [32, 32, 64, 3]},
    # the paper gives no toy schedule; this is every layer and 8x the prompts on the real models,
    # 100 random draws, and two more name-code sizes
    "paper": {"sections": _ZOO + ["real"], "markov_seeds": [0, 1, 2], "markov_rows": 512, "operator_rows": 1024,
              "families": list(DECODERS), "rows": 512, "align_prompts": 512, "draws": 100,
              "code_sizes": ["gpt2:6", "gpt2:16", "qwen2:4"], "real_models": ["smollm2-135m", "gemma3-270m"],
              "real_sva": [512, 512, 512, 0], "real_ioi": [256, 256, 512, 0]},
}
# real_sva / real_ioi: [prompts to fit, to test, to align, layers scanned (0 = every layer)]


def _round(x: Any, n: int = 4) -> Any:
    if isinstance(x, float):
        return round(x, n)
    if isinstance(x, (list, tuple)):
        return [_round(v, n) for v in x]
    if isinstance(x, dict):
        return {k: _round(v, n) for k, v in x.items()}
    return x


def _validation_dict(grid: Grid) -> dict[str, Any]:
    """{intervention: {metric: {core, random_mean, random_std[, random_min, random_max]}}}."""
    draws = grid.meta.get("random_draws", {})
    out: dict[str, Any] = {}
    for i, method in enumerate(grid.labels[0]):
        out[str(method)] = {}
        for m, metric in enumerate(grid.labels[2]):
            cell = {str(q): float(grid.values[i, j, m]) for j, q in enumerate(grid.labels[1])}
            if d := draws.get(str(method), {}).get(str(metric)):
                cell.update(random_min=min(d), random_max=max(d))
            out[str(method)][str(metric)] = cell
    return out


def _zoo(name: str) -> Path:
    return ZOO_DIR / name


def _load_zoo(name: str):
    if not (_zoo(name) / "config.json").exists():
        return None
    return load(f"zoo:{name}")


class _NoStore:
    """Units without a store (the notebook's direct calls): every unit runs."""

    root = None
    ran = 0

    def run(self, config: dict[str, Any], fn) -> dict[str, Any]:
        return json.loads(json.dumps(fn()))

    def get(self, config: dict[str, Any]) -> None:
        return None


def random_plane_angles(d: int, k: int, *, n: int = 2000, seed: int = 0) -> dict[str, list[float]]:
    """The baseline for angles between cores: principal angles (radians, ascending) between pairs
    of independent uniformly random k-planes in d dimensions; mean and 5th / 95th percentiles per
    angle index over `n` pairs."""
    g = torch.Generator().manual_seed(seed)
    angles = []
    for _ in range(n):
        a, _ = torch.linalg.qr(torch.randn(d, k, generator=g, dtype=torch.float64))
        b, _ = torch.linalg.qr(torch.randn(d, k, generator=g, dtype=torch.float64))
        angles.append(torch.arccos(torch.linalg.svdvals(a.T @ b).clamp(-1, 1)))  # cosines descend: angles ascend
    x = torch.stack(angles)  # [n, k]
    return {"mean": x.mean(0).tolist(), "p05": x.quantile(0.05, dim=0).tolist(), "p95": x.quantile(0.95, dim=0).tolist(), "pairs": n}


# ---------------------------------------------------------------------------------------------
# markov


def _markov_seed(seed: int, n: int, operator_rows: int, draws: int) -> dict[str, Any]:
    from interp.tasks import markov

    name = f"markov-s{seed}"
    model = _load_zoo(name)
    if model is None:
        return {"error": f"zoo model {name} is not shipped"}
    chain = markov.random_chain(4, seed=0)
    true = chain.nonunit_eigenvalues.to(torch.complex64)
    task = markov.markov(n, chain=chain, length=32, split="test", seed=1)
    _, grads = gradients(model, task, MARKOV_SITE, output="candidates")
    core = extract(model, task, site=MARKOV_SITE, output="candidates")
    rows = torch.tensor(markov.sample(chain, operator_rows, 32, seed=7))
    op = fit_operator(model, core, rows, start=4)
    pairs, err = controls.match_eigenvalues(op.eigenvalues, true)
    grid = validate(model, core, task, n_random=draws, progress=False)
    ctl = controls.spectrum_controls(controls.sequence_activations(model, MARKOV_SITE, rows), rows, true, core.k,
                                     start=4, n_draws=draws)
    half = len(task) // 2
    a, b = (extract(model, t, site=MARKOV_SITE, k=core.k, output="candidates") for t in (task[:half], task[half:]))
    return {
        "k": core.k, "gradient_rank": int(torch.linalg.matrix_rank(grads.double(), rtol=1e-4)),
        "spectrum": core.spectrum[:6].tolist(), "basis": core.basis.tolist(),
        "eigenvalues": [[float(e.real), float(e.imag)] for e in op.eigenvalues],
        "matched_found_vs_true": pairs, "max_abs_error": err, "operator_r2": op.r2, "controls": ctl,
        "random_planes_beaten": controls.beats_every_draw(err, ctl["random"]["draws"], lower_is_better=True),
        "split_half_angles_rad": principal_angles(a.basis, b.basis).tolist(),
        "validation_accuracy": {m: _validation_dict(grid)[m]["binary_accuracy"] for m in INTERVENTIONS},
    }


def markov_section(progress: bool = True, n: int = 512, *, seeds=(0, 1, 2), operator_rows: int = 256,
                   draws: int = controls.MIN_DRAWS, units=None) -> dict[str, Any]:
    from interp.tasks import markov

    units = units or _NoStore()
    chain = markov.random_chain(4, seed=0)
    out: dict[str, Any] = {
        "site": MARKOV_SITE, "output": "candidates", "states": 4,
        "k_fixed_by_task": "a 4-state chain's next-state distribution has 3 free dimensions, so k = 3 is what the task allows",
        "true_nonunit_eigenvalues": [[float(e.real), float(e.imag)] for e in chain.nonunit_eigenvalues], "draws": draws, "seeds": {}}
    for s in tqdm(list(seeds), desc="cores: markov seeds", disable=not progress):
        cfg = {"section": "markov", "seed": s, "rows": n, "operator_rows": operator_rows, "draws": draws}
        out["seeds"][f"markov-s{s}"] = units.run(cfg, lambda: _markov_seed(s, n, operator_rows, draws))
    bases = {name: torch.tensor(v.pop("basis")) for name, v in out["seeds"].items() if "basis" in v}
    names = sorted(bases)
    out["principal_angles_rad"] = {f"{a}|{b}": principal_angles(bases[a], bases[b]).tolist()
                                   for i, a in enumerate(names) for b in names[i + 1 :]}
    ks = {int(bases[n_].shape[1]) for n_ in names}
    if len(ks) == 1:
        k, d = ks.pop(), int(bases[names[0]].shape[0])
        out["random_planes"] = {"d": d, "k": k, **random_plane_angles(d, k)}
    errs = [v for v in out["seeds"].values() if "max_abs_error" in v]
    out["verdict"] = ("distinguishable from control" if errs and all(v["random_planes_beaten"] for v in errs)
                      else "not distinguishable from control")
    return out


# ---------------------------------------------------------------------------------------------
# modular


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


def _head_number(text: str) -> str | None:
    """"sg" / "pl" of a prompt's head noun: the first word the grammar gives a number."""
    from interp.tasks import english

    return next((n for w in text.split() if (n := english.noun_number(w))), None)




# ---------------------------------------------------------------------------------------------
# sva (zoo): every layer, a layer test that can fail, the readout share


def _flip_verdict(grid: Grid) -> dict[str, Any]:
    """Core flip inverts agreement: flipped accuracy below 0.5 and below every random flip."""
    acc = grid.sel(method="core_flipped", quantity="core", metric="binary_accuracy").values
    draws = grid.meta["random_draws"]["core_flipped"]["binary_accuracy"]
    return {"flips": bool(float(acc) < 0.5 and controls.beats_every_draw(float(acc), draws, lower_is_better=True))}


def _layer_test(model, core: Core, test, draws: int) -> dict[str, Any]:
    grid = validate(model, core, test, n_random=draws, progress=False)
    v = core_verdict(grid)
    return {"k": core.k, "necessary": v["necessary"], "sufficient": v["sufficient"], **_flip_verdict(grid),
            "validation": _validation_dict(grid)}


def _sva_family(model, fit, test, draws: int) -> dict[str, Any]:
    last = f"blocks.{model.cfg.n_layers - 1}.hook_resid_post"
    readout = controls.readout_share(model, fit, last)["direction"]  # at the last layer: the unembedding difference through the final norm
    layers = {}
    for layer in range(model.cfg.n_layers):
        site = f"blocks.{layer}.hook_resid_post"
        core = extract(model, fit, site=site)
        ro = controls.readout_share(model, fit, site)
        axis = core.truncated(1)
        layers[site] = {"layer": layer, "spectrum": core.spectrum[:6].tolist(), "gradient_rank": ro["rank"],
                        "gradient_top_share": ro["share"], "axis_cos_gradient": float((axis.basis[:, 0] @ ro["direction"]).abs()),
                        "axis_cos_readout": float((axis.basis[:, 0] @ readout).abs()),
                        "core": _layer_test(model, core, test, draws), "axis": _layer_test(model, axis, test, draws)}
    best = min(layers, key=lambda s: (layers[s]["core"]["k"], layers[s]["core"]["validation"]["core_removed"]["binary_accuracy"]["core"]))
    verdicts = {kind: {s: (v[kind]["necessary"], v[kind]["sufficient"], v[kind]["flips"]) for s, v in layers.items()} for kind in ("core", "axis")}
    return {"site": best, "k": layers[best]["core"]["k"], "spectrum": layers[best]["spectrum"],
            "validation": layers[best]["core"]["validation"], "layers": layers,
            # the layer test tells layers apart when its verdicts differ between layers
            "layers_distinguished": {kind: len(set(v.values())) > 1 for kind, v in verdicts.items()},
            "layers_passing": {kind: [s for s, t in v.items() if all(t)] for kind, v in verdicts.items()},
            "chosen_is_last": best == last,
            # forced: the rule picks the last layer, and the axis there is the readout direction
            # (|cos| >= 0.9 with the top output-gradient direction of the last layer)
            "choice_forced_by_readout": bool(best == last and layers[last]["axis_cos_readout"] >= 0.9)}


def _sva_alignment(models: dict[str, Any], sites: dict[str, str], fit, prompts: list[str]) -> dict[str, Any]:
    axes = {f: extract(models[f], fit, site=s).truncated(1) for f, s in sites.items()}
    labels = torch.tensor([int(_head_number(t) == "pl") for t in prompts])
    pairs: dict[str, Any] = {}
    for a in axes:
        for b in axes:
            if a != b:
                al = align(models[a], axes[a], models[b], axes[b], prompts, method="procrustes")
                xa, xb = matched_activations(models[a], models[b], prompts, axes[a].site, axes[b].site)
                rand_a = [(xa - axes[a].mean) @ random_basis(axes[a].d_model, 1, s) for s in range(5)]
                rand_b = [(xb - axes[b].mean) @ random_basis(axes[b].d_model, 1, 100 + s) for s in range(5)]
                controls_ = alignment_with_controls(axes[a].coordinates(xa), axes[b].coordinates(xb), labels,
                                                    random_za=rand_a, random_zb=rand_b)
                pairs[f"{a}->{b}"] = {"r2": al.r2, "r2_heldout": al.r2_heldout, "canonical_correlation": float(al.canonical[0]),
                                      **{k: v for k, v in controls_.items() if k != "r2_heldout"}}
    return pairs


def sva_section(models: dict[str, Any], progress: bool = True, n: int = 512, *, align_prompts: int = 256,
                draws: int = controls.MIN_DRAWS, units=None) -> dict[str, Any]:
    from interp.tasks import english

    units = units or _NoStore()
    fit, test = english.sva(n, split="sva_id", seed=1), english.sva(n, split="sva_id", seed=4)
    out: dict[str, Any] = {"draws": draws, "validation_rows": len(test), "families": {}}
    for family, model in tqdm(models.items(), desc="cores: sva families", disable=not progress):
        cfg = {"section": "sva", "family": family, "rows": n, "draws": draws}
        out["families"][family] = units.run(cfg, lambda: _sva_family(model, fit, test, draws))
    prompts = list(english.sva(align_prompts, split="sva_id", seed=2).text)
    sites = {f: v["site"] for f, v in out["families"].items()}
    if len(sites) > 1:
        cfg = {"section": "sva_alignment", "sites": sites, "rows": n, "prompts": align_prompts}
        out["axis_alignment"] = units.run(cfg, lambda: _sva_alignment(models, sites, fit, prompts))
    out["alignment_prompts"] = len(prompts)
    fams = out["families"].values()
    out["verdict"] = ("forced" if fams and all(v["choice_forced_by_readout"] for v in fams)
                      else "not forced" if fams and not any(v["choice_forced_by_readout"] for v in fams) else "partly forced")
    return out


# ---------------------------------------------------------------------------------------------
# ioi (zoo): two sites, the operator beside its baselines, k on held-out rows, code size varied


def _name_code_dims(path: Path) -> int | None:
    """The name-code dimension the recipe imposed (`interp.train.NameCodes`), from the card."""
    card = json.loads((path / "card.json").read_text())
    return card.get("training", {}).get("name_codes", card.get("recipe", {}).get("name_codes"))


def _name_subspace(model) -> torch.Tensor:
    """An orthonormal basis [d_model, r] of the span of the IOI names' centred unembedding
    columns: the subspace the imposed name codes are read from (rank r = the code dimension)."""
    from interp.tasks import english

    ids = [row[1] for row in english.encode(list(english.TRAIN_NAMES + english.TEST_NAMES))]
    w = model.W_U[:, ids].detach().double().cpu()  # [d_model, names]
    u, s, _ = torch.linalg.svd(w - w.mean(1, keepdim=True), full_matrices=False)
    return u[:, : int((s > 1e-6 * s[0]).sum())].float()


def _ioi_tasks(n: int):
    from interp.tasks import english

    return english.ioi(n, split="train", seed=1), english.ioi(n, split="train", seed=3), english.ioi(n, split="test", seed=3)


def _ioi_family(model, code_dims: int | None, n: int, draws: int) -> dict[str, Any]:
    fit, test, names = _ioi_tasks(n)
    scan = []
    for layer in range(model.cfg.n_layers):
        core = extract(model, fit, site=f"blocks.{layer}.hook_resid_post")
        grid = validate(model, core, fit, n_random=draws, progress=False)
        scan.append({"site": core.site, "layer": layer, "core": core, "acc": {m: float(grid.values[i, 0, 1]) for i, m in enumerate(INTERVENTIONS)}})
    two = sorted(sorted(scan, key=lambda r: r["acc"]["core_flipped"])[:2], key=lambda r: r["layer"])
    c_in, c_out = two[0]["core"], two[1]["core"]
    op = fit_operator(model, c_in, fit, target=c_out)
    sub = _name_subspace(model)
    held_k = {c.site: controls.heldout_k(model, extract(model, fit, site=c.site, k=16), test) for c in (c_in, c_out)}
    ks = [c_in.k, c_out.k]
    held = [v["k"] for v in held_k.values()]
    names_acc = {c.site: {m: float(g.values[i, 0, 1]) for i, m in enumerate(INTERVENTIONS)}
                 for c in (c_in, c_out) for g in [validate(model, c, names, n_random=draws, progress=False)]}
    return {
        "sites": [c_in.site, c_out.site], "k": [c_in.k, c_out.k], "name_code_dims": code_dims,
        # k read off the construction: the spectral-gap k is the imposed code size at both sites and
        # the held-out k is within one dimension of it
        "heldout_k": held_k, "k_equals_code_dims": bool(code_dims is not None and all(k == code_dims for k in ks)
                                                        and all(k is not None and abs(k - code_dims) <= 1 for k in held)),
        "name_subspace_rank": int(sub.shape[1]),
        "max_angle_to_name_subspace_rad": [float(principal_angles(c.basis, sub)[: c.k].max()) for c in (c_in, c_out)],
        "spectra": [c_in.spectrum[:14].tolist(), c_out.spectrum[:14].tolist()],
        "validation_accuracy": {r["site"]: r["acc"] for r in two}, "heldout_names_accuracy": names_acc,
        "operator_r2_fit": op.r2, "operator_r2_heldout": score_operator(model, op, c_in, c_out, test),
        "operator_r2_heldout_names": score_operator(model, op, c_in, c_out, names),
        "baselines": controls.operator_baselines(model, c_in, c_out, fit, test, n_draws=draws),
        "baselines_heldout_names": controls.operator_baselines(model, c_in, c_out, fit, names, n_draws=draws),
        "scan": {r["site"]: {"k": r["core"].k, **{f"{m}_acc": r["acc"][m] for m in INTERVENTIONS}} for r in scan},
    }


def _retrained(units, family: str, dims: int) -> Path:
    """zoo:lm-FAMILY retrained with `dims`-dimensional name codes (a unit: the weights stay in the
    unit store's models/ folder, never in the repo); its folder."""
    from interp.train import RECIPES, train

    root = Path(units.root) if units.root is not None else Path.home() / ".cache" / "interp" / "studies" / STUDY
    out = root / "models" / f"lm-{family}-codes{dims}"

    def fit() -> dict[str, Any]:
        if not (out / "card.json").exists():  # a model trained by a killed run is reused
            train(replace(RECIPES[f"lm-{family}"], name_codes=dims), out, progress=False)
        card = json.loads((out / "card.json").read_text())
        return {"dir": out.name, "seconds": card["training"]["seconds"], "accuracy": card.get("accuracy", {})}

    units.run({"section": "retrain", "family": family, "name_codes": dims}, fit)
    return out


def _ioi_transfer(models: dict[str, Any], sites: dict[str, list[str]], n: int, prompts: list[str], n_controls: int = 5) -> dict[str, Any]:
    fit, test, _ = _ioi_tasks(n)
    chosen = {}
    for f, (s_in, s_out) in sites.items():
        c_in, c_out = extract(models[f], fit, site=s_in), extract(models[f], fit, site=s_out)
        chosen[f] = (c_in, c_out, fit_operator(models[f], c_in, fit, target=c_out))
    g = torch.Generator().manual_seed(0)
    out: dict[str, Any] = {}
    for a in chosen:
        for b in chosen:
            if a == b:
                continue
            (ca_in, ca_out, op), (cb_in, cb_out, _) = chosen[a], chosen[b]
            al_in, al_out = align(models[a], ca_in, models[b], cb_in, prompts), align(models[a], ca_out, models[b], cb_out, prompts)
            moved = score_operator(models[b], transfer(op, al_in, al_out), cb_in, cb_out, test)
            z_in = [c.coordinates(x) for c, x in zip((ca_in, cb_in), matched_activations(models[a], models[b], prompts, ca_in.site, cb_in.site))]
            z_out = [c.coordinates(x) for c, x in zip((ca_out, cb_out), matched_activations(models[a], models[b], prompts, ca_out.site, cb_out.site))]
            ctl = []
            for _ in range(n_controls):
                perm = torch.randperm(len(prompts), generator=g)
                moved_ctl = transfer(op, _shuffled(*z_in, ca_in, cb_in, perm), _shuffled(*z_out, ca_out, cb_out, perm))
                ctl.append(score_operator(models[b], moved_ctl, cb_in, cb_out, test))
            out[f"{a}->{b}"] = {"r2_after_transfer": moved, "control_mean": sum(ctl) / len(ctl), "control_max": max(ctl),
                                "beats_control": bool(moved > max(ctl)), "alignment_in_r2": al_in.r2_heldout,
                                "alignment_out_r2": al_out.r2_heldout}
    return out


def _shuffled(za: torch.Tensor, zb: torch.Tensor, core_a: Core, core_b: Core, perm: torch.Tensor) -> Alignment:
    """Control: a Procrustes alignment fitted with B's prompts shuffled against A's (`perm`), so it
    carries the coordinates' scale and means but no prompt-by-prompt correspondence."""
    m, b, r2, r2_cv, rho = align_coordinates(za, zb[perm], method="procrustes")
    return Alignment(m, b, "procrustes", r2, r2_cv, rho, torch.zeros(0), core_a.basis, core_b.basis, {"control": "shuffled prompts"})


def ioi_section(models: dict[str, Any], progress: bool = True, n: int = 512, *, align_prompts: int = 256,
                draws: int = controls.MIN_DRAWS, code_sizes=(), units=None) -> dict[str, Any]:
    """IOI cores at two sites per family, the operator between them beside its baselines, k on
    held-out rows, the same on models retrained with other name-code sizes ("FAMILY:DIMS"), and
    the operator's transfer across the shipped families against shuffled-prompt alignments."""
    from interp.tasks import english

    units = units or _NoStore()
    out: dict[str, Any] = {"draws": draws, "families": {}, "code_sizes": {}}
    for family, model in tqdm(models.items(), desc="cores: ioi families", disable=not progress):
        cfg = {"section": "ioi", "family": family, "rows": n, "draws": draws}
        dims = _name_code_dims(_zoo(f"lm-{family}"))
        out["families"][family] = units.run(cfg, lambda: _ioi_family(model, dims, n, draws))
    for spec in code_sizes:
        family, dims = spec.split(":")
        path = _retrained(units, family, int(dims))
        cfg = {"section": "ioi", "family": family, "name_codes": int(dims), "rows": n, "draws": draws}
        out["code_sizes"][spec] = units.run(cfg, lambda: _ioi_family(load(path), int(dims), n, draws))
        out["code_sizes"][spec]["training"] = units.get({"section": "retrain", "family": family, "name_codes": int(dims)})
    prompts = list(english.ioi(align_prompts, split="train", seed=2).text)
    sites = {f: v["sites"] for f, v in out["families"].items()}
    if len(sites) > 1:
        cfg = {"section": "ioi_transfer", "sites": sites, "rows": n, "prompts": align_prompts}
        out["transfer"] = units.run(cfg, lambda: _ioi_transfer(models, sites, n, prompts))
    runs = list(out["families"].values()) + list(out["code_sizes"].values())
    for v in runs:  # the operator is a finding only above the identity map and every random-subspace fit
        b = v["baselines"]
        v["operator_beats_baselines"] = bool(b["operator_r2_heldout"] > max(b["identity_r2"], b["identity_through_core_r2"],
                                                                             b["random_subspaces_r2"]["max"]))
    out["k_verdict"] = "forced" if runs and all(v["k_equals_code_dims"] for v in runs) else "not forced"
    out["operator_verdict"] = ("distinguishable from control" if runs and all(v["operator_beats_baselines"] for v in runs)
                               else "not distinguishable from control")
    return out


# ---------------------------------------------------------------------------------------------
# the study


def _units(root, version: int):
    from interp.studies.units import Units

    return Units(STUDY, root=root, version=version)


def _real(cfg: dict[str, Any], progress: bool, units) -> dict[str, Any]:
    from interp.studies import ace_real

    real = {s: load(s) for s in tqdm(cfg["real_models"], desc="cores: load real models", disable=not progress)}
    (sf, st, sa, sc), (i_f, it, ia, ic) = cfg["real_sva"], cfg["real_ioi"]
    out = {"sva": ace_real.sva_real(real, n_fit=sf, n_test=st, n_align=sa, count=sc, n_random=cfg["draws"], progress=progress, units=units)}
    out["ioi"] = (ace_real.ioi_real(real, n_fit=i_f, n_test=it, n_align=ia, count=ic, n_random=cfg["draws"], progress=progress, units=units)
                  if len(real) > 1 else {"error": "transfer needs two models"})
    return out


def repro(progress: bool = True, models: list[str] | None = None, budget: str = "quick",
          overrides: dict[str, Any] | None = None, units: str | Path | None = None) -> dict[str, Any]:
    """The study at `budget` (see BUDGETS; `overrides` replace its keys), from resumable units
    stored under `units` (default $INTERP_CACHE/studies/cores); one JSON with its provenance.

    models: `zoo:lm-FAMILY` specs replace the budget's families, other specs its real models (and
    then only the sva / ioi / real sections run)."""
    from interp.studies.units import budget as resolve, budget_record, provenance

    start = time.perf_counter()
    cfg = resolve(BUDGETS, budget, overrides)
    if models:
        fams = [s.removeprefix("zoo:").removeprefix("lm-") for s in models if s.startswith("zoo:")]
        real = [s for s in models if not s.startswith("zoo:")]
        cfg = {**cfg, "families": fams, "real_models": real, "code_sizes": [],
               "sections": [s for s in cfg["sections"] if s in ("sva", "ioi")] * bool(fams) + ["real"] * bool(real)}
    zoo_units, real_units = _units(units, ZOO_VERSION), _units(units, REAL_VERSION)
    sections, result = cfg["sections"], {}
    if "markov" in sections:
        result["markov"] = markov_section(progress, cfg["markov_rows"], seeds=cfg["markov_seeds"],
                                          operator_rows=cfg["operator_rows"], draws=cfg["draws"], units=zoo_units)
    if "modular" in sections:
        result["modular"] = zoo_units.run({"section": "modular"}, lambda: modular_section(progress))
    zoo = {f: m for f in cfg["families"] if (m := _load_zoo(f"lm-{f}")) is not None}
    missing = [f for f in cfg["families"] if f not in zoo]
    if "sva" in sections and zoo:
        result["sva"] = sva_section(zoo, progress, cfg["rows"], align_prompts=cfg["align_prompts"], draws=cfg["draws"], units=zoo_units)
    if "ioi" in sections and zoo:
        result["ioi"] = ioi_section(zoo, progress, cfg["rows"], align_prompts=cfg["align_prompts"], draws=cfg["draws"],
                                    code_sizes=cfg["code_sizes"], units=zoo_units)
    for key in ("sva", "ioi"):
        if key in result and missing:
            result[key]["missing_families"] = missing
    if "real" in sections and cfg["real_models"]:
        result["real"] = _real(cfg, progress, real_units)
    ran = zoo_units.ran + real_units.ran
    wall = time.perf_counter() - start
    result["budget"] = budget_record(budget, cfg, None, _count(result), _count(result))
    result["provenance"] = provenance(budget, cfg, None, wall, _count(result), _count(result), units_run=ran)
    result["command"] = _command(budget, overrides, models)
    return _round(result)


def _count(result: dict[str, Any]) -> int:
    """Units aggregated here (every unit of the budget: a run stores each before it aggregates)."""
    n = len(result.get("markov", {}).get("seeds", {})) + ("modular" in result)
    for key in ("sva", "ioi"):
        s = result.get(key, {})
        n += len(s.get("families", {})) + 2 * len(s.get("code_sizes", {})) + ("axis_alignment" in s) + ("transfer" in s)
    real = result.get("real", {})
    for key in ("sva", "ioi"):
        n += len(real.get(key, {}).get("models", {})) + bool(real.get(key, {}).get("models"))
    return n


def _command(budget: str, overrides: dict[str, Any] | None, models: list[str] | None) -> str:
    parts = ["interp repro cores", f"--budget {budget}"]
    parts += [f"--set {k}={json.dumps(v, separators=(',', ':'))}" for k, v in (overrides or {}).items()]
    parts += [f"--model {m}" for m in models or []]
    return " ".join(parts)


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
        axes[family] = core.truncated(1)
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



from interp.studies.ace_docs import repro_markdown  # noqa: E402  (the doc renderer; re-exported for the notebook)

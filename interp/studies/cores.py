"""Algorithmic cores (Schiffman 2026) at toy scale: the reproduction (`interp repro cores`) and the
demo section. Built from public names of `interp.cores` only. See docs/cores.md.

Site rules (fixed here so every number in the repro is reproducible):

* markov: `blocks.0.hook_resid_post` (between the two layers) with the centred logits of the four
  states as the task output. Not `ln_final.hook_normalized`: there the gradients of four centred
  logits span exactly 3 dimensions whatever the model does, so k = 3 would be forced; here they
  span about 30 and k comes from the spectral gap. Cross-seed angles are reported beside the
  angles of random k-planes (`random_plane_angles`).
* modular: `blocks.0.hook_resid_post` (the one layer's output) at "=", output the logit difference.
* sva: each family's residual layer (hook_resid_post) with the smallest core dimension, ties
  broken by the lower core-removed accuracy; the axis aligned across families is the core's
  first direction.
* ioi: the two residual layers whose core flip hurts most (lowest core-flipped accuracy), in
  layer order; the operator maps the earlier core's coordinates to the later one's.
* controls: SVA axis alignments beside shuffled-prompt, within-number and random-direction fits
  (`interp.studies.ace_real.alignment_with_controls`); IOI transfer beside several alignments fitted
  on shuffled prompts; IOI held out on names never seen in an IOI sentence (`english.ioi` "test").
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
    INTERVENTIONS, Alignment, Core, Operator, ValidationBars, activations, align, align_coordinates, extract,
    fit_operator, fourier_power, gradients, matched_activations, score_operator, transfer, validate,
)
from interp.cores.linalg import principal_angles, random_basis
from interp.studies.ace_real import alignment_with_controls, core_verdict
from interp.model import ZOO_DIR, load
from interp.results import Grid, Heading

__all__ = ["DECODERS", "MARKOV_SITE", "demo_section", "random_plane_angles", "repro", "repro_markdown"]

DECODERS = ("gpt2", "llama", "gemma2", "qwen2")
MARKOV_SITE = "blocks.0.hook_resid_post"


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


def _split_half_angles(model, task, site: str, k: int) -> list[float]:
    """Angles between the cores (same k) extracted from the two halves of `task`: how well the
    data determine the core (0 = the same subspace)."""
    half = len(task) // 2
    a = extract(model, task[:half], site=site, k=k, output="candidates")
    b = extract(model, task[half:], site=site, k=k, output="candidates")
    return principal_angles(a.basis, b.basis).tolist()


def markov_section(progress: bool = True, n: int = 512) -> dict[str, Any]:
    from interp.tasks import markov

    chain = markov.random_chain(4, seed=0)
    true = chain.nonunit_eigenvalues.to(torch.complex64)
    out: dict[str, Any] = {"site": MARKOV_SITE, "output": "candidates", "true_nonunit_eigenvalues": [[float(e.real), float(e.imag)] for e in true], "seeds": {}}
    core_by_seed: dict[str, Core] = {}
    for s in tqdm(range(3), desc="cores: markov seeds", disable=not progress):
        name = f"markov-s{s}"
        model = _load_zoo(name)
        if model is None:
            out["seeds"][name] = {"error": f"zoo model {name} is not shipped"}
            continue
        task = markov.markov(n, chain=chain, length=32, split="test", seed=1)
        _, grads = gradients(model, task, MARKOV_SITE, output="candidates")
        core = extract(model, task, site=MARKOV_SITE, output="candidates")
        rows = torch.tensor(markov.sample(chain, 256, 32, seed=7))
        op = fit_operator(model, core, rows, start=4)
        pairs, err = _match_eigenvalues(op.eigenvalues, true)
        grid = validate(model, core, task, n_random=3, progress=False)
        core_by_seed[name] = core
        out["seeds"][name] = {
            "k": core.k, "gradient_rank": int(torch.linalg.matrix_rank(grads.double(), rtol=1e-4)),
            "spectrum": core.spectrum[:6].tolist(),
            "eigenvalues": [[float(e.real), float(e.imag)] for e in op.eigenvalues],
            "matched_found_vs_true": pairs, "max_abs_error": err, "operator_r2": op.r2,
            "split_half_angles_rad": _split_half_angles(model, task, MARKOV_SITE, core.k),
            "validation_accuracy": {m: _validation_dict(grid)[m]["binary_accuracy"] for m in INTERVENTIONS},
        }
    names = sorted(core_by_seed)
    out["principal_angles_rad"] = {
        f"{a}|{b}": principal_angles(core_by_seed[a].basis, core_by_seed[b].basis).tolist()
        for i, a in enumerate(names) for b in names[i + 1 :]
    }
    ks = {c.k for c in core_by_seed.values()}
    if len(ks) == 1:
        k, d = ks.pop(), next(iter(core_by_seed.values())).d_model
        out["random_planes"] = {"d": d, "k": k, **random_plane_angles(d, k)}
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


def _head_number(text: str) -> str | None:
    """"sg" / "pl" of a prompt's head noun: the first word the grammar gives a number."""
    from interp.tasks import english

    return next((n for w in text.split() if (n := english.noun_number(w))), None)


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
    labels = torch.tensor([int(_head_number(t) == "pl") for t in prompts])
    pairs: dict[str, Any] = {}
    for a in axes:
        for b in axes:
            if a != b:
                al = align(models[a], axes[a], models[b], axes[b], prompts, method="procrustes")
                xa, xb = matched_activations(models[a], models[b], prompts, axes[a].site, axes[b].site)
                rand_a = [(xa - axes[a].mean) @ random_basis(axes[a].d_model, 1, s) for s in range(5)]
                rand_b = [(xb - axes[b].mean) @ random_basis(axes[b].d_model, 1, 100 + s) for s in range(5)]
                controls = alignment_with_controls(axes[a].coordinates(xa), axes[b].coordinates(xb), labels,
                                                   random_za=rand_a, random_zb=rand_b)
                pairs[f"{a}->{b}"] = {"r2": al.r2, "r2_heldout": al.r2_heldout, "canonical_correlation": float(al.canonical[0]),
                                      **{k: v for k, v in controls.items() if k != "r2_heldout"}}
    out["axis_alignment"] = pairs
    out["alignment_prompts"] = len(prompts)
    return out


def _shuffled(za: torch.Tensor, zb: torch.Tensor, core_a: Core, core_b: Core, perm: torch.Tensor) -> Alignment:
    """Control: a Procrustes alignment fitted with B's prompts shuffled against A's (`perm`), so it
    carries the coordinates' scale and means but no prompt-by-prompt correspondence."""
    m, b, r2, r2_cv, rho = align_coordinates(za, zb[perm], method="procrustes")
    return Alignment(m, b, "procrustes", r2, r2_cv, rho, torch.zeros(0), core_a.basis, core_b.basis, {"control": "shuffled prompts"})


def _name_code_dims(family: str) -> int | None:
    """The name-code dimension the zoo recipe imposed (`interp.train.NameCodes`), from the card."""
    card = json.loads((_zoo(f"lm-{family}") / "card.json").read_text())
    return card.get("training", {}).get("name_codes", card.get("recipe", {}).get("name_codes"))


def _name_subspace(model) -> torch.Tensor:
    """An orthonormal basis [d_model, r] of the span of the IOI names' centred unembedding
    columns: the subspace the imposed name codes are read from (rank r = the code dimension)."""
    from interp.tasks import english

    ids = [row[1] for row in english.encode(list(english.TRAIN_NAMES + english.TEST_NAMES))]
    w = model.W_U[:, ids].detach().double().cpu()  # [d_model, names]
    u, s, _ = torch.linalg.svd(w - w.mean(1, keepdim=True), full_matrices=False)
    return u[:, : int((s > 1e-6 * s[0]).sum())].float()


def ioi_section(models: dict[str, Any], progress: bool = True, n: int = 512, n_controls: int = 5) -> dict[str, Any]:
    """IOI cores at two sites per family, the operator between them, and its transfer.

    Held-out checks: operator R² on new prompts with training names (seed 3) and on prompts made
    only of the held-out names (`english.ioi` split "test": names never seen in an IOI sentence in
    training). k is reported beside the name-code dimension the recipe imposed, with the principal
    angles between the core and the names' unembedding subspace. Transfer is scored against
    `n_controls` alignments fitted on shuffled prompts (mean and max)."""
    from interp.tasks import english

    fit_task, test_task = english.ioi(n, split="train", seed=1), english.ioi(n, split="train", seed=3)
    names_task = english.ioi(n, split="test", seed=3)
    prompts = english.ioi(256, split="train", seed=2).text
    out: dict[str, Any] = {"families": {}}
    chosen: dict[str, tuple[Core, Core, Operator]] = {}
    for family, model in tqdm(models.items(), desc="cores: ioi families", disable=not progress):
        scan = _scan(model, fit_task, range(model.cfg.n_layers))
        two = sorted(sorted(scan, key=lambda r: r["acc"]["core_flipped"])[:2], key=lambda r: r["layer"])
        c_in, c_out = two[0]["core"], two[1]["core"]
        op = fit_operator(model, c_in, fit_task, target=c_out)
        chosen[family] = (c_in, c_out, op)
        names_sub = _name_subspace(model)
        out["families"][family] = {
            "sites": [c_in.site, c_out.site], "k": [c_in.k, c_out.k], "name_code_dims": _name_code_dims(family),
            "name_subspace_rank": int(names_sub.shape[1]),
            "max_angle_to_name_subspace_rad": [float(principal_angles(c.basis, names_sub)[: c.k].max()) for c in (c_in, c_out)],
            "spectra": [c_in.spectrum[:14].tolist(), c_out.spectrum[:14].tolist()],
            "validation_accuracy": {r["site"]: r["acc"] for r in two},
            "heldout_names_accuracy": {c.site: {m: float(g.values[i, 0, 1]) for i, m in enumerate(INTERVENTIONS)}
                                       for c in (c_in, c_out) for g in [validate(model, c, names_task, n_random=2, progress=False)]},
            "operator_r2_fit": op.r2, "operator_r2_heldout": score_operator(model, op, c_in, c_out, test_task),
            "operator_r2_heldout_names": score_operator(model, op, c_in, c_out, names_task),
            "scan": {r["site"]: {"k": r["core"].k, **{f"{m}_acc": r["acc"][m] for m in INTERVENTIONS}} for r in scan},
        }
    g = torch.Generator().manual_seed(0)
    transfers: dict[str, Any] = {}
    for a in chosen:
        for b in chosen:
            if a == b:
                continue
            ca_in, ca_out, op = chosen[a]
            cb_in, cb_out, _ = chosen[b]
            al_in = align(models[a], ca_in, models[b], cb_in, prompts)
            al_out = align(models[a], ca_out, models[b], cb_out, prompts)
            moved = score_operator(models[b], transfer(op, al_in, al_out), cb_in, cb_out, test_task)
            z_in = [c.coordinates(x) for c, x in zip((ca_in, cb_in), matched_activations(models[a], models[b], prompts, ca_in.site, cb_in.site))]
            z_out = [c.coordinates(x) for c, x in zip((ca_out, cb_out), matched_activations(models[a], models[b], prompts, ca_out.site, cb_out.site))]
            controls = []
            for _ in range(n_controls):
                perm = torch.randperm(len(prompts), generator=g)
                ctl = transfer(op, _shuffled(*z_in, ca_in, cb_in, perm), _shuffled(*z_out, ca_out, cb_out, perm))
                controls.append(score_operator(models[b], ctl, cb_in, cb_out, test_task))
            transfers[f"{a}->{b}"] = {"r2_after_transfer": moved, "control_mean": sum(controls) / len(controls),
                                      "control_max": max(controls), "beats_control": bool(moved > max(controls)),
                                      "alignment_in_r2": al_in.r2_heldout, "alignment_out_r2": al_out.r2_heldout}
    out["transfer"] = transfers
    out["controls_per_pair"] = n_controls
    return out


def repro(progress: bool = True, models: list[str] | None = None) -> dict[str, Any]:
    """The study; every section records what it measured.

    models=None: the zoo sections (Markov seeds, modular-addition checkpoints, SVA and IOI on the
    four zoo decoder families) and the real-model sections (`interp.studies.ace_real`) on
    SmolLM2-135M and Gemma-3-270M. A list of specs runs SVA and IOI on those models only: `zoo:`
    specs with the zoo's English tasks, any other spec (a real model) with `interp.tasks.bpe`.
    """
    from interp.studies import ace_real

    start = time.perf_counter()
    result: dict[str, Any] = {}
    specs = list(models) if models is not None else [f"zoo:lm-{f}" for f in DECODERS] + list(ace_real.REAL_MODELS)
    if models is None:
        result["markov"] = markov_section(progress)
        result["modular"] = modular_section(progress)
    zoo_specs = [s for s in specs if s.startswith("zoo:")]
    zoo = {s.removeprefix("zoo:").removeprefix("lm-"): m for s in zoo_specs if (m := _load_zoo(s.removeprefix("zoo:"))) is not None}
    missing = [s for s in zoo_specs if s.removeprefix("zoo:").removeprefix("lm-") not in zoo]
    if zoo_specs:
        result["sva"] = sva_section(zoo, progress) if zoo else {"error": "no zoo language models shipped"}
        result["ioi"] = ioi_section(zoo, progress) if zoo else {"error": "no zoo language models shipped"}
        if missing:
            result["sva"]["missing_families"] = result["ioi"]["missing_families"] = missing
    real_specs = [s for s in specs if not s.startswith("zoo:")]
    if real_specs:
        real = {s: load(s) for s in tqdm(real_specs, desc="cores: load real models", disable=not progress)}
        result["real"] = {"sva": ace_real.sva_real(real, progress=progress),
                          "ioi": ace_real.ioi_real(real, progress=progress) if len(real) > 1 else {"error": "transfer needs two models"}}
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
        ks = ", ".join(f"{s}: k={v['k']} (gradient rank {v['gradient_rank']}), max abs eigenvalue error {v['max_abs_error']:.3f}"
                       for s, v in seeds.items())
        angles = [a for v in m.get("principal_angles_rad", {}).values() for a in v]
        rp = m.get("random_planes")
        base = (f"; random {rp['k']}-planes in {rp['d']} dims: smallest angle {rp['p05'][0]:.2f}-{rp['p95'][0]:.2f} rad "
                f"(5th-95th percentile)") if rp else ""
        out.append(f"| markov | 3-D cores in nearly orthogonal subspaces, same transition spectra | {ks}; principal angles "
                   f"between seeds {min(angles):.2f}-{max(angles):.2f} rad{base} |" if angles else f"| markov | | {ks} |")
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
        al = sva.get("axis_alignment", {})
        r2 = [v["r2_heldout"] for v in al.values()]
        ctl = [v["shuffled_max"] for v in al.values()]
        within = [v["within_label_mean"] for v in al.values() if "within_label_mean" in v]
        align_txt = (f"; axis alignment held-out R² {min(r2):.2f}-{max(r2):.2f} over {len(r2)} ordered pairs (shuffled prompts: "
                     f"max {max(ctl):.2f}; shuffled within one number: {min(within):.2f}-{max(within):.2f})") if r2 and within else ""
        out.append(f"| sva | one steerable axis, aligned across architectures | {fam}{align_txt} |")
    ioi = result.get("ioi", {})
    if "families" in ioi:
        fam = "; ".join(f"{f}: {v['sites'][0].split('.')[1]}→{v['sites'][1].split('.')[1]} (k={v['k'][0]}, {v['k'][1]}; name codes "
                        f"{v.get('name_code_dims')}), held-out names R² {v.get('operator_r2_heldout_names', float('nan')):.2f}"
                        for f, v in ioi["families"].items())
        tr = ioi.get("transfer", {})
        beats = sum(v["beats_control"] for v in tr.values())
        tr_txt = f"; transfer beats every shuffled-prompt control in {beats} of {len(tr)} ordered pairs" if tr else ""
        out.append(f"| ioi | compact cores at two sites, linked by an operator that transfers across families | {fam}{tr_txt} |")
    real = result.get("real", {})
    if "models" in real.get("sva", {}):
        cells = []
        for name, v in real["sva"]["models"].items():
            nec = [int(l) for l, r in v["scan"].items() if r["necessary"]]
            suf = [int(l) for l, r in v["scan"].items() if r["sufficient"]]
            ks = sorted({r["k"] for r in v["scan"].values()})
            cells.append(f"{name}: k {ks[0]}-{ks[-1]} over {len(v['scan'])} layers, necessary at layers {nec or 'none'}, "
                         f"sufficient at {suf or 'none'}")
        al = real["sva"]["axis_alignment"]
        cells.append("axis alignment held-out R² " + ", ".join(f"{k} {v['r2_heldout']:.2f} (shuffled max {v['shuffled_max']:.2f}, "
                                                               f"within number {v['within_label_mean']:.2f})" for k, v in al.items()))
        out.append(f"| sva, real models | one steerable axis, aligned across architectures | {'; '.join(cells)} |")
    if "models" in real.get("ioi", {}):
        io = real["ioi"]
        fam = "; ".join(f"{n}: layers {v['sites'][0].split('.')[1]}→{v['sites'][1].split('.')[1]} (k={v['k'][0]}, {v['k'][1]}), "
                        f"operator R² held-out prompts {v['operator_r2_heldout_prompts']:.2f}, held-out names "
                        f"{v['operator_r2_heldout_names']:.2f}" for n, v in io["models"].items())
        tr = "; ".join(f"{k}: transfer {v['r2_after_transfer']:.2f} vs control max {v['control_max']:.2f}" for k, v in io["transfer"].items())
        out.append(f"| ioi, real models | compact cores at two sites, linked by an operator that transfers across families | {fam}; {tr} |")
    out.append("")
    out.append(f"Total {result.get('seconds', float('nan')):.0f} s.")
    return "\n".join(out)

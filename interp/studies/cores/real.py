"""ACE (Schiffman 2026) on the two real models: SmolLM2-135M (LLaMA family) and Gemma-3-270M
(Gemma family), with a control beside every claim. `interp repro cores --model SPEC ...` runs the
SVA and IOI sections here on real models; `interp repro steering --model SPEC ...` the steering one.
Built from public names of `interp.cores`, `interp.steering` and `interp.tasks.bpe`.

Matched text. The two tokenizers differ, so every prompt is built from words that are one token
in *every* model of the run (`shared_vocabulary`) and only prompts whose text comes out in every
model are kept (`matched_tasks`), in the same order. Activations are read at each model's own
token position of the same text span: the answer position (END), the last word of the prompt,
which is one token in both models by construction.

Rules fixed here (so the numbers are reproducible):

* SVA: `bpe.sva` "pp" prompts (half with an attractor of the same number, half of the other),
  core per scanned layer at `blocks.L.hook_resid_post` at END, output the is/are logit
  difference, k by the largest spectral gap (k <= 16); validated on a fresh seed against
  random subspaces of the same k. The axis is the first direction of the core at the scanned
  layer whose core flip lowers the logit difference most on those validation rows. The last layer
  is never scanned: there the metric's gradient is the unembedding difference, which forces a core.
* IOI: `bpe.ioi` on one template, the two scanned layers whose core flip lowers the logit
  difference most, in layer order; the operator maps the earlier core to the later one.
* Controls: alignments against the same fit on shuffled rows (the prompt correspondence broken),
  on rows shuffled within one subject number (the number label kept, everything else broken),
  and random directions; transfer against alignments fitted on shuffled prompts.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
from tqdm.auto import tqdm

from interp.cores import INTERVENTIONS, Alignment, Core, activations, align_coordinates, extract, fit_operator, score_operator, transfer, validate
from interp.cores.linalg import random_basis
from interp.tasks import bpe
from interp.tasks.base import Task

__all__ = [
    "REAL_MODELS", "alignment_with_controls", "core_verdict", "ioi_real", "layer_scan", "matched_tasks",
    "shared_vocabulary", "sva_real", "sva_tasks",
]

REAL_MODELS = ("smollm2-135m", "gemma3-270m")
N_SHUFFLES = 20
N_RANDOM = 20  # random subspaces per validation: a spread needs >= 20 draws


def shared_vocabulary(models: dict[str, Any]) -> dict[str, tuple]:
    """The words (and noun pairs, prepositions) that are single tokens in every model, in the
    curated order of the first."""
    vocabs = [bpe.vocabulary(m) for m in models.values()]
    return {key: tuple(w for w in vocabs[0][key] if all(w in v[key] for v in vocabs[1:])) for key in vocabs[0]}


def matched_tasks(models: dict[str, Any], make: Callable[[Any], Task]) -> dict[str, Task]:
    """`make(model)` per model, cut to the prompts whose text every model produced, in the first
    model's order (so row i is the same text in every task)."""
    made = {name: make(m) for name, m in models.items()}
    first = next(iter(made.values()))
    common = [t for t in dict.fromkeys(first.text) if all(t in task.text for task in made.values())]
    out = {}
    for name, task in made.items():
        index = {t: i for i, t in enumerate(task.text)}
        out[name] = task[[index[t] for t in common]]
    return out


def core_verdict(grid, *, margin: float = 3.0) -> dict[str, Any]:
    """Necessity / sufficiency from a `validate` Grid, on the mean logit difference.

    necessary: removing the core keeps at most half the full logit difference, lies more than
    `margin` random standard deviations below the random subspaces' mean (floor: 1 % of |full|)
    and below every random draw; sufficient: keeping only the core keeps at least half and lies
    that far above the random mean and above every draw. With the draws in the grid's meta
    (`validate` keeps them) each intervention also reports the random range and in how many draws
    a random subspace did as well as the core (`random_beats_core`). Absent task information at
    the site, both come out False.
    """
    ld = {m: {q: float(grid.sel(method=m, quantity=q, metric="logit_diff").values) for q in ("core", "random_mean", "random_std")}
          for m in INTERVENTIONS}
    draws = grid.meta.get("random_draws", {})
    for m in INTERVENTIONS[1:]:
        d = draws.get(m, {}).get("logit_diff") or [ld[m]["random_mean"]]
        # "as well as the core": higher for core_only (keeping), lower for removed / flipped (hurting)
        beats = sum(v >= ld[m]["core"] for v in d) if m == "core_only" else sum(v <= ld[m]["core"] for v in d)
        ld[m].update(random_min=min(d), random_max=max(d), random_beats_core=int(beats), n_random=len(d))
    full = ld["full"]["core"]
    floor = 0.01 * abs(full)

    def gap(m: str) -> float:
        return margin * max(ld[m]["random_std"], floor)

    return {
        "full_logit_diff": full,
        "necessary": bool(full > 0 and ld["core_removed"]["core"] <= 0.5 * full
                          and ld["core_removed"]["core"] < ld["core_removed"]["random_mean"] - gap("core_removed")
                          and ld["core_removed"]["random_beats_core"] == 0),
        "sufficient": bool(full > 0 and ld["core_only"]["core"] >= 0.5 * full
                           and ld["core_only"]["core"] > ld["core_only"]["random_mean"] + gap("core_only")
                           and ld["core_only"]["random_beats_core"] == 0),
        "logit_diff": {m: ld[m] for m in INTERVENTIONS[1:]},
        "accuracy": {m: {q: float(grid.sel(method=m, quantity=q, metric="binary_accuracy").values) for q in ("core", "random_mean")}
                     for m in INTERVENTIONS},
    }


def layer_scan(model, fit: Task, test: Task, layers: Sequence[int], *, n_random: int = N_RANDOM, progress: bool = True,
               desc: str = "layers") -> list[dict[str, Any]]:
    """Per layer: the ACE core at `blocks.L.hook_resid_post` on `fit`, validated on `test`."""
    rows = []
    for layer in tqdm(list(layers), desc=desc, disable=not progress):
        site = f"blocks.{layer}.hook_resid_post"
        core = extract(model, fit, site=site, batch_size=32)
        grid = validate(model, core, test, n_random=n_random, progress=False)
        rows.append({"layer": layer, "site": site, "core": core, "verdict": core_verdict(grid),
                     "spectrum": [float(s) for s in core.spectrum[:6]]})
    return rows


def _flip_rank(row: dict[str, Any]) -> float:
    return row["verdict"]["logit_diff"]["core_flipped"]["core"]


def _r2(za: torch.Tensor, zb: torch.Tensor) -> float:
    return align_coordinates(za, zb, method="procrustes")[3]


def alignment_with_controls(za: torch.Tensor, zb: torch.Tensor, labels: torch.Tensor | None = None, *,
                            random_za: Sequence[torch.Tensor] = (), random_zb: Sequence[torch.Tensor] = (),
                            seed: int = 0, n_shuffles: int = N_SHUFFLES) -> dict[str, Any]:
    """Held-out Procrustes R² of za -> zb on matched rows, beside its controls.

    shuffled: the same fit with zb's rows permuted (`n_shuffles` permutations; mean, max);
    within_label (when `labels` is given): rows permuted only among rows of the same label, so a
    fit that only reads the shared label keeps its R²; random: coordinates of random directions
    of the same k in each model (pairs of `random_za`, `random_zb`). `beats_shuffled`: R² above
    the largest shuffled R².
    """
    g = torch.Generator().manual_seed(seed)
    r2 = _r2(za, zb)
    shuffled = [_r2(za, zb[torch.randperm(len(zb), generator=g)]) for _ in range(n_shuffles)]
    out: dict[str, Any] = {"r2_heldout": r2, "shuffled_mean": sum(shuffled) / len(shuffled), "shuffled_max": max(shuffled),
                           "beats_shuffled": bool(r2 > max(shuffled)), "n": int(len(za))}
    if labels is not None:
        within = []
        for _ in range(n_shuffles):
            perm = torch.arange(len(zb))
            for lab in labels.unique():
                idx = (labels == lab).nonzero().flatten()
                perm[idx] = idx[torch.randperm(len(idx), generator=g)]
            within.append(_r2(za, zb[perm]))
        out["within_label_mean"] = sum(within) / len(within)
        out["within_label_max"] = max(within)
    if random_za:
        rand = [_r2(a, b) for a, b in zip(random_za, random_zb)]
        out["random_directions_mean"] = sum(rand) / len(rand)
        out["random_directions_min"] = min(rand)
        out["random_directions_max"] = max(rand)
        out["random_directions_n"] = len(rand)
    return out


# ---------------------------------------------------------------------------------------------
# SVA


def sva_tasks(models: dict[str, Any], vocab: dict[str, tuple], n: int, seed: int) -> dict[str, Task]:
    """Matched "pp" SVA prompts: n/2 with an attractor of the same number, n/2 of the other."""
    preps = _one_token_prepositions(vocab)

    def make(model) -> Task:
        kw = {"nouns": vocab["nouns"], "prepositions": preps}
        a = bpe.sva(model, n // 2, split="pp_match", seed=seed, **kw)
        b = bpe.sva(model, n - n // 2, split="pp_mismatch", seed=seed, **kw)
        return _concat(a, b)

    return matched_tasks(models, make)


def _one_token_prepositions(vocab: dict[str, tuple]) -> list[str]:
    preps = [p for p in vocab["prepositions"] if " " not in p]
    if not preps:
        from interp.errors import InterpError

        raise InterpError("no one-word preposition is a single token in every model")
    return preps


def _concat(a: Task, b: Task) -> Task:
    """Rows of two tasks of one token length (same positions keys) as one task."""
    from dataclasses import replace

    from interp.errors import InterpError

    if a.clean.shape[1] != b.clean.shape[1]:
        raise InterpError(f"cannot join tasks of token lengths {a.clean.shape[1]} and {b.clean.shape[1]}")
    cat = torch.cat
    return replace(a, split=f"{a.split}+{b.split}", clean=cat([a.clean, b.clean]), corrupt=cat([a.corrupt, b.corrupt]),
                   correct=cat([a.correct, b.correct]), incorrect=cat([a.incorrect, b.incorrect]),
                   answer_pos=cat([a.answer_pos, b.answer_pos]), text=tuple(a.text) + tuple(b.text),
                   positions={k: cat([a.positions[k], b.positions[k]]) for k in a.positions},
                   meta={"parts": [a.split, b.split]})  # per-row meta lists are not carried


def subject_number(texts: Sequence[str], nouns: Sequence[tuple[str, str]]) -> torch.Tensor:
    """1 where the prompt's head noun (its second word, "The keys ...") is the plural of a
    (singular, plural) pair, else 0 (Task.meta is not cut with the rows, so read the text)."""
    plural = {p for _, p in nouns}
    return torch.tensor([int(t.split()[1] in plural) for t in texts])


def default_layers(model, count: int) -> list[int]:
    """`count` layers spread evenly over those the unembedding does not force (every one but the last,
    whose metric gradient is the readout), ending at the one before it (SmolLM2's 30, count 2: 13, 28;
    Gemma-3's 18: 7, 16): what this CPU allows, not every layer. 0: every unforced layer."""
    n = model.cfg.n_layers - 1
    count = min(count or n, n)
    return sorted({round((i + 1) * n / count) - 1 for i in range(count)})


def _unit(units, config: dict[str, Any], fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """One resumable unit of the study (`interp.studies.units.Units.run`), or `fn()` without a store."""
    return units.run(config, lambda *_: fn()) if units is not None else fn()


def _scan_json(scan: list[dict[str, Any]]) -> dict[str, Any]:
    best = min(scan, key=_flip_rank)
    return {"layers_scanned": [r["layer"] for r in scan], "axis_layer": best["layer"], "axis_site": best["site"],
            "scan": {str(r["layer"]): {"k": r["core"].k, "spectrum": r["spectrum"], **r["verdict"]} for r in scan}}


def sva_real(models: dict[str, Any], *, n_fit: int = 64, n_test: int = 64, n_align: int = 128, count: int = 6,
             n_random: int = N_RANDOM, progress: bool = True, units=None) -> dict[str, Any]:
    """The SVA core per layer in each model (k, necessity, sufficiency against `n_random` random
    subspaces), and the core axis aligned across every ordered pair of models on matched prompts.
    Units: one layer scan per model, one alignment of all pairs (it re-extracts each axis from
    the scan's chosen layer: extraction is deterministic)."""
    vocab = shared_vocabulary(models)
    fit, test, al = (sva_tasks(models, vocab, n, seed) for n, seed in ((n_fit, 1), (n_test, 2), (n_align, 3)))
    out: dict[str, Any] = {"prompts": {"fit": len(next(iter(fit.values()))), "test": len(next(iter(test.values()))),
                                       "align": len(next(iter(al.values())))},
                           "example": next(iter(fit.values())).text[0], "n_random": n_random, "models": {}}
    base = {"section": "real_sva", "models": list(models), "n_fit": n_fit, "n_test": n_test, "n_random": n_random}
    for name, model in models.items():
        layers = default_layers(model, count)
        out["models"][name] = _unit(units, {**base, "part": "scan", "model": name, "layers": layers}, lambda: _scan_json(
            layer_scan(model, fit[name], test[name], layers, n_random=n_random, progress=progress, desc=f"sva {name}")))

    def alignment() -> dict[str, Any]:
        axes = {n: extract(models[n], fit[n], site=v["axis_site"], batch_size=32).truncated(1) for n, v in out["models"].items()}
        labels = subject_number(next(iter(al.values())).text, vocab["nouns"])
        acts = {n: activations(models[n], al[n], axes[n].site) for n in models}
        pairs = {}
        for a in models:
            for b in models:
                if a == b:
                    continue
                za, zb = axes[a].coordinates(acts[a]), axes[b].coordinates(acts[b])
                ra = [_random_coords(acts[a], axes[a], s) for s in range(N_RANDOM)]
                rb = [_random_coords(acts[b], axes[b], 100 + s) for s in range(N_RANDOM)]
                pairs[f"{a}->{b}"] = alignment_with_controls(za, zb, labels, random_za=ra, random_zb=rb)
        return pairs

    sites = {n: v["axis_site"] for n, v in out["models"].items()}
    out["axis_alignment"] = _unit(units, {**base, "part": "alignment", "n_align": n_align, "axis_sites": sites, "random": N_RANDOM},
                                  alignment)
    return out


def _random_coords(acts: torch.Tensor, core: Core, seed: int) -> torch.Tensor:
    return (acts - core.mean) @ random_basis(core.d_model, core.k, seed)


# ---------------------------------------------------------------------------------------------
# IOI


IOI_TEMPLATE = 0  # one template, so rows have one token length in every model


def ioi_tasks(models: dict[str, Any], vocab: dict[str, tuple], n: int, seed: int, split: str = "mixed") -> dict[str, Task]:
    def make(model) -> Task:
        return bpe.ioi(model, n, split=split, seed=seed, names=vocab["names"], places=vocab["places"],
                       objects=vocab["objects"], templates=[IOI_TEMPLATE])

    return matched_tasks(models, make)


def _alignment(za, zb, core_a: Core, core_b: Core, perm: torch.Tensor | None = None) -> Alignment:
    zb = zb if perm is None else zb[perm]
    m, b, r2, r2_cv, rho = align_coordinates(za, zb, method="procrustes")
    return Alignment(m, b, "procrustes", r2, r2_cv, rho, torch.zeros(0), core_a.basis, core_b.basis,
                     {"control": "shuffled prompts" if perm is not None else None})


def ioi_real(models: dict[str, Any], *, n_fit: int = 32, n_test: int = 32, n_align: int = 64, count: int = 3,
             n_controls: int = 3, n_random: int = N_RANDOM, progress: bool = True, units=None) -> dict[str, Any]:
    """Two-site IOI cores per model, the operator between them (fit, held-out prompts, held-out
    names) beside its identity and shuffled-row baselines (`interp.cores.controls`), and the
    operator carried across models against shuffled-prompt alignments. Units: one per model
    (scan, sites, operator), one for the transfers (it re-extracts the chosen cores)."""
    from interp.cores.controls import operator_baselines

    vocab = shared_vocabulary(models)
    fit, test, al = (ioi_tasks(models, vocab, n, seed) for n, seed in ((n_fit, 1), (n_test, 2), (n_align, 3)))
    held = ioi_tasks(models, vocab, n_test, 4, split="mixed_heldout")
    out: dict[str, Any] = {"prompts": {"fit": len(next(iter(fit.values()))), "test": len(next(iter(test.values()))),
                                       "align": len(next(iter(al.values()))), "heldout_names": len(next(iter(held.values())))},
                           "example": next(iter(fit.values())).text[0], "n_random": n_random, "models": {}}
    base = {"section": "real_ioi", "models": list(models), "n_fit": n_fit, "n_test": n_test, "n_random": n_random}

    def one(name: str, model, layers: list[int]) -> dict[str, Any]:
        scan = layer_scan(model, fit[name], test[name], layers, n_random=n_random, progress=progress, desc=f"ioi {name}")
        two = sorted(sorted(scan, key=_flip_rank)[:2], key=lambda r: r["layer"])
        c_in, c_out = two[0]["core"], two[1]["core"]
        op = fit_operator(model, c_in, fit[name], target=c_out)
        return {"layers_scanned": [r["layer"] for r in scan], "sites": [c_in.site, c_out.site], "k": [c_in.k, c_out.k],
                "operator_r2_fit": op.r2, "operator_r2_heldout_prompts": score_operator(model, op, c_in, c_out, test[name]),
                "operator_r2_heldout_names": score_operator(model, op, c_in, c_out, held[name]),
                "baselines": operator_baselines(model, c_in, c_out, fit[name], test[name]),
                "scan": {str(r["layer"]): {"k": r["core"].k, "spectrum": r["spectrum"], **r["verdict"]} for r in scan}}

    for name, model in models.items():
        layers = default_layers(model, count)
        out["models"][name] = _unit(units, {**base, "part": "model", "model": name, "layers": layers},
                                    lambda: one(name, model, layers))

    def transfers() -> dict[str, Any]:
        chosen = {}
        for name, v in out["models"].items():
            c_in, c_out = (extract(models[name], fit[name], site=s, batch_size=32) for s in v["sites"])
            chosen[name] = (c_in, c_out, fit_operator(models[name], c_in, fit[name], target=c_out))
        g = torch.Generator().manual_seed(0)
        result = {}
        for a in models:
            for b in models:
                if a == b:
                    continue
                (ca_in, ca_out, op), (cb_in, cb_out, _) = chosen[a], chosen[b]
                z = {key: core.coordinates(activations(models[m], al[m], core.site))
                     for key, m, core in (("a_in", a, ca_in), ("a_out", a, ca_out), ("b_in", b, cb_in), ("b_out", b, cb_out))}
                al_in, al_out = _alignment(z["a_in"], z["b_in"], ca_in, cb_in), _alignment(z["a_out"], z["b_out"], ca_out, cb_out)
                moved = score_operator(models[b], transfer(op, al_in, al_out), cb_in, cb_out, test[b])
                controls = []
                for _ in range(n_controls):
                    perm = torch.randperm(len(z["b_in"]), generator=g)
                    ctl = transfer(op, _alignment(z["a_in"], z["b_in"], ca_in, cb_in, perm),
                                   _alignment(z["a_out"], z["b_out"], ca_out, cb_out, perm))
                    controls.append(score_operator(models[b], ctl, cb_in, cb_out, test[b]))
                result[f"{a}->{b}"] = {
                    "r2_after_transfer": moved, "control_mean": sum(controls) / len(controls), "control_max": max(controls),
                    "beats_control": bool(moved > max(controls)), "own_operator_r2": out["models"][b]["operator_r2_heldout_prompts"],
                    "alignment_in_r2_heldout": al_in.r2_heldout, "alignment_out_r2_heldout": al_out.r2_heldout,
                }
        return result

    sites = {n: v["sites"] for n, v in out["models"].items()}
    out["transfer"] = _unit(units, {**base, "part": "transfer", "n_align": n_align, "n_controls": n_controls, "sites": sites}, transfers)
    return out

"""The generated regions of docs/cores.md, rendered from the one JSON of `interp repro cores`
(docs/cores_repro.json) through `interp.studies.docs.Render`, so every number names its JSON key
and tests/test_docs.py checks it at the precision shown.

    interp doc cores --json docs/cores_repro.json --doc docs/cores.md   # rewrites every <!-- gen:NAME --> region

A region lives between ``<!-- gen:NAME -->`` and ``<!-- /gen:NAME -->``; prose around it is
hand-written and holds no result numbers. Verdict words are the JSON's own (interp.studies.verdicts).
"""

from __future__ import annotations

import re
from typing import Any

from interp.studies.docs import Render, pointer
from interp.studies.verdicts import against_all, combine

__all__ = ["cores_regions", "repro_markdown", "splice"]

def _yes(x: bool) -> str:
    return "yes" if x else "no"


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _table(head: list[str], rows: list[list[str]]) -> str:
    return "\n".join([_row(head), "|" + "---|" * len(head), *(_row(r) for r in rows)])


def _layer(site: str) -> str:
    return f"`{site.split('.')[1]}`"  # a label: in a code span, so not a result number


class _R(Render):
    """Render with the small helpers these tables need."""

    def ctl(self, *path: Any) -> str:
        """core (random mean [min, max]) of a validation cell at `path`."""
        p = pointer(*path)
        out = f"{self.num(p + '/core')} ({self.num(p + '/random_mean')}"
        cell = self.data
        for part in path:
            cell = cell[part]
        if "random_min" in cell:
            out += f" [{self.num(p + '/random_min')}, {self.num(p + '/random_max')}]"
        return out + ")"

    def ev(self, *path: Any) -> str:
        """Eigenvalues [[re, im], ...] at `path` as (re, im) pairs."""
        cell = self.data
        for part in path:
            cell = cell[part]
        return ", ".join(f"({self.num(pointer(*path, i, 0))}, {self.num(pointer(*path, i, 1))})" for i in range(len(cell)))

    def rng(self, pairs: list[tuple]) -> str:
        """The smallest and largest of several keyed values as "lo-hi" (one value when they agree)."""
        (lo_v, lo), (hi_v, hi) = min(pairs), max(pairs)
        return self.num(lo) if lo_v == hi_v else f"{self.num(lo)} to {self.num(hi)}"


def _markov(r: _R, m: dict[str, Any]) -> dict[str, str]:
    out = {}
    rows = []
    for seed, v in m["seeds"].items():
        b = ("markov", "seeds", seed)
        acc = ("markov", "seeds", seed, "validation_accuracy")
        rows.append([seed, r.int(pointer(*b, "gradient_rank")), r.int(pointer(*b, "k")),
                     f"{r.num(pointer(*b, 'spectrum', 2))} / {r.num(pointer(*b, 'spectrum', 3))}", r.ev(*b, "eigenvalues"),
                     r.num(pointer(*b, "max_abs_error")), r.num(pointer(*b, "split_half_angles_rad", len(v["split_half_angles_rad"]) - 1)),
                     f"{r.num(pointer(*acc, 'full', 'core'))} / {r.num(pointer(*acc, 'core_only', 'core'))} / "
                     f"{r.num(pointer(*acc, 'core_removed', 'core'))} ({r.num(pointer(*acc, 'core_removed', 'random_mean'))}) / "
                     f"{r.num(pointer(*acc, 'core_flipped', 'core'))}"])
    out["markov"] = r.region(_table(["seed", "gradient rank", "k", "Hankel s3 / s4", "operator eigenvalues (re, im)", "max abs error",
                                     "split-half largest angle (rad)", "acc: full / core only / removed (random mean) / flipped"], rows))
    out["markov_true"] = r.region(r.ev("markov", "true_nonunit_eigenvalues"))
    rows = []
    for seed, v in m["seeds"].items():
        c = ("markov", "seeds", seed, "controls")
        rows.append([seed, r.num(pointer("markov", "seeds", seed, "max_abs_error")), r.num(pointer(*c, "random", "mean")),
                     r.num(pointer(*c, "random", "min")), r.num(pointer(*c, "random", "max")), r.num(pointer(*c, "pca")),
                     r.num(pointer(*c, "class_means")), r.num(pointer(*c, "state")), v["verdict"]["word"]])
    out["markov_controls"] = r.region(_table(["seed", "core", "random 3-planes: mean", "min", "max", "PCA", "class means",
                                              "one-hot state (no model)", "verdict"], rows))
    rp = m["random_planes"]
    judges = m.get("orthogonality_judges", {})
    rows = [[pair.replace("|", " vs "), *[r.num(pointer("markov", "principal_angles_rad", pair, i)) for i in range(len(a))],
             judges[pair]["word"] if pair in judges else ""] for pair, a in m["principal_angles_rad"].items()]
    for label, key in (("random planes: mean", "mean"), ("random: 5th percentile", "p05"), ("random: 95th percentile", "p95")):
        rows.append([label, *[r.num(pointer("markov", "random_planes", key, i)) for i in range(rp["k"])], ""])
    out["markov_angles"] = r.region(_table(["pair", *[f"angle {'abcdefgh'[i]} (rad)" for i in range(rp["k"])],
                                           "word: smallest angle vs random 3-planes (5th-95th percentile)"], rows))
    return out


def _modular(r: _R, mod: dict[str, Any]) -> str:
    rows = []
    for label, v in mod["checkpoints"].items():
        if "k" not in v:
            continue
        p = ("modular", "checkpoints", label)
        freqs = ", ".join(f"{r.int(pointer(*p, 'dominant_frequencies', i))} ({r.num(pointer(*p, 'power_fraction', i))})"
                          for i in range(len(v["dominant_frequencies"])))
        rows.append([label, r.int(pointer(*p, "step")), r.num(pointer(*p, "train_acc"), digits=4), r.num(pointer(*p, "test_acc"), digits=4),
                     r.int(pointer(*p, "k")), freqs])
    return r.region(_table(["checkpoint", "step", "train acc", "test acc", "k", "top frequencies (share of core Fourier power)"], rows))


def _sva(r: _R, sva: dict[str, Any]) -> dict[str, str]:
    rows = []
    for fam, v in sva["families"].items():
        for site, lv in v["layers"].items():
            for kind in ("core", "axis"):
                p = ("sva", "families", fam, "layers", site)
                words = " / ".join(j["word"] for j in lv[kind]["judges"].values())
                mark = " (forced: readout)" if site == v.get("forced_layer") else " (axis read here)" if site == v.get("axis_site") else ""
                rows.append([fam, _layer(site) + mark, kind + (" (smallest k)" if kind == "core" and site == v["site"] else ""),
                             r.int(pointer(*p, kind, "k")),
                             r.num(pointer(*p, "axis_cos_readout")) if kind == "axis" else "",
                             *[r.ctl(*p, kind, "validation", m, metric) for metric in ("logit_diff", "binary_accuracy")
                               for m in ("core_only", "core_removed", "core_flipped")],
                             words])
    out = {"sva_layers": r.region(_table(
        ["family", "layer", "subspace", "k", "axis abs cos with the readout", "logit diff: core only (random mean [min, max])",
         "core removed", "core flipped", "acc: core only (random mean [min, max])", "core removed", "core flipped",
         "words (logit diff): only / removed / flipped"], rows))}
    rows = [[fam, _layer(v["site"]), r.int(pointer("sva", "families", fam, "k")), _yes(v["chosen_is_last"]),
             r.num(pointer("sva", "families", fam, "layers", v["site"], "axis_cos_readout")),
             _yes(v["axis_words_differ_across_layers"]), v["readout_judge"]["word"], _layer(v["axis_site"]),
             " / ".join(j["word"] for j in v["layers"][v["axis_site"]]["axis"]["judges"].values())]
            for fam, v in sva["families"].items()]
    out["sva_choice"] = r.region(_table(["family", "smallest-k layer", "k", "last layer", "axis abs cos with the readout",
                                         "layer test tells layers apart", "word on the smallest-k choice",
                                         "axis layer (unforced, chosen on validation rows)",
                                         "axis words there: only / removed / flipped"], rows))
    if "axis_alignment" in sva:
        out["sva_alignment"] = r.region(_alignment(r, ("sva", "axis_alignment"), sva["axis_alignment"]))
    return out


ALIGN_HEAD = ["A -> B", "held-out R²", "shuffled: mean", "shuffled: max", "within number: mean", "within number: max",
              "random directions: mean", "random directions: min", "random directions: max", "beats shuffled",
              "word vs random directions"]


def _alignment(r: _R, base: tuple, pairs: dict[str, Any]) -> str:
    rows = [[k, *[r.num(pointer(*base, k, f)) for f in ("r2_heldout", "shuffled_mean", "shuffled_max", "within_label_mean",
                                                        "within_label_max", "random_directions_mean", "random_directions_min",
                                                        "random_directions_max")], _yes(v["beats_shuffled"]), v["judge"]["word"]]
            for k, v in pairs.items()]
    return _table(ALIGN_HEAD, rows)


def _ioi(r: _R, ioi: dict[str, Any]) -> dict[str, str]:
    runs = [(f, ("ioi", "families", f)) for f in ioi["families"]] + [(k, ("ioi", "code_sizes", k)) for k in ioi.get("code_sizes", {})]
    rows, base = [], []
    for label, p in runs:
        v = r.data[p[0]][p[1]][p[2]]
        name = label if p[1] == "families" else "lm-{}-codes{}".format(*label.split(":"))
        rows.append([name, " -> ".join(f"`{s}`" for s in v["sites"]), " -> ".join(r.int(pointer(*p, "k", i)) for i in range(2)),
                     " -> ".join(r.int(pointer(*p, "heldout_k", s, "k")) for s in v["heldout_k"]), r.int(pointer(*p, "name_code_dims")),
                     " / ".join(r.num(pointer(*p, "max_angle_to_name_subspace_rad", i)) for i in range(2)),
                     " / ".join(f"{r.num(pointer(*p, 'heldout_names_accuracy', s, 'full'))}, "
                                f"{r.num(pointer(*p, 'heldout_names_accuracy', s, 'core_flipped'))}" for s in v["sites"]), v["k_word"]])
    ioi_table = r.region(_table(["model", "sites", "k (spectral gap)", "k (held out)", "name-code dims",
                                 "largest angle core vs names' subspace (rad)", "held-out names acc: full, core flipped (per site)",
                                 "verdict on k"], rows))
    for label, p in runs:
        v = r.data[p[0]][p[1]][p[2]]
        name = label if p[1] == "families" else "lm-{}-codes{}".format(*label.split(":"))
        for rows_label, key in (("new prompts", "baselines"), ("held-out names", "baselines_heldout_names")):
            b = (*p, key)
            base.append([name, rows_label, *[r.num(pointer(*b, f)) for f in ("operator_r2_heldout", "identity_r2", "identity_through_core_r2",
                                                                                "shuffled_rows_r2")],
                         r.num(pointer(*b, "random_subspaces_r2", "mean")), r.num(pointer(*b, "random_subspaces_r2", "max")),
                         v["operator_word"] if key == "baselines" else ""])
    out = {"ioi": ioi_table,
           "ioi_baselines": r.region(_table(["model", "rows", "operator R²", "identity", "identity through the input core", "shuffled-row fit",
                                             "random subspaces: mean", "random subspaces: max", "verdict on the operator"], base))}
    if "transfer" in ioi:
        t = ("ioi", "transfer")
        rows = [[k, *[r.num(pointer(*t, k, f)) for f in ("r2_after_transfer", "control_mean", "control_min", "control_max")],
                 v["judges"]["shuffled"]["word"],
                 *[r.num(pointer(*t, k, "random_operators", f)) for f in ("mean", "min", "max")], v["judges"]["random"]["word"],
                 r.num(pointer(*t, k, "alignment_in_r2")), r.num(pointer(*t, k, "alignment_out_r2"))]
                for k, v in ioi["transfer"].items()]
        out["ioi_transfer"] = r.region(_table(["A -> B", "R² after transfer", "shuffled-prompt alignments: mean", "min", "max",
                                               "word vs shuffled", "random operators of the same norm: mean", "min", "max",
                                               "word vs random operators", "alignment R² in", "alignment R² out"], rows))
    return out


def _scan(r: _R, base: tuple, models: dict[str, Any]) -> str:
    rows = []
    for name, m in models.items():
        for layer, v in m["scan"].items():
            p = (*base, "models", name, "scan", layer)
            ld = (*p, "logit_diff")
            rows.append([name, f"`{layer}`", r.int(pointer(*p, "k")), r.num(pointer(*p, "full_logit_diff")),
                         *[r.ctl(*ld, m_) for m_ in ("core_only", "core_removed", "core_flipped")],
                         r.int(pointer(*ld, "core_only", "random_beats_core")),
                         f"{r.num(pointer(*p, 'accuracy', 'core_only', 'core'))} ({r.num(pointer(*p, 'accuracy', 'core_only', 'random_mean'))})",
                         _yes(v["necessary"]), _yes(v["sufficient"]),
                         v["sufficiency_judge"]["word"]])
    return _table(["model", "layer", "k", "full", "core only (random mean [min, max])", "core removed", "core flipped",
                   "random draws keeping as much as the core", "acc: core only (random mean)", "necessary", "sufficient",
                   "word: core only vs random"], rows)


def _real(r: _R, real: dict[str, Any]) -> dict[str, str]:
    out = {}
    if "models" in real.get("sva", {}):
        out["real_sva_scan"] = r.region(_scan(r, ("real", "sva"), real["sva"]["models"]))
        out["real_sva_alignment"] = r.region(_alignment(r, ("real", "sva", "axis_alignment"), real["sva"]["axis_alignment"]))
    io = real.get("ioi", {})
    if "models" in io:
        out["real_ioi_scan"] = r.region(_scan(r, ("real", "ioi"), io["models"]))
        rows = [[n, " -> ".join(f"`{s}`" for s in v["sites"]), " -> ".join(r.int(pointer("real", "ioi", "models", n, "k", i)) for i in range(2)),
                 *[r.num(pointer("real", "ioi", "models", n, f)) for f in ("operator_r2_fit", "operator_r2_heldout_prompts", "operator_r2_heldout_names")],
                 *[r.num(pointer("real", "ioi", "models", n, "baselines", f)) for f in ("identity_r2", "shuffled_rows_r2")],
                 r.num(pointer("real", "ioi", "models", n, "baselines", "random_subspaces_r2", "max")), v["operator_judge"]["word"]]
                for n, v in io["models"].items()]
        out["real_ioi"] = r.region(_table(["model", "sites", "k", "operator R² fit", "held-out prompts", "held-out names", "identity",
                                           "shuffled-row fit", "random subspaces: max", "word vs identity"], rows))
        rows = [[k, *[r.num(pointer("real", "ioi", "transfer", k, f)) for f in ("r2_after_transfer", "control_mean", "control_max")],
                 _yes(v["beats_control"]), *[r.num(pointer("real", "ioi", "transfer", k, f)) for f in
                                             ("own_operator_r2", "alignment_in_r2_heldout", "alignment_out_r2_heldout")]]
                for k, v in io["transfer"].items()]
        out["real_ioi_transfer"] = r.region(_table(["A -> B", "R² after transfer", "control: mean", "control: max", "beats control",
                                                    "B's own operator", "alignment R² in", "alignment R² out"], rows))
    return out


# ---------------------------------------------------------------------------------------------
# the headline table, the provenance line and the readings (sentences whose numbers name keys)


def _seeds(result: dict[str, Any]) -> list[str]:
    return [s for s, v in result["markov"]["seeds"].items() if "k" in v]


def _vals(r: _R, ptrs: list[str]) -> list[tuple]:
    from interp.studies.docs import get

    return [(get(r.data, p), p) for p in ptrs]


def _markov_cell(r: _R, result: dict[str, Any]) -> str:
    seeds = _seeds(result)
    sp = lambda *k: [pointer("markov", "seeds", s, *k) for s in seeds]  # noqa: E731
    return (f"k = {r.rng(_vals(r, sp('k')))} in every seed (fixed by the 4-state task); operator eigenvalue error "
            f"{r.rng(_vals(r, sp('max_abs_error')))}; the same fit on random 3-planes {r.rng(_vals(r, sp('controls', 'random', 'min') + sp('controls', 'random', 'max')))}, "
            f"on the one-hot state itself (no model) {r.rng(_vals(r, sp('controls', 'state')))}")


def _sva_cell(r: _R, result: dict[str, Any]) -> str:
    fams = result["sva"]["families"]
    cells = [f"{f}: smallest k at layer {_layer(v['site'])}, axis abs cos with the readout "
             f"{r.num(pointer('sva', 'families', f, 'layers', v['site'], 'axis_cos_readout'))}, axis read at unforced layer "
             f"{_layer(v['axis_site'])}" for f, v in fams.items()]
    return "; ".join(cells) + "; the layer test tells layers apart in " + ", ".join(
        f for f, v in fams.items() if v["axis_words_differ_across_layers"]) + " (not in: " + (
        ", ".join(f for f, v in fams.items() if not v["axis_words_differ_across_layers"]) or "none") + ")"


def _ioi_cell(r: _R, result: dict[str, Any]) -> str:
    ioi = result["ioi"]
    cells = []
    for key, group in (("families", ioi["families"]), ("code_sizes", ioi.get("code_sizes", {}))):
        for f, v in group.items():
            p = ("ioi", key, f)
            name = f if key == "families" else "lm-{}-codes{}".format(*f.split(":"))
            cells.append(f"{name}: held-out k {' / '.join(r.int(pointer(*p, 'heldout_k', s, 'k')) for s in v['heldout_k'])} for codes of "
                         f"{r.int(pointer(*p, 'name_code_dims'))}, operator R² {r.num(pointer(*p, 'baselines', 'operator_r2_heldout'))} vs identity "
                         f"{r.num(pointer(*p, 'baselines', 'identity_r2'))}")
    return "; ".join(cells)


def _real_cell(r: _R, result: dict[str, Any], section: str) -> str:
    models = result["real"][section]["models"]
    cells = []
    for n, v in models.items():
        suf = [layer for layer, row in v["scan"].items() if row["sufficiency_judge"]["word"] == "reproduced"]
        beaten = [layer for layer, row in v["scan"].items() if row["logit_diff"]["core_only"]["random_beats_core"] > 0]
        cells.append(f"{n}: core only beyond every random draw at layers {', '.join(f'`{x}`' for x in suf) or 'none'}; "
                     f"random subspaces keep as much at {', '.join(f'`{x}`' for x in beaten) or 'no layer'}")
    return "; ".join(cells)


def headline(r: _R, result: dict[str, Any]) -> str:
    """study | paper | measured here | verdict, the verdicts being the JSON's words."""
    rows = []
    if result.get("markov", {}).get("seeds"):
        orth = [j["word"] for j in result["markov"].get("orthogonality_judges", {}).values()]
        rows.append(["markov", "3-D cores in nearly orthogonal subspaces, same transition spectra", _markov_cell(r, result),
                     f"spectrum: {result['markov']['verdict']}" + (f"; orthogonality: {against_all(orth)}" if orth else "")])
    if "families" in result.get("sva", {}):
        al = [v["judge"]["word"] for v in result["sva"].get("axis_alignment", {}).values()]
        rows.append(["sva", "one steerable axis, aligned across architectures", _sva_cell(r, result),
                     f"axis at an unforced layer: {result['sva']['verdict']}" + (f"; alignment: {combine(al)}" if al else "")])
    if "families" in result.get("ioi", {}):
        tc = "transfer_count" in result["ioi"]
        cnt = "/ioi/transfer_count/"
        rows.append(["ioi", "compact cores at two sites, linked by an operator that transfers across families (`6 of 12` pairs)",
                     _ioi_cell(r, result), f"k: {result['ioi']['k_verdict']}; operator: {result['ioi']['operator_verdict']}"
                     + (f"; transfer beats random operators of the same norm in {r.int(cnt + 'beat_random_operators')} of "
                        f"{r.int(cnt + 'pairs')} pairs, shuffled-prompt alignments in {r.int(cnt + 'beat_shuffled_prompts')} of "
                        f"{r.int(cnt + 'pairs')}" if tc else "")])
    real = result.get("real", {})
    for section, claim in (("sva", "one steerable axis"), ("ioi", "compact two-site cores")):
        if "models" in real.get(section, {}):
            rows.append([f"{section}, real models", claim, _real_cell(r, result, section), "per layer (table below)"])
    return _table(["study", "paper", "measured here", "verdict"], rows)


def provenance_text(r: _R, result: dict[str, Any]) -> str:
    p = result["provenance"]
    m = p["machine"]
    body = (f"Made by `{result['command']} --out docs/cores_repro.json` (budget `{result['budget']['name']}`) at commit "
            f"`{p['commit']}` on `{p['date']}`, `{m['cpu']}` with `torch_threads={m['torch_threads']}`, device `{m['device']}`: "
            f"the run took {r.num('/provenance/wall_s')} s of wall time and computed {r.int('/provenance/units_run')} of its "
            f"{r.int('/budget/units_total')} units (the others were read back from the unit store, computed by earlier runs of the same command).")
    if "timing" in result:
        body += (" Computing every unit of this budget took " + ", ".join(
            f"{r.num(pointer('timing', 'unit_seconds', k))} s ({k})" for k in result["timing"]["unit_seconds"])
            + f" when each unit ran; scaled to the `paper` budget (the sections run here only) that is about "
            f"{r.num('/timing/paper_budget_cpu_hours')} hours on this CPU.")
    if "gpu_estimate" in result["provenance"]:
        from interp.studies.gpu_estimate import bound_words

        gpu = result["provenance"]["gpu_estimate"]["models"]
        first = lambda *p: pointer("provenance", "gpu_estimate", "models", next(iter(gpu)), *p)  # noqa: E731
        body += (" *On one GPU, an estimate, not a measurement* (not timed on a GPU; `interp.studies.gpu_estimate`): each model's "
                 f"share of those hours scaled by one forward of {r.int(first('batch'))} rows of {r.int(first('seq'))} tokens timed "
                 f"here against that forward's GPU bound, {bound_words(lambda *k: r.num(first('calibration', *k)), next(iter(gpu.values()))['calibration'])}: "
                 + "; ".join(f"`{k}` {r.num(pointer('provenance', 'gpu_estimate', 'models', k, 'cpu_forward_s'))} s here, "
                             f"{r.num(pointer('provenance', 'gpu_estimate', 'models', k, 'gpu_forward_s', 0))}–{r.num(pointer('provenance', 'gpu_estimate', 'models', k, 'gpu_forward_s', 1))} s on a GPU"
                             for k in gpu)
                 + f", so about {r.num('/provenance/gpu_estimate/paper_budget_gpu_hours/0')}–{r.num('/provenance/gpu_estimate/paper_budget_gpu_hours/1')} "
                   "GPU hours for the `paper` budget.")
    return r.region(body)


def readings(r: _R, result: dict[str, Any]) -> dict[str, str]:
    out = {}
    if result.get("markov", {}).get("seeds"):
        seeds = _seeds(result)
        sp = lambda *k: [pointer("markov", "seeds", s, *k) for s in seeds]  # noqa: E731
        out["markov_reading"] = r.region(
            f"The operator fitted on the core's coordinates gives the chain's eigenvalues to {r.rng(_vals(r, sp('max_abs_error')))} "
            f"(max abs error), but so does the same least-squares fit on random 3-planes of the same site: their errors range over "
            f"{r.rng(_vals(r, sp('controls', 'random', 'min') + sp('controls', 'random', 'max')))} (means "
            f"{r.rng(_vals(r, sp('controls', 'random', 'mean')))}), PCA and class-mean codes give "
            f"{r.rng(_vals(r, sp('controls', 'pca') + sp('controls', 'class_means')))}, and the one-hot code of the current state, "
            f"with no model at all, gives {r.rng(_vals(r, sp('controls', 'state')))}: the error is the sampling error of the chain's "
            f"transitions in these rows. Any linear code of the current state carries the spectrum, so the spectrum is not evidence "
            f"for the core, and the verdict is **{result['markov']['verdict']}**. The dimension k = "
            f"{r.rng(_vals(r, sp('k')))} is what a 4-state task allows (a next-state distribution has that many free "
            f"dimensions), found where the output gradients span {r.rng(_vals(r, sp('gradient_rank')))} dimensions.")
    if "families" in result.get("sva", {}):
        fams = result["sva"]["families"]
        forced = [f for f, v in fams.items() if v["readout_judge"]["word"] == "forced"]
        parts = []
        for f, v in fams.items():
            passing = [s for s, lv in v["layers"].items() if all(j["word"] == "reproduced" for j in lv["axis"]["judges"].values())]
            parts.append(f"{f} at {', '.join(_layer(s) for s in passing) or 'no layer'}")
        out["sva_reading"] = r.region(
            "Read at every residual layer against random subspaces of the same k, the 1-D axis keeps, lowers and inverts the "
            "agreement logit difference beyond every random draw (all three words \"reproduced\") at: " + "; ".join(parts) + ". The smallest-k rule picks the last "
            "layer in " + (", ".join(f for f, v in fams.items() if v["chosen_is_last"]) or "no family") + "; there the axis is the "
            "unembedding readout (abs cos with the last layer's top output-gradient direction " +
            r.rng(_vals(r, [pointer("sva", "families", f, "layers", v["site"], "axis_cos_readout") for f, v in fams.items()])) +
            "), so the choice is forced in " + (", ".join(forced) or "no family") + ". The claim is therefore read at the layer "
            "the readout does not force, chosen among the others on the validation rows (lowest accuracy with the axis flipped): "
            + "; ".join(f"{f} at {_layer(v['axis_site'])}, words (only / removed / flipped) "
                        + " / ".join(j["word"] for j in v["layers"][v["axis_site"]]["axis"]["judges"].values()) for f, v in fams.items())
            + f", so the verdict is **{result['sva']['verdict']}**.")
    if "models" in result.get("real", {}).get("sva", {}):
        parts = []
        for n, v in result["real"]["sva"]["models"].items():
            for layer, row in v["scan"].items():
                acc = row["accuracy"]["core_only"]
                if row["sufficient"] and acc["random_mean"] > acc["core"]:
                    p = ("real", "sva", "models", n, "scan", layer, "accuracy", "core_only")
                    parts.append(f"{n} layer `{layer}` (core {r.num(pointer(*p, 'core'))}, random {r.num(pointer(*p, 'random_mean'))})")
        out["real_sva_reading"] = r.region(
            "\"Sufficient\" is read on the logit difference. On agreement accuracy, keeping only a random subspace of the same k "
            "keeps more than keeping only the core at " + ("; ".join(parts) or "no layer called sufficient") + ": there the core "
            "carries the size of the is/are preference but is not what keeps each prompt on the right side, so these layers' "
            "sufficiency is not claimed beyond the logit difference. The last layer of each model is forced by the readout and is not "
            "scanned; among the scanned layers the core is necessary at " + ("; ".join(
                f"{n} layer `{layer}`" for n, v in result["real"]["sva"]["models"].items() for layer, row in v["scan"].items()
                if row["necessary"]) or "none") + ".")
    if "families" in result.get("ioi", {}):
        ioi = result["ioi"]
        runs = [("ioi", "families", f) for f in ioi["families"]] + [("ioi", "code_sizes", k) for k in ioi.get("code_sizes", {})]
        out["ioi_reading"] = r.region(
            "The imposed name-code size was varied by retraining (" + ", ".join(
                f"`{k}`" for k in ioi.get("code_sizes", {})) + "): held-out k against code size, per model, "
            + "; ".join(f"{' / '.join(r.int(pointer(*p, 'heldout_k', s, 'k')) for s in r.data[p[0]][p[1]][p[2]]['heldout_k'])} for "
                        f"{r.int(pointer(*p, 'name_code_dims'))}" for p in runs)
            + f". Verdict on k: **{ioi['k_verdict']}**. The operator's held-out R² against the identity map (the input site's "
            "residual read in the later core): " + "; ".join(
                f"{r.num(pointer(*p, 'baselines', 'operator_r2_heldout'))} vs {r.num(pointer(*p, 'baselines', 'identity_r2'))}" for p in runs)
            + f". Verdict on the operator: **{ioi['operator_verdict']}**.")
    return out


def cores_regions(result: dict[str, Any]) -> dict[str, str]:
    """Every generated region of docs/cores.md from the study's one JSON."""
    r = _R(result)
    out = {"provenance": provenance_text(r, result), "headline": r.region(headline(r, result))}
    if "markov" in result:
        out.update(_markov(r, result["markov"]))
    if "modular" in result:
        out["modular"] = _modular(r, result["modular"])
    if "families" in result.get("sva", {}):
        out.update(_sva(r, result["sva"]))
    if "families" in result.get("ioi", {}):
        out.update(_ioi(r, result["ioi"]))
    out.update(_real(r, result.get("real", {})))
    out.update(readings(r, result))
    return out


def repro_markdown(result: dict[str, Any]) -> str:
    """The headline table (study, paper, measured here, verdict) of a result, without its keys comment."""
    return headline(_R(result), result)


def splice(markdown: str, tables: dict[str, str]) -> str:
    """Replace each ``<!-- table:NAME -->...<!-- /table -->`` block whose NAME is in `tables` (older docs)."""
    def sub(m: re.Match) -> str:
        name = m.group(1)
        return f"<!-- table:{name} -->\n{tables[name]}\n<!-- /table -->" if name in tables else m.group(0)

    return re.sub(r"<!-- table:([a-z_]+) -->\n.*?<!-- /table -->", sub, markdown, flags=re.S)

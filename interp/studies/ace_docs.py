"""The tables of docs/cores.md and docs/steering.md, rendered from the committed JSON of
`interp repro cores --json` / `interp repro steering --json`, so every number in them is one the
JSON holds (at the precision shown; tests/test_docs.py checks it).

    python -m interp.studies.ace_docs          # rewrites the marked tables in both docs

A table lives in the markdown between ``<!-- table:NAME -->`` and ``<!-- /table -->``; prose around
it is left alone.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable

from interp.storage import write_text_atomic

__all__ = ["cores_tables", "repro_markdown", "splice", "update"]

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _f(x: Any, n: int = 3) -> str:
    if x is None:
        return "–"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return str(x)
    return f"{x:.{n}f}"


def _table(head: list[str], rows: list[list[Any]]) -> str:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(c if isinstance(c, str) else _f(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def _ev(pairs: list[list[float]]) -> str:
    return ", ".join(f"{re:.3f}{im:+.3f}i" for re, im in pairs)


def _alignment_rows(pairs: dict[str, Any]) -> list[list[Any]]:
    return [[k, v["r2_heldout"], v["shuffled_mean"], v["shuffled_max"], v.get("within_label_mean"), v.get("within_label_max"),
             v.get("random_directions_mean"), v["beats_shuffled"]] for k, v in pairs.items()]


ALIGN_HEAD = ["A -> B", "held-out R²", "shuffled: mean", "shuffled: max", "within number: mean", "within number: max",
              "random directions: mean", "beats shuffled"]


def _ctl(cell: dict[str, Any]) -> str:
    """core (random mean [min, max])."""
    rng = f" [{_f(cell['random_min'])}, {_f(cell['random_max'])}]" if "random_min" in cell else ""
    return f"{_f(cell['core'])} ({_f(cell['random_mean'])}{rng})"


def _scan_rows(models: dict[str, Any]) -> list[list[Any]]:
    rows = []
    for name, m in models.items():
        for layer, v in m["scan"].items():
            ld = v["logit_diff"]
            rows.append([name, int(layer), v["k"], v["full_logit_diff"], *[_ctl(ld[k]) for k in ("core_only", "core_removed", "core_flipped")],
                         ld["core_only"].get("random_beats_core"), v["necessary"], v["sufficient"]])
    return rows


SCAN_HEAD = ["model", "layer", "k", "full", "core only (random mean [min, max])", "core removed (random)", "core flipped (random)",
             "random draws keeping as much as the core", "necessary", "sufficient"]


def _rng(values: list, n: int = 3) -> str:
    return f"{min(values):.{n}f}" if min(values) == max(values) else f"{min(values):.{n}f}-{max(values):.{n}f}"


def _layer(site: str) -> str:
    return site.split(".")[1]


def _markov_cell(m: dict[str, Any]) -> tuple[str, str]:
    seeds = {s: v for s, v in m.get("seeds", {}).items() if "k" in v}
    if not seeds:
        return "", "not run"
    c = [v["controls"] for v in seeds.values()]
    rand = [x for v in c for x in v["random"]["draws"]]
    beaten = sum(v["random_planes_beaten"] for v in seeds.values())
    text = (f"k = {_rng([v['k'] for v in seeds.values()], 0)} in {len(seeds)} seeds (fixed by the 4-state task) where the gradients span "
            f"{_rng([v['gradient_rank'] for v in seeds.values()], 0)} dims; operator eigenvalue error "
            f"{_rng([v['max_abs_error'] for v in seeds.values()])}; the same fit on random 3-planes: "
            f"{_rng(rand)} over {len(rand)} draws (mean {sum(rand) / len(rand):.3f}), on PCA {_rng([v['pca'] for v in c])}, "
            f"on the one-hot state itself {_rng([v['state'] for v in c])}; the core beats every random plane in {beaten} of {len(seeds)} seeds")
    angles = [a for v in m.get("principal_angles_rad", {}).values() for a in v]
    rp = m.get("random_planes")
    if angles and rp:
        text += (f"; cross-seed angles {min(angles):.2f}-{max(angles):.2f} rad, random 3-planes {rp['p05'][0]:.2f}-{rp['p95'][-1]:.2f} "
                 f"(5th-95th percentile)")
    return text, m["verdict"]


def _sva_cell(sva: dict[str, Any]) -> tuple[str, str]:
    cells = []
    for f, v in sva["families"].items():
        passing = [_layer(s) for s in v["layers_passing"]["axis"]]
        cells.append(f"{f}: smallest k = {v['k']} at layer {_layer(v['site'])}, axis abs cos with the readout "
                     f"{v['layers'][v['site']]['axis_cos_readout']:.3f}; 1-D axis necessary, sufficient and flipping beyond "
                     f"{sva['draws']} random draws at layers {', '.join(passing) or 'none'} of {len(v['layers'])}")
    al = sva.get("axis_alignment", {})
    if al:
        r2 = [v["r2_heldout"] for v in al.values()]
        within = [v["within_label_mean"] for v in al.values()]
        cells.append(f"axis alignment held-out R² {_rng(r2)} ({len(r2)} pairs; shuffled within one number {_rng(within)})")
    return "; ".join(cells), sva["verdict"]


def _ioi_cell(ioi: dict[str, Any]) -> tuple[str, str]:
    cells = []
    for label, v in [*ioi["families"].items(), *[(f"{k} retrained", v) for k, v in ioi.get("code_sizes", {}).items()]]:
        b = v["baselines"]
        held = ", ".join(str(h["k"]) for h in v["heldout_k"].values())
        cells.append(f"{label}: k {v['k'][0]}, {v['k'][1]} (held-out {held}; name codes {v['name_code_dims']}), operator held-out R² "
                     f"{b['operator_r2_heldout']:.3f} vs identity {b['identity_r2']:.3f}, random subspaces max {b['random_subspaces_r2']['max']:.3f}")
    tr = ioi.get("transfer", {})
    if tr:
        cells.append(f"transfer beats every shuffled-prompt control in {sum(v['beats_control'] for v in tr.values())} of {len(tr)} pairs")
    return "; ".join(cells), f"k: {ioi['k_verdict']}; operator: {ioi['operator_verdict']}"


def _real_scan_cell(section: dict[str, Any]) -> str:
    cells = []
    for name, v in section["models"].items():
        suf = [l for l, r in v["scan"].items() if r["sufficient"]]
        beaten = [l for l, r in v["scan"].items() if r["logit_diff"]["core_only"]["random_beats_core"] > 0]
        nec = [l for l, r in v["scan"].items() if r["necessary"]]
        cells.append(f"{name}: sufficient at layers {', '.join(suf) or 'none'}, necessary at {', '.join(nec) or 'none'} of "
                     f"{len(v['scan'])} ({section['n_random']} random draws; a random subspace keeps as much as the core at "
                     f"{', '.join(beaten) or 'no layer'})")
    return "; ".join(cells)


def repro_markdown(result: dict[str, Any]) -> str:
    """The repro's headline numbers beside the paper's findings, with the verdict the JSON carries."""
    out = ["| study | paper | measured here | verdict |", "|---|---|---|---|"]
    if "markov" in result:
        text, verdict = _markov_cell(result["markov"])
        out.append(f"| markov | 3-D cores in nearly orthogonal subspaces, same transition spectra | {text} | {verdict} |")
    mod = result.get("modular", {}).get("checkpoints", {})
    if mod:
        cells = [f"{label}: " + (f"k={v['k']}, frequencies {v['dominant_frequencies'][:3]}" if "k" in v else v.get("error", ""))
                 for label, v in mod.items()]
        out.append(f"| modular | compact cyclic core at grokking, then inflates | {'; '.join(cells)} | – |")
    if "families" in result.get("sva", {}):
        text, verdict = _sva_cell(result["sva"])
        out.append(f"| sva | one steerable axis, aligned across architectures | {text} | choice of layer: {verdict} |")
    if "families" in result.get("ioi", {}):
        text, verdict = _ioi_cell(result["ioi"])
        out.append(f"| ioi | compact cores at two sites, linked by an operator that transfers across families | {text} | {verdict} |")
    real = result.get("real", {})
    if "models" in real.get("sva", {}):
        al = real["sva"]["axis_alignment"]
        text = _real_scan_cell(real["sva"]) + "; axis alignment held-out R² " + ", ".join(
            f"{k} {v['r2_heldout']:.2f} (within number {v['within_label_mean']:.2f})" for k, v in al.items())
        out.append(f"| sva, real models | one steerable axis, aligned across architectures | {text} | – |")
    if "models" in real.get("ioi", {}):
        io = real["ioi"]
        fam = "; ".join(f"{n}: layers {_layer(v['sites'][0])}→{_layer(v['sites'][1])}, operator R² held-out "
                        f"{v['operator_r2_heldout_prompts']:.2f} (identity {v['baselines']['identity_r2']:.2f})" for n, v in io["models"].items())
        out.append(f"| ioi, real models | compact cores at two sites, linked by an operator that transfers across families | "
                   f"{_real_scan_cell(io)}; {fam} | – |")
    return "\n".join(out)


def cores_tables(r: dict[str, Any]) -> dict[str, str]:
    t: dict[str, str] = {"headline": repro_markdown(r)}
    m = r["markov"]
    rows = []
    for seed, v in m["seeds"].items():
        acc, c = v["validation_accuracy"], v["controls"]
        rows.append([seed, v["gradient_rank"], v["k"], f"{_f(v['spectrum'][2], 4)} / {_f(v['spectrum'][3], 4)}", _ev(v["eigenvalues"]),
                     v["max_abs_error"], max(v["split_half_angles_rad"]),
                     f"{_f(acc['full']['core'])} / {_f(acc['core_only']['core'])} / {_f(acc['core_removed']['core'])} "
                     f"({_f(acc['core_removed']['random_mean'])}) / {_f(acc['core_flipped']['core'])}"])
    t["markov_controls"] = _table(
        ["seed", "core", "random 3-planes: mean", "min", "max", "PCA", "class means", "one-hot state (no model)", "core beats every random plane"],
        [[seed, v["max_abs_error"], v["controls"]["random"]["mean"], v["controls"]["random"]["min"], v["controls"]["random"]["max"],
          v["controls"]["pca"], v["controls"]["class_means"], v["controls"]["state"], v["random_planes_beaten"]] for seed, v in m["seeds"].items()])
    t["markov_true"] = ", ".join(f"{re:.3f}{im:+.3f}i" for re, im in m["true_nonunit_eigenvalues"])
    t["markov"] = _table(["seed", "gradient rank", "k", "Hankel s3 / s4", "operator eigenvalues", "max abs error",
                          "split-half max angle (rad)", "acc: full / core only / removed (random) / flipped"], rows)
    rp = m["random_planes"]
    rows = [[pair.replace("|", " vs "), *angles] for pair, angles in m["principal_angles_rad"].items()]
    rows.append([f"random {rp['k']}-planes in {rp['d']} dims: mean", *rp["mean"]])
    rows.append(["random: 5th percentile", *rp["p05"]])
    rows.append(["random: 95th percentile", *rp["p95"]])
    t["markov_angles"] = _table(["pair", *[f"angle {i + 1} (rad)" for i in range(rp["k"])]], rows)
    rows = []
    for label, v in r["modular"]["checkpoints"].items():
        if "k" in v:
            freqs = ", ".join(f"{f} ({_f(p, 2)})" for f, p in zip(v["dominant_frequencies"], v["power_fraction"]))
            rows.append([label, v["step"], _f(v["train_acc"], 4), _f(v["test_acc"], 4), v["k"], freqs])
    t["modular"] = _table(["checkpoint", "step", "train acc", "test acc", "k", "top frequencies (share of core Fourier power)"], rows)
    rows = []
    for fam, v in r["sva"]["families"].items():
        for site, lv in v["layers"].items():
            for kind in ("core", "axis"):
                val = lv[kind]["validation"]
                rows.append([fam, lv["layer"] if kind == "core" else "", kind, lv[kind]["k"], lv["axis_cos_readout"] if kind == "axis" else "",
                             *[_ctl(val[m]["binary_accuracy"]) for m in ("core_only", "core_removed", "core_flipped")],
                             "/".join("yes" if lv[kind][x] else "no" for x in ("necessary", "sufficient", "flips"))
                             + (" (chosen)" if site == v["site"] and kind == "core" else "")])
    t["sva"] = _table(["family", "layer", "subspace", "k", "axis abs cos with the readout", "acc: core only (random mean [min, max])",
                       "core removed (random)", "core flipped (random)", "necessary / sufficient / flips"], rows)
    t["sva_layers"] = _table(["family", "chosen layer", "chosen is last", "layers told apart (core, axis)", "axis passes at",
                              "choice forced by the readout"],
                             [[fam, int(v["site"].split(".")[1]), v["chosen_is_last"],
                               f"{_f(v['layers_distinguished']['core'])}, {_f(v['layers_distinguished']['axis'])}",
                               ", ".join(s.split(".")[1] for s in v["layers_passing"]["axis"]) or "none", v["choice_forced_by_readout"]]
                              for fam, v in r["sva"]["families"].items()])
    t["sva_alignment"] = _table(ALIGN_HEAD, _alignment_rows(r["sva"]["axis_alignment"]))
    rows, base = [], []
    runs = [*r["ioi"]["families"].items(), *[(f"{k} retrained", v) for k, v in r["ioi"].get("code_sizes", {}).items()]]
    for fam, v in runs:
        held = v["heldout_names_accuracy"]
        rows.append([fam, " -> ".join(f"`{s}`" for s in v["sites"]), " -> ".join(map(str, v["k"])),
                     " -> ".join(str(h["k"]) for h in v["heldout_k"].values()), v["name_code_dims"],
                     " / ".join(_f(a) for a in v["max_angle_to_name_subspace_rad"]),
                     " / ".join(f"{_f(held[s]['full'])}, {_f(held[s]['core_flipped'])}" for s in v["sites"])])
        for label, b in (("new prompts", v["baselines"]), ("held-out names", v["baselines_heldout_names"])):
            base.append([fam, label, b["operator_r2_heldout"], b["identity_r2"], b["identity_through_core_r2"], b["shuffled_rows_r2"],
                         b["random_subspaces_r2"]["mean"], b["random_subspaces_r2"]["max"]])
    t["ioi"] = _table(["family", "sites", "k (spectral gap)", "k (held out)", "name-code dims", "max angle core vs name subspace (rad)",
                       "held-out names acc: full, core flipped (per site)"], rows)
    t["ioi_baselines"] = _table(["family", "rows", "operator R²", "identity", "identity through the input core", "shuffled-row fit",
                                 "random subspaces: mean", "random subspaces: max"], base)
    t["ioi_transfer"] = _table(
        ["A -> B", "R² after transfer", "control: mean", "control: max", "beats control", "alignment R² in", "alignment R² out"],
        [[k, v["r2_after_transfer"], v["control_mean"], v["control_max"], v["beats_control"], v["alignment_in_r2"], v["alignment_out_r2"]]
         for k, v in r["ioi"]["transfer"].items()])
    real = r.get("real", {})
    if "sva" in real:
        t["real_sva_scan"] = _table(SCAN_HEAD, _scan_rows(real["sva"]["models"]))
        t["real_sva_alignment"] = _table(ALIGN_HEAD, _alignment_rows(real["sva"]["axis_alignment"]))
    if "ioi" in real and "models" in real["ioi"]:
        io = real["ioi"]
        t["real_ioi_scan"] = _table(SCAN_HEAD, _scan_rows(io["models"]))
        t["real_ioi"] = _table(["model", "sites", "k", "operator R² fit", "held-out prompts", "held-out names", "identity (held-out prompts)",
                                "shuffled-row fit", "random subspaces: max"],
                               [[n, " -> ".join(f"`{s}`" for s in v["sites"]), " -> ".join(map(str, v["k"])), v["operator_r2_fit"],
                                 v["operator_r2_heldout_prompts"], v["operator_r2_heldout_names"], v["baselines"]["identity_r2"],
                                 v["baselines"]["shuffled_rows_r2"], v["baselines"]["random_subspaces_r2"]["max"]] for n, v in io["models"].items()])
        t["real_ioi_transfer"] = _table(
            ["A -> B", "R² after transfer", "control: mean", "control: max", "beats control", "B's own operator", "alignment R² in", "alignment R² out"],
            [[k, v["r2_after_transfer"], v["control_mean"], v["control_max"], v["beats_control"], v["own_operator_r2"],
              v["alignment_in_r2_heldout"], v["alignment_out_r2_heldout"]] for k, v in io["transfer"].items()])
    return t


def splice(markdown: str, tables: dict[str, str]) -> str:
    """Replace each ``<!-- table:NAME -->...<!-- /table -->`` block whose NAME is in `tables`."""
    def sub(m: re.Match) -> str:
        name = m.group(1)
        return f"<!-- table:{name} -->\n{tables[name]}\n<!-- /table -->" if name in tables else m.group(0)

    return re.sub(r"<!-- table:([a-z_]+) -->\n.*?<!-- /table -->", sub, markdown, flags=re.S)


def update(doc: str, render: Callable[[dict], dict[str, str]]) -> None:
    result = json.loads((DOCS / f"{doc}_repro.json").read_text())
    md = DOCS / f"{doc}.md"
    write_text_atomic(md, splice(md.read_text(), render(result)))


if __name__ == "__main__":
    update("cores", cores_tables)
    # docs/steering.md: interp.studies.steer_real.render

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

__all__ = ["cores_tables", "splice", "steering_tables", "update"]

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


def _scan_rows(models: dict[str, Any]) -> list[list[Any]]:
    rows = []
    for name, m in models.items():
        for layer, v in m["scan"].items():
            ld = v["logit_diff"]
            rows.append([name, int(layer), v["k"], v["full_logit_diff"],
                         f"{_f(ld['core_only']['core'])} ({_f(ld['core_only']['random_mean'])})",
                         f"{_f(ld['core_removed']['core'])} ({_f(ld['core_removed']['random_mean'])})",
                         f"{_f(ld['core_flipped']['core'])} ({_f(ld['core_flipped']['random_mean'])})",
                         v["necessary"], v["sufficient"]])
    return rows


SCAN_HEAD = ["model", "layer", "k", "full", "core only (random)", "core removed (random)", "core flipped (random)",
             "necessary", "sufficient"]


def cores_tables(r: dict[str, Any]) -> dict[str, str]:
    from interp.studies.cores import repro_markdown

    t: dict[str, str] = {"headline": repro_markdown(r).split("\n\nTotal")[0]}
    m = r["markov"]
    rows = []
    for seed, v in m["seeds"].items():
        acc = v["validation_accuracy"]
        rows.append([seed, v["gradient_rank"], v["k"], f"{_f(v['spectrum'][2], 4)} / {_f(v['spectrum'][3], 4)}", _ev(v["eigenvalues"]),
                     v["max_abs_error"], max(v["split_half_angles_rad"]),
                     f"{_f(acc['full']['core'])} / {_f(acc['core_only']['core'])} / {_f(acc['core_removed']['core'])} "
                     f"({_f(acc['core_removed']['random_mean'])}) / {_f(acc['core_flipped']['core'])}"])
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
        val = v["validation"]
        for metric in ("binary_accuracy", "logit_diff"):
            cell = {k: val[k][metric] for k in val}
            rows.append([fam, f"`{v['site']}`", v["k"], metric, cell["full"]["core"],
                         *[f"{_f(cell[k]['core'])} ({_f(cell[k]['random_mean'])})" for k in ("core_only", "core_removed", "core_flipped")]])
    t["sva"] = _table(["family", "site", "k", "metric", "full", "core only (random)", "core removed (random)", "core flipped (random)"], rows)
    t["sva_alignment"] = _table(ALIGN_HEAD, _alignment_rows(r["sva"]["axis_alignment"]))
    rows = []
    for fam, v in r["ioi"]["families"].items():
        held = v["heldout_names_accuracy"]
        rows.append([fam, " -> ".join(f"`{s}`" for s in v["sites"]), " -> ".join(map(str, v["k"])), v["name_code_dims"],
                     " / ".join(_f(a) for a in v["max_angle_to_name_subspace_rad"]), v["operator_r2_fit"], v["operator_r2_heldout"],
                     v["operator_r2_heldout_names"],
                     " / ".join(f"{_f(held[s]['full'])}, {_f(held[s]['core_flipped'])}" for s in v["sites"])])
    t["ioi"] = _table(["family", "sites", "k", "name-code dims", "max angle core vs name subspace (rad)", "operator R² fit",
                       "held-out prompts", "held-out names", "held-out names acc: full, core flipped (per site)"], rows)
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
        t["real_ioi"] = _table(["model", "sites", "k", "operator R² fit", "held-out prompts", "held-out names"],
                               [[n, " -> ".join(f"`{s}`" for s in v["sites"]), " -> ".join(map(str, v["k"])), v["operator_r2_fit"],
                                 v["operator_r2_heldout_prompts"], v["operator_r2_heldout_names"]] for n, v in io["models"].items()])
        t["real_ioi_transfer"] = _table(
            ["A -> B", "R² after transfer", "control: mean", "control: max", "beats control", "B's own operator", "alignment R² in", "alignment R² out"],
            [[k, v["r2_after_transfer"], v["control_mean"], v["control_max"], v["beats_control"], v["own_operator_r2"],
              v["alignment_in_r2_heldout"], v["alignment_out_r2_heldout"]] for k, v in io["transfer"].items()])
    return t


def steering_tables(r: dict[str, Any]) -> dict[str, str]:
    t: dict[str, str] = {}
    rows = [[fam, f"`{v['site']}`", v["n"], v["core_flip_rate"], v["core_grammatical_rate"], v["random_flip_control_rate"],
             v["random_flip_control_max"], v["control_flip_rate"], v["control_grammatical_rate"], v["diff_means_flip_rate"],
             v["core_cosine"], v["unsteered_agree_rate"]] for fam, v in r["families"].items()]
    t["zoo"] = _table(["family", "site", "n", "core flip rate", "core grammatical", "random flip (mean of 3)", "random flip (max)",
                       "random add, equal norm", "random add grammatical", "diff-of-means flip rate (comparison)",
                       "abs cos(core, diff)", "unsteered agree"], rows)
    t["zoo_sites"] = _table(["family", *[f"L{i}" for i in range(1, 4)]],
                            [[fam, *[v["site_generation_scores"].get(f"blocks.{i}.hook_resid_pre") for i in range(1, 4)]]
                             for fam, v in r["families"].items()])
    if "core_axis_alignment" in r:
        t["zoo_alignment"] = _table(ALIGN_HEAD, _alignment_rows(r["core_axis_alignment"]))
    rows = []
    for name, v in r.get("real", {}).items():
        for run in ("unsteered", "core_flip", "random_flip", "random_add", "diff_means_flip"):
            x = v[run]
            rows.append([name, run.replace("_", " "), x["verb_judged"], x["verb_agree"], x["verb_flip"], x["pronoun_judged"],
                         x["pronoun_agree"], x["pronoun_flip"]])
    if rows:
        t["real"] = _table(["model", "run", "verb judged", "verb agrees", "verb flipped", "pronoun judged", "pronoun agrees",
                            "pronoun flipped"], rows)
        t["real_sites"] = _table(["model", "site", "prompts", "dev verb flip per candidate layer", "abs cos(core, diff)", "flip displacement"],
                                 [[n, f"`{v['site']}`", v["n_prompts"], ", ".join(f"L{k}: {_f(s)}" for k, s in v["dev_verb_flip"].items()),
                                   v["core_cosine_diff_means"], v["displacement"]] for n, v in r["real"].items()])
    return t


def examples(r: dict[str, Any]) -> str:
    """The real-model continuations as a list (free text, not a table)."""
    def one_line(text: str) -> str:
        return " ↵ ".join(part.strip() for part in text.strip().split("\n") if part.strip())

    out = []
    for name, v in r.get("real", {}).items():
        for e in v["examples"]:
            out.append(f"* {name}, *{e['prompt']}* ({e['number']}): unsteered “{one_line(e['unsteered'])}” · core flipped "
                       f"“{one_line(e['core_flip'])}” · random flip “{one_line(e['random_flip'])}”")
    return "\n".join(out)


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
    update("steering", lambda r: {**steering_tables(r), "real_examples": examples(r)})

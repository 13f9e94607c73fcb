"""docs/illusions.md's generated regions, rendered from one `interp repro illusions` JSON.

Every number goes through `interp.studies.docs.Render`, so each names its JSON key and
tests/test_docs.py checks it (and fails when the JSON changes and the doc does not). Labels that
hold digits (`SVD rank 4`, `dyck seed 1`) are code spans, so they are not read as numbers.
"""

from __future__ import annotations

from typing import Any

from interp.studies.docs import Render, pointer
from interp.studies.gpu_estimate import calibration_words

__all__ = ["regions"]


def _label(r: dict[str, Any]) -> str:
    return {"svd": "SVD rank {rank}", "kmeans": "k-means k={k}", "onehot": "one-hot"}[r["method"]].format(rank=r["rank"], k=r["k"])


def _p(r: Render, ptr: str, data: dict) -> str:
    from interp.studies.docs import get

    return "—" if get(data, ptr) is None else r.num(ptr)


def _run(r: Render, d: dict) -> str:
    prov, b = "/provenance", "/budget"
    models = ", ".join(f"`{k}`" for k in d["models"])
    lines = [f"Budget `{d['budget']['name']}`: {r.num(b + '/paper_fraction')} of the paper budget, "
             f"{r.int(b + '/units_done')} of {r.int(b + '/units_total')} units; models {models}. "
             f"Run `{d['provenance']['date']}` in {r.num(prov + '/wall_s')} s ({r.int(prov + '/units_run')} units computed "
             f"by this run, the rest read back), on `{d['provenance']['machine']['cpu']}` with "
             f"{r.int(prov + '/machine/cpus')} CPUs and {r.int(prov + '/machine/torch_threads')} torch threads, "
             f"commit `{d['provenance']['commit']}`."]
    trained = [k for k, m in d["models"].items() if m["training"] and "retrained" in m["training"]["source"]]
    if trained:
        lines.append("Training the retrained seeds (as stored in their cards): " + "; ".join(
            f"`{k}` {r.num(pointer('models', k, 'training', 'train_s'))} s" for k in trained) + ".")
    units = [k for k in d["provenance"].get("units_s", {}) if not k.startswith("train")]
    if units:
        lines.append("Each simplifier unit's compute: " + "; ".join(
            f"`{k}` {r.num(pointer('provenance', 'units_s', k))} s" for k in units) + ".")
    return r.region("\n\n".join(lines))


def _budgets(r: Render, d: dict) -> str:
    cols = [("seeds", "seeds"), ("steps", "training steps"), ("fit", "fit sequences"), ("rows", "sequences per split"),
            ("boot", "bootstrap resamples"), ("ranks", "SVD ranks"), ("ks", "k-means ks")]
    out = ["| budget | " + " | ".join(c for _, c in cols) + " | step profile |", "|---|" + "---|" * (len(cols) + 1)]
    for name, values in d["budgets"].items():
        cells = []
        for key, _ in cols:
            v = values[key]
            cells.append(", ".join(r.int(pointer("budgets", name, key, i)) for i in range(len(v))) if isinstance(v, list)
                         else r.int(pointer("budgets", name, key)))
        out.append(f"| `{name}` | " + " | ".join(cells) + f" | {'yes' if values.get('profile') else 'no'} |")
    return r.region("\n".join(out))


def _timing(r: Render, d: dict) -> str:
    t = d["provenance"].get("step_profile")
    if t is None:
        return r.region("This run did not profile a training step (budget key `profile`).")
    p = "/provenance/step_profile"
    return r.region(
        f"One training step of the recipe took {r.num(p + '/cpu_s_per_step')} s on this machine while the run was "
        f"going ({r.num(p + '/cpu_s_per_seed')} s for the {r.int(p + '/steps_per_seed')} steps of a seed at that rate) and "
        f"runs {r.int(p + '/ops_per_step')} torch operations (torch profiler). *GPU: an estimate, not a measurement "
        f"(not timed on a GPU).* A model this small is bound by the host-side cost of those operations; "
        f"at {calibration_words(lambda *k: r.num(pointer('provenance', 'step_profile', 'calibration', *k)), d['provenance']['step_profile']['calibration'])}, "
        "a seed trains in "
        f"{r.num(p + '/gpu_estimate_s_per_seed/0')}–{r.num(p + '/gpu_estimate_s_per_seed/1')} s, and the evaluation "
        "units are bound in the same way (a plain Hugging Face training step may cost less per op than a bridge "
        "forward, so this likely errs high).")



def _summary(r: Render, d: dict) -> str:
    cells = d["across_seeds"]["cells"]
    splits = list(next(iter(d["models"].values()))["original"])
    out = [f"Across the {r.int('/across_seeds/n_models')} models, each cell: same-prediction mean [min, max] "
           "(original: accuracy).", "", "| simplifier | " + " | ".join(splits) + " |", "|---|" + "---|" * len(splits)]
    for label, by_split in cells.items():
        q = "accuracy" if label == "original" else "same_prediction"
        row = []
        for s in splits:
            if by_split.get(s, {}).get(q) is None:
                row.append("—")
                continue
            base = pointer("across_seeds", "cells", label, s, q)
            row.append(f"{r.num(base + '/mean')} [{r.num(base + '/min')}, {r.num(base + '/max')}]")
        out.append(f"| `{label}` | " + " | ".join(row) + " |")
    return r.region("\n".join(out))


def _claims(r: Render, d: dict) -> str:
    c = d["claims"]
    out = ["| the paper's claim | per model | verdict |", "|---|---|---|"]
    rows = [("svd4_faithful_in_distribution", "same-prediction on seen_struct [CI] against the threshold {t}",
             lambda base: f"{r.num(base + '/effect')} [{r.num(base + '/effect_ci/0')}, {r.num(base + '/effect_ci/1')}]"),
            ("svd4_deviates_on_structure", "same-prediction unseen_struct vs seen_struct, gap [CI]",
             lambda base: f"{r.num(base + '/effect')} vs {r.num(base + '/control')}, "
                          f"[{r.num(base + '/diff_ci/0')}, {r.num(base + '/diff_ci/1')}]"),
            ("onehot_above_original_on_depth", "accuracy one-hot vs original on unseen_depth, difference [CI]",
             lambda base: f"{r.num(base + '/effect')} vs {r.num(base + '/control')}, "
                          f"[{r.num(base + '/diff_ci/0')}, {r.num(base + '/diff_ci/1')}]")]
    for key, what, cell in rows:
        what = what.format(t=r.num("/claims/id_faithful")) if "{t}" in what else what
        per = "; ".join(f"`{p['model']}`: {cell(pointer('claims', key, 'per_model', i))}" for i, p in enumerate(c[key]["per_model"]))
        out.append(f"| {c[key]['claim']} ({what}) | {per} | {r.text(pointer('claims', key, 'word'))} |")
    if "onehot_faithful_structure" in c:
        base = pointer("claims", "onehot_faithful_structure")
        cells = []
        for i, p in enumerate(c["onehot_faithful_structure"]["per_model"]):
            b = f"{base}/per_model/{i}"
            control = (f"random {r.num(b + '/control')} [{r.num(b + '/control_ci/0')}, {r.num(b + '/control_ci/1')}]"
                       if p["null"] == "random scores" else f"threshold {r.num(b + '/control')}")
            cells.append(f"`{p['model']}` {p['split']}: {r.num(b + '/effect')} [{r.num(b + '/effect_ci/0')}, "
                         f"{r.num(b + '/effect_ci/1')}] vs {control} ({r.text(b + '/word')})")
        out.append(f"| {c['onehot_faithful_structure']['claim']} (one-hot same-prediction [CI] against random one-hot "
                   f"attention [min, max of {r.int(pointer('models', c['onehot_faithful_structure']['per_model'][0]['model'], 'onehot_random', 'draws'))} "
                   f"draws] and against the threshold) | {'; '.join(cells)} | {r.text(base + '/word')} |")
    for key in ("code_java_vs_unseen", "code_repeated_word"):
        if key in c:
            per = "; ".join(f"{lang}: {r.text(pointer('claims', key, 'per_language', lang, 'word'))}" for lang in c[key]["per_language"])
            out.append(f"| {c[key]['claim']} (the code model, below) | {per} | {r.text(pointer('claims', key, 'word'))} |")
    per = "; ".join(f"`{o['model']}`: {r.num(pointer('claims', 'original_on_structure', i, 'seen_struct'))} → "
                    f"{r.num(pointer('claims', 'original_on_structure', i, 'unseen_struct'))}"
                    for i, o in enumerate(c["original_on_structure"]))
    out.append(f"| the original generalises almost perfectly to unseen structures (accuracy seen → unseen) | {per} | "
               "set-up, no verdict |")
    return r.region("\n".join(out))


def _gaps(r: Render, d: dict) -> str:
    c = d["claims"]
    out = ["Same-prediction gap against seen_struct for every data-fitted proxy, per model: in-distribution "
           "same-prediction → gap [CI]. A drop: the gap's interval lies below zero. Faithful in distribution: "
           f"same-prediction at least {r.num('/claims/id_faithful')}. The paper claims the drop on unseen "
           "structures only, so the depth rows carry no verdict.", "",
           "| split | proxy | per model | models with a drop | models faithful in distribution |", "|---|---|---|---|---|"]
    for split, proxies in c["gaps"].items():
        for label, row in proxies.items():
            base = pointer("claims", "gaps", split, label)
            per = "; ".join(f"`{row['per_model'][i]['model']}` {r.num(f'{base}/per_model/{i}/id_same_prediction')} → {r.num(f'{base}/per_model/{i}/gap')} "
                            f"[{r.num(f'{base}/per_model/{i}/gap_ci/0')}, {r.num(f'{base}/per_model/{i}/gap_ci/1')}]"
                            for i in range(len(row["per_model"])))
            out.append(f"| {split} | `{label}` | {per} | {r.int(base + '/models_with_drop')} | "
                       f"{r.int(base + '/models_faithful_id')} |")
    return r.region("\n".join(out))


def _model(r: Render, spec: str, m: dict) -> list[str]:
    splits, base = list(m["original"]), pointer("models", spec)
    out = [f"#### `{spec}`: {r.int(base + '/fit/sequences')} fit sequences, {r.int(base + '/eval/sequences_per_split')} per split",
           "", "Each cell: accuracy / same-prediction / JS (bits).", "",
           "| simplifier | " + " | ".join(splits) + " |", "|---|" + "---|" * len(splits),
           "| original | " + " | ".join(f"{r.num(f'{base}/original/{s}')} / — / —" for s in splits) + " |"]
    rows: dict[str, dict[str, str]] = {}
    for i, rec in enumerate(m["simplified"]):
        p = f"{base}/simplified/{i}"
        # a JS below float noise is shown as a bound, not a number (1 % of 1e-9 is below what a check can see)
        js = "`<1e-6`" if abs(rec["js"]) < 1e-6 else r.num(p + "/js")
        rows.setdefault(_label(rec), {})[rec["split"]] = f"{r.num(p + '/accuracy')} / {r.num(p + '/same_prediction')} / {js}"
    out += [f"| `{label}` | " + " | ".join(cells.get(s, "—") for s in splits) + " |" for label, cells in rows.items()]
    out += ["", "Paired gaps against seen_struct (two-sided bootstrap p over sequences):", "",
            "| split | `SVD rank 4`: same-prediction gap (p) | `SVD rank 4`: accuracy gap (p) | one-hot − original accuracy [CI] (p) |",
            "|---|---|---|---|"]
    for s in m["findings"]:
        f = f"{base}/findings/{s}"
        out.append(f"| {s} | {r.num(f + '/svd4_same_prediction_gap')} ({_p(r, f + '/svd4_same_prediction_gap_p', r.data)}) | "
                   f"{r.num(f + '/svd4_delta_gap')} ({_p(r, f + '/svd4_delta_gap_p', r.data)}) | "
                   f"{r.num(f + '/onehot_minus_original')} [{r.num(f + '/onehot_minus_original_ci/0')}, "
                   f"{r.num(f + '/onehot_minus_original_ci/1')}] ({_p(r, f + '/onehot_minus_original_p', r.data)}) |")
    return out + [""]


def _small_p(r: Render, ptr: str, p: float) -> str:
    """A p-value, or a bound below 1e-4 (a 1 % change of a p near 1e-8 is below what a check can see)."""
    return "`<1e-4`" if p < 1e-4 else r.num(ptr)


def _code(r: Render, d: dict) -> str:
    c = d.get("code")
    if c is None:
        return r.region("This run has no code experiment (its budget's `code_steps` is `0`, or the run predates it).")
    m, t = c["model"], c["training"]
    langs = list(c["eval"]["accuracy"])
    out = [f"Model: character-level GPT-2, {r.int('/code/model/n_layers')} layers, d_model {r.int('/code/model/d_model')}, "
           f"{r.int('/code/model/n_heads')} heads, {r.int('/code/model/n_ctx')} characters of context, trained "
           f"{r.int('/code/training/steps')} steps of {r.int('/code/training/chars_per_step')} characters (AdamW, lr "
           f"{r.num('/code/training/lr')}, cosine) on {r.int('/code/corpus/python_train/files')} standard-library files in "
           f"{r.num('/code/training/train_s')} s; loss {r.num('/code/training/loss_curve/0')} → "
           f"{r.num(pointer('code', 'training', 'loss_curve', len(t['loss_curve']) - 1))} (mean of the first and last "
           "twentieth of training). Each head on its own: rank "
           f"{r.int('/code/rank')} SVD fitted on {r.int('/code/eval/fit_vectors')} training positions, and "
           f"{r.int('/code/draws')} random projections of the same rank through the same means.", "",
           "| language | files | windows | original's next-character accuracy | repeated-word positions | SVD similarity, all / repeated-word / other (mean over heads) | random projections, all (mean) |",
           "|---|---|---|---|---|---|---|"]
    for lang in langs:
        b = pointer("code", "means", lang)
        out.append(f"| {lang} | {r.int(pointer('code', 'corpus', lang, 'files'))} | {r.int(pointer('code', 'eval', 'windows', lang))} | "
                   f"{r.num(pointer('code', 'eval', 'accuracy', lang))} | {r.int(pointer('code', 'eval', 'repeated_positions', lang))} | "
                   f"{r.num(b + '/svd/all')} / {r.num(b + '/svd/repeated')} / {r.num(b + '/svd/other')} | {r.num(b + '/random_all')} |")
    out += ["", "Verdicts, per unseen language, paired over the heads (effect vs control, interval of the difference, "
            "paired t-test p):", "", "| language | judgement | effect vs control | interval [level] | p | word |", "|---|---|---|---|---|---|"]
    claims = d["claims"]
    for lang in claims["code_java_vs_unseen"]["per_language"]:
        for key in ("code_java_vs_unseen", "code_repeated_word"):
            for i, j in enumerate(claims[key]["per_language"][lang]["claims"]):
                b = pointer("claims", key, "per_language", lang, "claims", i)
                out.append(f"| {lang} | `{j['claim_text']}` | {r.num(b + '/effect')} vs {r.num(b + '/control')} | "
                           f"[{r.num(b + '/diff_ci/0')}, {r.num(b + '/diff_ci/1')}] [{r.num(b + '/ci_level')}] | "
                           f"{_small_p(r, b + '/paired_t_p', j['paired_t_p'])} | {r.text(b + '/word')} |")
    out += ["", "The head with the largest repeated-word gap per language, chosen after the fact as the paper's one head "
            "was (description, no verdict; the paper: `0.75 on Java vs 0.61 unseen at rank 16`): " + "; ".join(
                f"{lang} `L{v['head'][0]}H{v['head'][1]}` "
                f"{r.num(pointer('code', 'largest_repeated_gap_head', lang, 'python'))} on Python vs "
                f"{r.num(pointer('code', 'largest_repeated_gap_head', lang, lang))}"
                for lang, v in c["largest_repeated_gap_head"].items()) + "."]
    return r.region("\n".join(out))


def regions(result: dict[str, Any]) -> dict[str, str]:
    """The doc's generated regions (name -> body with its keys comment) for one `repro` result."""
    r = Render(result)
    out = {"budgets": _budgets(r, result), "run": _run(r, result), "timing": _timing(r, result), "summary": _summary(r, result), "claims": _claims(r, result), "gaps": _gaps(r, result), "code": _code(r, result)}
    lines: list[str] = []
    for spec, m in result["models"].items():
        lines += _model(r, spec, m)
    out["models"] = r.region("\n".join(lines).rstrip())
    return out

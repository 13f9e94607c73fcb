"""docs/heuristic_core.md's generated regions, rendered from the study's one JSON with every number
bound to its key (`interp.studies.docs.Render`): `write_doc("docs/heuristic_core.md",
"docs/heuristic_core_repro.json")`.

Regions: ``hc-paper`` (the paper's numbers), ``hc-budget`` (budget and provenance), ``hc-results``
(per model: the per-sparsity table, every mask, the verdicts), ``hc-timing`` (measured rate, CPU
hours, GPU estimate), ``hc-reading`` (the first zoo model's claims in words), ``hc-mechanism`` (the
core's emergence over training and whether the generalizing masks' extra heads read it).
"""

from __future__ import annotations

from typing import Any

from interp.studies.docs import Render, pointer

__all__ = ["regions"]


def _range(r: Render, *at: Any) -> str:
    base = pointer(*at)
    return f"{r.num(base + '/mean')} [{r.num(base + '/min')}, {r.num(base + '/max')}]"


def _paper(r: Render) -> str:
    return "\n".join([
        "| the paper (BERT-base) | in distribution (MNLI) | out of distribution (HANS non-entailment) |",
        "|---|---|---|",
        f"| full model | — | {r.num('/paper/full_model_hans')} |",
        f"| subnetworks at sparsity {r.num('/paper/sparsity')} | {r.num('/paper/subnetworks_50_mnli/0')}–"
        f"{r.num('/paper/subnetworks_50_mnli/1')} | {r.num('/paper/subnetworks_50_hans/0')}–{r.num('/paper/subnetworks_50_hans/1')} |",
    ])


def _budget(r: Render, data: dict[str, Any]) -> str:
    prov = data["provenance"]
    return (f"Budget `{data['budget']['name']}`: {r.int('/budget/units_done')} of {r.int('/budget/units_total')} masks stored; "
            f"on the zoo, steps × rows per step are {r.num('/budget/paper_fraction')} of the paper's {r.int('/paper/steps')} × "
            f"{r.int('/paper/batch_size')}. Aggregated on `{prov['machine']['cpu']}` with {r.int('/provenance/machine/torch_threads')} "
            f"torch thread(s), `{prov['date']}`, commit `{prov['commit']}`, in {r.num('/provenance/wall_s')} s (this run learned "
            f"{r.int('/provenance/units_run')} of the masks; the rest were read from the unit store).")


def _model(r: Render, data: dict[str, Any], spec: str) -> list[str]:
    m = data["models"][spec]
    at = ("models", spec)
    out = [f"#### `{spec}`\n"]
    if "sparsities" not in m:
        return out + [f"No mask stored yet: {r.int(pointer(*at, 'units_done'))} of {r.int(pointer(*at, 'units_total'))}.\n"]
    idk, oodk = m["id_split"], m["ood_split"]
    line = (f"`{m['recipe']}` recipe, {r.int(pointer(*at, 'steps'))} steps ({m['schedule']}), batch {r.int(pointer(*at, 'batch_size'))}, "
            f"{r.int(pointer(*at, 'rows'))} rows per split. Full model: `{idk}` {r.num(pointer(*at, 'full', idk))}, `{oodk}` "
            f"{r.num(pointer(*at, 'full', oodk))}")
    if "nearest_noun_heuristic" in m:
        line += (f"; the nearest-noun heuristic scores {r.num(pointer(*at, 'nearest_noun_heuristic', idk))} / "
                 f"{r.num(pointer(*at, 'nearest_noun_heuristic', oodk))}")
    out += [line + ".\n",
            f"| target sparsity | masks done / planned | distinct (duplicates) | achieved sparsity, mean [min, max] | `{idk}` | `{oodk}` "
            f"| random masks matched / drawn | matched random, `{oodk}` | core units | chance core, mean (5th–95th pct) | p | core alone: ID / OOD |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for key, s in m["sparsities"].items():
        sp = (*at, "sparsities", key)
        target = f"`{key}`"
        if not s["done"]:
            out.append(f"| {target} | {r.int(pointer(*sp, 'done'))} / {r.int(pointer(*sp, 'planned'))} | — | — | — | — | — | — | — | — | — | — |")
            continue
        c, ctl = (*sp, "core"), (*sp, "random_control")
        cells = [target, f"{r.int(pointer(*sp, 'done'))} / {r.int(pointer(*sp, 'planned'))}",
                 f"{r.int(pointer(*sp, 'distinct'))} ({r.int(pointer(*sp, 'duplicate_count'))})",
                 _range(r, *sp, "achieved_sparsity"), _range(r, *sp, "id"), _range(r, *sp, "ood"),
                 f"{r.int(pointer(*ctl, 'matched'))} / {r.int(pointer(*ctl, 'draws'))}"]
        cells.append(_range(r, *ctl, "matched_ood") if s["random_control"]["matched_ood"] else "—")
        cells += [r.int(pointer(*c, "units")),
                  f"{r.num(pointer(*c, 'chance_units_mean'))} ({r.num(pointer(*c, 'chance_units_q05'))}–{r.num(pointer(*c, 'chance_units_q95'))})",
                  r.num(pointer(*c, "p_value")), f"{r.num(pointer(*c, 'alone', idk))} / {r.num(pointer(*c, 'alone', oodk))}"]
        out.append("| " + " | ".join(cells) + " |")
    out += ["", f"| target | seed | achieved sparsity | within tolerance | `{idk}` | `{oodk}` | final KL |", "|---|---|---|---|---|---|---|"]
    for i, k in enumerate(m["masks"]):
        mk = (*at, "masks", i)
        out.append(f"| {r.num(pointer(*mk, 'sparsity'))} | {r.int(pointer(*mk, 'seed'))} | {r.num(pointer(*mk, 'achieved_sparsity'))} | "
                   f"{'yes' if k['within_tolerance'] else '**no**'} | {r.num(pointer(*mk, 'accuracy', idk))} | "
                   f"{r.num(pointer(*mk, 'accuracy', oodk))} | {r.num(pointer(*mk, 'final_kl'))} |")
    out.append("")
    for name, v in m.get("verdicts", {}).items():
        if "word" not in v:  # description kept beside the verdicts (the full-model comparison): no word
            continue
        if "effect" not in v:  # a claim made of the judged ones above it (both at once)
            out.append(f"- {v['label']}: **{r.text(pointer(*at, 'verdicts', name, 'word'))}**")
            continue
        vp = (*at, "verdicts", name)
        nums = "" if v["effect"] is None else f" ({r.num(pointer(*vp, 'effect'))} against {r.num(pointer(*vp, 'control'))}" + (
            f", control interval {r.num(pointer(*vp, 'control_ci', 0))}–{r.num(pointer(*vp, 'control_ci', 1))})" if "control_ci" in v else ")")
        out.append(f"- {v['claim_text'].split(' (')[0]}: **{r.text(pointer(*vp, 'word'))}**{nums}")
    out.append("")
    return out


def _timing(r: Render, data: dict[str, Any]) -> str:
    t = data["timing"]
    out = ["| model | seed-steps in the budget | measured s per seed-step here | CPU hours, this CPU (measured rate) | GPU hours (estimate) |",
           "|---|---|---|---|---|"]
    for spec, row in t["per_model"].items():
        rate = data["models"][spec].get("seconds_per_seed_step")
        cells = [r.int(pointer("timing", "per_model", spec, "seed_steps")),
                 "—" if rate is None else r.num(pointer("models", spec, "seconds_per_seed_step")),
                 "—" if row["cpu_hours"] is None else r.num(pointer("timing", "per_model", spec, "cpu_hours")),
                 "—" if row["gpu_hours_estimate"] is None else
                 f"{r.num(pointer('timing', 'per_model', spec, 'gpu_hours_range', 0))}–{r.num(pointer('timing', 'per_model', spec, 'gpu_hours_range', 1))}"
                 if "gpu_hours_range" in row else r.num(pointer("timing", "per_model", spec, "gpu_hours_estimate"))]
        out.append(f"| `{spec}` | " + " | ".join(cells) + " |")
    from interp.studies.gpu_estimate import bound_words, calibration_words

    if t.get("host_step_ops") is not None:
        out.append(f"\nThe GPU column is an estimate, not a measurement: a step of these 4-layer models on a GPU is bound by "
                   f"its host-side work (Python, hooks, optimizer, launches): {r.int('/timing/host_step_ops/ops')} torch ops a "
                   f"step on one row (counted here on `{t['host_step_ops']['model']}`) at "
                   f"{calibration_words(lambda *k: r.num(pointer('timing', 'calibration', *k)), t['calibration'])}, times the "
                   f"steps of each batched group of seeds. This CPU does the same step in {r.num('/timing/host_step_s')} s.")
    elif t["host_step_s"] is not None:
        out.append(f"\nThe GPU column is an estimate, not a measurement: a step of these 4-layer models on a GPU is bound by "
                   f"its host-side work (Python, hooks, optimizer, launches), measured here as {r.num('/timing/host_step_s')} s "
                   "a step on one row, times the steps of each batched group of seeds.")

    for spec in t.get("profiles", {}):
        q = lambda *k: r.num(pointer("timing", "profiles", spec, *k))  # noqa: E731
        out.append(f"\n`{spec}` is not host-bound: its GPU hours are its CPU hours scaled by one forward of a batch "
                   f"({r.int(pointer('timing', 'profiles', spec, 'batch'))} rows of {r.int(pointer('timing', 'profiles', spec, 'seq'))} "
                   f"tokens) timed here, {q('cpu_forward_s')} s, against that forward's GPU bound, {q('gpu_forward_s', 0)}–"
                   f"{q('gpu_forward_s', 1)} s ({bound_words(lambda *k: q('calibration', *k), t['profiles'][spec]['calibration'])}; "
                   "`interp.studies.gpu_estimate`).")
    return "\n".join(out)


def _reading(r: Render, data: dict[str, Any]) -> str:
    """Sentences on the first zoo model at the paper's sparsity, worded from the verdicts."""
    zoo = [s for s in data["models"] if s.startswith("zoo:") and "sparsities" in data["models"][s]]
    key = f"{data['paper']['sparsity']:g}"
    if not zoo or not data["models"][zoo[0]]["sparsities"].get(key, {}).get("done"):
        return "No zoo mask at the paper's sparsity is stored yet, so no claim is read."
    spec = zoo[0]
    m, at = data["models"][spec], ("models", zoo[0])
    s, sp = m["sparsities"][key], (*at, "sparsities", key)
    idk, oodk = m["id_split"], m["ood_split"]
    off = len(s["off_target"])
    out = [f"On `{spec}` at target sparsity `{key}`, {r.int(pointer(*sp, 'done'))} masks of the official recipe at the paper's "
           f"schedule switch off {r.num(pointer(*sp, 'achieved_sparsity', 'min'))}–{r.num(pointer(*sp, 'achieved_sparsity', 'max'))} "
           f"of the units: " + ("every one within the tolerance of its target." if not off else
                                "not all within the tolerance of their target (the per-mask table names them).")]
    out.append(f"In distribution the {r.int(pointer(*sp, 'distinct'))} distinct masks score {r.num(pointer(*sp, 'id', 'min'))}–"
               f"{r.num(pointer(*sp, 'id', 'max'))}, out of distribution {r.num(pointer(*sp, 'ood', 'min'))}–{r.num(pointer(*sp, 'ood', 'max'))}: "
               "the paper's pattern of subnetworks alike in distribution and apart out of it. Random masks with the same per-layer "
               f"counts whose ID accuracy falls in the same window ({r.int(pointer(*sp, 'random_control', 'matched'))} of "
               f"{r.int(pointer(*sp, 'random_control', 'draws'))}) score {r.num(pointer(*sp, 'random_control', 'matched_ood', 'min'))}–"
               f"{r.num(pointer(*sp, 'random_control', 'matched_ood', 'max'))} out of distribution, so the learned spread against that "
               f"control is **{r.text(pointer(*at, 'verdicts', 'spread', 'word'))}**.")
    out.append(f"The core (units in every distinct mask) keeps {r.int(pointer(*sp, 'core', 'units'))} units, against "
               f"{r.num(pointer(*sp, 'core', 'chance_units_mean'))} on average for the cores of random masks of the same per-layer sizes "
               f"(p = {r.num(pointer(*sp, 'core', 'p_value'))}): a core larger than chance is **{r.text(pointer(*at, 'verdicts', 'core', 'word'))}**.")
    out.append(f"Kept alone, the core scores {r.num(pointer(*sp, 'core', 'alone', idk))} in distribution"
               + (f" (the nearest-noun heuristic: {r.num(pointer(*at, 'nearest_noun_heuristic', idk))})" if "nearest_noun_heuristic" in m else "")
               + f" and {r.num(pointer(*sp, 'core', 'alone', oodk))} out of distribution (the full model scores "
               f"{r.num(pointer(*at, 'full', oodk))} there: a comparison without a word, since units of the core's size all fall short "
               f"of it). Random units of the core's own per-layer sizes, kept alone, reach "
               f"{r.num(pointer(*sp, 'core', 'size_matched_alone', idk, 'median'))} in distribution (median; 5th–95th percentile "
               f"{r.num(pointer(*sp, 'core', 'size_matched_alone', idk, 'q05'))}–{r.num(pointer(*sp, 'core', 'size_matched_alone', idk, 'q95'))}), so "
               f"a core carrying in-distribution behaviour beyond units of its size is **{r.text(pointer(*at, 'verdicts', 'core_id', 'word'))}**; "
               f"out of distribution they reach {r.num(pointer(*sp, 'core', 'size_matched_alone', oodk, 'median'))} "
               f"({r.num(pointer(*sp, 'core', 'size_matched_alone', oodk, 'q05'))}–{r.num(pointer(*sp, 'core', 'size_matched_alone', oodk, 'q95'))}), "
               f"so a core that fails out of distribution beyond units of its size is "
               f"**{r.text(pointer(*at, 'verdicts', 'core_ood', 'word'))}**. "
               f"(The cores of random masks, mostly smaller, reach {r.num(pointer(*sp, 'core', 'random_alone', idk, 'median'))}: "
               f"a weaker control, reported, not judged.)")
    return " ".join(out)


def _emergence(r: Render, e: dict[str, Any] | None) -> str:
    if not e or "checkpoints" not in e:
        return "Emergence over training: not run in this budget (no checkpoints trained or stored)."
    at = ("emergence",)
    v = e["verdict"]
    heads = ", ".join(f"`({layer}, {h})`" for layer, h in e["core_heads"]) or "none"
    out = [f"Emergence over training: `{e['recipe']}` retrained by its own recipe with a checkpoint every {r.int('/emergence/every')} "
           f"steps ({r.int('/emergence/last_step')} steps in all"
           + (f"; the last checkpoint's weights differ from the shipped model's by at most {r.num('/emergence/final_vs_shipped')}"
              if e.get("final_vs_shipped") is not None else "") + f"). The final core's heads: {heads}."]
    if e["generalized_at"] is None:
        out.append("The model never reaches the generalization threshold out of distribution, so nothing is judged.")
    else:
        out.append(f"It first generalizes out of distribution at step {r.int('/emergence/generalized_at')}.")
    if e["judged_at"] is not None:
        out.append(f"At the last checkpoint before that (step {r.int('/emergence/judged_at')}) the core heads' mean importance percentile "
                   f"is {r.num(pointer(*at, 'verdict', 'effect'))}, against {r.num(pointer(*at, 'verdict', 'control'))} for random head "
                   f"sets of the core's size (median; 5th–95th percentile {r.num(pointer(*at, 'verdict', 'control_ci', 0))}–"
                   f"{r.num(pointer(*at, 'verdict', 'control_ci', 1))}, {r.int(pointer(*at, 'verdict', 'draws'))} draws): core heads "
                   f"important before the model generalizes is **{r.text(pointer(*at, 'verdict', 'word'))}**.")
    else:
        out.append(f"No checkpoint precedes generalization with a core head to trace: **{r.text(pointer(*at, 'verdict', 'word'))}**.")
    last = pointer(*at, "checkpoints", len(e["checkpoints"]) - 1)
    out.append(f"At the last checkpoint (step {r.int(last + '/step')}) they stand at {r.num(last + '/core')} (random sets: "
               f"{r.num(last + '/random/q05')}–{r.num(last + '/random/q95')}).")
    if e["core_first_above_random"] is not None:
        out.append(f"The core heads first stand above the random sets' 95th percentile at step {r.int('/emergence/core_first_above_random')}.")
    else:
        out.append("The core heads never stand above the random sets' 95th percentile.")
    return " ".join(out)


def _reads(r: Render, data: dict[str, Any], spec: str) -> str:
    g = data["models"][spec].get("reading")
    if g is None:
        return ""
    at = ("models", spec, "reading")
    if "generalizing_extra_reading" not in g:
        why = "no head is kept by every distinct mask, so there is no core to read" if not g["core_heads"] else \
            "too few distinct masks with extra heads to split"
        return f"- `{spec}`: {why}: **{r.text(pointer(*at, 'claim', 'word'))}**."
    return (f"- `{spec}` (`{len(g['core_heads'])}` core heads, {r.int(pointer(*at, 'masks'))} distinct masks, split by `{g['split']}` "
            f"accuracy): the generalizing half's extra heads read the core at {r.num(pointer(*at, 'generalizing_extra_reading'))} per head, "
            f"random non-core heads of the same per-layer counts at {r.num(pointer(*at, 'random', 'median'))} (5th–95th percentile "
            f"{r.num(pointer(*at, 'random', 'q05'))}–{r.num(pointer(*at, 'random', 'q95'))}): **{r.text(pointer(*at, 'vs_random', 'word'))}**; "
            f"the non-generalizing half's extra heads at {r.num(pointer(*at, 'not_generalizing_extra_reading'))} (difference "
            f"{r.num(pointer(*at, 'difference', 'value'), signed=True)}, bootstrap 2.5th–97.5th percentile {r.num(pointer(*at, 'difference', 'ci95', 0), signed=True)}"
            f" to {r.num(pointer(*at, 'difference', 'ci95', 1), signed=True)}): **{r.text(pointer(*at, 'vs_not_generalizing', 'word'))}**; "
            f"the claim: **{r.text(pointer(*at, 'claim', 'word'))}**.")


def _mechanism(r: Render, data: dict[str, Any]) -> str:
    reads = [x for x in (_reads(r, data, spec) for spec in data["models"]) if x]
    mech = data["provenance"].get("mechanism")
    where = [f"Both were added to the stored result at commit `{mech['commit']}` (`{mech['date']}`, "
             f"{r.num('/provenance/mechanism/wall_s')} s) by `{mech['command']}`; the numbers above it are the "
             "aggregation's, unchanged.", ""] if mech else []
    return "\n".join([*where, _emergence(r, data.get("emergence")), "",
                      "Do the generalizing masks' extra heads read the core (summed |EAP edge score| from the core heads into each "
                      "head's q/k/v inputs)?" if reads else "Reading the core: not run.", "", *reads])


def regions(data: dict[str, Any]) -> dict[str, str]:
    """The doc's regions for one `heuristic_core.repro` JSON."""
    r = Render(data)
    out = {"hc-paper": r.region(_paper(r)), "hc-budget": r.region(_budget(r, data))}
    lines: list[str] = []
    for spec in data["models"]:
        lines += _model(r, data, spec)
    out["hc-results"] = r.region("\n".join(lines).rstrip())
    out["hc-timing"] = r.region(_timing(r, data))
    out["hc-reading"] = r.region(_reading(r, data))
    out["hc-mechanism"] = r.region(_mechanism(r, data))
    return out

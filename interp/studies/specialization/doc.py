"""docs/specialization.md's generated regions, every number rendered from its key of the study's JSON
(interp.studies.docs.Render), every verdict word the one stored beside its numbers."""

from __future__ import annotations

from typing import Any

from interp.studies.docs import Render, pointer

ORDINAL = {"1": "first", "2": "second", "3": "third"}  # claim ids as words: a region's numbers are all results
CONTROL_NAMES = {"random_search": "same search, random scores", "magnitude": "magnitude mask",
                 "random_counts": "random mask, probe's counts"}


def _ci(r: Render, *path: Any) -> str:
    return f"[{r.num(pointer(*path, 0))}, {r.num(pointer(*path, 1))}]"


def _score(r: Render, *path: Any) -> str:
    return f"{r.num(pointer(*path, 'score'))} {_ci(r, *path, 'ci')}"


RENDER = "interp doc specialization --json docs/specialization_repro.json --doc docs/specialization.md"


def _run_line(r: Render, result: dict) -> str:
    from interp.studies.units import repro_command

    b = result["budget"]
    v = ("budget", "values")
    made = "" if "budgets" not in result else (  # a JSON without its budgets cannot say what it overrode
        f"Made by `{repro_command('specialization', b, result['budgets'], units='docs/specialization_units', out='docs/specialization_repro.json')}` "
        f"then `{RENDER}`. ")
    return (f"{made}Budget `{r.text('/budget/name')}`: models {', '.join(f'`{m}`' for m in b['values']['models'])}; "
            f"validation rows per task {r.int(pointer(*v, 'n_val'))}, test rows per task {r.int(pointer(*v, 'n_test'))}; "
            f"target sparsity {r.num(pointer(*v, 'sparsity'))} within a tolerance of {r.num(pointer(*v, 'tolerance'))}; "
            f"top-k fraction {r.num(pointer(*v, 'k'))}; {r.int(pointer(*v, 'permutations'))} permutations, "
            f"{r.int(pointer(*v, 'bootstrap'))} bootstrap draws. Units stored: {r.int('/budget/units_done')} of "
            f"{r.int('/budget/units_total')}; wall time of the aggregating run {r.num('/provenance/wall_s')} s.")


def _cost(r: Render, result: dict) -> list[str]:
    e = result.get("estimate")
    if e is None:
        return []
    left = ("the remaining units at the mean time of the stored units of their kind: "
            f"{r.num('/estimate/remaining_cpu_h')} hours more on one core" if e["remaining_cpu_h"] is not None
            else f"no estimate of the rest yet (no unit of kind {', '.join(e['kinds_never_run'])} is stored)")
    gpu = "" if e["paper_gpu_min_estimate"] is None else _gpu(r, e)
    return ["", f"What this budget costs: the {r.int('/estimate/stored')} stored units of {r.int('/estimate/units')} took "
                f"{r.num('/estimate/stored_cpu_h')} CPU hours here (one core each, the machine shared); {left}.{gpu}"]


def _verdicts(r: Render, result: dict) -> str:
    out = ["| model | claim | verdict |", "|---|---|---|"]
    for spec, m in result["models"].items():
        for c in m["claims"]:
            out.append(f"| `{spec}` | {ORDINAL[c]}: {result['paper']['claims'][c]} | {r.text(pointer('models', spec, 'claims', c, 'word'))} |")
    return "\n".join(out)


def _overlap(r: Render, spec: str, m: dict) -> list[str]:
    out = ["| prompts | within | across | within − across | null mean | null 95th pct | null max | p | distinct deals | verdict |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for fmt, ov in m["overlap"].items():
        o = ("models", spec, "overlap", fmt)
        n = (*o, "null")
        out.append(f"| {fmt} | {r.num(pointer(*o, 'within'))} | {r.num(pointer(*o, 'across'))} | "
                   f"{r.num(pointer(*n, 'observed'))} | {r.num(pointer(*n, 'null_mean'), signed=True)} | "
                   f"{r.num(pointer(*n, 'null_q95'))} | {r.num(pointer(*n, 'null_max'))} | {r.num(pointer(*n, 'p'))} | {r.int(pointer(*n, 'distinct_deals'))} | "
                   f"{r.text(pointer('models', spec, 'claims', '1', 'per_format', fmt, 'word'))} |")
    for fmt in m["claims"]["1"]["per_format"]:
        if fmt not in m["overlap"]:
            out.append(f"| {fmt} | not run | | | | | | | | {r.text(pointer('models', spec, 'claims', '1', 'per_format', fmt, 'word'))} |")
    return out


def _matrix(r: Render, spec: str, m: dict) -> list[str]:
    doms = list(m["domains"])
    if "full" not in m:
        return ["The full model's test scores are not stored yet (the `full` unit has not run)."]
    out = ["| subnetwork | sparsity | " + " | ".join(doms) + " |", "|---|---|" + "---|" * len(doms)]
    out.append("| full model | none | " + " | ".join(_score(r, "models", spec, "full", d) for d in doms) + " |")
    for d in doms:
        if d not in m["subnetworks"]:
            out.append(f"| probed on {d} | not run |" + " |" * len(doms))
            continue
        s = ("models", spec, "subnetworks", d)
        out.append(f"| probed on {d} | {r.num(pointer(*s, 'sparsity'))} | "
                   + " | ".join(("**" if x == d else "") + _score(r, *s, "on", x) + ("**" if x == d else "") for x in doms) + " |")
        for kind, c in m["controls"].get(d, {}).items():
            cp = ("models", spec, "controls", d, kind)
            out.append(f"| {CONTROL_NAMES[kind]}, as {d} | {r.num(pointer(*cp, 'sparsity'))} | "
                       + " | ".join(_score(r, *cp, "on", x) for x in doms) + " |")
    return out


def _rows(r: Render, spec: str, m: dict) -> list[str]:
    if "test_rows" not in m:
        return []
    out = ["Test rows per task (a zero-shot task gives each of its items once; the others ask items again under",
           "other solved examples up to the budget's rows):", "", "| task | test rows | distinct items |", "|---|---|---|"]
    for t in m["test_rows"]:
        out.append(f"| {t} | {r.int(pointer('models', spec, 'test_rows', t))} | {r.int(pointer('models', spec, 'test_items', t))} |")
    return out + [""]


def _probes(r: Render, spec: str, m: dict) -> list[str]:
    if not m["subnetworks"]:
        return ["No probe is stored yet."]
    out = ["| domain | probe sparsity | checks | stopped because | search on random scores: sparsity | its stop |",
           "|---|---|---|---|---|---|"]
    for d, s in m["subnetworks"].items():
        p = ("models", spec, "subnetworks", d)
        rs = m["controls"].get(d, {}).get("random_search")
        tail = (f"{r.num(pointer('models', spec, 'controls', d, 'random_search', 'sparsity'))} | {rs['stop']} |"
                if rs else "not run | |")
        out.append(f"| {d} | {r.num(pointer(*p, 'sparsity'))} | {r.int(pointer(*p, 'checks'))} | {s['stop']} | {tail}")
    return out


def _claims23(r: Render, spec: str, m: dict) -> list[str]:
    out = ["| domain | second claim: vs the same search on random scores | vs magnitude | second claim | third claim: own − other subnetworks | third claim |",
           "|---|---|---|---|---|---|"]
    for d in m["domains"]:
        c2 = ("models", spec, "claims", "2", "per_domain", d)
        c3 = ("models", spec, "claims", "3", "per_domain", d)
        cells = []
        for kind in ("random_search", "magnitude"):
            j = m["claims"]["2"]["per_domain"][d].get(kind)
            if j is None or j["effect"] is None:
                cells.append("not run")
            elif "diff_ci" in j:
                cells.append(f"accuracy {r.num(pointer(*c2, kind, 'effect'), signed=True)} {_ci(r, *c2, kind, 'diff_ci')}: "
                             f"{r.text(pointer(*c2, kind, 'word'))}")
            else:
                cells.append(f"sparsity {r.num(pointer(*c2, kind, 'effect'))} vs {r.num(pointer(*c2, kind, 'control'))}: "
                             f"{r.text(pointer(*c2, kind, 'word'))}")
        j3 = m["claims"]["3"]["per_domain"][d]
        c3_cell = (f"{r.num(pointer(*c3, 'effect'), signed=True)} {_ci(r, *c3, 'diff_ci')}"
                   if j3["effect"] is not None else "not run")
        out.append(f"| {d} | {cells[0]} | {cells[1]} | {r.text(pointer(*c2, 'word'))} | {c3_cell} | {r.text(pointer(*c3, 'word'))} |")
    return out


def regions(result: dict) -> dict[str, str]:
    """{region name: rendered body} for docs/specialization.md."""
    r = Render(result)
    times = [f"| {name} | {r.num(pointer('provenance', 'units_s', name))} |"
             for name, sec in result["provenance"].get("units_s", {}).items() if sec is not None]
    timing = ["", "Seconds each stored unit took when it ran (this shared two-core CPU, loaded by other work):", "",
              "| unit | seconds |", "|---|---|", *times] if times else []
    out = {"run": r.region("\n".join([_run_line(r, result), *_cost(r, result), *timing])),
           "verdicts": r.region(_verdicts(r, result))}
    body: list[str] = []
    for spec, m in result["models"].items():
        body += [f"### `{spec}`", "", "Overlap of the tasks' top weights (Jaccard), against tasks dealt to domains at random:",
                 "", *_overlap(r, spec, m), "", "Test accuracy among the options, with percentile bootstrap intervals (test items resampled):", "",
                 *_matrix(r, spec, m), "", *_rows(r, spec, m), "Probes:", "", *_probes(r, spec, m), "", "The second and third claims per domain (differences with paired bootstrap intervals):", "",
                 *_claims23(r, spec, m), ""]
    out["results"] = r.region("\n".join(body).rstrip())
    return out


def _gpu(r: Render, e: dict) -> str:
    """The budget on one GPU: an estimate from counted ops and the calibrated per-op cost."""
    from interp.studies.gpu_estimate import calibration_words

    ops = " and ".join(f"{r.int(pointer('estimate', 'gpu_counts', 'ops_per_forward', m))} (`{m}`)"
                       for m in e["gpu_counts"]["ops_per_forward"])
    return (f" On one GPU, an estimate (not measured): each of the budget's searches at the stored ones' mean of "
            f"{r.num('/estimate/mean_checks_per_search')} checks, {r.int('/estimate/gpu_forwards')} forwards in all with the test "
            f"batches, each bound by its torch ops ({ops} counted in one bridge forward, mean "
            f"{r.num('/estimate/gpu_counts/ops_mean')}) at "
            f"{calibration_words(lambda *k: r.num(pointer('estimate', 'calibration', *k)), e['calibration'])}, plus the weight "
            f"mask's {r.int('/estimate/gpu_counts/passes')} passes over the weights at {r.num('/estimate/calibration/gb_per_s')} GB/s: "
            f"{r.num('/estimate/gpu_forward_s_estimate/0')}–{r.num('/estimate/gpu_forward_s_estimate/1')} s a forward, "
            f"{r.num('/estimate/paper_gpu_min_estimate/0')}–{r.num('/estimate/paper_gpu_min_estimate/1')} minutes for the whole budget.")

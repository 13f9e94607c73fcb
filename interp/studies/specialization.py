"""Generalization by Specialization (Ma et al. 2025): domain subnetworks found by parameter probing,
scored on every domain beside three controls at the same sparsity.

For each model and domain: Wanda input norms of every task's validation rows (`interp.probing`),
the overlap of the tasks' top-10 % weights (within vs across domains), then a subnetwork probed on
one task of the domain (greedy group pruning to a target sparsity within a tolerance), scored on
the test rows of every task of every domain: the domain x subnetwork matrix. Controls at each
subnetwork's sparsity per matrix: a random mask, a magnitude-only mask (|W|), and the mask probed
on another domain. 95 % bootstrap intervals over test examples. `interp repro specialization
--json` prints the JSON; docs/specialization.md is rendered from it (`markdown`).

Built from public names of `interp.probing`, `interp.run` and the domain tasks only.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from interp.errors import InterpError
from interp.model import load
from interp.probing import (
    Probe,
    input_norms,
    magnitude_like,
    overlap,
    probe,
    random_like,
)
from interp.results import Grid, Heading
from interp.run import evaluate
from interp.tasks import domains as bpe_domains
from interp.tasks import multidomain
from interp.tasks.domains import option_scores

__all__ = [
    "DEFAULT_MODELS", "SETTINGS", "demo_section", "markdown", "matrix_grid", "merge", "repro", "run_model", "write_doc",
    "write_repro",
]

DEFAULT_MODELS = ("smollm2-135m", "gemma3-270m")
# the task each domain's subnetwork is probed on (the others of the domain are held out)
PROBE_TASK = {"arithmetic": "add", "grammar": "sva_pp", "facts": "capital", "code": "operator"}
ZOO_PROBE_TASK = {"counting": "up", "grammar": "agree", "facts": "capital"}
SETTINGS = {
    # controls="own": the random and magnitude controls are scored on their own domain only (a
    # shared two-core CPU could not afford every domain for every control on the real models)
    "real": dict(n_val=32, n_test=16, sparsity=0.3, tolerance=0.1, n_groups=10, grouping="row", max_checks=8,
                 k=0.1, bootstrap=1000, controls="own"),
    "zoo": dict(n_val=32, n_test=32, sparsity=0.6, tolerance=0.05, n_groups=10, grouping="row", max_checks=64,
                k=0.1, bootstrap=1000, controls="all"),
}


def _suites(model, spec: str, s: dict) -> tuple[dict, dict, dict]:
    if spec.startswith("zoo:"):
        val = multidomain.suite(split="val", n=s["n_val"])
        test = multidomain.suite(split="test", n=s["n_test"])
        return val, test, ZOO_PROBE_TASK
    val = bpe_domains.suite(model, split="val", n=s["n_val"])
    test = bpe_domains.suite(model, split="test", n=s["n_test"])
    return val, test, PROBE_TASK


def _per_example(model, task, mask) -> torch.Tensor:
    """[batch] option accuracy of each test row under `mask` (None: the full model), one forward."""
    variant = [] if mask is None else [mask]

    def metric(logits):
        return {str(i): v for i, v in enumerate(option_scores(logits, task))}

    return evaluate(model, task.clean, [variant], metric, answer_pos=task.answer_pos, progress=False)[0]


def _bootstrap(x: torch.Tensor, draws: int, seed: int = 0) -> list[float]:
    gen = torch.Generator().manual_seed(seed)
    idx = torch.randint(len(x), (draws, len(x)), generator=gen)
    means = x[idx].mean(1)
    return [round(float(means.quantile(0.025)), 4), round(float(means.quantile(0.975)), 4)]


def _scores(model, test: dict, mask, draws: int, only: Sequence[str] | None = None) -> dict[str, Any]:
    """{"scores": {domain: mean}, "ci": {domain: [lo, hi]}, "tasks": {domain/task: mean}} over the
    test rows of every domain (or of the domains `only`)."""
    out: dict[str, Any] = {"scores": {}, "ci": {}, "tasks": {}}
    for d, tasks in test.items():
        if only is not None and d not in only:
            continue
        parts = []
        for name, t in tasks.items():
            x = _per_example(model, t, mask)
            out["tasks"][f"{d}/{name}"] = round(float(x.mean()), 4)
            parts.append(x)
        x = torch.cat(parts)
        out["scores"][d] = round(float(x.mean()), 4)
        out["ci"][d] = _bootstrap(x, draws)
    return out


def run_model(spec: str, *, progress: bool = True, settings: dict | None = None) -> dict[str, Any]:
    """The study on one model (`zoo:NAME` uses the zoo's multi-domain tasks)."""
    start = time.perf_counter()
    s = {**SETTINGS["zoo" if spec.startswith("zoo:") else "real"], **(settings or {})}
    model = load(spec)
    val, test, probe_task = _suites(model, spec, s)
    # scores of every task's validation rows, and their overlap
    norms, domain_of = {}, {}
    for d, tasks in val.items():
        for name, t in tasks.items():
            norms[f"{d}/{name}"] = input_norms(model, t.clean, answer_pos=t.answer_pos)
            domain_of[f"{d}/{name}"] = d
    if progress:
        print(f"{spec}: scores of {len(norms)} tasks ({time.perf_counter() - start:.0f} s)", flush=True)
    grid = overlap(model, norms, domain_of, k=s["k"])
    full = _scores(model, test, None, s["bootstrap"])
    subnets: dict[str, Any] = {}
    probes: dict[str, Probe] = {}
    for d in tqdm(list(val), desc=f"probe {spec}", disable=not progress):
        if progress:
            print(f"{spec}: probing {d} ({time.perf_counter() - start:.0f} s)", flush=True)
        t = val[d][probe_task[d]]
        p = probe(model, t.clean, bpe_domains.option_accuracy(t), norms[f"{d}/{probe_task[d]}"],
                  answer_pos=t.answer_pos, tolerance=s["tolerance"], sparsity=s["sparsity"], n_groups=s["n_groups"],
                  grouping=s["grouping"], max_checks=s["max_checks"], progress=False)
        probes[d] = p
        scored = _scores(model, test, p.mask(model), s["bootstrap"])
        held = [v for k, v in scored["tasks"].items() if k.startswith(f"{d}/") and k != f"{d}/{probe_task[d]}"]
        subnets[d] = {"probe_task": probe_task[d], "sparsity": round(p.total_sparsity, 4), "checks": p.meta["checks"],
                      "stop": p.meta["stop"], "val_full": round(p.meta["full"], 4), "probe_seconds": p.meta["seconds"],
                      "heldout_tasks": round(sum(held) / len(held), 4) if held else None, **scored}
    controls: dict[str, Any] = {"random": {}, "magnitude": {}, "cross": {}}
    names = list(val)
    for d in tqdm(names, desc=f"controls {spec}", disable=not progress):
        p = probes[d]
        for kind, c in (("random", random_like(p, seed=0)), ("magnitude", magnitude_like(model, p))):
            only = [d] if s.get("controls") == "own" else None
            controls[kind][d] = {"sparsity": round(c.total_sparsity, 4),
                                 **_scores(model, test, c.mask(model), s["bootstrap"], only)}
        other = names[(names.index(d) + 1) % len(names)]  # the next domain's subnetwork, scored on d
        controls["cross"][d] = {"mask_from": other, "sparsity": subnets[other]["sparsity"],
                                "score": subnets[other]["scores"][d], "ci": subnets[other]["ci"][d],
                                "own": subnets[d]["scores"][d]}
    ov = {"k": s["k"], "within": round(grid.meta["within"], 4), "across": round(grid.meta["across"], 4),
          "tasks": list(grid.labels[0]), "matrix": [[round(float(v), 4) for v in row] for row in grid.values]}
    return {
        "model": spec,
        "domains": {d: {"tasks": list(val[d]), "probe_task": probe_task[d]} for d in val},
        "settings": s,
        "full": {d: {"score": full["scores"][d], "ci": full["ci"][d]} for d in val} | {"tasks": full["tasks"]},
        "subnetworks": subnets,
        "controls": controls,
        "overlap": ov,
        "seconds": round(time.perf_counter() - start, 1),
    }


def repro(progress: bool = True, models: Sequence[str] | None = None) -> dict[str, Any]:
    """The study on `models` (default SmolLM2-135M and Gemma-3-270M); one object whose keys each
    hold one entry per model: model, domains, full, subnetworks, controls, overlap, seconds."""
    start = time.perf_counter()
    specs = list(models) if models else list(DEFAULT_MODELS)
    return merge([run_model(spec, progress=progress) for spec in specs], time.perf_counter() - start)


def merge(parts: Sequence[dict[str, Any]], seconds: float | None = None) -> dict[str, Any]:
    """Per-model results -> one object: {"model": [specs], key: {spec: value}, "seconds": ...}."""
    if not parts:
        raise InterpError("merge needs at least one model's result")
    out: dict[str, Any] = {"model": [p["model"] for p in parts]}
    for key in ("domains", "settings", "full", "subnetworks", "controls", "overlap"):
        out[key] = {p["model"]: p[key] for p in parts}
    out["seconds"] = {p["model"]: p["seconds"] for p in parts}
    if seconds is not None:
        out["seconds"]["total"] = round(seconds, 1)
    return out


def write_repro(result: dict[str, Any], path: str | Path) -> Path:
    """Write the repro JSON atomically (docs/specialization_repro.json)."""
    from interp.storage import write_text_atomic

    return write_text_atomic(path, json.dumps(result, indent=1) + "\n")


# ---------------------------------------------------------------------------------------------
# the domain x subnetwork matrix, as a Grid and as markdown


def matrix_grid(result: dict[str, Any], spec: str) -> Grid:
    """Grid [subnetwork, domain]: rows full, each domain's subnetwork, and its random / magnitude
    controls; cells are test accuracy among the options (meta has the bootstrap intervals)."""
    doms = list(result["domains"][spec])
    rows, labels, cis = [], [], []
    full = result["full"][spec]
    rows.append([full[d]["score"] for d in doms])
    labels.append("full")
    cis.append([full[d]["ci"] for d in doms])
    for kind in ("subnet", "random", "magnitude"):
        for d in doms:
            entry = result["subnetworks"][spec][d] if kind == "subnet" else result["controls"][spec][kind][d]
            rows.append([entry["scores"].get(x, float("nan")) for x in doms])
            labels.append(f"{kind}:{d}")
            cis.append([entry["ci"].get(x) for x in doms])
    return Grid(torch.tensor(rows), ("subnetwork", "domain"), {"subnetwork": labels, "domain": doms},
                {"title": f"{spec}: test accuracy among options (rows: subnetworks, columns: domains)",
                 "metric": "option_accuracy", "ci95": cis, "model": spec})


def markdown(result: dict[str, Any]) -> str:
    """The tables of docs/specialization.md, every number copied from `result` as stored."""
    out = []
    for spec in result["model"]:
        doms = list(result["domains"][spec])
        sub, ctl, full = result["subnetworks"][spec], result["controls"][spec], result["full"][spec]
        out += [f"### {spec}", "", "| subnetwork | sparsity | " + " | ".join(doms) + " |",
                "|---|---|" + "---|" * len(doms)]
        out.append("| full model | none | " + " | ".join(f"{full[d]['score']} [{full[d]['ci'][0]}, {full[d]['ci'][1]}]" for d in doms) + " |")
        for d in doms:
            e = sub[d]
            out.append(f"| probed on {d}/{e['probe_task']} | {e['sparsity']} | "
                       + " | ".join(f"{'**' if x == d else ''}{e['scores'][x]}{'**' if x == d else ''} [{e['ci'][x][0]}, {e['ci'][x][1]}]" for x in doms) + " |")
        for kind in ("random", "magnitude"):
            for d in doms:
                e = ctl[kind][d]
                out.append(f"| {kind}, as {d} | {e['sparsity']} | "
                           + " | ".join(f"{e['scores'][x]} [{e['ci'][x][0]}, {e['ci'][x][1]}]" if x in e["scores"]
                                        else "not run" for x in doms) + " |")
        out += ["", "| domain | own subnetwork | held-out tasks of the domain | other domain's subnetwork (from) | random | magnitude | full |",
                "|---|---|---|---|---|---|---|"]
        for d in doms:
            c = ctl["cross"][d]
            out.append(f"| {d} | {c['own']} | {sub[d]['heldout_tasks']} | {c['score']} ({c['mask_from']}) | "
                       f"{ctl['random'][d]['scores'][d]} | {ctl['magnitude'][d]['scores'][d]} | {full[d]['score']} |")
        if all("probe_seconds" in sub[d] for d in doms):
            out += ["", "| probed domain | validation checks | stopped because | probe seconds |", "|---|---|---|---|"]
            out += [f"| {d} | {sub[d]['checks']} | {sub[d]['stop']} | {sub[d]['probe_seconds']} |" for d in doms]
        ov = result["overlap"][spec]
        out += ["", (f"Overlap of the top {ov['k']} weights (Jaccard): within a domain {ov['within']}, across "
                     f"domains {ov['across']}."), ""]
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------
# demo


def demo_section(workdir: Path) -> list:
    """The committed repro rendered: the domain x subnetwork matrix of each model (no model runs)."""
    path = Path(__file__).resolve().parents[2] / "docs" / "specialization_repro.json"
    items: list = [Heading("Domain-specialised subnetworks (parameter probing)")]
    if not path.exists():
        return items + ["docs/specialization_repro.json is not there; run `interp repro specialization --json`."]
    result = json.loads(path.read_text())
    items.append("Subnetworks probed on one task per domain (Wanda scores, greedy group pruning within a "
                 "tolerance), scored on held-out test rows of every domain, beside random and magnitude "
                 "masks at the same sparsity. Numbers from docs/specialization_repro.json.")
    return items + [matrix_grid(result, spec) for spec in result["model"]]


BEGIN, END = "<!-- tables: interp.studies.specialization.markdown -->", "<!-- end of tables -->"


def write_doc(result: dict[str, Any], path: str | Path) -> Path:
    """Replace the tables between the markers in docs/specialization.md with `markdown(result)`."""
    from interp.storage import fill_between

    return fill_between(path, BEGIN, END, "\n" + markdown(result))

"""Generalization by Specialization (Ma et al. 2025): domain subnetworks found by parameter probing,
each claim beside a control that could have produced the same number.

Claim 1 (weight activations are task-specific): the Jaccard overlap of tasks' top-k Wanda weights is
higher within a domain than across, read against a permutation null (the same matrix with the tasks
dealt to domains at random, domain sizes kept) and again with format-matched prompts (one Q/A frame in
every domain, so shared prompt tokens cannot make a domain's tasks alike).
Claim 2 (probed subnetworks keep their domain): each domain's probe (greedy group pruning to the target
sparsity, no cap on validation checks) scored on its domain's test rows beside the same search run on
random scores (a control that can fail: it matches when the scores carry nothing), a magnitude mask and
a random mask of the probe's per-matrix counts, all at the probe's sparsity, scored on every domain.
Claim 3 (they deteriorate across domains): a domain's own subnetwork against the other domains'
subnetworks on that domain's test rows. Differences carry 95 % bootstrap intervals (test items
resampled, paired rows); verdict words come from interp.studies.verdicts.

Every piece is a unit (interp.studies.units): an overlap per (model, format), the full model's scores,
a probe per (model, domain), a control per (model, domain, kind). `interp repro specialization
--budget quick|cpu|paper`; docs/specialization.md is rendered from the JSON by `write_doc`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from interp.errors import InterpError
from interp.model import load
from interp.probing import (
    Probe, input_norms, magnitude_like, overlap, overlap_null, probe, random_like, random_scores,
)
from interp.results import Grid, Heading
from interp.results import load as load_result
from interp.results import save as save_result
from interp.run import evaluate
from interp.studies.specialization.doc import regions
from interp.studies.protocol import study
from interp.studies.units import Units, budget_record, provenance
from interp.studies.units import budget as resolve_budget
from interp.studies.verdicts import against_all, combine, judge
from interp.tasks import domains as bpe_domains
from interp.tasks import multidomain
from interp.tasks.domains import option_scores

__all__ = ["BUDGETS", "CONTROLS", "demo_section", "departures", "matrix_grid", "recalibrate_gpu", "regions", "repro"]

VERSION = 2
PROBE_TASK = {"arithmetic": "add", "grammar": "sva_pp", "facts": "capital", "code": "operator"}
ZOO_PROBE_TASK = {"counting": "up", "grammar": "agree", "facts": "capital"}
# random_search: the probe's own search on random scores (can fail); random_counts: the probe's
# per-matrix counts pruned at random (cannot fail: reported, not used for a verdict)
CONTROLS = ("random_search", "magnitude", "random_counts")
# compute=False (`--set compute=false`): aggregate the stored units only, computing none
_COMMON = dict(n_val=32, n_groups=10, grouping="row", max_checks=0, k=0.1, bootstrap=1000, permutations=10000, compute=True)
BUDGETS = {
    "quick": {**_COMMON, "models": ["zoo:multidomain"], "n_test": 32, "sparsity": 0.6, "tolerance": 0.05,
              "bootstrap": 200, "permutations": 2000, "formats": ["default"]},
    "cpu": {**_COMMON, "models": ["smollm2-135m"], "n_test": 200, "sparsity": 0.3, "tolerance": 0.1,
            "formats": ["default", "matched"]},
    "paper": {**_COMMON, "models": ["smollm2-135m", "gemma3-270m"], "n_test": 200, "sparsity": 0.3, "tolerance": 0.1,
              "formats": ["default", "matched"]},
}
PAPER = {"claims": {"1": "weight activations are task-specific",
                    "2": "a subnetwork probed for a domain keeps (or improves) performance within it",
                    "3": "its performance deteriorates across domains"},
         "note": "the paper's models are 2B-9B (LLaMA, Gemma); only its abstract is public, so it gives no number here"}


def departures(values: dict[str, Any]) -> list[dict[str, Any]]:
    """How a budget differs from Ma et al.'s set-up, as far as its public abstract gives it."""
    out = [{"what": "models", "ours": values["models"], "paper": "LLaMA and Gemma models of 2B-9B parameters",
            "why": "no model hub and a 2-core CPU: the two pretrained decoders that install here"},
           {"what": "tasks and domains", "ours": "arithmetic, grammar, facts and code tasks built here (two or three a "
            "domain; three in the matched format)", "paper": "its benchmarks (not public: only the abstract is)",
            "why": "no datasets offline"}]
    if values.get("max_checks"):
        out.append({"what": "validation checks of the probe", "ours": values["max_checks"], "paper": "unbounded",
                    "why": "budget"})
    return out


def _suite(model, spec: str, split: str, n: int, fmt: str) -> dict:
    if spec.startswith("zoo:"):
        if fmt != "default":
            raise InterpError(f"the zoo's multidomain tasks have one prompt format; {fmt!r} is for real models")
        return multidomain.suite(split=split, n=n)
    # a split with fewer items than rows asks them again under other solved examples (meta["keys"])
    return bpe_domains.suite(model, split=split, n=n, fmt=fmt, repeat=True)


def _rows(model, task, mask) -> list[int]:
    """0/1 option accuracy of each row under `mask` (None: the full model)."""
    variant = [] if mask is None else [mask]

    def metric(logits):
        return {str(i): v for i, v in enumerate(option_scores(logits, task))}

    return [int(v) for v in evaluate(model, task.clean, [variant], metric, answer_pos=task.answer_pos,
                                     progress=False)[0].tolist()]


def _score_all(model, test: dict, mask) -> dict[str, list[int]]:
    return {f"{d}/{n}": _rows(model, t, mask) for d, tasks in test.items() for n, t in tasks.items()}


class _Model:
    """The model and its task suites, loaded only when a unit needs them."""

    def __init__(self, spec: str, b: dict):
        self.spec, self.b, self._model, self._suites = spec, b, None, {}

    @property
    def model(self):
        if self._model is None:
            self._model = load(self.spec)
        return self._model

    def suite(self, split: str, fmt: str = "default") -> dict:
        if (split, fmt) not in self._suites:
            n = self.b["n_val"] if split == "val" else self.b["n_test"]
            self._suites[split, fmt] = _suite(self.model, self.spec, split, n, fmt)
        return self._suites[split, fmt]

    def probe_task(self) -> dict[str, str]:
        return ZOO_PROBE_TASK if self.spec.startswith("zoo:") else PROBE_TASK


def _task_names(spec: str, fmt: str) -> list[str]:
    """The "domain/task" names an overlap unit compares (part of its key: more tasks, a new unit)."""
    names = (multidomain.DOMAINS if spec.startswith("zoo:") else
             bpe_domains.MATCHED_DOMAINS if fmt == "matched" else bpe_domains.DOMAINS)
    return [f"{d}/{n}" for d, ts in names.items() for n in ts]


def _overlap_unit(m: _Model, fmt: str) -> dict:
    val = m.suite("val", fmt)
    norms = {f"{d}/{n}": input_norms(m.model, t.clean, answer_pos=t.answer_pos) for d, ts in val.items() for n, t in ts.items()}
    grid = overlap(m.model, norms, {k: k.split("/")[0] for k in norms}, k=m.b["k"])
    return {"tasks": list(norms), "within": grid.meta["within"], "across": grid.meta["across"],
            "matrix": [[round(float(v), 5) for v in row] for row in grid.values],
            "null": overlap_null(grid, permutations=m.b["permutations"])}


def _probe(m: _Model, d: str, scores, checkpoint: Path) -> Probe:
    t = m.suite("val")[d][m.probe_task()[d]]
    b = m.b
    return probe(m.model, t.clean, bpe_domains.option_accuracy(t), scores, answer_pos=t.answer_pos,
                 tolerance=b["tolerance"], sparsity=b["sparsity"], n_groups=b["n_groups"], grouping=b["grouping"],
                 max_checks=b["max_checks"] or None, progress=False, checkpoint=checkpoint)


def _probe_record(p: Probe) -> dict:
    return {"sparsity": p.total_sparsity, "checks": p.meta["checks"], "stop": p.meta["stop"],
            "val_full": p.meta["full"], "seconds": p.meta["seconds"]}


def _unit_fns(m: _Model, store: Units, configs: dict) -> dict:
    """The function computing each unit of model `m` (run only when the unit is missing)."""

    def probe_fn(d: str):
        def fn():
            t = m.suite("val")[d][m.probe_task()[d]]
            p = _probe(m, d, input_norms(m.model, t.clean, answer_pos=t.answer_pos), store.checkpoint_path(configs["probe", d]))
            save_result(p, store.files(configs["probe", d]) / "probe.safetensors")
            return {**_probe_record(p), "rows": _score_all(m.model, m.suite("test"), p.mask(m.model))}
        return fn

    def control_fn(d: str, kind: str):
        def fn():
            if kind == "random_search":
                c = _probe(m, d, random_scores(m.model, seed=0), store.checkpoint_path(configs["control", d, kind]))
                extra = _probe_record(c)
            else:
                store.run(configs["probe", d], probe_fn(d))
                p = load_result(store.files(configs["probe", d]) / "probe.safetensors")
                c = random_like(p, seed=0) if kind == "random_counts" else magnitude_like(m.model, p)
                extra = {"sparsity": c.total_sparsity}
            return {**extra, "rows": _score_all(m.model, m.suite("test"), c.mask(m.model))}
        return fn

    def full_fn():
        test = m.suite("test")
        keys = {f"{d}/{n}": t.meta.get("keys") or [str(i) for i in range(len(t))] for d, ts in test.items() for n, t in ts.items()}
        return {"rows": _score_all(m.model, test, None), "keys": keys}

    fns = {("full",): full_fn}
    for fmt in m.b["formats"]:
        fns["overlap", fmt] = lambda fmt=fmt: _overlap_unit(m, fmt)
    for d in _domains(m.spec):
        fns["probe", d] = probe_fn(d)
        for kind in CONTROLS:
            fns["control", d, kind] = control_fn(d, kind)
    return fns


def _domains(spec: str) -> list[str]:
    return list(multidomain.DOMAINS if spec.startswith("zoo:") else bpe_domains.DOMAINS)


def _configs(spec: str, b: dict) -> dict:
    base = {"model": spec, "n_val": b["n_val"], "n_test": b["n_test"]}
    search = {k: b[k] for k in ("sparsity", "tolerance", "n_groups", "grouping", "max_checks")}
    out = {}  # cheapest first: a run stopped early still has claim 1
    for fmt in b["formats"]:
        out["overlap", fmt] = {"model": spec, "n_val": b["n_val"], "unit": "overlap", "format": fmt, "k": b["k"],
                               "permutations": b["permutations"], "tasks": _task_names(spec, fmt)}
    out["full",] = {**base, "unit": "full"}
    for d in _domains(spec):
        out["probe", d] = {**base, **search, "unit": "probe", "domain": d}
    # the random-score search, many times a probe's cost, comes last: a run stopped early has every
    # probe (claim 3) and the cheap controls
    for kind in sorted(CONTROLS, key=lambda k: k == "random_search"):
        for d in _domains(spec):
            out["control", d, kind] = {**base, **search, "unit": "control", "domain": d, "kind": kind}
    return out


# ---------------------------------------------------------------------------------------------
# aggregation: means, paired bootstrap intervals, verdicts


def _boot(x: torch.Tensor, keys: list[str], draws: int, seed: int = 0) -> list[float]:
    """95 % interval of the mean of `x` [rows], resampling items (rows of one key go together)."""
    ids = {k: i for i, k in enumerate(dict.fromkeys(keys))}
    idx = torch.tensor([ids[k] for k in keys])
    sums = torch.zeros(len(ids), dtype=torch.float64).index_add_(0, idx, x.double())
    counts = torch.bincount(idx, minlength=len(ids)).double()
    draw = torch.randint(len(ids), (draws, len(ids)), generator=torch.Generator().manual_seed(seed))
    means = sums[draw].sum(1) / counts[draw].sum(1)
    return [float(means.quantile(0.025)), float(means.quantile(0.975))]


def _null(kind: str) -> dict[str, Any]:
    """What a claim-2 control is (interp.studies.verdicts): the search on random scores is one random draw
    (one search per domain: no spread of the null, so by the rules no control); magnitude pruning is a method."""
    return {"null": "random scores", "draws": 1} if kind == "random_search" else {"null": "method"}


def _domain_rows(rows: dict[str, list[int]], d: str, keys: dict[str, list[str]]) -> tuple[torch.Tensor, list[str]]:
    names = [n for n in rows if n.startswith(f"{d}/")]
    return (torch.tensor([v for n in names for v in rows[n]], dtype=torch.float64),
            [f"{n}|{k}" for n in names for k in keys[n]])


def _model_result(spec: str, res: dict, b: dict) -> dict:
    """One model's aggregate from whichever of its units are stored (a missing piece reads "not run")."""
    doms = _domains(spec)
    probe_task = ZOO_PROBE_TASK if spec.startswith("zoo:") else PROBE_TASK
    draws = b["bootstrap"]
    out: dict[str, Any] = {"domains": {d: {"probe_task": probe_task[d]} for d in doms}, "overlap": {},
                           "subnetworks": {}, "controls": {}}
    # claim 1: within - across beyond the permutation null, in every prompt format run
    claim1 = {}
    for fmt in b["formats"]:
        ov = res.get(("overlap", fmt))
        text = f"within-domain overlap exceeds across-domain ({fmt} prompts) beyond tasks dealt at random"
        if ov is None:
            claim1[fmt] = judge(text, None, None, null="permutation")
            continue
        out["overlap"][fmt] = ov
        n = ov["null"]
        claim1[fmt] = judge(text, n["observed"], n["null_mean"], "greater", control_ci=[n["null_mean"], n["null_q95"]],
                            null="permutation", draws=n.get("permutations", b["permutations"]))
    claim2 = {d: {"word": "not run"} for d in doms}
    claim3 = {d: judge(f"{d}: its own subnetwork beats the other domains' subnetworks on it", None, None, null="baseline") for d in doms}
    full = res.get(("full",))
    if full is not None:
        keys = full["keys"]  # each test row's item: rows of one item are resampled together

        def stat(rows: dict, d: str) -> dict:
            x, k = _domain_rows(rows, d, keys)
            return {"score": float(x.mean()), "ci": _boot(x, k, draws)}

        out["test_rows"] = {n: len(v) for n, v in full["rows"].items()}
        out["test_items"] = {n: len(set(k)) for n, k in keys.items()}
        out["full"] = {d: stat(full["rows"], d) for d in doms}
        probes = {d: res[("probe", d)] for d in doms if ("probe", d) in res}
        for d, p in probes.items():
            out["subnetworks"][d] = {**{k: p[k] for k in ("sparsity", "checks", "stop", "val_full", "seconds")},
                                     "reached": abs(p["sparsity"] - b["sparsity"]) <= 0.01,
                                     "on": {x: stat(p["rows"], x) for x in doms}}
            ctl = {k: res[("control", d, k)] for k in CONTROLS if ("control", d, k) in res}
            out["controls"][d] = {k: {"sparsity": c["sparsity"], "on": {x: stat(c["rows"], x) for x in doms},
                                      **({"stop": c["stop"]} if "stop" in c else {})} for k, c in ctl.items()}
            # claim 2: own subnetwork on its domain vs each control that can fail, paired by row
            per = {}
            for kind in ("random_search", "magnitude"):
                c = ctl.get(kind)
                if c is None:
                    per[kind] = judge(f"{d}: probed subnetwork beats {kind}", None, None, **_null(kind))
                elif c["sparsity"] < b["sparsity"] - 0.01:  # the search on random scores stopped short: compare
                    # how far each got under the same validation tolerance (the probe's accuracy is held to it too)
                    per[kind] = judge(f"{d}: the probe prunes more than the same search on {kind} at the same tolerance",
                                      p["sparsity"], c["sparsity"], "greater", tol=0.01, **_null(kind))
                    per[kind]["measure"] = "sparsity reached within the tolerance"
                else:
                    xa, k = _domain_rows(p["rows"], d, keys)
                    xc, _ = _domain_rows(c["rows"], d, keys)
                    per[kind] = judge(f"{d}: probed subnetwork beats {kind} on its domain's test rows",
                                      float((xa - xc).mean()), 0.0, "greater", diff_ci=_boot(xa - xc, k, draws), **_null(kind))
                    per[kind]["measure"] = "test accuracy difference at equal sparsity"
            claim2[d] = {**per, "word": against_all(v["word"] for v in per.values())}
        # claim 3: own subnetwork on d vs the other domains' subnetworks on d (every probe needed)
        if len(probes) == len(doms):
            for d in doms:
                own, k = _domain_rows(probes[d]["rows"], d, keys)
                other = torch.stack([_domain_rows(probes[o]["rows"], d, keys)[0] for o in doms if o != d]).mean(0)
                claim3[d] = judge(claim3[d]["claim_text"], float((own - other).mean()), 0.0, "greater",
                                  diff_ci=_boot(own - other, k, draws), null="baseline")
    out["claims"] = {
        "1": {"label": f"{spec}: {PAPER['claims']['1']}", "claim_id": "gs.task_specific", "per_format": claim1,
              "word": against_all(v["word"] for v in claim1.values())},
        "2": {"label": f"{spec}: {PAPER['claims']['2']}", "claim_id": "gs.probe_keeps_domain", "per_domain": claim2,
              "word": combine(v["word"] for v in claim2.values())},
        "3": {"label": f"{spec}: {PAPER['claims']['3']}", "claim_id": "gs.deteriorates_across", "per_domain": claim3,
              "word": combine(v["word"] for v in claim3.values())},
    }
    return out


@study("specialization")
def repro(progress: bool = True, models: Sequence[str] | None = None, budget: str = "quick",
          overrides: dict[str, Any] | None = None, units: str | Path | None = None, *,
          compute: bool = True) -> dict[str, Any]:
    """`interp repro specialization`: every model of the budget (or `models`), its units computed or
    read back, aggregated; with the run's budget and provenance. compute=False: aggregate only the
    units already stored (the JSON of a run still under way says how many are done)."""
    start = time.time()
    b = resolve_budget(BUDGETS, budget, overrides)
    compute = compute and b["compute"]
    specs = list(models) if models else list(b["models"])
    store = Units("specialization", units, version=VERSION)
    out: dict[str, Any] = {"paper": PAPER, "models": {}}
    all_configs, seconds, res_checks, timed = [], {}, {}, []
    for spec in specs:
        configs = _configs(spec, b)
        fns = _unit_fns(_Model(spec, b), store, configs)
        res = {}
        for name in tqdm(list(configs), desc=f"specialization {spec}", disable=not progress):
            got = store.run(configs[name], fns[name]) if compute else store.get(configs[name])
            if got is not None:
                res[name] = got
                # a search resumed from its checkpoint ran in more than the session that stored it: its own total
                sec = max(store.seconds(configs[name]) or 0.0, float(got.get("seconds") or 0.0))
                seconds[f"{spec} {' '.join(name)}"] = sec
                timed.append((configs[name], sec))
                if "checks" in got:
                    res_checks[f"{spec} {' '.join(name)}"] = got["checks"]
        all_configs += configs.values()
        out["models"][spec] = _model_result(spec, res, b)
    done, total = store.count(all_configs)
    out["estimate"] = estimate(all_configs, timed, res_checks)
    out["budget"] = budget_record(budget, b, None, done, total)
    out["budgets"] = BUDGETS
    out["provenance"] = provenance(budget, b, None, time.time() - start, done, total, units_run=store.ran, units_s=seconds)
    return out


# ---------------------------------------------------------------------------------------------
# what the budget costs: measured on this CPU, estimated on one GPU

# An estimate, not a measurement: a probe check or a test batch is one bridge forward of a ~100M-parameter
# decoder at 32-200 rows of ~20 tokens, bound on a GPU by the host cost of its torch ops (counted: leaf ops of
# one forward of each model at batch 20 x 1, as docs/steering_repro.json's gpu_estimate stores them; the
# count hardly moves with rows), each at the calibrated per-op cost (interp.studies.gpu_estimate), plus the
# weight mask's multiply (read weights and mask, write: ~3 passes at ~2 TB/s).
GPU_COUNTS = {"ops_per_forward": {"smollm2-135m": 2136, "gemma3-270m": 2669}, "params": 135e6, "passes": 3,
              "test_forwards_per_unit": 9}


def _kind(config: dict[str, Any]) -> str:
    return config.get("kind") or config["unit"]


def estimate(configs: list[dict[str, Any]], timed: list[tuple[dict[str, Any], float | None]],
             checks: dict[str, int]) -> dict[str, Any]:
    """The budget's cost. On this CPU: the stored units' measured seconds, and each missing unit at the
    mean of the stored units of its kind (overlap, full, probe, random_search, magnitude, random_counts;
    None while a kind has no stored unit); `timed`: (config, seconds) of each stored unit. On one GPU, an estimate: every search at the stored searches'
    mean number of checks, one forward per check and per test batch (gpu_estimate)."""
    measured: dict[str, list[float]] = {}
    for c, sec in timed:
        if sec is not None:
            measured.setdefault(_kind(c), []).append(sec)
    mean = {k: sum(v) / len(v) for k, v in measured.items()}
    counts: dict[str, int] = {}
    for c in configs:
        counts[_kind(c)] = counts.get(_kind(c), 0) + 1
    left = {k: n - len(measured.get(k, [])) for k, n in counts.items() if n > len(measured.get(k, []))}
    never = sorted(k for k in left if k not in mean)
    per_search = sum(checks.values()) / len(checks) if checks else None
    searches = counts.get("probe", 0) + counts.get("random_search", 0)
    forwards = None if per_search is None else round(searches * per_search + len(configs) * GPU_COUNTS["test_forwards_per_unit"])
    return gpu_estimate({"units": len(configs), "stored": sum(len(v) for v in measured.values()),
                         "stored_cpu_h": sum(map(sum, measured.values())) / 3600, "mean_s_by_kind": mean, "missing_by_kind": left,
                         "remaining_cpu_h": None if never else sum(n * mean[k] for k, n in left.items()) / 3600,
                         "kinds_never_run": never, "mean_checks_per_search": per_search, "gpu_forwards": forwards})


def gpu_estimate(est: dict[str, Any], cal: dict[str, Any] | None = None) -> dict[str, Any]:
    """The `estimate` block with its GPU part (re-)derived from `gpu_forwards` under the GPU calibration
    (interp.studies.gpu_estimate.load_calibration): a forward is the models' mean counted ops at the
    calibrated per-op cost plus the mask's memory passes, given as the range the calibration's error gives."""
    from interp.studies.gpu_estimate import load_calibration, summary

    cal = load_calibration() if cal is None else cal
    a = GPU_COUNTS
    ops = sum(a["ops_per_forward"].values()) / len(a["ops_per_forward"])
    fit = ops * cal["us_per_op"] * 1e-6 + a["params"] * 4 * a["passes"] / (cal["gb_per_s"] * 1e9)
    forward = [fit * e for e in cal["error"]]
    kept = {k: v for k, v in est.items() if k not in ("gpu_assumed", "gpu_forward_s_estimate", "paper_gpu_min_estimate")}
    n = est.get("gpu_forwards")
    return {**kept, "gpu_counts": {**a, "ops_mean": ops}, "calibration": summary(cal), "gpu_forward_s_estimate": forward,
            "paper_gpu_min_estimate": None if n is None else [f * n / 60 for f in forward]}


def recalibrate_gpu(result: dict[str, Any], cal: dict[str, Any] | None = None) -> dict[str, Any]:
    """`result` with its `estimate` block's GPU part re-derived under the GPU calibration; nothing else
    changes. A JSON from before the calibration gives its forward count as its minutes over its forward."""
    import copy

    out = copy.deepcopy(result)
    e = out.get("estimate")
    if e is None:
        return out
    if "gpu_forwards" not in e and e.get("paper_gpu_min_estimate") is not None:
        e["gpu_forwards"] = round(e["paper_gpu_min_estimate"] * 60 / e["gpu_forward_s_estimate"])
    out["estimate"] = gpu_estimate(e, cal)
    return out


# ---------------------------------------------------------------------------------------------
# the domain x subnetwork matrix as a Grid; the doc


def matrix_grid(result: dict[str, Any], spec: str) -> Grid:
    """Grid [subnetwork, domain] of test accuracy among options: the full model, each domain's probe and
    its controls (meta: the bootstrap intervals)."""
    r = result["models"][spec]
    doms = list(r["domains"])
    rows, labels, cis = [[r["full"][d]["score"] for d in doms]], ["full"], [[r["full"][d]["ci"] for d in doms]]
    for d in doms:
        controls = r["controls"].get(d, {})  # a run still under way may lack some
        for label, e in [(f"probe:{d}", r["subnetworks"][d])] + [(f"{k}:{d}", controls[k]) for k in CONTROLS if k in controls]:
            rows.append([e["on"][x]["score"] for x in doms])
            labels.append(label)
            cis.append([e["on"][x]["ci"] for x in doms])
    return Grid(torch.tensor(rows), ("subnetwork", "domain"), {"subnetwork": labels, "domain": doms},
                {"title": f"{spec}: test accuracy among options (rows: subnetworks, columns: domains)",
                 "metric": "option_accuracy", "ci95": cis, "model": spec})


def demo_section(workdir: Path) -> list:
    """The committed repro rendered: the domain x subnetwork matrix of each model (no model runs)."""
    import json

    path = Path(__file__).resolve().parents[3] / "docs" / "specialization_repro.json"
    items: list = [Heading("Domain-specialised subnetworks (parameter probing)")]
    if not path.exists():
        return items + ["docs/specialization_repro.json is not there; run `interp repro specialization --json`."]
    result = json.loads(path.read_text())
    items.append("Subnetworks probed on one task per domain, scored on held-out test rows of every domain, beside "
                 "the same search on random scores, magnitude and random masks at the same sparsity. Numbers from "
                 "docs/specialization_repro.json.")
    for spec, r in result["models"].items():
        if all(d in r.get("subnetworks") or {} for d in r["domains"]) and "full" in r:
            items.append(matrix_grid(result, spec))
        else:  # the committed run stopped before this model's probes: say so rather than draw a partial matrix
            items.append(f"{spec}: the probes were not run in the committed JSON (see docs/specialization.md).")
    return items

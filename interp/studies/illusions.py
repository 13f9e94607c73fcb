"""Friedman et al.'s Dyck study at toy scale (`interp repro illusions`) and its demo section.

"Interpretability Illusions in the Generalization of Simplified Models" (ICML 2024): simplify the
second-layer head of a Dyck-(20, 10) model (SVD of queries and keys at several ranks, k-means at
several k, one-hot attention), fit in distribution, and measure faithfulness on seen structures,
unseen structures (whole structural families held out of training, `dyck.family`) and unseen
depths. Built on the public API of `interp.simplify` only.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Sequence

from tqdm.auto import tqdm

import interp
from interp.results import Grid, Heading
from interp.simplify import (
    METRICS, QUANTITIES, Rows, Sweep, compare_attention, dyck_rows, faithfulness, k_sweep, onehot, rank_sweep,
)
from interp.tasks import dyck

__all__ = ["DEFAULT_MODELS", "DYCK_SPLITS", "REPRO_KS", "REPRO_RANKS", "demo_section", "findings", "markdown", "records", "repro", "study", "write_doc"]

DEFAULT_MODELS = ("zoo:dyck",)

REPRO_RANKS = (1, 2, 4, 8, 16, 32)
REPRO_KS = (2, 4, 8, 16, 32, 64)
DYCK_SPLITS = ("seen_struct", "unseen_struct", "unseen_depth")


def _dyck_eval(n: int, seed: int, deep: bool) -> dict[str, Rows]:
    splits = {s: dyck_rows(n, split=s, seed=seed) for s in DYCK_SPLITS}
    if deep:  # one closer per sequence, among those closing deeper than training (Task split)
        splits["unseen_depth_deep"] = Rows.of(dyck.dyck(n, split="unseen_depth", seed=seed))
    return splits


def records(sweep_or_grid: Sweep | Grid, method: str) -> list[dict[str, Any]]:
    grid = sweep_or_grid.grid if isinstance(sweep_or_grid, Sweep) else sweep_or_grid
    v = grid.values if isinstance(sweep_or_grid, Sweep) else grid.values[None]
    params = grid.labels[0] if isinstance(sweep_or_grid, Sweep) else (None,)
    splits = grid.labels[-3]
    get = lambda p, s, m, q="value": float(v[p, s, METRICS.index(m), QUANTITIES.index(q)])  # noqa: E731
    p_of = lambda p, s, m: None if math.isnan(get(p, s, m, "p_value")) else get(p, s, m, "p_value")  # noqa: E731
    out = []
    for p, param in enumerate(params):
        for s, split in enumerate(splits):
            out.append({
                "method": method,
                "rank": param if method == "svd" else None,
                "k": param if method == "kmeans" else None,
                "split": split,
                "accuracy": get(p, s, "accuracy_simplified"),
                "same_prediction": get(p, s, "same_prediction"),
                "js": get(p, s, "js"),
                "accuracy_ci": [get(p, s, "accuracy_simplified", "ci_low"), get(p, s, "accuracy_simplified", "ci_high")],
                "same_prediction_ci": [get(p, s, "same_prediction", "ci_low"), get(p, s, "same_prediction", "ci_high")],
                "delta": get(p, s, "delta"),
                "delta_ci": [get(p, s, "delta", "ci_low"), get(p, s, "delta", "ci_high")],
                "delta_p": p_of(p, s, "delta"),
                "delta_gap": get(p, s, "delta_gap"),
                "delta_gap_p": p_of(p, s, "delta_gap"),
                "same_prediction_gap": get(p, s, "same_prediction_gap"),
                "same_prediction_gap_p": p_of(p, s, "same_prediction_gap"),
            })
    return out


def repro(progress: bool = True, models: Sequence[str] | None = None, *, n_fit: int = 1000, n_eval: int = 512,
          n_boot: int = 1000) -> dict[str, Any]:
    """Friedman et al.'s Dyck study at toy scale on each of `models` (default: the zoo's Dyck-(20, 10)
    model): {"models": {spec: study(spec, ...)}, "seconds"}. The models must be Dyck models (the
    zoo's `dyck` vocabulary): the study's splits are Dyck splits."""
    start = time.time()
    out = {"models": {spec: study(spec, progress=progress, n_fit=n_fit, n_eval=n_eval, n_boot=n_boot)
                      for spec in tqdm(list(models or DEFAULT_MODELS), desc="illusions models", disable=not progress)}}
    out["seconds"] = round(time.time() - start, 1)
    return out


def findings(result: dict[str, Any]) -> dict[str, Any]:
    """The readings the doc makes, from one model's `study` result: per OOD split, rank-4 SVD's
    same-prediction gap against seen_struct (p), one-hot's accuracy minus the original's (95 %
    CI, p), and the k-means ks whose accuracy gap (delta_gap) is significant at 0.05."""
    recs = result["simplified"]
    pick = lambda method, split, **kw: next(  # noqa: E731
        r for r in recs if r["method"] == method and r["split"] == split and all(r[k] == v for k, v in kw.items()))
    out = {}
    for split in (*DYCK_SPLITS[1:], "unseen_depth_deep"):
        svd4, oh = pick("svd", split, rank=4), pick("onehot", split)
        out[split] = {
            "svd4_same_prediction_gap": svd4["same_prediction_gap"], "svd4_same_prediction_gap_p": svd4["same_prediction_gap_p"],
            "svd4_delta_gap": svd4["delta_gap"], "svd4_delta_gap_p": svd4["delta_gap_p"],
            "onehot_minus_original": oh["delta"], "onehot_minus_original_ci": oh["delta_ci"], "onehot_minus_original_p": oh["delta_p"],
            "kmeans_significant_gap_ks": [r["k"] for r in recs if r["method"] == "kmeans" and r["split"] == split
                                          and r["delta_gap_p"] is not None and r["delta_gap_p"] < 0.05],
        }
    return out


def study(spec: str, *, progress: bool = True, n_fit: int = 1000, n_eval: int = 512, n_boot: int = 1000) -> dict[str, Any]:
    """Simplify the second-layer head of the Dyck model `spec` (SVD ranks, k-means ks, one-hot),
    fitted on `n_fit` training sequences, and measure faithfulness on `n_eval` fresh sequences per
    split scored at every closing bracket (plus `unseen_depth_deep`: one closer per sequence
    closing deeper than training); `findings` of the result under "findings"."""
    start = time.time()
    model = interp.load(spec)
    head = (model.cfg.n_layers - 1, 0)
    fit = dyck_rows(n_fit, split="train", seed=0)
    splits = _dyck_eval(n_eval, 12345, deep=True)
    ev_args = dict(reference="seen_struct", n_boot=n_boot, progress=progress)
    svd_sweep = rank_sweep(model, head, fit, splits, ranks=list(REPRO_RANKS), **ev_args)
    km_sweep = k_sweep(model, head, fit, splits, ks=list(REPRO_KS), **ev_args)
    oh = faithfulness(model, onehot(model, head), splits, reference="seen_struct", n_boot=n_boot)
    acc = METRICS.index("accuracy_original")
    out = {
        "model": spec,
        "heads": [list(head)],
        "fit": {"split": "train", "sequences": n_fit, "vectors": svd_sweep.meta["fitted_on"]["n_vectors"]},
        "eval": {"sequences_per_split": n_eval, "seed": 12345, "scored": "every closing bracket (unseen_depth_deep: one deep closer per sequence)"},
        "original": {s: float(oh.values[i, acc, 0]) for i, s in enumerate(oh.labels[0])},
        "simplified": records(svd_sweep, "svd") + records(km_sweep, "kmeans") + records(oh, "onehot"),
        "held_out_families": "unseen_struct: skeletons whose (depth, peaks) family is held out of training (dyck.family)",
        "seconds": round(time.time() - start, 1),
    }
    out["findings"] = findings(out)
    return out


def _demo_model(workdir: Path) -> tuple[Any, str]:
    if any(card.get("name") == "dyck" for card in interp.zoo.entries()):
        return interp.load("zoo:dyck"), "zoo:dyck"
    path = interp.build_tiny("gpt2", workdir / "models" / "dyck-random", words=dyck.words(20), n_layers=2, d_model=32, n_heads=1, d_mlp=128)
    return interp.load(path), "a random-weight Dyck-shaped model (zoo:dyck is not trained yet)"


def demo_section(workdir: Path) -> list[Any]:
    """Report items: faithfulness against SVD rank (one line per split) and one-hot vs original attention."""
    from interp import plot  # plotly and circuitsvis only when the demo runs

    model, name = _demo_model(Path(workdir))
    head = (model.cfg.n_layers - 1, 0)
    fit = dyck_rows(300, split="train", seed=0)
    splits = _dyck_eval(256, 12345, deep=False)
    sweep = rank_sweep(model, head, fit, splits, ranks=[1, 2, 4, 8, 16, 32], reference="seen_struct", n_boot=200, progress=False)
    oh = faithfulness(model, onehot(model, head), splits, reference="seen_struct", n_boot=200)
    keep = ["accuracy_original", "accuracy_simplified", "same_prediction", "js"]
    table = oh.to_dataframe()
    table = table[(table.quantity == "value") & table.metric.isin(keep)].pivot(index="split", columns="metric", values="value")[keep].reset_index()
    example = dyck.dyck(1, split="unseen_depth", seed=3).clean[0]
    view = compare_attention(model, onehot(model, head), example, head)
    return [
        Heading("Attention simplifiers: faithfulness in and out of distribution"),
        f"Model: {name}. The second-layer head {head} is simplified, fitted on 300 training "
        "sequences, and compared with the original on 256 fresh sequences per split, scored at "
        "every closing bracket (Friedman et al. 2024). Lines: one per split; error bars: 95 % "
        "bootstrap intervals over sequences.",
        sweep,
        Heading("One-hot attention", 3),
        table,
        view,
        plot.attention(view.patterns, list(view.tokens), head_names=list(view.names)),  # the interactive view
    ]


# ---------------------------------------------------------------------------------------------
# the doc's tables, rendered from the committed JSON (tests/test_docs.py checks every number)

_LABEL = {"svd": "SVD rank {rank}", "kmeans": "k-means k={k}", "onehot": "one-hot"}


def _p(p: float | None) -> str:
    return "—" if p is None else f"{p:.3f}"


def markdown(result: dict[str, Any]) -> str:
    """The doc's tables for a `repro` result: per model, accuracy / same-prediction / JS per split
    and simplifier, then the paired gaps the readings rest on."""
    out = []
    for spec, m in result["models"].items():
        splits = list(m["original"])
        out.append(f"#### `{spec}`: {m['fit']['sequences']} fit sequences, {m['eval']['sequences_per_split']} per split, {m['seconds']:.1f} s\n")
        out.append("Each cell: accuracy / same-prediction / JS (bits).\n")
        out.append("| simplifier | " + " | ".join(splits) + " |")
        out.append("|---|" + "---|" * len(splits))
        out.append("| original | " + " | ".join(f"{m['original'][s]:.3f} / — / —" for s in splits) + " |")
        rows: dict[str, dict[str, str]] = {}
        for r in m["simplified"]:
            label = _LABEL[r["method"]].format(rank=r["rank"], k=r["k"])
            rows.setdefault(label, {})[r["split"]] = f"{r['accuracy']:.3f} / {r['same_prediction']:.3f} / {r['js']:.3f}"
        out += [f"| {label} | " + " | ".join(cells.get(s, "—") for s in splits) + " |" for label, cells in rows.items()]
        out.append("")
        out.append("Paired gaps against seen_struct (two-sided bootstrap p over sequences):\n")
        out.append("| split | SVD rank 4: same-prediction gap (p) | SVD rank 4: accuracy gap (p) | one-hot − original accuracy [95 % CI] (p) | k-means ks with an accuracy gap at p < 0.05 |")
        out.append("|---|---|---|---|---|")
        for s, f in m["findings"].items():
            lo, hi = f["onehot_minus_original_ci"]
            ks = ", ".join(str(k) for k in f["kmeans_significant_gap_ks"]) or "none"
            out.append(f"| {s} | {f['svd4_same_prediction_gap']:.3f} ({_p(f['svd4_same_prediction_gap_p'])}) | "
                       f"{f['svd4_delta_gap']:.3f} ({_p(f['svd4_delta_gap_p'])}) | "
                       f"{f['onehot_minus_original']:.3f} [{lo:.3f}, {hi:.3f}] ({_p(f['onehot_minus_original_p'])}) | {ks} |")
        out.append("")
    return "\n".join(out)


def write_doc(doc: str | Path, data: str | Path) -> Path:
    """Replace the text between `<!-- tables:begin -->` and `<!-- tables:end -->` in the doc
    with `markdown` of the JSON `data` (written atomically)."""
    import json

    from interp.storage import fill_between

    body = markdown(json.loads(Path(data).read_text()))
    return fill_between(doc, "<!-- tables:begin -->", "<!-- tables:end -->", body)

"""Friedman et al.'s Dyck study at toy scale (`interp repro illusions`) and its demo section.

"Interpretability Illusions in the Generalization of Simplified Models" (ICML 2024): simplify the
second-layer head of a Dyck-(20, 10) model (SVD of queries and keys at several ranks, k-means at
several k, one-hot attention), fit in distribution, and measure faithfulness on seen structures,
unseen structures and unseen depths. Built on the public API of `interp.simplify` only.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import interp
from interp.results import Grid, Heading
from interp.simplify import (
    METRICS, QUANTITIES, Rows, Sweep, compare_attention, dyck_rows, faithfulness, k_sweep, onehot, rank_sweep,
)
from interp.tasks import dyck

__all__ = ["DYCK_SPLITS", "REPRO_KS", "REPRO_RANKS", "demo_section", "repro"]

REPRO_RANKS = (1, 2, 4, 8, 16, 32)
REPRO_KS = (2, 4, 8, 16, 32, 64)
DYCK_SPLITS = ("seen_struct", "unseen_struct", "unseen_depth")


def _dyck_eval(n: int, seed: int, deep: bool) -> dict[str, Rows]:
    splits = {s: dyck_rows(n, split=s, seed=seed) for s in DYCK_SPLITS}
    if deep:  # one closer per sequence, among those closing deeper than training (Task split)
        splits["unseen_depth_deep"] = Rows.of(dyck.dyck(n, split="unseen_depth", seed=seed))
    return splits


def _records(sweep_or_grid: Sweep | Grid, method: str) -> list[dict[str, Any]]:
    grid = sweep_or_grid.grid if isinstance(sweep_or_grid, Sweep) else sweep_or_grid
    v = grid.values if isinstance(sweep_or_grid, Sweep) else grid.values[None]
    params = grid.labels[0] if isinstance(sweep_or_grid, Sweep) else (None,)
    splits = grid.labels[-3]
    get = lambda p, s, m, q="value": float(v[p, s, METRICS.index(m), QUANTITIES.index(q)])  # noqa: E731
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
                "delta_gap_p": None if math.isnan(get(p, s, "delta_gap", "p_value")) else get(p, s, "delta_gap", "p_value"),
            })
    return out


def repro(progress: bool = True, *, spec: str = "zoo:dyck", n_fit: int = 1000, n_eval: int = 512, n_boot: int = 1000) -> dict[str, Any]:
    """Friedman et al.'s Dyck study at toy scale: simplify the second-layer head of the zoo
    Dyck-(20, 10) model (SVD ranks, k-means ks, one-hot), fitted on 1000 training sequences, and
    measure faithfulness on `n_eval` fresh sequences per split scored at every closing bracket
    (plus `unseen_depth_deep`: one closer per sequence closing deeper than training)."""
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
    return {
        "model": spec,
        "heads": [list(head)],
        "fit": {"split": "train", "sequences": n_fit, "vectors": svd_sweep.meta["fitted_on"]["n_vectors"]},
        "eval": {"sequences_per_split": n_eval, "seed": 12345, "scored": "every closing bracket (unseen_depth_deep: one deep closer per sequence)"},
        "original": {s: float(oh.values[i, acc, 0]) for i, s in enumerate(oh.labels[0])},
        "simplified": _records(svd_sweep, "svd") + _records(km_sweep, "kmeans") + _records(oh, "onehot"),
        "seconds": round(time.time() - start, 1),
    }


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

"""Benchmark: a full SVD rank sweep on the Dyck model, and k-means fits at several sizes.

    .venv/bin/python benchmarks/simplify.py [--spec zoo:dyck] [--quick]

Reports (1) the wall time of `interp.simplify.rank_sweep` over ranks 1..d_head on the second-layer
head (fit + evaluation on three splits), split into its fit and evaluation parts, and (2) the time
of one k-means fit (queries and keys of one head) as the number of fitted vectors N and k grow,
with the fitted log-log slope of time against N (1.0 = linear). Prints a markdown section.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import time
from datetime import date

import torch

from interp import simplify as S
from interp.simplify.simplifiers import fit_svd
from interp.model import ZOO_DIR, build_tiny, load
from interp.studies.illusions import DYCK_SPLITS
from interp.tasks import dyck


def _model(spec: str):
    if spec == "zoo:dyck" and not (ZOO_DIR / "dyck" / "config.json").exists():
        import tempfile

        path = build_tiny("gpt2", tempfile.mkdtemp() + "/dyck", words=dyck.words(20), n_layers=2, d_model=32, n_heads=1, d_mlp=128)
        return load(path), "random-weight Dyck-shaped model (zoo:dyck absent)"
    return load(spec), spec


def _timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--spec", default="zoo:dyck")
    parser.add_argument("--quick", action="store_true", help="smaller sizes (smoke run)")
    args = parser.parse_args()
    model, name = _model(args.spec)
    head = (model.cfg.n_layers - 1, 0)
    n_fit, n_eval = (100, 64) if args.quick else (1000, 512)
    fit = S.dyck_rows(n_fit, split="train", seed=0)
    splits = {s: S.dyck_rows(n_eval, split=s, seed=12345) for s in DYCK_SPLITS}

    lines = ["## simplify", "", f"{date.today()}, {platform.machine()}, {os.cpu_count()} CPUs, "
             f"{torch.get_num_threads()} torch threads, torch {torch.__version__}; model: {name}.", ""]
    _, t_collect = _timed(lambda: S.collect(model, head, fit))
    _, t_fit = _timed(lambda: fit_svd(model, head, fit, basis="separate", center=True))
    sweep, t_sweep = _timed(lambda: S.rank_sweep(model, head, fit, splits, n_boot=1000, progress=False))
    n_vec = sweep.meta["fitted_on"]["n_vectors"]
    d_head = model.cfg.d_head
    lines += [
        f"Full rank sweep (ranks 1..{d_head}, {n_fit} fit sequences = {n_vec} vectors, {len(splits)} splits x "
        f"{n_eval} sequences, 1000 bootstrap resamples): **{t_sweep:.1f} s** "
        f"({t_sweep / d_head:.2f} s per rank; collecting the fit vectors {t_collect:.2f} s, the SVD fit "
        f"{t_fit:.2f} s including collection).",
        "",
        "k-means fit (queries and keys of one head, scikit-learn KMeans, k-means++ with n_init='auto'; "
        "best of 2; N vectors resampled from fitted training positions):",
        "",
        "| N vectors | k=8 (s) | k=32 (s) |",
        "|---|---|---|",
    ]
    q, k_vecs = S.collect(model, head, S.dyck_rows(4000 if not args.quick else 400, split="train", seed=0))
    sizes = [n for n in ([1000, 4000, 16000, 64000] if not args.quick else [500, 2000, 8000]) if n <= q.shape[1] * 4]
    S.kmeans_centroids(q[0, :200], 8, seed=0)  # warm-up: sklearn import and thread-pool start
    times: dict[int, list[float]] = {8: [], 32: []}
    for n in sizes:
        idx = torch.randint(q.shape[1], (n,), generator=torch.Generator().manual_seed(n))  # resample to size N
        row = []
        for k in (8, 32):
            t = min(_timed(lambda: [S.kmeans_centroids(x[idx], k, seed=0) for x in (q[0], k_vecs[0])])[1] for _ in range(2))
            times[k].append(t)
            row.append(f"{t:.2f}")
        lines.append(f"| {n} | {' | '.join(row)} |")
    slopes = []
    for k, ts in times.items():
        xs, ys = [math.log(n) for n in sizes], [math.log(max(t, 1e-6)) for t in ts]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        slopes.append(f"k={k}: {sum((a - mx) * (b - my) for a, b in zip(xs, ys)) / sum((a - mx) ** 2 for a in xs):.2f}")
    lines += ["", f"log-log slope of fit time against N ({', '.join(slopes)}; 1.0 = linear).", ""]
    print("\n".join(lines))


if __name__ == "__main__":
    main()

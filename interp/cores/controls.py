"""Controls that could have produced a core's headline number: each effect beside the
same measurement made on something that is not the core.

* Spectra (`spectrum_controls`): the least-squares operator over time steps fitted on random
  k-planes of the same site (and on other linear codes: PCA, class means, the state itself). Any
  linear code of a Markov chain's current state gives the chain's eigenvalues, so a core's
  eigenvalue error is a finding only if random planes do worse.
* Site operators (`operator_baselines`): the identity map (adjacent residual layers are nearly
  the same vector), the same fit on shuffled rows, and the same fit between random subspaces
  of the same k.
* Held-out k (`heldout_k`): the smallest truncation of a core whose core-only logit difference on
  held-out rows reaches 99 % of the best (where adding directions stops helping), instead of the
  spectral gap on the fitted rows.
* Readout share (`readout_share`): how much of the output gradients' second moment lies on one
  direction; near 1 the site is (up to the norm) the unembedding readout and k = 1 is forced.

`beats_every_draw` is the one rule the studies use to call an effect distinguishable from its
random control: better than every draw, with at least `MIN_DRAWS` draws.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch import Tensor

from interp import run
from interp.cores import linalg
from interp.cores.analysis import both_metrics, gradients, operator_from, resolve_site
from interp.cores.results import Core
from interp.errors import InterpError
from interp.interventions import Project
from interp.tasks.base import Task

__all__ = [
    "MIN_DRAWS", "beats_every_draw", "bootstrap_r2_diff", "heldout_k", "match_eigenvalues", "operator_baselines", "readout_share",
    "sequence_activations", "spectrum_controls", "spread",
]

MIN_DRAWS = 20  # a random control's spread is reported over at least this many draws


def spread(values: Sequence[float]) -> dict[str, Any]:
    """mean, min, max and the draws themselves."""
    v = [float(x) for x in values]
    if not v:
        raise InterpError("a control spread needs at least one draw")
    return {"mean": sum(v) / len(v), "min": min(v), "max": max(v), "n": len(v), "draws": v}


def beats_every_draw(effect: float, draws: Sequence[float], *, lower_is_better: bool) -> bool:
    """True when `effect` is strictly better than every control draw (and there are >= MIN_DRAWS)."""
    if len(draws) < MIN_DRAWS:
        raise InterpError(f"{len(draws)} control draws; a spread needs at least {MIN_DRAWS}")
    return all(effect < d for d in draws) if lower_is_better else all(effect > d for d in draws)


def match_eigenvalues(found: Tensor, true: Tensor) -> tuple[list, float]:
    """Pair found and true eigenvalues (Hungarian on |difference|); (pairs, max abs error), NaN
    when the counts differ."""
    from scipy.optimize import linear_sum_assignment

    found, true = found.to(torch.complex128), true.to(torch.complex128)
    cost = (found[:, None] - true[None, :]).abs().numpy()
    rows, cols = linear_sum_assignment(cost)
    pairs = [[[float(found[r].real), float(found[r].imag)], [float(true[c].real), float(true[c].imag)]] for r, c in zip(rows, cols)]
    worst = float(cost[rows, cols].max()) if len(rows) else float("nan")
    return pairs, worst if found.numel() == true.numel() else float("nan")


def sequence_activations(model, site: str, tokens: Tensor, *, batch_size: int = 256) -> Tensor:
    """[batch, pos, d] activations at `site` at every position (rows without padding), on the CPU."""
    site = resolve_site(model, site)
    out = []
    for start in range(0, tokens.shape[0], batch_size):
        _, acts = run.cache(model, tokens[start : start + batch_size].to(model.cfg.device), [site])
        out.append(acts[site].float().cpu())
    return torch.cat(out)


def _time_error(z: Tensor, true: Tensor, start: int) -> float:
    """Max abs eigenvalue error of the least-squares map z_t -> z_{t+1} (positions >= start)."""
    x, y = z[:, start:-1].flatten(0, 1), z[:, start + 1 :].flatten(0, 1)
    op = operator_from(x, y, source="-", target="-")
    return match_eigenvalues(op.eigenvalues, true)[1]


def _onehot(tokens: Tensor, states: Tensor) -> Tensor:
    """[batch, pos, S - 1]: one-hot of each position's state, centred and cut to S - 1 columns (an
    affine code of the state: what an exact linear code of the current state is)."""
    hot = (tokens[..., None] == states).double()
    return (hot - hot.mean((0, 1)))[..., :-1]


def spectrum_controls(acts: Tensor, tokens: Tensor, true: Tensor, k: int, *, start: int = 1, n_draws: int = MIN_DRAWS,
                      seed: int = 0) -> dict[str, Any]:
    """Eigenvalue errors (max abs, matched) of the time-step operator fitted on other codes of the
    same activations [batch, pos, d]:

    random: `n_draws` random orthonormal k-planes (`linalg.random_basis(d, k, seed + i)`);
    pca: the top k principal directions (pooled positions); class_means: the span of the means
    per current state (tokens [batch, pos]); state: the one-hot code of the current state itself
    (no model: the sampling floor of the chain's estimate from these rows)."""
    if acts.shape[:2] != tokens.shape:
        raise InterpError(f"activations {tuple(acts.shape)} and tokens {tuple(tokens.shape)} must share [batch, pos]")
    acts, tokens, start = acts[:, start:], tokens[:, start:], 0  # only the positions the operator is fitted on (no BOS)
    flat = acts.flatten(0, 1).double()
    mean = flat.mean(0)
    centred = acts.double() - mean
    d = acts.shape[-1]
    random = [_time_error(centred @ linalg.random_basis(d, k, seed + i).double(), true, start) for i in range(n_draws)]
    _, _, vt = torch.linalg.svd(flat - mean, full_matrices=False)
    states = torch.unique(tokens)
    means = torch.stack([flat[tokens.flatten() == s].mean(0) for s in states]) - mean
    q, _ = torch.linalg.qr((means - means.mean(0)).T)
    return {"random": spread(random), "pca": _time_error(centred @ vt[:k].T, true, start),
            "class_means": _time_error(centred @ q[:, : min(k, len(states) - 1)], true, start),
            "state": _time_error(_onehot(tokens, states), true, start), "n_states": int(len(states))}


def _r2(pred: Tensor, y: Tensor) -> float:
    return linalg.r2_score(pred.float(), y.float())


def bootstrap_r2_diff(pred_a: Tensor, pred_b: Tensor, y: Tensor, *, n_boot: int = 1000, seed: int = 0,
                      level: float = 0.95) -> list[float]:
    """The percentile bootstrap interval (`level`) of R²(pred_a, y) - R²(pred_b, y) over rows of y resampled
    with replacement (`n_boot` resamples): how far apart two predictions of the same held-out rows are."""
    g = torch.Generator().manual_seed(seed)
    diffs = []
    for _ in range(n_boot):
        idx = torch.randint(len(y), (len(y),), generator=g, device="cpu").to(y.device)  # a CPU generator: same rows on any device
        diffs.append(_r2(pred_a[idx], y[idx]) - _r2(pred_b[idx], y[idx]))
    d = torch.tensor(diffs, dtype=torch.float64, device="cpu")
    q = (1 - level) / 2
    return [float(d.quantile(q)), float(d.quantile(1 - q))]


def operator_baselines(model, core_in: Core, core_out: Core, fit: Task, test: Task, *, n_draws: int = MIN_DRAWS,
                       seed: int = 0, n_boot: int = 1000) -> dict[str, Any]:
    """Held-out R² (on `test`) of the site-to-site operator beside its baselines:

    identity: core_out's coordinates of the *input* site's activation, z_out ≈ B_outᵀ(h_in − μ_in)
    (the residual stream carried unchanged); identity_through_core: only the input core's part of
    h_in carried, B_outᵀ P_in (h_in − μ_in); shuffled_rows: the least-squares fit on `fit` with its
    target rows permuted; random: the fit between random subspaces of the same k_in and k_out at
    the two sites (`n_draws` draws, `linalg.random_basis`). `*_ci`: 95 % bootstrap intervals over the
    held-out rows (`bootstrap_r2_diff`, `n_boot` resamples) of the operator's R² minus each map's."""
    from interp.cores.analysis import activations

    h_in_fit, h_out_fit = activations(model, fit, core_in.site), activations(model, fit, core_out.site)
    h_in, h_out = activations(model, test, core_in.site), activations(model, test, core_out.site)
    x_fit, y_fit = core_in.coordinates(h_in_fit), core_out.coordinates(h_out_fit)
    y = core_out.coordinates(h_out)
    op = operator_from(x_fit, y_fit, source=core_in.site, target=core_out.site)
    centred = h_in - core_in.mean
    ident_pred = centred @ core_out.basis
    through_pred = (centred @ core_in.basis) @ (core_in.basis.T @ core_out.basis)
    op_pred = op(core_in.coordinates(h_in))
    perm = torch.randperm(len(y_fit), generator=torch.Generator().manual_seed(seed))
    shuffled = operator_from(x_fit, y_fit[perm], source=core_in.site, target=core_out.site)
    d = core_in.d_model
    random = []
    for i in range(n_draws):
        b_in, b_out = linalg.random_basis(d, core_in.k, seed + i), linalg.random_basis(d, core_out.k, seed + 1000 + i)
        m = operator_from((h_in_fit - core_in.mean) @ b_in, (h_out_fit - core_out.mean) @ b_out, source="-", target="-")
        random.append(_r2(m((h_in - core_in.mean) @ b_in), (h_out - core_out.mean) @ b_out))
    return {"operator_r2_heldout": _r2(op_pred, y), "identity_r2": _r2(ident_pred, y),
            "identity_through_core_r2": _r2(through_pred, y), "shuffled_rows_r2": _r2(shuffled(core_in.coordinates(h_in)), y),
            "random_subspaces_r2": spread(random),
            "operator_minus_identity_ci": bootstrap_r2_diff(op_pred, ident_pred, y, n_boot=n_boot, seed=seed),
            "operator_minus_identity_through_core_ci": bootstrap_r2_diff(op_pred, through_pred, y, n_boot=n_boot, seed=seed),
            "n_heldout_rows": int(len(y))}


def heldout_k(model, core: Core, task: Task, *, fraction: float = 0.99) -> dict[str, Any]:
    """k read off held-out rows: the core-only logit difference on `task` for each truncation
    core.truncated(j), j = 1..core.k (one batched `run.evaluate`), and the smallest j reaching
    `fraction` of the best. Pass a core extracted with a generous k (e.g. k=16)."""
    resolve_site(model, core.site)
    task = task.to(model.cfg.device)
    variants = [[]] + [[Project(core.site, core.basis[:, :j], core.mean, "core_only", positions=task.answer_pos)]
                       for j in range(1, core.k + 1)]
    measured = run.evaluate(model, task.clean, variants, both_metrics(task), answer_pos=task.answer_pos, progress=False)
    ld = [float(v) for v in measured[1:, 0]]
    best = max(ld)
    k = next(j + 1 for j, v in enumerate(ld) if v >= fraction * best) if best > 0 else None
    return {"k": k, "fraction": fraction, "full_logit_diff": float(measured[0, 0]), "core_only_logit_diff": ld,
            "core_only_accuracy": [float(v) for v in measured[1:, 1]]}


def readout_share(model, task: Task, site: str, *, output: str = "metric") -> dict[str, Any]:
    """Share of the output gradients' second moment on their top direction at `site` (1: every
    example's gradient points one way, as at the last residual layer, where the metric is the
    unembedding difference read through the final norm), and that direction."""
    _, g = gradients(model, task, site, output=output)
    s = torch.linalg.svdvals(g.double())
    _, _, vt = torch.linalg.svd(g.double(), full_matrices=False)
    return {"share": float(s[0] ** 2 / (s**2).sum()), "rank": int(torch.linalg.matrix_rank(g.double(), rtol=1e-4)),
            "direction": vt[0].float()}

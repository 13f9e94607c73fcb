"""Pure tensor functions behind algorithmic cores: no model, no hooks.

The projection interventions themselves (`project`, `Project`) live in `interp.interventions`.

Shapes: activations X [n, d] (one row per example), output gradients G [m, d] (one row per
example and output), core coordinates Z [n, k]. Everything is computed in float64 and returned
as float32 unless stated.
"""

from __future__ import annotations

import math

import torch
from jaxtyping import Float
from torch import Tensor

from interp.errors import InterpError

__all__ = [
    "balanced_truncation", "cca", "cca_map", "choose_k", "lstsq_map", "pca", "principal_angles", "procrustes_map",
    "r2_score", "random_basis", "sqrt_factor",
]

_RTOL = 1e-6  # singular values below rtol * largest count as zero when choosing k


def _f64(x: Tensor) -> Tensor:
    return x.detach().to(torch.float64).cpu()


def sqrt_factor(gram: Float[Tensor, "d d"]) -> Float[Tensor, "d d"]:
    """A square-root factor L with L @ L.T == gram, for a PSD matrix that may be singular.

    A Cholesky factor needs a positive-definite Gramian; activation covariances of small models
    are often rank-deficient (a Markov model's residual takes a handful of values), so this uses
    the symmetric eigen-factor U sqrt(max(lambda, 0)) U.T instead, which is a valid factor always.
    """
    g = _f64(gram)
    g = (g + g.T) / 2
    evals, evecs = torch.linalg.eigh(g)
    return (evecs * evals.clamp(min=0).sqrt()) @ evecs.T


def balanced_truncation(
    activations: Float[Tensor, "n d"], gradients: Float[Tensor, "m d"]
) -> tuple[Float[Tensor, "d d"], Float[Tensor, " d"]]:
    """Balanced truncation of (reachability, observability) Gramians estimated from samples.

    W_x = Cov(activations) = L_x L_x.T (reachability) and W_g = E[g g.T] = L_g L_g.T
    (observability, from the task-output gradients). The Hankel singular values are those of
    L_g.T L_x = U S V.T. Balanced truncation keeps the states x = S_k.T (h - mu) with
    S_k = L_g U_k S_k^{-1/2} (the observable side, what the task output reads) reconstructed along
    T_k = L_x V_k S_k^{-1/2} (the reachable side). The core is the span of S_k: orthogonal
    projection onto it keeps (core only) or removes (core removed) exactly the part of h the
    linearised output reads, within the directions that the activations actually vary along.
    Returns (an orthonormal basis whose first k columns span S_k for every k, [d, d]; the Hankel
    singular values S, [d]).
    """
    x, g = _f64(activations), _f64(gradients)
    if x.ndim != 2 or g.ndim != 2 or x.shape[1] != g.shape[1]:
        raise InterpError(f"activations {tuple(x.shape)} and gradients {tuple(g.shape)} must be [n, d] and [m, d] with the same d")
    xc = x - x.mean(0)
    l_x = sqrt_factor(xc.T @ xc / max(1, x.shape[0] - 1))
    l_g = sqrt_factor(g.T @ g / max(1, g.shape[0]))
    u, s, _ = torch.linalg.svd(l_g.T @ l_x)
    directions = l_g @ u  # [d, d]; scaling columns by S^{-1/2} does not change the nested spans
    return _nested_orthonormal(directions, s), s.float()


def _nested_orthonormal(directions: Tensor, spectrum: Tensor) -> Float[Tensor, "d d"]:
    """Gram-Schmidt (QR) of the columns in order, so the first k columns span the first k
    directions; columns for zero singular values are completed arbitrarily but orthonormally."""
    q, r = torch.linalg.qr(directions)
    signs = torch.sign(torch.diagonal(r))
    signs[signs == 0] = 1
    return (q * signs).float()


def pca(activations: Float[Tensor, "n d"]) -> tuple[Float[Tensor, "d d"], Float[Tensor, " d"]]:
    """Principal directions of the centred activations and their singular values (descending)."""
    x = _f64(activations)
    xc = x - x.mean(0)
    _, s, vh = torch.linalg.svd(xc / math.sqrt(max(1, x.shape[0] - 1)), full_matrices=True)
    spectrum = torch.zeros(x.shape[1], dtype=torch.float64)
    spectrum[: s.shape[0]] = s
    return vh.T.float(), spectrum.float()


def choose_k(spectrum: Float[Tensor, " r"], *, max_k: int | None = None, rtol: float = _RTOL) -> int:
    """k at the largest spectral gap: argmax over i of s_i / s_{i+1} (values below rtol * s_1 are
    floored there, so numerical zeros make no gap of their own). At least 1, at most max_k."""
    s = _f64(spectrum).flatten()
    if s.numel() == 0 or float(s[0]) <= 0:
        raise InterpError("the spectrum is empty or all zero: the task output does not depend on this site")
    floor = float(s[0]) * rtol
    s = s.clamp(min=floor)
    limit = s.numel() - 1 if max_k is None else min(max_k, s.numel() - 1)
    if limit < 1:
        return 1
    ratios = s[:limit] / s[1 : limit + 1]
    return int(ratios.argmax()) + 1


def principal_angles(a: Float[Tensor, "d ka"], b: Float[Tensor, "d kb"]) -> Float[Tensor, " k"]:
    """Principal angles (radians, ascending) between the column spans of two [d, k] bases, via
    TransformerLens's projection kernel."""
    from transformer_lens.tools.analysis.projection_kernel import orthonormal_subspace, projection_kernel

    if a.shape[0] != b.shape[0]:
        raise InterpError(f"principal angles need the same ambient width: got bases {tuple(a.shape)} and {tuple(b.shape)}")
    sa = orthonormal_subspace(_f64(a), rank=a.shape[1])
    sb = orthonormal_subspace(_f64(b), rank=b.shape[1])
    return projection_kernel(sa, sb).angles.float()


def random_basis(d: int, k: int, seed: int) -> Float[Tensor, "d k"]:
    """A seeded random orthonormal [d, k] basis (TransformerLens's interchange.random_basis)."""
    from transformer_lens.tools.analysis.interchange import random_basis as tl_random_basis

    return tl_random_basis(d, k, seed).float()


# ---------------------------------------------------------------------------------------------
# maps between coordinate sets: za [n, ka] -> zb [n, kb]


def r2_score(pred: Float[Tensor, "n k"], target: Float[Tensor, "n k"]) -> float:
    """1 - SS_res / SS_tot pooled over all output dimensions (target centred per column)."""
    t, p = _f64(target), _f64(pred)
    ss_tot = float(((t - t.mean(0)) ** 2).sum())
    if ss_tot <= 0:
        return float("nan")
    return 1.0 - float(((t - p) ** 2).sum()) / ss_tot


def lstsq_map(
    za: Float[Tensor, "n ka"], zb: Float[Tensor, "n kb"], *, ridge: float = 0.0
) -> tuple[Float[Tensor, "ka kb"], Float[Tensor, " kb"]]:
    """(M, c) minimising ||za M + c - zb||^2 + ridge * tr(za.T za)/ka * ||M||^2 (ridge is relative)."""
    a, b = _f64(za), _f64(zb)
    ma, mb = a.mean(0), b.mean(0)
    ac, bc = a - ma, b - mb
    gram = ac.T @ ac
    lam = ridge * float(torch.trace(gram)) / max(1, gram.shape[0])
    m = torch.linalg.solve(gram + lam * torch.eye(gram.shape[0], dtype=gram.dtype), ac.T @ bc) if lam > 0 else torch.linalg.lstsq(ac, bc).solution
    return m.float(), (mb - ma @ m).float()


def procrustes_map(
    za: Float[Tensor, "n ka"], zb: Float[Tensor, "n kb"]
) -> tuple[Float[Tensor, "ka kb"], Float[Tensor, " kb"]]:
    """(s R, c): the scaled (semi-)orthogonal R and scale s minimising ||s (za - mean) R - (zb - mean)||."""
    a, b = _f64(za), _f64(zb)
    ma, mb = a.mean(0), b.mean(0)
    ac, bc = a - ma, b - mb
    u, s, vh = torch.linalg.svd(ac.T @ bc, full_matrices=False)
    rot = u @ vh  # [ka, kb]
    denom = float((ac**2).sum())
    scale = float(s.sum()) / denom if denom > 0 else 1.0
    m = scale * rot
    return m.float(), (mb - ma @ m).float()


def cca(
    za: Float[Tensor, "n ka"], zb: Float[Tensor, "n kb"], *, eps: float = 1e-9
) -> tuple[Float[Tensor, " r"], Float[Tensor, "ka r"], Float[Tensor, "kb r"]]:
    """Canonical correlations (descending) and the canonical directions of each side."""
    a, b = _f64(za), _f64(zb)
    ac, bc = a - a.mean(0), b - b.mean(0)
    n = max(1, a.shape[0] - 1)

    def inv_sqrt(c: Tensor) -> Tensor:
        evals, evecs = torch.linalg.eigh((c + c.T) / 2)
        keep = evals > eps * max(float(evals.max()), eps)
        return (evecs[:, keep] / evals[keep].sqrt()) @ evecs[:, keep].T

    wa, wb = inv_sqrt(ac.T @ ac / n), inv_sqrt(bc.T @ bc / n)
    u, s, vh = torch.linalg.svd(wa @ (ac.T @ bc / n) @ wb, full_matrices=False)
    return s.clamp(0, 1).float(), (wa @ u).float(), (wb @ vh.T).float()


def cca_map(
    za: Float[Tensor, "n ka"], zb: Float[Tensor, "n kb"]
) -> tuple[Float[Tensor, "ka kb"], Float[Tensor, " kb"]]:
    """The map through canonical variates: za's variates times their correlations predict zb's,
    which are mapped back to zb coordinates."""
    rho, dir_a, dir_b = cca(za, zb)
    m = _f64(dir_a) @ torch.diag(_f64(rho)) @ torch.linalg.pinv(_f64(dir_b))
    ma, mb = _f64(za).mean(0), _f64(zb).mean(0)
    return m.float(), (mb - ma @ m).float()

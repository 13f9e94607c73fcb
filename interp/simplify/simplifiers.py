"""The three simplifiers, each an intervention (`interp.interventions` protocol), and their fits.

A simplifier is a frozen dataclass of data: the heads it simplifies, what it replaces their
vectors by, the hook names it acts on (`sites`), and `__call__(act, *, site, start)`, the new
activation at one of them. `interp.run` applies it like any other intervention:

    run.logits(model, tokens, [s])        run.cache(model, tokens, names, [s])
    with run.intervened(model, [s]): ...  run.evaluate(model, tokens, [[s1], [s2]], metric)

`interp.results.save(s, path)` / `interp.results.load(path)` store and restore one; `meta` records
what it was fitted on.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from interp.errors import InterpError
from interp.results import result
from interp.simplify.core import (
    HeadSpec, Rows, collect, fit_meta, heads_of, kmeans_centroids, kv_heads_of, nearest, onehot_scores,
    project, qk_site, svd_basis,
)
from interp.sites import check_tuples, hook_name, kv_head_of, layer_of
from interp.tasks.base import Task

__all__ = [
    "KMeansFit", "KMeansSimplifier", "OneHotSimplifier", "SVDFit", "SVDSimplifier", "Simplifier", "fit_kmeans",
    "fit_svd", "kmeans", "onehot", "svd",
]


# ---------------------------------------------------------------------------------------------
# simplifiers


def _pairs(value: Any, what: str) -> tuple[tuple[int, int], ...]:
    pairs = check_tuples(value, 2, what, "(layer, head)")
    try:  # operator.index takes numpy and 0-d torch integers but refuses 1.5 (int() would truncate it)
        return tuple((operator.index(a), operator.index(b)) for a, b in pairs)
    except TypeError:
        raise InterpError(f"{what} must be (layer, head) pairs of ints, got {value!r}") from None


def _heads_text(heads: tuple[tuple[int, int], ...]) -> str:
    """(layer, head) pairs as LlHh, the first eight then a count."""
    shown = ", ".join(f"L{l}H{h}" for l, h in heads[:8])
    return f"[{shown}{f', ... {len(heads) - 8} more' if len(heads) > 8 else ''}]"


def _check_rows(what: str, t: Tensor, n: int, ndim: int) -> None:
    if t.ndim != ndim or t.shape[0] != n:
        raise InterpError(f"{what} has shape {tuple(t.shape)}: expected {ndim} axes, the first one per head ({n})")


class _Vectors:
    """Shared by SVD and k-means: replace the query vectors of `heads` and the key vectors of
    `kv_heads` at hook_q / hook_k (hook_rot_q / hook_rot_k when `rotary`)."""

    heads: tuple[tuple[int, int], ...]
    kv_heads: tuple[tuple[int, int], ...]
    rotary: bool

    def _site(self, layer: int, which: str) -> str:
        return f"blocks.{layer}.attn.hook_rot_{which}" if self.rotary else hook_name(which, layer)

    @property
    def sites(self) -> tuple[str, ...]:
        names = [self._site(layer, "q") for layer, _ in self.heads] + [self._site(layer, "k") for layer, _ in self.kv_heads]
        return tuple(dict.fromkeys(names))

    @property
    def first_pos(self) -> int:
        return 0

    @property
    def d_head(self) -> int:
        raise NotImplementedError

    def _replace(self, x: Tensor, which: str, row: int) -> Tensor:
        raise NotImplementedError

    def __call__(self, act: Tensor, *, site: str, start: int = 0) -> Tensor:
        which = "q" if site.endswith("q") else "k"
        if act.ndim != 4 or act.shape[-1] != self.d_head:
            raise InterpError(f"the simplifier was fitted with d_head={self.d_head} but {site} has shape "
                              f"{tuple(act.shape)} (d_head={act.shape[-1]}); apply it to the model it was fitted on")
        layer = layer_of(site)
        out = act.clone()
        for row, (l, head) in enumerate(self.heads if which == "q" else self.kv_heads):
            if l != layer:
                continue
            if head >= act.shape[2]:
                raise InterpError(f"head {head} is out of range: {site} has heads 0..{act.shape[2] - 1}")
            out[:, :, head] = self._replace(act[:, :, head], which, row)
        return out


@result
@dataclass(frozen=True)
class SVDSimplifier(_Vectors):
    """Queries and keys projected onto top-`rank` singular subspaces fitted in distribution.

    q_basis[i] is [d_head, rank] for heads[i]; k_basis[j] for kv_heads[j]; the means are zero
    when center=False. With basis="shared", a head's queries and its kv head's keys share one
    subspace (and mean) fitted on both together.
    """

    heads: tuple[tuple[int, int], ...]
    kv_heads: tuple[tuple[int, int], ...]
    rank: int
    basis: str
    center: bool
    q_basis: Float[Tensor, "head d_head rank"]
    k_basis: Float[Tensor, "kv_head d_head rank"]
    q_mean: Float[Tensor, "head d_head"]
    k_mean: Float[Tensor, "kv_head d_head"]
    rotary: bool = False
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "heads", _pairs(self.heads, "heads"))
        object.__setattr__(self, "kv_heads", _pairs(self.kv_heads, "kv_heads"))
        for what, t, n, ndim in (("q_basis", self.q_basis, len(self.heads), 3), ("k_basis", self.k_basis, len(self.kv_heads), 3),
                                 ("q_mean", self.q_mean, len(self.heads), 2), ("k_mean", self.k_mean, len(self.kv_heads), 2)):
            _check_rows(what, t, n, ndim)
        if self.q_basis.shape[2] != self.rank or self.k_basis.shape[2] != self.rank:
            raise InterpError(f"bases {tuple(self.q_basis.shape)} and {tuple(self.k_basis.shape)} must end in rank={self.rank}")

    @property
    def d_head(self) -> int:
        return self.q_basis.shape[1]

    def _replace(self, x: Tensor, which: str, row: int) -> Tensor:
        if which == "q":
            return project(x, self.q_basis[row], self.q_mean[row])
        return project(x, self.k_basis[row], self.k_mean[row])

    def describe(self) -> str:
        return f"svd rank {self.rank} ({self.basis}{', centred' if self.center else ''})"

    def __repr__(self) -> str:
        return (f"SVDSimplifier(rank={self.rank}, basis={self.basis!r}, center={self.center}, "
                f"heads={_heads_text(self.heads)}, kv_heads={_heads_text(self.kv_heads)}, rotary={self.rotary})")


@result
@dataclass(frozen=True)
class KMeansSimplifier(_Vectors):
    """Queries and keys replaced by their nearest of `k` centroids, fitted separately."""

    heads: tuple[tuple[int, int], ...]
    kv_heads: tuple[tuple[int, int], ...]
    k: int
    seed: int
    q_centroids: Float[Tensor, "head k d_head"]
    k_centroids: Float[Tensor, "kv_head k d_head"]
    rotary: bool = False
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "heads", _pairs(self.heads, "heads"))
        object.__setattr__(self, "kv_heads", _pairs(self.kv_heads, "kv_heads"))
        _check_rows("q_centroids", self.q_centroids, len(self.heads), 3)
        _check_rows("k_centroids", self.k_centroids, len(self.kv_heads), 3)

    @property
    def d_head(self) -> int:
        return self.q_centroids.shape[2]

    def _replace(self, x: Tensor, which: str, row: int) -> Tensor:
        return nearest(x, (self.q_centroids if which == "q" else self.k_centroids)[row])

    def describe(self) -> str:
        return f"k-means k={self.k}"

    def __repr__(self) -> str:
        return (f"KMeansSimplifier(k={self.k}, seed={self.seed}, heads={_heads_text(self.heads)}, "
                f"kv_heads={_heads_text(self.kv_heads)}, rotary={self.rotary})")


@result
@dataclass(frozen=True)
class OneHotSimplifier:
    """Each attention row of the chosen heads replaced by a one-hot at the argmax of its scores
    (at hook_attn_scores: the argmax keeps score 0, the rest -inf)."""

    heads: tuple[tuple[int, int], ...]
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "heads", _pairs(self.heads, "heads"))

    @property
    def sites(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(hook_name("attn_scores", layer) for layer, _ in self.heads))

    @property
    def first_pos(self) -> int:
        return 0

    def __call__(self, act: Tensor, *, site: str, start: int = 0) -> Tensor:
        layer = layer_of(site)
        idx = [head for l, head in self.heads if l == layer]
        if idx and max(idx) >= act.shape[1]:
            raise InterpError(f"head {max(idx)} is out of range: {site} has heads 0..{act.shape[1] - 1}")
        out = act.clone()  # [batch, head, dest, src]
        out[:, idx] = onehot_scores(act[:, idx])
        return out

    def describe(self) -> str:
        return "one-hot"

    def __repr__(self) -> str:
        return f"OneHotSimplifier(heads={_heads_text(self.heads)})"


Simplifier = SVDSimplifier | KMeansSimplifier | OneHotSimplifier


# ---------------------------------------------------------------------------------------------
# fitting


def _rotary(model) -> bool:
    return qk_site(model, 0, "q").endswith("rot_q")


def _check_rank(rank: Any, d_head: int) -> None:
    if isinstance(rank, bool) or not isinstance(rank, int) or not 1 <= rank <= d_head:
        raise InterpError(f"rank={rank!r} is out of range: choose 1..d_head={d_head}")


@dataclass(frozen=True)
class SVDFit:
    """Full-rank bases from one pass over the data (`fit_svd`); `at(rank)` truncates them."""

    heads: tuple[tuple[int, int], ...]
    kv_heads: tuple[tuple[int, int], ...]
    basis: str
    center: bool
    q_v: Tensor  # [head, d_head, d_head]
    k_v: Tensor  # [kv_head, d_head, d_head]
    q_mean: Tensor
    k_mean: Tensor
    rotary: bool
    meta: dict[str, Any]

    def at(self, rank: int) -> SVDSimplifier:
        _check_rank(rank, self.q_v.shape[1])
        return SVDSimplifier(
            self.heads, self.kv_heads, rank, self.basis, self.center,
            self.q_v[..., :rank].contiguous(), self.k_v[..., :rank].contiguous(),
            self.q_mean, self.k_mean, self.rotary, self.meta,
        )


def fit_svd(model, heads: HeadSpec, data: Task | Rows, *, basis: str = "separate", center: bool = True) -> SVDFit:
    """SVD of the queries and keys of `heads` on `data`, at full rank (see `svd`)."""
    if basis not in ("separate", "shared"):
        raise InterpError(f"basis={basis!r} is not one of 'separate', 'shared'")
    heads = heads_of(model, heads)
    kv = kv_heads_of(model, heads)
    q, k = collect(model, heads, data)  # [head, n, d], [kv_head, n, d]
    if basis == "separate":
        qf = [svd_basis(x, center) for x in q]
        kf = [svd_basis(x, center) for x in k]
    else:  # one subspace per kv group: its keys and the queries of its chosen heads together
        group = [kv.index((layer, kv_head_of(model, h))) for layer, h in heads]
        kf = [svd_basis(torch.cat([k[j], *[q[i] for i, g in enumerate(group) if g == j]]), center) for j in range(len(kv))]
        qf = [kf[g] for g in group]
    meta = {**fit_meta(model, data, q.shape[1]), "q_singular_values": [f[1].tolist() for f in qf],
            "k_singular_values": [f[1].tolist() for f in kf]}
    return SVDFit(
        heads, kv, basis, center,
        torch.stack([f[0] for f in qf]), torch.stack([f[0] for f in kf]),
        torch.stack([f[2] for f in qf]), torch.stack([f[2] for f in kf]), _rotary(model), meta,
    )


def svd(model, heads: HeadSpec, data: Task | Rows, *, rank: int, basis: str = "separate", center: bool = True) -> SVDSimplifier:
    """Fit a rank-`rank` SVD simplifier of the queries and keys of `heads` on `data`.

    basis="separate" fits queries and keys their own subspaces; "shared" fits one to both.
    center=True projects onto an affine subspace through the fitted mean.
    """
    _check_rank(rank, model.cfg.d_head)
    return fit_svd(model, heads, data, basis=basis, center=center).at(rank)


@dataclass(frozen=True)
class KMeansFit:
    """Queries and keys collected once (`fit_kmeans`); `at(k)` clusters them into k each."""

    heads: tuple[tuple[int, int], ...]
    kv_heads: tuple[tuple[int, int], ...]
    q: Tensor  # [head, n, d_head]
    k_vecs: Tensor  # [kv_head, n, d_head]
    seed: int
    rotary: bool
    meta: dict[str, Any]

    def check(self, k: Any) -> None:
        """InterpError unless 1 <= k <= the number of fitted vectors."""
        n = self.q.shape[1]
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= n:
            raise InterpError(f"k={k!r} is out of range: choose 1..{n}, the number of fitted vectors")

    def at(self, k: int) -> KMeansSimplifier:
        self.check(k)
        return KMeansSimplifier(
            self.heads, self.kv_heads, k, self.seed,
            torch.stack([kmeans_centroids(x, k, self.seed) for x in self.q]),
            torch.stack([kmeans_centroids(x, k, self.seed) for x in self.k_vecs]),
            self.rotary, self.meta,
        )


def fit_kmeans(model, heads: HeadSpec, data: Task | Rows, *, seed: int = 0) -> KMeansFit:
    """The queries and keys of `heads` on `data`, ready to cluster at any k (see `kmeans`)."""
    heads = heads_of(model, heads)
    q, k_vecs = collect(model, heads, data)
    return KMeansFit(heads, kv_heads_of(model, heads), q, k_vecs, seed, _rotary(model), fit_meta(model, data, q.shape[1]))


def kmeans(model, heads: HeadSpec, data: Task | Rows, *, k: int, seed: int = 0) -> KMeansSimplifier:
    """Fit a k-means simplifier: queries and keys of `heads` clustered separately into k each."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise InterpError(f"k={k!r} is out of range: choose 1..the number of fitted vectors")
    return fit_kmeans(model, heads, data, seed=seed).at(k)


def onehot(model, heads: HeadSpec) -> OneHotSimplifier:
    """One-hot attention on `heads` (needs no data)."""
    return OneHotSimplifier(heads_of(model, heads), {"model": str(getattr(model.cfg, "model_name", "")), "data": None})

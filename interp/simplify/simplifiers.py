"""The three simplifiers (frozen dataclasses: data, saved to safetensors + JSON) and their fits."""

from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
from jaxtyping import Float
from safetensors import safe_open
from torch import Tensor

from interp.hooks import hooks, kv_head_of
from interp.results import write_tensors_atomic
from interp.simplify.core import (
    HeadSpec, Rows, _by_layer, _check_model, _describe_fit, _heads, _kv_heads, _site, collect,
    kmeans_centroids, nearest, onehot_scores, project, svd_basis,
)
from interp.tasks.base import Task

_FORMAT = "interp.simplify/1"


# ---------------------------------------------------------------------------------------------
# simplifiers


def _save(path: str | Path, kind: str, tensors: dict[str, Tensor], fields: dict[str, Any]) -> Path:
    header = {"kind": kind, **fields}
    write_tensors_atomic(path, {k: v.contiguous() for k, v in tensors.items()}, {"format": _FORMAT, "simplifier": json.dumps(header)})
    return Path(path)


def _read(path: str | Path) -> tuple[dict[str, Any], dict[str, Tensor]]:
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata() or {}
        if meta.get("format") != _FORMAT:
            raise ValueError(f"{path} is not an interp simplifier file (format {meta.get('format')!r}, want {_FORMAT!r})")
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    header = json.loads(meta["simplifier"])
    header["heads"] = tuple(tuple(h) for h in header["heads"])
    if "kv_heads" in header:
        header["kv_heads"] = tuple(tuple(h) for h in header["kv_heads"])
    return header, tensors


def _vector_hooks(model, heads, kv_heads, fn_q: Callable[[Tensor, int], Tensor], fn_k: Callable[[Tensor, int], Tensor]) -> list:
    """Hooks replacing chosen heads' q (and kv heads' k) vectors: fn(vectors [b, p, d], row)."""

    def make(pairs: list[tuple[int, int]], fn: Callable[[Tensor, int], Tensor]):
        def hook_fn(act: Tensor, *, hook) -> Tensor:
            act = act.clone()
            for row, head in pairs:
                act[:, :, head] = fn(act[:, :, head], row)
            return act

        return hook_fn

    out = []
    for layer, pairs in _by_layer(heads).items():
        out.append((_site(model, layer, "q"), make(pairs, fn_q)))
    for layer, pairs in _by_layer(kv_heads).items():
        out.append((_site(model, layer, "k"), make(pairs, fn_k)))
    return out


@dataclass(frozen=True)
class SVDSimplifier:
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
    fitted_on: dict[str, Any] = field(default_factory=dict)

    def hooks(self, model) -> list:
        _check_model(model, self.heads, self.q_basis.shape[1])
        return _vector_hooks(
            model, self.heads, self.kv_heads,
            lambda x, i: project(x, self.q_basis[i], self.q_mean[i]),
            lambda x, j: project(x, self.k_basis[j], self.k_mean[j]),
        )

    @contextmanager
    def apply(self, model) -> Iterator[object]:
        with hooks(model, self.hooks(model)):
            yield model

    def describe(self) -> str:
        return f"svd rank {self.rank} ({self.basis}{', centred' if self.center else ''})"

    def save(self, path: str | Path) -> Path:
        t = {"q_basis": self.q_basis, "k_basis": self.k_basis, "q_mean": self.q_mean, "k_mean": self.k_mean}
        f = {"heads": self.heads, "kv_heads": self.kv_heads, "rank": self.rank, "basis": self.basis, "center": self.center, "fitted_on": self.fitted_on}
        return _save(path, "svd", t, f)

    @classmethod
    def load(cls, path: str | Path) -> SVDSimplifier:
        header, t = _read(path)
        if header.pop("kind") != "svd":
            raise ValueError(f"{path} holds a different simplifier; use interp.simplify.load")
        return cls(**header, **t)


@dataclass(frozen=True)
class KMeansSimplifier:
    """Queries and keys replaced by their nearest of `k` centroids, fitted separately."""

    heads: tuple[tuple[int, int], ...]
    kv_heads: tuple[tuple[int, int], ...]
    k: int
    seed: int
    q_centroids: Float[Tensor, "head k d_head"]
    k_centroids: Float[Tensor, "kv_head k d_head"]
    fitted_on: dict[str, Any] = field(default_factory=dict)

    def hooks(self, model) -> list:
        _check_model(model, self.heads, self.q_centroids.shape[2])
        return _vector_hooks(
            model, self.heads, self.kv_heads,
            lambda x, i: nearest(x, self.q_centroids[i]),
            lambda x, j: nearest(x, self.k_centroids[j]),
        )

    @contextmanager
    def apply(self, model) -> Iterator[object]:
        with hooks(model, self.hooks(model)):
            yield model

    def describe(self) -> str:
        return f"k-means k={self.k}"

    def save(self, path: str | Path) -> Path:
        t = {"q_centroids": self.q_centroids, "k_centroids": self.k_centroids}
        f = {"heads": self.heads, "kv_heads": self.kv_heads, "k": self.k, "seed": self.seed, "fitted_on": self.fitted_on}
        return _save(path, "kmeans", t, f)

    @classmethod
    def load(cls, path: str | Path) -> KMeansSimplifier:
        header, t = _read(path)
        if header.pop("kind") != "kmeans":
            raise ValueError(f"{path} holds a different simplifier; use interp.simplify.load")
        return cls(**header, **t)


@dataclass(frozen=True)
class OneHotSimplifier:
    """Each attention row of the chosen heads replaced by a one-hot at the argmax of its scores."""

    heads: tuple[tuple[int, int], ...]
    fitted_on: dict[str, Any] = field(default_factory=dict)

    def hooks(self, model) -> list:
        _check_model(model, self.heads, None)
        out = []
        for layer, pairs in _by_layer(self.heads).items():
            idx = [head for _, head in pairs]

            def hook_fn(scores: Tensor, *, hook, idx: list[int] = idx) -> Tensor:
                scores = scores.clone()  # [batch, head, dest, src]
                scores[:, idx] = onehot_scores(scores[:, idx])
                return scores

            out.append((f"blocks.{layer}.attn.hook_attn_scores", hook_fn))
        return out

    @contextmanager
    def apply(self, model) -> Iterator[object]:
        with hooks(model, self.hooks(model)):
            yield model

    def describe(self) -> str:
        return "one-hot"

    def save(self, path: str | Path) -> Path:
        return _save(path, "onehot", {"heads": torch.tensor(self.heads)}, {"heads": self.heads, "fitted_on": self.fitted_on})

    @classmethod
    def load(cls, path: str | Path) -> OneHotSimplifier:
        header, _ = _read(path)
        if header.pop("kind") != "onehot":
            raise ValueError(f"{path} holds a different simplifier; use interp.simplify.load")
        return cls(**header)


Simplifier = SVDSimplifier | KMeansSimplifier | OneHotSimplifier
_KINDS = {"svd": SVDSimplifier, "kmeans": KMeansSimplifier, "onehot": OneHotSimplifier}


def load(path: str | Path) -> Simplifier:
    """Load any simplifier saved with `.save(path)`."""
    header, _ = _read(path)
    return _KINDS[header["kind"]].load(path)


# ---------------------------------------------------------------------------------------------
# fitting


@dataclass(frozen=True)
class _SVDFit:
    """Full-rank bases from one pass over the data; `at(rank)` truncates."""

    heads: tuple[tuple[int, int], ...]
    kv_heads: tuple[tuple[int, int], ...]
    basis: str
    center: bool
    q_v: Tensor  # [head, d_head, d_head]
    k_v: Tensor  # [kv_head, d_head, d_head]
    q_mean: Tensor
    k_mean: Tensor
    fitted_on: dict[str, Any]

    def at(self, rank: int) -> SVDSimplifier:
        d_head = self.q_v.shape[1]
        if not isinstance(rank, int) or not 1 <= rank <= d_head:
            raise ValueError(f"rank={rank!r} is out of range: choose 1..d_head={d_head}")
        return SVDSimplifier(
            self.heads, self.kv_heads, rank, self.basis, self.center,
            self.q_v[..., :rank].contiguous(), self.k_v[..., :rank].contiguous(),
            self.q_mean, self.k_mean, self.fitted_on,
        )


def _fit_svd(model, heads: HeadSpec, data: Task | Rows, basis: str, center: bool) -> _SVDFit:
    if basis not in ("separate", "shared"):
        raise ValueError(f"basis={basis!r} is not one of 'separate', 'shared'")
    heads = _heads(model, heads)
    kv = _kv_heads(model, heads)
    q, k = collect(model, heads, data)  # [head, n, d], [kv_head, n, d]
    if basis == "separate":
        qf = [svd_basis(x, center) for x in q]
        kf = [svd_basis(x, center) for x in k]
    else:  # one subspace per kv group: its keys and the queries of its chosen heads together
        group = [kv.index((layer, kv_head_of(model, h))) for layer, h in heads]
        kf = [svd_basis(torch.cat([k[j], *[q[i] for i, g in enumerate(group) if g == j]]), center) for j in range(len(kv))]
        qf = [kf[g] for g in group]
    fitted = {**_describe_fit(model, data, q.shape[1]), "q_singular_values": [f[1].tolist() for f in qf], "k_singular_values": [f[1].tolist() for f in kf]}
    return _SVDFit(
        heads, kv, basis, center,
        torch.stack([f[0] for f in qf]), torch.stack([f[0] for f in kf]),
        torch.stack([f[2] for f in qf]), torch.stack([f[2] for f in kf]), fitted,
    )


def svd(model, heads: HeadSpec, data: Task | Rows, *, rank: int, basis: str = "separate", center: bool = True) -> SVDSimplifier:
    """Fit a rank-`rank` SVD simplifier of the queries and keys of `heads` on `data`.

    basis="separate" fits queries and keys their own subspaces; "shared" fits one to both.
    center=True projects onto an affine subspace through the fitted mean.
    """
    d_head = model.cfg.d_head
    if not isinstance(rank, int) or not 1 <= rank <= d_head:
        raise ValueError(f"rank={rank!r} is out of range: choose 1..d_head={d_head}")
    return _fit_svd(model, heads, data, basis, center).at(rank)


def _check_k(k: int, n: int) -> None:
    if not isinstance(k, int) or not 1 <= k <= n:
        raise ValueError(f"k={k!r} is out of range: choose 1..{n}, the number of fitted vectors")


def _fit_kmeans(model, heads, kv, q: Tensor, k_vecs: Tensor, k: int, seed: int, fitted: dict[str, Any]) -> KMeansSimplifier:
    _check_k(k, q.shape[1])
    return KMeansSimplifier(
        heads, kv, k, seed,
        torch.stack([kmeans_centroids(x, k, seed) for x in q]),
        torch.stack([kmeans_centroids(x, k, seed) for x in k_vecs]),
        fitted,
    )


def kmeans(model, heads: HeadSpec, data: Task | Rows, *, k: int, seed: int = 0) -> KMeansSimplifier:
    """Fit a k-means simplifier: queries and keys of `heads` clustered separately into k each."""
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"k={k!r} is out of range: choose 1..the number of fitted vectors")
    heads = _heads(model, heads)
    q, k_vecs = collect(model, heads, data)
    return _fit_kmeans(model, heads, _kv_heads(model, heads), q, k_vecs, k, seed, _describe_fit(model, data, q.shape[1]))


def onehot(model, heads: HeadSpec) -> OneHotSimplifier:
    """One-hot attention on `heads` (needs no data)."""
    return OneHotSimplifier(_heads(model, heads), {"model": str(getattr(model.cfg, "model_name", "")), "data": None})

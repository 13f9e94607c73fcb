"""Data (Rows), heads and hook sites, collecting queries and keys, and the pure tensor functions."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

import torch
from jaxtyping import Float, Int
from torch import Tensor

from interp import run
from interp.errors import InterpError
from interp.sites import check_head, hook_name, kv_head_of
from interp.tasks.base import Task

__all__ = [
    "BATCH", "IGNORE", "HeadSpec", "Rows", "collect", "dyck_rows", "fit_meta", "heads_of", "js_divergence",
    "kmeans_centroids", "kv_heads_of", "nearest", "onehot_scores", "project", "qk_site", "svd_basis",
]

IGNORE = -100
BATCH = 256
HeadSpec = tuple[int, int] | Sequence[tuple[int, int]]


# ---------------------------------------------------------------------------------------------
# data


@dataclass(frozen=True)
class Rows:
    """Token rows, a target token at every scored position (IGNORE = -100 elsewhere), and each
    row's length (positions at or after it are padding and are neither fitted nor compared)."""

    tokens: Int[Tensor, "batch pos"]
    targets: Int[Tensor, "batch pos"]
    lengths: Int[Tensor, " batch"]
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.tokens.shape != self.targets.shape:
            raise InterpError(f"tokens {tuple(self.tokens.shape)} and targets {tuple(self.targets.shape)} must have the same shape [batch, pos]")
        if self.lengths.shape != (self.tokens.shape[0],):
            raise InterpError(f"lengths has shape {tuple(self.lengths.shape)}, expected ({self.tokens.shape[0]},) for tokens {tuple(self.tokens.shape)}")
        if len(self.lengths) and (int(self.lengths.min()) < 0 or int(self.lengths.max()) > self.tokens.shape[1]):
            raise InterpError(f"lengths must lie in 0..{self.tokens.shape[1]}, got {self.lengths.min().item()}..{self.lengths.max().item()}")
        if bool(((self.targets != IGNORE) & ~self.valid()).any()):
            raise InterpError("a target lies at or after its row's length; scored positions must come before the length")

    def __len__(self) -> int:
        return self.tokens.shape[0]

    @classmethod
    def of(cls, data: Task | Rows) -> Rows:
        """A Rows as it is, or a Task scored at its answer positions against `correct`."""
        if isinstance(data, Rows):
            return data
        targets = torch.full_like(data.clean, IGNORE)
        targets[torch.arange(len(data)), data.answer_pos] = data.correct
        meta = {"task": data.name, "split": data.split, "n": len(data), "seed": data.seed}
        return cls(data.clean, targets, data.answer_pos + 1, meta)

    def valid(self) -> Tensor:
        """[batch, pos] bool: positions before each row's length."""
        return torch.arange(self.tokens.shape[1])[None, :] < self.lengths[:, None]

    def batches(self, size: int = BATCH) -> Iterator[Rows]:
        for start in range(0, len(self), size):
            sl = slice(start, start + size)
            lengths = self.lengths[sl]
            width = max(1, int(lengths.max()))  # drop all-padding columns
            yield Rows(self.tokens[sl, :width], self.targets[sl, :width], lengths, self.meta)


def dyck_rows(n: int, *, split: str, seed: int = 0, k: int = 20, m: int = 10) -> Rows:
    """`n` whole Dyck sequences of `split`, scored at every closing bracket (as the zoo card's
    accuracy is: `interp.zoo.train.evaluate`)."""
    from interp.tasks import dyck, pad_rows

    seqs = dyck.sequences(n, split=split, k=k, m=m, seed=seed)
    tokens = pad_rows(seqs)
    meta = {"task": "dyck", "split": split, "n": n, "seed": seed, "scored": "every closing bracket"}
    return Rows(tokens, dyck.closing_targets(tokens), torch.tensor([len(s) for s in seqs]), meta)


# ---------------------------------------------------------------------------------------------
# heads and hook sites


def heads_of(model, heads: HeadSpec) -> tuple[tuple[int, int], ...]:
    """Normalise (layer, head) or a sequence of them; check ranges; sorted, no repeats."""
    if isinstance(heads, tuple) and len(heads) == 2 and all(isinstance(x, int) for x in heads):
        heads = [heads]
    out = []
    for h in heads:
        if not (isinstance(h, (tuple, list)) and len(h) == 2):
            raise InterpError(f"a head is a (layer, head) pair, got {h!r}")
        layer, head = int(h[0]), int(h[1])
        check_head(model, layer, head)
        out.append((layer, head))
    if not out:
        raise InterpError("no heads given; pass (layer, head) or a list of (layer, head) pairs")
    return tuple(sorted(set(out)))


def kv_heads_of(model, heads: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
    """The sorted (layer, kv_head) pairs that the query heads `heads` read their keys from."""
    return tuple(sorted({(layer, kv_head_of(model, h)) for layer, h in heads}))


def qk_site(model, layer: int, which: str) -> str:
    """The hook whose vectors form the scores: hook_rot_q/k on rotary models, else hook_q/k."""
    rot = f"blocks.{layer}.attn.hook_rot_{which}"
    return rot if rot in model.hook_dict else hook_name(which, layer)


def collect(model, heads: HeadSpec, data: Task | Rows) -> tuple[Float[Tensor, "head n d_head"], Float[Tensor, "kv_head n d_head"]]:
    """Queries of each chosen head and keys of each of their kv heads, at every fitted position.

    Returns ([head, n, d_head], [kv_head, n, d_head]) in the order of the sorted (layer, head)
    and (layer, kv_head) pairs. Raises on empty data.
    """
    heads = heads_of(model, heads)
    kv = kv_heads_of(model, heads)
    rows = Rows.of(data)
    if len(rows) == 0 or int(rows.lengths.sum()) == 0:
        raise InterpError("the fit data is empty: it has no rows or no positions before the row lengths")
    layers = sorted({layer for layer, _ in heads})
    names = [qk_site(model, layer, w) for layer in layers for w in ("q", "k")]
    qs: list[list[Tensor]] = [[] for _ in heads]
    ks: list[list[Tensor]] = [[] for _ in kv]
    device = model.cfg.device
    for batch in rows.batches():
        _, cache = run.cache(model, batch.tokens.to(device), names)
        keep = batch.valid().to(device)  # [batch, pos]
        for i, (layer, head) in enumerate(heads):
            qs[i].append(cache[qk_site(model, layer, "q")][:, :, head][keep].float().cpu())
        for j, (layer, kvh) in enumerate(kv):
            ks[j].append(cache[qk_site(model, layer, "k")][:, :, kvh][keep].float().cpu())
    return torch.stack([torch.cat(x) for x in qs]), torch.stack([torch.cat(x) for x in ks])


def fit_meta(model, data: Task | Rows, n_vectors: int) -> dict[str, Any]:
    """Provenance of a fit: the model, the data's own meta, its row count and the vectors fitted."""
    rows = Rows.of(data)
    return {"model": str(getattr(model.cfg, "model_name", "")), **rows.meta, "rows": len(rows), "n_vectors": n_vectors}


# ---------------------------------------------------------------------------------------------
# pure tensor functions


def project(
    x: Float[Tensor, "*batch d_head"], basis: Float[Tensor, "d_head rank"], mean: Float[Tensor, " d_head"]
) -> Float[Tensor, "*batch d_head"]:
    """mean + (x - mean) V V^T: the orthogonal projection onto the affine subspace."""
    basis, mean = basis.to(x), mean.to(x)
    return (x - mean) @ basis @ basis.T + mean


def nearest(x: Float[Tensor, "*batch d_head"], centroids: Float[Tensor, "k d_head"]) -> Float[Tensor, "*batch d_head"]:
    """Each vector replaced by its nearest centroid (Euclidean; ties go to the lowest index)."""
    flat = x.reshape(-1, x.shape[-1]).float()  # [n, d_head]
    c = centroids.float().to(x.device)
    dist = (flat * flat).sum(-1, keepdim=True) - 2 * flat @ c.T + (c * c).sum(-1)[None]  # [n, k]
    return c[dist.argmin(-1)].reshape(x.shape).to(x.dtype)


def onehot_scores(scores: Float[Tensor, "*batch src"]) -> Float[Tensor, "*batch src"]:
    """0 at each row's argmax (the first, on ties) and -inf elsewhere: softmax gives a one-hot."""
    out = torch.full_like(scores, float("-inf"))
    return out.scatter(-1, scores.argmax(-1, keepdim=True), 0.0)


def js_divergence(p: Float[Tensor, "*batch src"], q: Float[Tensor, "*batch src"]) -> Float[Tensor, "*batch"]:
    """Jensen-Shannon divergence in bits (0..1) between distributions on the last axis."""
    p, q = p.double(), q.double()
    mid = (p + q) / 2
    kl = lambda a: (torch.xlogy(a, a) - torch.xlogy(a, mid)).sum(-1)  # noqa: E731
    return ((kl(p) + kl(q)) / (2 * math.log(2))).clamp_min(0.0).float()


def svd_basis(x: Float[Tensor, "n d_head"], center: bool) -> tuple[Float[Tensor, "d_head d_head"], Float[Tensor, " d_head"], Float[Tensor, " d_head"]]:
    """(V with the right singular vectors as columns by decreasing singular value, the singular
    values, the mean subtracted first: zeros when center=False). d_head vectors even if n < d_head."""
    x = x.double()
    mean = x.mean(0) if center else torch.zeros(x.shape[1], dtype=x.dtype)
    _, s, vh = torch.linalg.svd(x - mean, full_matrices=x.shape[0] < x.shape[1])
    s = torch.cat([s, s.new_zeros(vh.shape[0] - s.shape[0])])
    return vh.T.float(), s.float(), mean.float()


def kmeans_centroids(x: Float[Tensor, "n d_head"], k: int, seed: int) -> Float[Tensor, "k d_head"]:
    """scikit-learn KMeans (k-means++, Lloyd) centroids of the rows of x."""
    from sklearn.cluster import KMeans
    from sklearn.exceptions import ConvergenceWarning

    with warnings.catch_warnings():  # k >= distinct vectors: sklearn warns, centroids repeat
        warnings.simplefilter("ignore", ConvergenceWarning)
        fit = KMeans(n_clusters=k, random_state=seed, n_init="auto").fit(x.double().numpy())
    return torch.from_numpy(fit.cluster_centers_).float()

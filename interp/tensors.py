"""Axis vocabulary and jaxtyping aliases shared by every module.

Axis names are fixed once here and used the same way everywhere:

    batch    examples in a task
    pos      token position (a query position when attention is involved)
    layer    transformer block index
    head     query head index (per-head sites); kv_head on GQA key/value sites
    kv_head  key/value head index (GQA models have fewer of these than query heads)
    dest     attention destination (query) position
    src      attention source (key) position
    d_model  residual-stream width
    d_head   per-head width
    d_vocab  vocabulary size
    rank, k, split, seed, metric, site, unit, model, step, method, strength, quantity
             sweep axes that results may carry
    other    the second index of a pairwise matrix over the same set as its first axis
             (e.g. model x other: overlap between subnetworks)
"""

from __future__ import annotations

import torch
from jaxtyping import Float, Int
from torch import Tensor

__all__ = ["AXES", "HeadAct", "Logits", "Pattern", "PerExample", "Resid", "Tokens", "tolerance"]

AXES = (
    "batch", "pos", "layer", "head", "kv_head", "dest", "src", "d_model", "d_head", "d_vocab",
    "rank", "k", "split", "seed", "metric", "site", "unit", "model", "step", "method",
    "strength", "quantity", "other",
)

Tokens = Int[Tensor, "batch pos"]
Logits = Float[Tensor, "batch pos d_vocab"]
Resid = Float[Tensor, "batch pos d_model"]
HeadAct = Float[Tensor, "batch pos head d_head"]
Pattern = Float[Tensor, "batch head dest src"]
PerExample = Float[Tensor, " batch"]


def tolerance(dtype: torch.dtype, float32: float) -> float:
    """A relative tolerance for two computations of the same function in `dtype`: `float32` (the
    caller's, for float32/float64 work) or, for a coarser dtype, 4 of its rounding steps (bf16:
    0.031, fp16: 0.0039): measured bf16 runs of one function through different kernels differ by
    about 0.006 relative, while a different function (post-LN blocks, folded weights) differs by
    far more."""
    return max(float32, 4 * torch.finfo(dtype).eps) if dtype.is_floating_point else float32

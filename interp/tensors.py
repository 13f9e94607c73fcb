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
    caller's, for float32/float64 work) or, for a coarser dtype, 3 of its rounding steps (bf16:
    0.023, fp16: 0.0029). Measured on the zoo's 4-layer decoders: one function through the bridge
    and through its HF modules differs by at most 0.0059 (bf16) / 0.00073 (fp16) of the largest
    logit, while a different function (TL 4.3's GPT-2 with folded layer norms against its HF
    blocks) differs by 0.067-0.070 in every dtype."""
    return max(float32, 3 * torch.finfo(dtype).eps) if dtype.is_floating_point else float32

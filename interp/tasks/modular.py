"""Modular addition `a + b mod p` (Nanda et al. 2023, "Progress measures for grokking").

Vocabulary after the specials: the numbers "0" .. "p-1" (id 5 + x), then "=" (id 5 + p).
A row is ``BOS a b =``; the logits at "=" (answer_pos 3) predict (a + b) mod p.

How the splits are made: all p² ordered pairs (a, b) are shuffled by a permutation seeded with
`seed`; the first round(train_frac * p²) pairs are ``train`` and the rest are ``test``, so the two
are disjoint and together cover every pair. `n` takes the first n pairs of the split in that
shuffled order.

Corruption: a' = (a + delta) mod p with delta in 1..p-1 drawn per example from `seed`, so the corrupt
answer (a' + b) mod p always differs from the clean one; incorrect = that corrupt answer.
"""

from __future__ import annotations

import random

import torch

from interp.errors import InterpError

from .base import BOS_ID, Task, word_tokenizer

__all__ = ["EQUALS", "FIRST_ID", "SPLITS", "equals_id", "modular_addition", "number_id", "split_pairs", "tokenizer", "words"]

SPLITS = ("train", "test")
FIRST_ID = 5
EQUALS = "="


def words(p: int = 113) -> tuple[str, ...]:
    _check_p(p)
    return (*(str(x) for x in range(p)), EQUALS)


def tokenizer(p: int = 113):
    return word_tokenizer(words(p))


def number_id(p: int, x: int) -> int:
    """Token id of the number x (0 <= x < p)."""
    if not 0 <= x < p:
        raise InterpError(f"x={x} is not a residue mod p={p}; allowed 0..{p - 1}")
    return FIRST_ID + x


def equals_id(p: int) -> int:
    return FIRST_ID + p


def split_pairs(
    *, p: int = 113, split: str = "train", train_frac: float = 0.3, seed: int = 0
) -> list[tuple[int, int]]:
    """The (a, b) pairs of a split, in their shuffled order."""
    _check(p, split, train_frac)
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(p * p, generator=g).tolist()  # pair index i = a * p + b
    cut = round(train_frac * p * p)
    chosen = order[:cut] if split == "train" else order[cut:]
    return [divmod(i, p) for i in chosen]


def modular_addition(
    *,
    p: int = 113,
    split: str = "train",
    train_frac: float = 0.3,
    seed: int = 0,
    n: int | None = None,
) -> Task:
    """All pairs of the split (or its first `n`), one row ``BOS a b =`` each.

    `meta["a"]`, `meta["b"]` hold the operands per row (for Fourier analyses).
    """
    pairs = split_pairs(p=p, split=split, train_frac=train_frac, seed=seed)
    if n is not None:
        if not 1 <= n <= len(pairs):
            raise InterpError(f"n={n}: split {split!r} has {len(pairs)} pairs; use 1..{len(pairs)} or None")
        pairs = pairs[:n]
    if not pairs:
        raise InterpError(f"train_frac={train_frac} leaves split {split!r} empty for p={p}")
    rng = random.Random(f"modular/corrupt/{split}/{seed}")
    eq = equals_id(p)
    clean, corrupt, correct, incorrect = [], [], [], []
    for a, b in pairs:
        a2 = (a + rng.randint(1, p - 1)) % p  # any a' != a
        clean.append([BOS_ID, number_id(p, a), number_id(p, b), eq])
        corrupt.append([BOS_ID, number_id(p, a2), number_id(p, b), eq])
        correct.append(number_id(p, (a + b) % p))
        incorrect.append(number_id(p, (a2 + b) % p))
    return Task(
        name="modular",
        split=split,
        clean=torch.tensor(clean),
        corrupt=torch.tensor(corrupt),
        correct=torch.tensor(correct),
        incorrect=torch.tensor(incorrect),
        answer_pos=torch.full((len(pairs),), 3),
        text=tuple(f"{a} {b} {EQUALS}" for a, b in pairs),
        metric="logit_diff",
        seed=seed,
        meta={"p": p, "train_frac": train_frac, "a": [a for a, _ in pairs], "b": [b for _, b in pairs]},
    )


def _check_p(p: int) -> None:
    if p < 3:
        raise InterpError(f"p={p} is too small; need a prime p >= 3")
    if any(p % d == 0 for d in range(2, int(p**0.5) + 1)):
        raise InterpError(f"p={p} is not prime; use a prime such as 113")


def _check(p: int, split: str, train_frac: float) -> None:
    _check_p(p)
    if split not in SPLITS:
        raise InterpError(f"split={split!r} is not a modular split; valid: {', '.join(SPLITS)}")
    if not 0 < train_frac < 1:
        raise InterpError(f"train_frac={train_frac} must lie strictly between 0 and 1")

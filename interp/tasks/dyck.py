"""Dyck-(k, m): predict the type of every closing bracket (after Friedman et al. 2024).

A sequence is a balanced string over k bracket types with nesting depth at most m. Its
*skeleton* is the open/close pattern with the types erased, written as a string of "(" and ")".
The vocabulary interleaves the two brackets of each type, so parity tells them apart for any k:

    id 5 + 2t = "(t"  (open, type t)        id 6 + 2t = "t)"  (close, type t)

and a sequence reads like ``(3 (7 7) 3)``.

How the splits are made (all deterministic from `seed`):

* Skeletons are drawn by a random walk: a depth d uniform in 1..m, an even length L uniform in
  [2d, max_len], then a walk of exactly L brackets that reaches depth d and never exceeds it (so
  depths are spread evenly, not piled up near 1).
* A skeleton's structural *family* is its nesting-shape signature (max depth, number of peaks),
  a peak being a local maximum of the depth profile ("(()(()))" -> (3, 2): depth 3, two peaks).
  A family is *held out* when (depth + peaks) % 4 == 0, about a quarter of the skeletons, spread
  over every depth 1..m: each depth keeps some peak counts and loses others, so an unseen
  structure combines a depth and a branching the model saw, but never together (as in
  Friedman et al. 2024, whose structure split holds out whole families of structures).
* The training *pool* is `pool_size` distinct skeletons of the walk, all from families that are
  not held out.
* A (skeleton, types) pair is *reserved* when a stable hash of its tokens is 0 mod 8 (no seed
  involved). Types are drawn uniformly per opening bracket.
* ``train``: a pool skeleton with a type assignment that is not reserved.
* ``seen_struct``: a pool skeleton with a reserved type assignment, so no row ever equals a
  ``train`` row, for any sample sizes.
* ``unseen_struct``: a skeleton from the same walk (depth <= m, length <= max_len) whose family is
  held out, so neither it nor any skeleton of its family is ever in training; any types.
* ``unseen_depth``: depth d uniform in m+1..m+4, so deeper than anything in the pool; length
  even in [2d, max(max_len, 2d)] (with the defaults, m=10 and max_len=40, no longer than training).

`sequences` yields whole rows ``BOS brackets EOS`` for language-model training. `dyck` yields one
example per (sequence, closing bracket): the prefix before that bracket, to be completed with
the right closer. For ``unseen_depth`` the bracket is drawn among those that close at a depth > m,
so every example needs a stack deeper than training; for the other splits it is uniform over
closing brackets.
"""

from __future__ import annotations

import hashlib
import random
from functools import lru_cache
from typing import Sequence

import torch
from jaxtyping import Int
from torch import Tensor

from interp.errors import InterpError

from .base import BOS_ID, EOS_ID, Task, pad_rows, word_tokenizer

# The surface (`from interp.tasks.dyck import *`, the docs): at most 15 names; the word lists and helpers
# below it stay importable by name.
__all__ = [
    "IGNORE", "SPLITS", "closing_targets", "dyck", "family", "held_out_family", "max_depth", "pool", "sequences",
    "skeleton", "tokenizer", "words"
]

SPLITS = ("train", "seen_struct", "unseen_struct", "unseen_depth")
FIRST_ID = 5  # first non-special id
IGNORE = -100  # `closing_targets` value at positions that are not scored (torch's ignore_index)
_EXTRA_DEPTH = 4  # unseen_depth draws depths m+1 .. m+_EXTRA_DEPTH
_RESERVED_MOD = 8  # 1 in 8 type assignments is reserved for seen_struct
_FAMILY_MOD = 4  # families with (depth + peaks) % 4 == 0 are held out of training


def words(k: int = 20) -> tuple[str, ...]:
    """The vocabulary after the specials: "(0", "0)", "(1", "1)", ..."""
    _check_k(k)
    return tuple(w for t in range(k) for w in (f"({t}", f"{t})"))


def tokenizer(k: int = 20):
    return word_tokenizer(words(k))


def open_id(t: int) -> int:
    return FIRST_ID + 2 * t


def close_id(t: int) -> int:
    return FIRST_ID + 2 * t + 1


def is_open(token: int) -> bool:
    return token >= FIRST_ID and (token - FIRST_ID) % 2 == 0


def is_close(token: int) -> bool:
    return token >= FIRST_ID and (token - FIRST_ID) % 2 == 1


def skeleton(tokens: Sequence[int] | Tensor) -> str:
    """The open/close pattern of a token row, e.g. "(()())"; specials (BOS, EOS, PAD) are skipped."""
    ids = tokens.tolist() if isinstance(tokens, Tensor) else list(tokens)
    return "".join("(" if is_open(t) else ")" for t in ids if t >= FIRST_ID)


def max_depth(skel: str) -> int:
    """Deepest nesting of a skeleton string ("(())" -> 2)."""
    depth = best = 0
    for c in skel:
        depth += 1 if c == "(" else -1
        best = max(best, depth)
    return best


def family(skel: str) -> tuple[int, int]:
    """The structural family of a skeleton: (max depth, number of peaks), where a peak is an
    opening bracket followed directly by a closing one ("(()(()))" -> (3, 2))."""
    if not skel or set(skel) - {"(", ")"}:
        raise InterpError(f"skeleton {skel!r} must be a non-empty string of '(' and ')' (see dyck.skeleton)")
    return max_depth(skel), skel.count("()")


def held_out_family(fam: tuple[int, int]) -> bool:
    """Whether a family (depth, peaks) is held out of training: (depth + peaks) % 4 == 0."""
    depth, peaks = fam
    return (depth + peaks) % _FAMILY_MOD == 0


def closing_targets(tokens: Int[Tensor, "batch pos"]) -> Int[Tensor, "batch pos"]:
    """Targets aligned with next-token logits: `tokens[b, p+1]` where that token is a closing
    bracket, else IGNORE (-100). Accuracy over all closing brackets is then

        t = closing_targets(tokens); keep = t != IGNORE
        acc = (logits.argmax(-1)[keep] == t[keep]).float().mean()

    and `F.cross_entropy(logits.flatten(0, 1), t.flatten(), ignore_index=IGNORE)` trains on them.
    """
    nxt = torch.full_like(tokens, IGNORE)
    nxt[:, :-1] = tokens[:, 1:]
    closing = (nxt >= FIRST_ID) & ((nxt - FIRST_ID) % 2 == 1)
    return torch.where(closing, nxt, torch.full_like(nxt, IGNORE))


def sequences(
    n: int,
    *,
    split: str = "train",
    k: int = 20,
    m: int = 10,
    seed: int = 0,
    pool_size: int = 3000,
    max_len: int = 40,
) -> list[list[int]]:
    """`n` full rows ``BOS brackets EOS`` of the split (at most max_len + 2 tokens, except
    unseen_depth rows when 2 * (m + 4) > max_len)."""
    _check(n=n, split=split, k=k, m=m, pool_size=pool_size, max_len=max_len)
    rng = random.Random(f"dyck/sequences/{split}/{seed}")
    return [[BOS_ID, *_draw(rng, split, k, m, seed, pool_size, max_len), EOS_ID] for _ in range(n)]


def dyck(
    n: int,
    *,
    split: str = "seen_struct",
    k: int = 20,
    m: int = 10,
    seed: int = 0,
    pool_size: int = 3000,
    max_len: int = 40,
) -> Task:
    """`n` (sequence, closing bracket) examples.

    clean = BOS + the sequence up to just before the chosen closing bracket, answer_pos = its last
    position, correct = the closer that matches the innermost open bracket. corrupt = the same
    prefix with that open bracket's type changed to another (uniform) type; incorrect = the closer
    the corrupt prefix needs. `meta["depth"][i]` is the stack depth at the answer.
    """
    _check(n=n, split=split, k=k, m=m, pool_size=pool_size, max_len=max_len)
    if k < 2:
        raise InterpError(f"k={k}: a corrupt prefix changes a bracket's type, so dyck() needs k >= 2")
    rng = random.Random(f"dyck/task/{split}/{seed}")
    clean, corrupt, correct, incorrect, depths = [], [], [], [], []
    while len(clean) < n:
        row = [BOS_ID, *_draw(rng, split, k, m, seed, pool_size, max_len)]
        stack, choices = [], []  # choices: (position of closer, position of its opener, depth)
        for pos, tok in enumerate(row[1:], start=1):
            if is_open(tok):
                stack.append(pos)
            else:
                choices.append((pos, stack[-1], len(stack)))
                stack.pop()
        if split == "unseen_depth":  # only closers that need a stack deeper than training
            choices = [c for c in choices if c[2] > m]
        pos, opener, depth = rng.choice(choices)
        t = (row[opener] - FIRST_ID) // 2
        t_new = (t + 1 + rng.randrange(k - 1)) % k  # any type but t
        prefix = row[:pos]
        bad = list(prefix)
        bad[opener] = open_id(t_new)
        clean.append(prefix)
        corrupt.append(bad)
        correct.append(close_id(t))
        incorrect.append(close_id(t_new))
        depths.append(depth)
    vocab = words(k)
    return Task(
        name="dyck",
        split=split,
        clean=pad_rows(clean),
        corrupt=pad_rows(corrupt),
        correct=torch.tensor(correct),
        incorrect=torch.tensor(incorrect),
        answer_pos=torch.tensor([len(r) - 1 for r in clean]),
        text=tuple(" ".join(vocab[t - FIRST_ID] for t in r[1:]) for r in clean),
        metric="logit_diff",
        seed=seed,
        meta={"k": k, "m": m, "pool_size": pool_size, "max_len": max_len, "depth": depths},
    )


def pool(*, m: int = 10, seed: int = 0, pool_size: int = 3000, max_len: int = 40) -> frozenset[str]:
    """The training skeleton pool (cached; identical for every k); no skeleton of a held-out family."""
    _check(n=1, split="train", k=1, m=m, pool_size=pool_size, max_len=max_len)
    return _pool(m, seed, pool_size, max_len)[1]


# ---------------------------------------------------------------------------------------------
# generation


def _draw(rng: random.Random, split: str, k: int, m: int, seed: int, size: int, max_len: int) -> list[int]:
    """One bracket sequence (no BOS/EOS) of the split."""
    if split == "unseen_depth":  # deeper than any pool skeleton, so no pool needed
        d = rng.randint(m + 1, m + _EXTRA_DEPTH)
        return _typed(rng, _walk(rng, rng.randrange(2 * d, max(max_len, 2 * d) + 1, 2), d), k)
    order, _ = _pool(m, seed, size, max_len)
    for _ in range(10_000):
        if split == "unseen_struct":
            skel = _random_skeleton(rng, m, max_len)
            if held_out_family(family(skel)):  # never in the pool, whose families are all seen
                return _typed(rng, skel, k)
            continue
        skel = rng.choice(order)
        want_reserved = split == "seen_struct"
        for _ in range(32):  # tiny skeletons with small k may have no assignment in this bucket
            seq = _typed(rng, skel, k)
            if _reserved(seq) == want_reserved:
                return seq
    raise InterpError(
        f"could not draw a {split!r} sequence with k={k}, m={m}, pool_size={size}, "
        f"max_len={max_len}: the pool covers (almost) every skeleton; lower pool_size or raise max_len"
    )


def _typed(rng: random.Random, skel: str, k: int) -> list[int]:
    """Give each opening bracket a uniform type; closers copy their opener's type."""
    out, stack = [], []
    for c in skel:
        if c == "(":
            t = rng.randrange(k)
            stack.append(t)
            out.append(open_id(t))
        else:
            out.append(close_id(stack.pop()))
    return out


def _reserved(seq: list[int]) -> bool:
    digest = hashlib.blake2b(",".join(map(str, seq)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % _RESERVED_MOD == 0


def _random_skeleton(rng: random.Random, m: int, max_len: int) -> str:
    d = rng.randint(1, min(m, max_len // 2))
    return _walk(rng, rng.randrange(2 * d, max_len + 1, 2), d)


def _walk(rng: random.Random, length: int, depth: int) -> str:
    """A balanced skeleton of exactly `length` brackets whose maximum depth is exactly `depth`.

    At each step a move is allowed only if the rest can still finish the job: opening needs room
    to close again, closing before the peak needs room to climb back to `depth` and down.
    """
    p_open = rng.uniform(0.35, 0.65)  # per-sequence bias varies the shapes
    out, h, reached = [], 0, False
    for step in range(length):
        left = length - step - 1  # moves after this one
        can_open = h < depth and left >= h + 1
        can_close = h > 0 and (reached or left >= 2 * depth - (h - 1))
        opening = can_open and (not can_close or rng.random() < p_open)
        h += 1 if opening else -1
        reached = reached or h == depth
        out.append("(" if opening else ")")
    return "".join(out)


@lru_cache(maxsize=16)
def _pool(m: int, seed: int, size: int, max_len: int) -> tuple[tuple[str, ...], frozenset[str]]:
    rng = random.Random(f"dyck/pool/{seed}")
    order: list[str] = []
    seen: set[str] = set()
    for _ in range(50 * size + 1000):
        skel = _random_skeleton(rng, m, max_len)
        if skel not in seen and not held_out_family(family(skel)):
            seen.add(skel)
            order.append(skel)
            if len(order) == size:
                return tuple(order), frozenset(seen)
    raise InterpError(
        f"pool_size={size}: found only {len(order)} distinct skeletons with depth <= m={m} and "
        f"length <= max_len={max_len}; lower pool_size or raise m/max_len"
    )


def _check_k(k: int) -> None:
    if k < 1:
        raise InterpError(f"k={k}: the number of bracket types must be >= 1")


def _check(*, n: int, split: str, k: int, m: int, pool_size: int, max_len: int) -> None:
    _check_k(k)
    if m < 1:
        raise InterpError(f"m={m}: the maximum depth must be >= 1")
    if n < 1:
        raise InterpError(f"n={n}: the number of examples must be >= 1")
    if split not in SPLITS:
        raise InterpError(f"split={split!r} is not a dyck split; valid: {', '.join(SPLITS)}")
    if pool_size < 1:
        raise InterpError(f"pool_size={pool_size}: must be >= 1")
    if max_len < 2:
        raise InterpError(f"max_len={max_len}: must be >= 2 (one pair of brackets)")

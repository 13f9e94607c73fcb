"""Next-state prediction in a fixed Markov chain (in-context statistics of a known process).

Vocabulary after the specials: the states "s0" .. "s{n-1}" (id 5 + state). A row is ``BOS x1 .. xL``
with x1 drawn from the stationary distribution and each next state from the transition matrix;
`true_next_dist` gives the exact next-state distribution, so a model can be scored against the
process itself, not just against samples.

How the splits are made: `markov(..., split)` draws rows from a random stream seeded by
(split, seed), then keeps a row only if a stable hash of its tokens puts it in that split's bucket
(even -> ``train``, odd -> ``test``), so the two splits never share a row, whatever their sizes.

Example i: the row has `length` states and answer_pos is its last position; correct = the next
state actually sampled after it; incorrect = the least likely next state under the true matrix
(among states other than `correct`); corrupt = the same row with the last state replaced by the
state that makes `incorrect` most likely, so the corrupt answer leans to `incorrect`.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

import torch
from jaxtyping import Complex, Float, Int
from torch import Tensor

from interp.errors import InterpError

from .base import BOS_ID, Task, word_tokenizer

__all__ = ["FIRST_ID", "MarkovChain", "SPLITS", "markov", "random_chain", "sample", "state_id", "tokenizer", "true_next_dist", "words"]

SPLITS = ("train", "test")
FIRST_ID = 5
_FLOOR = 0.05  # mass spread uniformly over all states: every transition possible, chain aperiodic
_MIN_TOP = 0.3  # random_chain redraws until the top non-unit eigenvalue has at least this modulus


@dataclass(frozen=True, eq=False)
class MarkovChain:
    """A chain over states 0..n-1: `transition[i, j]` = P(next = j | current = i), float64."""

    transition: Float[Tensor, "state next"]
    seed: int = 0

    def __post_init__(self) -> None:
        p = self.transition
        if p.ndim != 2 or p.shape[0] != p.shape[1]:
            raise InterpError(f"transition has shape {tuple(p.shape)}; expected a square [n, n] matrix")
        if p.shape[0] < 2:
            raise InterpError(f"transition is {tuple(p.shape)}: a chain needs n >= 2 states")
        p = p.detach().to(torch.float64)
        sums = p.sum(-1)
        if (p < 0).any() or not torch.allclose(sums, torch.ones_like(sums), atol=1e-6):
            raise InterpError(
                f"transition is not row-stochastic: entries must be >= 0 and rows sum to 1, "
                f"got row sums {[round(s, 6) for s in sums.tolist()]} and min entry {p.min().item():.3g}"
            )
        object.__setattr__(self, "transition", p)  # frozen: store the float64 copy once

    @property
    def n(self) -> int:
        return self.transition.shape[0]

    @property
    def stationary(self) -> Float[Tensor, " state"]:
        """pi with pi @ transition = pi and sum(pi) = 1 (least squares on the stacked system)."""
        eye, ones = torch.eye(self.n, dtype=torch.float64), torch.ones(1, self.n, dtype=torch.float64)
        a = torch.cat([self.transition.T - eye, ones])  # [n + 1, n]
        b = torch.zeros(self.n + 1, 1, dtype=torch.float64)
        b[-1] = 1.0
        pi = torch.linalg.lstsq(a, b).solution[:, 0].clamp(min=0)
        return pi / pi.sum()

    @property
    def eigenvalues(self) -> Complex[Tensor, " state"]:
        """All eigenvalues, sorted by modulus, largest first (the first is 1)."""
        ev = torch.linalg.eigvals(self.transition)
        return ev[torch.argsort(ev.abs(), descending=True, stable=True)]

    @property
    def nonunit_eigenvalues(self) -> Complex[Tensor, " rest"]:
        """The eigenvalues without the one closest to 1 (they set how fast the chain forgets)."""
        ev = self.eigenvalues
        drop = int((ev - 1).abs().argmin())
        return torch.cat([ev[:drop], ev[drop + 1 :]])


def words(n: int = 4) -> tuple[str, ...]:
    _check_states(n)
    return tuple(f"s{i}" for i in range(n))


def tokenizer(n: int = 4):
    return word_tokenizer(words(n))


def state_id(state: int) -> int:
    return FIRST_ID + state


def random_chain(n: int = 4, *, seed: int = 0, concentration: float = 0.5) -> MarkovChain:
    """Rows drawn from Dirichlet(concentration), mixed with 5% uniform.

    Concentration below 1 makes rows peaked (an interesting, far-from-uniform spectrum); the 5%
    floor keeps every transition possible so the chain mixes. Draws repeat (deterministically)
    until the largest non-unit eigenvalue has modulus >= 0.3. For n <= 16 the default succeeds
    within a few draws; larger n needs a smaller concentration.
    """
    _check_states(n)
    if concentration <= 0:
        raise InterpError(f"concentration={concentration} must be > 0")
    rng = random.Random(f"markov/chain/{seed}")
    for _ in range(1000):
        draws = [[rng.gammavariate(concentration, 1.0) for _ in range(n)] for _ in range(n)]
        rows = torch.tensor(draws, dtype=torch.float64)
        rows = rows.clamp(min=1e-300)  # a gamma draw can underflow to 0; keep every row normalisable
        p = (1 - _FLOOR) * rows / rows.sum(-1, keepdim=True) + _FLOOR / n
        chain = MarkovChain(p, seed)
        if chain.nonunit_eigenvalues.abs().max() >= _MIN_TOP:
            return chain
    raise InterpError(
        f"concentration={concentration}: no chain over n={n} states with a non-unit eigenvalue of "
        f"modulus >= {_MIN_TOP} in 1000 draws; use a smaller concentration"
    )


def sample(chain: MarkovChain, n_seqs: int, length: int, *, seed: int = 0) -> list[list[int]]:
    """`n_seqs` rows ``BOS x1 .. x_length`` (token ids), x1 from the stationary distribution."""
    if n_seqs < 1:
        raise InterpError(f"n_seqs={n_seqs} must be >= 1")
    _check_length(length)
    states = _walk(chain, n_seqs, length, torch.Generator().manual_seed(seed))
    return [[BOS_ID, *row] for row in (states + FIRST_ID).tolist()]


def markov(n: int, *, chain: MarkovChain, length: int = 32, split: str = "train", seed: int = 0) -> Task:
    """`n` next-state examples; see the module docstring. `meta["transition"]` is the matrix."""
    if n < 1:
        raise InterpError(f"n={n} must be >= 1")
    _check_length(length)
    if split not in SPLITS:
        raise InterpError(f"split={split!r} is not a markov split; valid: {', '.join(SPLITS)}")
    digest = hashlib.blake2b(f"markov/{split}/{seed}".encode(), digest_size=8).digest()
    g = torch.Generator().manual_seed(int.from_bytes(digest, "little") >> 1)
    want = SPLITS.index(split)
    kept: list[list[int]] = []
    for _ in range(1000):
        for row in _walk(chain, 2 * n + 8, length + 1, g).tolist():  # length states + the answer
            if _bucket(row[:length]) == want and len(kept) < n:
                kept.append(row)
        if len(kept) == n:
            break
    else:
        raise InterpError(f"length={length}: too few distinct rows to fill split {split!r} with n={n}")
    p = chain.transition.tolist()  # plain floats: fast indexing in the loop below
    clean, corrupt, correct, incorrect = [], [], [], []
    for row in kept:
        cur, nxt = row[length - 1], row[length]
        others = [s for s in range(chain.n) if s != nxt]
        low = min(others, key=lambda s: p[cur][s])
        swap = max((s for s in range(chain.n) if s != cur), key=lambda s: p[s][low])
        clean.append([BOS_ID, *(s + FIRST_ID for s in row[:length])])
        corrupt.append(clean[-1][:-1] + [swap + FIRST_ID])
        correct.append(nxt + FIRST_ID)
        incorrect.append(low + FIRST_ID)
    names = words(chain.n)
    return Task(
        name="markov",
        split=split,
        clean=torch.tensor(clean),
        corrupt=torch.tensor(corrupt),
        correct=torch.tensor(correct),
        incorrect=torch.tensor(incorrect),
        answer_pos=torch.full((n,), length),
        text=tuple(" ".join(names[s] for s in row[:length]) for row in kept),
        metric="logit_diff",
        seed=seed,
        meta={"transition": p, "stationary": chain.stationary.tolist(), "chain_seed": chain.seed},
    )


def true_next_dist(chain: MarkovChain, tokens: Int[Tensor, "batch pos"]) -> Float[Tensor, "batch pos state"]:
    """The exact next-state distribution at every position: the transition row of the state there,
    or the stationary distribution at BOS. Any other token (PAD, EOS, out of range) is an error."""
    state = tokens - FIRST_ID
    is_state = (state >= 0) & (state < chain.n)
    bad = ~is_state & (tokens != BOS_ID)
    if bad.any():
        b, pos = (int(i) for i in bad.nonzero()[0])
        raise InterpError(
            f"tokens[{b}, {pos}] = {int(tokens[b, pos])} is neither BOS ({BOS_ID}) nor a state id "
            f"{FIRST_ID}..{FIRST_ID + chain.n - 1}"
        )
    flat = state.clamp(0, chain.n - 1).flatten()  # [batch * pos]
    rows = chain.transition.to(tokens.device).index_select(0, flat).view(*tokens.shape, chain.n)
    pi = chain.stationary.to(tokens.device).expand_as(rows)
    return torch.where(is_state[..., None], rows, pi)


def _walk(chain: MarkovChain, n_seqs: int, steps: int, g: torch.Generator) -> Int[Tensor, "seq step"]:
    """States (0..n-1) of `n_seqs` walks of `steps` steps, the first from the stationary law."""
    p = chain.transition
    out = torch.empty(n_seqs, steps, dtype=torch.long)
    out[:, 0] = torch.multinomial(chain.stationary, n_seqs, replacement=True, generator=g)
    for t in range(1, steps):
        rows = p.index_select(0, out[:, t - 1])  # [seq, state]; index_select is far faster than p[idx]
        out[:, t] = torch.multinomial(rows, 1, generator=g)[:, 0]
    return out


def _bucket(states: list[int]) -> int:
    digest = hashlib.blake2b(",".join(map(str, states)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % 2


def _check_states(n: int) -> None:
    if n < 2:
        raise InterpError(f"n={n}: a chain needs n >= 2 states")


def _check_length(length: int) -> None:
    if length < 2:
        raise InterpError(f"length={length} must be >= 2 states per row")

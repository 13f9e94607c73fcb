"""Task families: token rows, clean/corrupt pairs, answers and ID/OOD splits (see `base.Task`).

    from interp import tasks
    task = tasks.make("dyck", split="unseen_depth", n=256, seed=0)

One module per family: `dyck`, `modular`, `markov`, `english` (SVA and IOI). Each has its own
word vocabulary (`words(...)` / `WORDS`) and `tokenizer(...)`; ids 0-4 are the specials.
"""

from __future__ import annotations
from interp.errors import InterpError

from typing import Any

from . import dyck, english, markov, modular
from .base import BOS_ID, EOS_ID, MASK_ID, PAD_ID, UNK_ID, Task, pad_rows, word_tokenizer

SPLITS: dict[str, tuple[str, ...]] = {
    "dyck": dyck.SPLITS,
    "modular": modular.SPLITS,
    "markov": markov.SPLITS,
    "sva": english.SPLITS_SVA,
    "ioi": english.SPLITS_IOI,
}
DEFAULT_N = 256


def make(name: str, *, split: str, n: int | None = None, seed: int = 0, **kwargs: Any) -> Task:
    """Build a task by family name. `n=None` means every pair of the split for "modular" and
    DEFAULT_N (256) examples otherwise. `kwargs` go to the family's generator (e.g. `k`, `m` for
    dyck, `p`, `train_frac` for modular, `chain`, `length` for markov, `masked` for sva). For
    "markov" without `chain`, the chain is `markov.random_chain()` (seed 0), so examples vary
    with `seed` while the process stays fixed.
    """
    if name not in SPLITS:
        raise InterpError(f"unknown task {name!r}; valid: {', '.join(SPLITS)}")
    if split not in SPLITS[name]:
        raise InterpError(f"split={split!r} is not a {name} split; valid: {', '.join(SPLITS[name])}")
    if name == "modular":
        return modular.modular_addition(split=split, n=n, seed=seed, **kwargs)
    count = DEFAULT_N if n is None else n
    if name == "dyck":
        return dyck.dyck(count, split=split, seed=seed, **kwargs)
    if name == "markov":
        chain = kwargs.pop("chain", None) or markov.random_chain()
        return markov.markov(count, chain=chain, split=split, seed=seed, **kwargs)
    if name == "sva":
        return english.sva(count, split=split, seed=seed, **kwargs)
    return english.ioi(count, split=split, seed=seed, **kwargs)


__all__ = [
    "BOS_ID",
    "EOS_ID",
    "MASK_ID",
    "PAD_ID",
    "UNK_ID",
    "SPLITS",
    "Task",
    "dyck",
    "english",
    "make",
    "markov",
    "modular",
    "pad_rows",
    "word_tokenizer",
]

"""Task families: token rows, clean/corrupt pairs, answers and ID/OOD splits (see `base.Task`).

    from interp import tasks
    task = tasks.make("dyck", split="unseen_depth", n=256, seed=0)

One module per family: `dyck`, `modular`, `markov`, `english` (SVA and IOI). Each has its own
word vocabulary (`words(...)` / `WORDS`) and `tokenizer(...)`; ids 0-4 are the specials.

For a real pretrained model, `bpe` builds IOI and SVA over the model's own BPE tokenizer
(single-token words only, padding-free rows of one length); pass `model=` (a loaded bridge) or
`tokenizer=` (a Hugging Face tokenizer) to `make`, with a split from `BPE_SPLITS`:

    task = tasks.make("ioi", split="abba", n=32, model=model)   # == tasks.bpe.ioi(model, 32, split="abba")
"""

from __future__ import annotations
from interp.errors import InterpError

from typing import Any

from . import bpe, dyck, english, markov, modular
from .base import BOS_ID, EOS_ID, MASK_ID, PAD_ID, UNK_ID, Task, pad_rows, word_tokenizer

SPLITS: dict[str, tuple[str, ...]] = {
    "dyck": dyck.SPLITS,
    "modular": modular.SPLITS,
    "markov": markov.SPLITS,
    "sva": english.SPLITS_SVA,
    "ioi": english.SPLITS_IOI,
}
BPE_SPLITS: dict[str, tuple[str, ...]] = bpe.SPLITS  # the splits of make(..., model=...)
DEFAULT_N = 256


def make(
    name: str,
    *,
    split: str,
    n: int | None = None,
    seed: int = 0,
    model: Any = None,
    tokenizer: Any = None,
    **kwargs: Any,
) -> Task:
    """Build a task by family name. `n=None` means every pair of the split for "modular" and
    DEFAULT_N (256) examples otherwise. `kwargs` go to the family's generator (e.g. `k`, `m` for
    dyck, `p`, `train_frac` for modular, `chain`, `length` for markov, `masked` for sva). For
    "markov" without `chain`, the chain is `markov.random_chain()` (seed 0), so examples vary
    with `seed` while the process stays fixed.

    With `model=` (a loaded bridge) or `tokenizer=` (a Hugging Face tokenizer), "ioi" and "sva"
    come from `bpe.ioi` / `bpe.sva` over that tokenizer, with the splits in `BPE_SPLITS`.
    """
    if model is not None or tokenizer is not None:
        if model is not None and tokenizer is not None:
            raise InterpError("pass model= or tokenizer=, not both")
        if name not in BPE_SPLITS:
            raise InterpError(
                f"task {name!r} has no model/tokenizer version; with model= or tokenizer= valid are: "
                f"{', '.join(BPE_SPLITS)}"
            )
        if split not in BPE_SPLITS[name]:
            raise InterpError(
                f"split={split!r} is not a {name} split for a real tokenizer; valid: {', '.join(BPE_SPLITS[name])}"
            )
        build = bpe.ioi if name == "ioi" else bpe.sva
        return build(model if model is not None else tokenizer, DEFAULT_N if n is None else n,
                     split=split, seed=seed, **kwargs)
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
    "BPE_SPLITS",
    "EOS_ID",
    "MASK_ID",
    "PAD_ID",
    "SPLITS",
    "Task",
    "bpe",
    "dyck",
    "english",
    "make",
    "markov",
    "modular",
    "pad_rows",
    "word_tokenizer",
]

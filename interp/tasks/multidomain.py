"""Three domains of two tasks each over one word vocabulary: what the zoo's multi-domain model
(`zoo:multidomain`, recipe in `interp.zoo.train`) is trained on, for parameter probing.

    counting    up         "count 7 8 9"                  -> 0      (mod 10; options: the digits)
                down       "back 2 1 0"                   -> 9
    grammar     agree      "the dog near the cats"        -> is     (options: is, are)
                pronoun    "the dogs near the cat said that" -> they (options: it, they)
    facts       capital    "the capital of france is"     -> paris  (options: every capital)
                language   "in france people speak"       -> french (options: every language)

Tasks come as domain `Task`s (see `interp.tasks.domains`: `meta` has `domain` and `options`,
the score is `domains.option_accuracy`). Items (a number pair, a noun pair, a country) split
by key into "val" and "test" exactly as the BPE domains do; the model is trained on the items of
both splits (it must know every fact), so the splits separate the probe's data from the data a
subnetwork is scored on, not training from testing.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import torch

from interp.errors import InterpError

from .base import BOS_ID, EOS_ID, PAD_ID, Task, word_tokenizer
from .domains import check_split, check_task_name, domain_task, split_items

__all__ = ["DOMAINS", "WORDS", "encode", "suite", "task", "tokenizer", "training_rows"]

DOMAINS: dict[str, tuple[str, ...]] = {
    "counting": ("up", "down"), "grammar": ("agree", "pronoun"), "facts": ("capital", "language"),
}
_DIGITS = tuple(str(d) for d in range(10))
_NOUNS = (("dog", "dogs"), ("cat", "cats"), ("bird", "birds"), ("horse", "horses"), ("man", "men"),
          ("woman", "women"), ("child", "children"), ("king", "kings"), ("key", "keys"), ("box", "boxes"),
          ("tree", "trees"), ("lamp", "lamps"), ("car", "cars"), ("book", "books"), ("door", "doors"),
          ("road", "roads"))
_PREPS = ("near", "with", "behind", "under")
_COUNTRIES = (  # (country, capital, language): invented, so the model cannot have met them elsewhere
    ("norland", "brisk", "norlish"), ("vestia", "calden", "vestian"), ("ombria", "dulcet", "ombric"),
    ("karsk", "fellow", "karskan"), ("tirol", "gantry", "tirolic"), ("azuria", "harbin", "azuric"),
    ("belmar", "istra", "belmaric"), ("corvin", "jasper", "corvish"), ("dunmor", "kestrel", "dunmoric"),
    ("elbia", "lorne", "elbian"), ("fennic", "marrow", "fennish"), ("galdor", "nesting", "galdoric"),
    ("hestia", "orrin", "hestian"), ("ilvan", "pellow", "ilvanic"), ("jorvik", "quarry", "jorvish"),
    ("kaldor", "ravel", "kaldoric"), ("lumos", "sorrel", "lumic"), ("mardon", "tessel", "mardish"),
    ("nivia", "umber", "nivian"), ("ostrel", "vantage", "ostrelic"), ("pardis", "wexley", "pardish"),
    ("quiron", "yarrow", "quironic"), ("rhodan", "zephyr", "rhodish"), ("sarvik", "alder", "sarvic"),
    ("tamsin", "bracken", "tamsic"), ("ulmar", "cinder", "ulmaric"), ("varden", "dapple", "vardish"),
    ("wendel", "ember", "wendic"), ("xantia", "furrow", "xantian"), ("yorath", "gable", "yorish"),
    ("zelda", "hollis", "zeldic"), ("arvon", "inglet", "arvonic"),
)
_GLUE = ("count", "up", "back", "down", "the", "is", "are", "said", "that", "it", "they", "capital", "of", "in",
         "people", "speak")
WORDS: tuple[str, ...] = tuple(dict.fromkeys(
    [*_DIGITS, *_GLUE, *_PREPS, *(w for pair in _NOUNS for w in pair), *(w for c in _COUNTRIES for w in c)]))
_ID = {w: i + 5 for i, w in enumerate(WORDS)}


def tokenizer():
    return word_tokenizer(WORDS)


def encode(words: Sequence[str]) -> list[int]:
    """BOS + word ids (no EOS); an unknown word is an error."""
    missing = [w for w in words if w not in _ID]
    if missing:
        raise InterpError(f"words {missing} are not in the multidomain vocabulary")
    return [BOS_ID, *(_ID[w] for w in words)]


def _items(domain: str, name: str) -> list[tuple[str, list[str], str]]:
    """(key, prompt words, answer) for every item of a task."""
    if domain == "counting":  # a run of 2-5 digits up (or down) by one, mod 10; two cue words each
        step, cues = (1, ("count", "up")) if name == "up" else (-1, ("back", "down"))
        return [(f"{start},{length}", [cue, *(str((start + step * i) % 10) for i in range(length))],
                 str((start + step * length) % 10)) for start in range(10) for length in range(2, 6) for cue in cues]
    if domain == "facts":  # two phrasings of each question
        if name == "capital":
            return [(c[0], w, c[1]) for c in _COUNTRIES for w in (["the", "capital", "of", c[0], "is"], [c[0], "capital", "is"])]
        return [(c[0], w, c[2]) for c in _COUNTRIES for w in (["in", c[0], "people", "speak"], ["people", "of", c[0], "speak"])]
    if domain == "grammar":
        out = []
        for i, subject in enumerate(_NOUNS):
            for j, other in enumerate(_NOUNS):
                if i == j:
                    continue
                for number in (0, 1):
                    prep = _PREPS[(i + j) % len(_PREPS)]
                    words = ["the", subject[number], prep, "the", other[1 - number]]  # attractor of the other number
                    if name == "agree":
                        out.append((subject[0], words, ("is", "are")[number]))
                    else:
                        out.append((subject[0], [*words, "said", "that"], ("it", "they")[number]))
        return out
    raise InterpError(f"no items for {domain}/{name}")


def task(domain: str, name: str, *, split: str = "val", n: int = 32, seed: int = 0) -> Task:
    """`n` rows of one task's split; an InterpError when the split has fewer items than `n`."""
    check_task_name(DOMAINS, domain, name)
    check_split(split)
    pool = split_items(_items(domain, name), split, f"multidomain/{domain}/{name}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InterpError(f"n={n!r} must be a positive int")
    if n > len(pool):
        raise InterpError(f"domain {domain!r} task {name!r} has only {len(pool)} {split} examples, but {n} were "
                          f"asked; ask for at most {len(pool)}")
    chosen = random.Random(f"multidomain/{domain}/{name}/{split}/{seed}").sample(pool, n)
    options = list(dict.fromkeys(_ID[a] for _, _, a in _items(domain, name)))
    return domain_task(name, domain, split, [encode(w) for _, w, _ in chosen], [_ID[a] for _, _, a in chosen],
                       options, [" ".join([*w, a]) for _, w, a in chosen], PAD_ID, seed, len(pool))


def suite(*, split: str = "val", n: int = 32, seed: int = 0) -> dict[str, dict[str, Task]]:
    """{domain: {task: Task}} for all three domains."""
    return {d: {name: task(d, name, split=split, n=n, seed=seed) for name in names} for d, names in DOMAINS.items()}


def training_rows(n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs [n, pos], targets [n, pos]): n sentences drawn evenly over the six tasks (items of
    both splits), the loss taken at the answer only (targets are -100 elsewhere)."""
    rng = random.Random(f"multidomain/train/{seed}")
    pools = [_items(d, name) for d, names in DOMAINS.items() for name in names]
    rows = []
    for i in range(n):
        _, words, answer = rng.choice(pools[i % len(pools)])
        rows.append([*encode(words), _ID[answer], EOS_ID])
    width = max(len(r) for r in rows)
    inputs = torch.full((n, width), PAD_ID, dtype=torch.long)
    targets = torch.full((n, width), -100, dtype=torch.long)
    for i, r in enumerate(rows):
        inputs[i, : len(r)] = torch.tensor(r)
        targets[i, len(r) - 3] = r[-2]  # the answer, predicted at the last prompt word
    return inputs, targets

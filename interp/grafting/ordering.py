"""The data-ordering experiment at zoo scale (Feng et al. 2024, Sec. 5.1).

The paper's prediction: extractive structures are learned in pretraining only when facts come
before their implications. Pretraining a 7B model is out of reach, so a small LLaMA-family model
is trained here from scratch on a synthetic world:

    city knowledge     "the people in city3 speak lang3"                (every phase)
    facts              "name17 lives in city3"                          (training people)
    implications       "the people in the city name17 lives in speak lang3"

in three orders: joint (facts and implications mixed), facts first (facts, then implications),
implications first (the reverse). Each pretrained model is then fine-tuned on the facts of new
people only, and their implications are ranked among the languages (chance (n - 1) / 2).
Every stage is a `finetune` delta on the random-init model, so the base model is never written.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from interp.errors import InterpError
from interp.grafting.delta import Delta, finetune
from interp.grafting.facts import Facts, mean_rank
from interp.model import build_tiny, load

__all__ = ["ORDERS", "data_ordering", "world"]

ORDERS = ("joint", "facts_first", "implications_first")
FACT = "{} lives in"
IMPLICATION = "the people in the city {} lives in speak"
KNOWLEDGE = "the people in {} speak"


def world(n_cities: int = 8, n_train: int = 96, n_test: int = 16, seed: int = 0) -> dict[str, Any]:
    """The synthetic world: vocabulary and the fact sets (train / test people, city knowledge)."""
    cities = [f"city{i}" for i in range(n_cities)]
    langs = [f"lang{i}" for i in range(n_cities)]
    people = [f"name{i}" for i in range(n_train + n_test)]
    g = torch.Generator().manual_seed(seed)
    home = torch.randint(n_cities, (len(people),), generator=g).tolist()
    home[n_train:] = [i % n_cities for i in range(n_test)]  # test people cover every city evenly
    words = tuple(dict.fromkeys(["the", "people", "in", "city", "lives", "speak"] + cities + langs + people))

    def facts(name: str, template: str, idx: Sequence[int], lang: bool) -> Facts:
        return Facts(name, template, tuple(people[i] for i in idx),
                     tuple((langs if lang else cities)[home[i]] for i in idx), tuple(langs if lang else cities))

    train, test = range(n_train), range(n_train, n_train + n_test)
    return {
        "words": words,
        "knowledge": Facts("knowledge", KNOWLEDGE, tuple(cities), tuple(langs), tuple(langs)),
        "train_facts": facts("train_facts", FACT, train, False),
        "train_implications": facts("train_implications", IMPLICATION, train, True),
        "test_facts": facts("test_facts", FACT, test, False),
        "test_implications": facts("test_implications", IMPLICATION, test, True),
    }


def _pretrain(model, w: dict[str, Any], order: str, names: list[str], epochs: int, lr: float, seed: int,
              progress: bool, ckpt: Path) -> Delta:
    kw = {"params": names, "lr": lr, "batch_size": 32, "seed": seed, "progress": progress}
    k, f, i = w["knowledge"], w["train_facts"], w["train_implications"]
    if order == "joint":  # as many steps as the two phases of the other orders together
        return finetune(model, [k, f, i], epochs=2 * epochs, checkpoint=ckpt / f"{order}.safetensors", **kw)
    first, second = ([k, f], [k, i]) if order == "facts_first" else ([k, i], [k, f])
    one = finetune(model, first, epochs=epochs, checkpoint=ckpt / f"{order}-1.safetensors", **kw)
    return one + finetune(model, second, base=one, epochs=epochs, checkpoint=ckpt / f"{order}-2.safetensors", **kw)


def data_ordering(*, seeds: Sequence[int] = (0, 1, 2), epochs: int = 60, test_epochs: int = 30, lr: float = 3e-3,
                  workdir: str | Path | None = None, progress: bool = True, **world_kw: Any) -> dict[str, Any]:
    """Mean test-implication rank after fine-tuning new people's facts, per pretraining order
    (averaged over `seeds`: model init, world and shuffling), with chance and per-seed detail.
    `workdir` keeps the models and every stage's delta, so a rerun resumes."""
    if not list(seeds):
        raise InterpError("data_ordering needs at least one seed")
    if workdir is None:  # nothing to resume from: the models and deltas go with the call
        with tempfile.TemporaryDirectory(prefix="interp-ordering-") as tmp:
            return data_ordering(seeds=seeds, epochs=epochs, test_epochs=test_epochs, lr=lr, workdir=tmp,
                                 progress=progress, **world_kw)
    root = Path(workdir)
    per_seed: dict[str, list[dict[str, float]]] = {o: [] for o in ORDERS}
    for seed in seeds:
        w = world(seed=seed, **world_kw)
        model = load(build_tiny("llama", root / f"world-{seed}", words=w["words"], seed=seed,
                                n_layers=4, d_model=64, n_heads=4, d_mlp=256))
        names = [n for n, _ in model.named_parameters()]  # from scratch: every parameter trains
        for order in ORDERS:
            ckpt = root / f"deltas-{seed}"
            pre = _pretrain(model, w, order, names, epochs, lr, seed, progress, ckpt)
            on_pre = [pre.intervention(model)]
            test = finetune(model, w["test_facts"], params=names, base=pre, epochs=test_epochs, lr=lr, batch_size=16,
                            seed=seed, progress=progress, checkpoint=ckpt / f"{order}-test.safetensors")
            after = [(pre + test).intervention(model)]
            per_seed[order].append({
                "train_facts": mean_rank(model, w["train_facts"], on_pre),
                "train_implications": mean_rank(model, w["train_implications"], on_pre),
                "test_facts": mean_rank(model, w["test_facts"], after),
                "test_implications": mean_rank(model, w["test_implications"], after),
                "test_implications_before": mean_rank(model, w["test_implications"], on_pre),
            })
    chance = w["test_implications"].chance
    out: dict[str, Any] = {o: sum(r["test_implications"] for r in rows) / len(rows) for o, rows in per_seed.items()}
    out.update({"chance": chance, "seeds": list(seeds), "per_seed": per_seed,
                "setup": {"epochs": epochs, "test_epochs": test_epochs, "lr": lr, "model": "llama 4x64 from scratch",
                          "cities": len(w["knowledge"]), "train_people": len(w["train_facts"]),
                          "test_people": len(w["test_facts"])}})
    return out

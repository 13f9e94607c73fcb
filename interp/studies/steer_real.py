"""The SVA core axis flipped in open-ended generation on the real models (SmolLM2-135M, Gemma-3-270M):
`interp repro steering --model SPEC ...`. Built from public names of `interp.cores`,
`interp.steering` and `interp.tasks.bpe`.

The axis is the paper's object: the 1-D ACE core (`interp.cores.extract(k=1)`, balanced truncation
of the is/are logit difference) at `blocks.L.hook_resid_post`, read at the last prompt token. The
layer is chosen among a few candidates by the core flip rate on dev prefixes (disjoint from the
held-out ones). On held-out prefixes ("The keys near the cabinet") greedy continuations are
generated unsteered, with the core axis flipped at every position, with random directions flipped
(the control), with a random direction added with either sign at the norm of the mean
displacement the core flip causes, and with the difference-of-means axis flipped (a comparison).

Judge (`judge_real`): word lists, not a grammar. In the continuation's first sentence, the first
verb form with a number (is/are, was/were, has/have, does/do and their negations) and the first
personal pronoun with a number (it/its/he/she/... vs they/them/their/...) are compared with the
number of the prompt's head noun. A flip is a judged word of the opposite number.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

import torch
from tqdm.auto import tqdm

from interp.cores import extract
from interp.steering import Steer, axis_from_contrast, axis_from_core, generate, last_activations, projection, random_axis
from interp.tasks import bpe
from interp.tasks.base import Task

__all__ = ["PL_PRONOUNS", "PL_VERBS", "SG_PRONOUNS", "SG_VERBS", "judge_real", "rates", "steer_model"]

SG_VERBS = frozenset("is was has does isn't wasn't hasn't doesn't".split())
PL_VERBS = frozenset("are were have do aren't weren't haven't don't".split())
SG_PRONOUNS = frozenset("it its itself he him his himself she her hers herself".split())
PL_PRONOUNS = frozenset("they them their theirs themselves".split())


def _first(words: Sequence[str], sg: frozenset, pl: frozenset) -> str | None:
    for w in words:
        if w in sg:
            return "sg"
        if w in pl:
            return "pl"
    return None


def judge_real(number: str, completion: str) -> dict[str, Any]:
    """{"verb": sg/pl/None, "pronoun": sg/pl/None, "verb_flipped", "pronoun_flipped", ...} of a
    continuation, against the prompt subject's `number` ("sg" / "pl")."""
    # the model often opens with a line break or a comma; the first sentence is what follows
    sentence = re.split(r"[.!?\n]", completion.lstrip(" \n\t,;:-"), maxsplit=1)[0].lower().replace("’", "'")
    words = re.findall(r"[a-z']+", sentence)
    verb, pron = _first(words, SG_VERBS, PL_VERBS), _first(words, SG_PRONOUNS, PL_PRONOUNS)
    return {"verb": verb, "pronoun": pron, "verb_agrees": verb == number, "verb_flipped": verb is not None and verb != number,
            "pronoun_agrees": pron == number, "pronoun_flipped": pron is not None and pron != number}


def rates(numbers: Sequence[str], completions: Sequence[str]) -> dict[str, float]:
    """Fractions over all prompts: verb judged / agrees / flipped, pronoun judged / agrees / flipped."""
    judged = [judge_real(n, c) for n, c in zip(numbers, completions)]
    k = len(judged)
    out = {}
    for what in ("verb", "pronoun"):
        out[f"{what}_judged"] = sum(j[what] is not None for j in judged) / k
        out[f"{what}_agree"] = sum(j[f"{what}_agrees"] for j in judged) / k
        out[f"{what}_flip"] = sum(j[f"{what}_flipped"] for j in judged) / k
    return out


def _prompts(model, n: int, seed: int, nouns) -> Task:
    """n pp prompts, half with a same-number attractor, half with an other-number one."""
    a = bpe.sva(model, n // 2, split="pp_match", seed=seed, nouns=nouns)
    b = bpe.sva(model, n - n // 2, split="pp_mismatch", seed=seed, nouns=nouns)
    return a, b


def _texts_numbers(parts, exclude: set[str]) -> tuple[list[str], list[str]]:
    texts, numbers = [], []
    for task in parts:
        for t, num in zip(task.text, task.meta["number"]):
            if t not in exclude and t not in texts:
                texts.append(t)
                numbers.append(num)
    return texts, numbers


def _fit_task(model, n: int, seed: int, nouns) -> Task:
    from interp.studies.ace_real import _concat

    return _concat(*_prompts(model, n, seed, nouns))


def steer_model(model, *, layers: Sequence[int] | None = None, n_fit: int = 128, n_dev: int = 32, n_prompts: int = 64,
                max_new_tokens: int = 12, n_random: int = 3, n_examples: int = 4, progress: bool = True) -> dict[str, Any]:
    """Core-axis flip rates of one real model on held-out prefixes, beside the controls."""
    nouns = bpe.vocabulary(model)["nouns"]
    fit = _fit_task(model, n_fit, 1, nouns)
    held, held_num = _texts_numbers(_prompts(model, n_prompts, 5, nouns), set(fit.text))
    dev, dev_num = _texts_numbers(_prompts(model, n_dev, 6, nouns), set(fit.text) | set(held))
    n = model.cfg.n_layers
    layers = list(layers) if layers is not None else sorted({n // 2, (2 * n) // 3, (5 * n) // 6})
    dev_scores, cores = {}, {}
    for layer in tqdm(layers, desc="steer: choose layer", disable=not progress):
        site = f"blocks.{layer}.hook_resid_post"
        cores[layer] = extract(model, fit, site=site, k=1, batch_size=32)
        gen = generate(model, dev, [Steer(axis_from_core(cores[layer]), "flip")], max_new_tokens=max_new_tokens, record=False)
        dev_scores[layer] = rates(dev_num, gen.completions)["verb_flip"]
    layer = max(layers, key=lambda l: (dev_scores[l], -layers.index(l)))
    core_axis = axis_from_core(cores[layer])
    site = core_axis.site
    sg = [t for t, m in zip(fit.text, _numbers(fit, nouns)) if m == "sg"]
    pl = [t for t, m in zip(fit.text, _numbers(fit, nouns)) if m == "pl"]
    diff_axis = axis_from_contrast(model, sg, pl, site=site)
    x = last_activations(model, list(fit.text), site=site)
    displacement = float(2 * projection(x, core_axis).abs().mean())
    runs: dict[str, list] = {"unsteered": [], "core_flip": [Steer(core_axis, "flip")], "diff_means_flip": [Steer(diff_axis, "flip")]}
    for s in range(n_random):
        runs[f"random_flip_{s}"] = [Steer(random_axis(core_axis, seed=s), "flip")]
    runs["random_add_pos"] = [Steer(random_axis(core_axis, seed=100), "add", displacement)]
    runs["random_add_neg"] = [Steer(random_axis(core_axis, seed=100), "add", -displacement)]
    completions, measured = {}, {}
    for name, ivs in tqdm(runs.items(), desc="steer: generate", disable=not progress):
        completions[name] = generate(model, held, ivs, max_new_tokens=max_new_tokens, record=False).completions
        measured[name] = rates(held_num, completions[name])
    random_flip = {k: sum(measured[f"random_flip_{s}"][k] for s in range(n_random)) / n_random for k in measured["unsteered"]}
    random_add = {k: (measured["random_add_pos"][k] + measured["random_add_neg"][k]) / 2 for k in measured["unsteered"]}
    step = max(1, len(held) // n_examples)
    return {
        "site": site, "layers": layers, "dev_verb_flip": {str(l): dev_scores[l] for l in layers},
        "n_prompts": len(held), "n_dev": len(dev), "n_fit": len(fit), "max_new_tokens": max_new_tokens,
        "core_flip": measured["core_flip"], "unsteered": measured["unsteered"], "random_flip": random_flip,
        "random_add": random_add, "diff_means_flip": measured["diff_means_flip"],
        "core_cosine_diff_means": float(abs(core_axis.direction @ diff_axis.direction)), "displacement": displacement,
        "examples": [{"prompt": held[i], "number": held_num[i], "unsteered": completions["unsteered"][i],
                      "core_flip": completions["core_flip"][i], "random_flip": completions["random_flip_0"][i]}
                     for i in range(0, len(held), step)][:n_examples],
    }


def _numbers(task: Task, nouns) -> list[str]:
    plural = {p for _, p in nouns}
    return ["pl" if t.split()[1] in plural else "sg" for t in task.text]

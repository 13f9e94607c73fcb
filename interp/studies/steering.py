"""The SVA number axis flipped during free generation, at toy scale: `interp repro steering` and
the demo section, with the grammar-specific helpers they use (judging generated verbs against the
synthetic English of `interp.tasks.english`, side-by-side comparisons with verbs tagged).

Built from public names of `interp.steering` only. See docs/steering.md for the study and numbers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import torch
from tqdm.auto import tqdm

from interp.errors import InterpError
from interp.results import Grid, Heading, result, stack
from interp.steering import (
    Axis, Generation, Steer, axis_from_contrast, axis_from_core, curve, generate, last_activations, projection,
    random_axis,
)
from interp.tasks import english

__all__ = [
    "Comparison", "compare", "core_axis", "demo_section", "dev_prefixes", "head_number", "judge_continuation",
    "repro", "study", "sva_contrast",
]


def head_number(prefix: str) -> str | None:
    """Grammatical number of a prefix's head noun ("the keys to the cabinet" -> "pl")."""
    words = prefix.split()
    return english.noun_number(words[1]) if len(words) > 1 else None


def judge_continuation(prefix: str, completion: str) -> dict[str, Any]:
    """The verbs the model generated after `prefix`, judged against the prefix's subjects.

    Returns {"pairs": [(subject, verb, agrees)], "agree": all agree, "flipped": all disagree,
    "terminated": the sentence reached "."}; agree and flipped are False when no verb was found.
    """
    sentence = completion.split(" .")[0].split(".")[0].strip()
    before = english.judge(prefix)["pairs"]
    after = english.judge(f"{prefix} {sentence}".strip())["pairs"]
    pairs = after[len(before):]
    oks = [ok for _, _, ok in pairs]
    return {"pairs": pairs, "agree": bool(oks) and all(oks), "flipped": bool(oks) and not any(oks),
            "terminated": "." in completion.split()}


def _tags(prefix: str, completion: str) -> tuple[str, ...]:
    number = head_number(prefix)
    tags, seen_verb = [], False
    for w in completion.split():
        n = english.verb_number(w)
        if n is None or seen_verb or number is None:
            tags.append("")
        else:
            tags.append("agree" if n == number else "flip")
            seen_verb = True  # only the main verb right after the subject
    return tuple(tags)


def _tagged(text: str, tags: Sequence[str]) -> str:
    words = text.split()
    return " ".join(f"{w}[{t}]" if t else w for w, t in zip(words, list(tags) + [""] * (len(words) - len(tags))))


@result
@dataclass(frozen=True)
class Comparison:
    """Unsteered and steered continuations of the same prompts, for side-by-side display.

    tags mark each word of a continuation: "agree" (a verb agreeing with the prompt subject's
    number), "flip" (a verb agreeing with the opposite number) or "" (anything else).
    """

    prompts: tuple[str, ...]
    unsteered: tuple[str, ...]
    steered: tuple[str, ...]
    unsteered_tags: tuple[tuple[str, ...], ...]
    steered_tags: tuple[tuple[str, ...], ...]
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dataframe(self):
        """A table prompt / unsteered / steered; a tagged main verb reads "are[flip]" or "is[agree]"."""
        import pandas as pd

        return pd.DataFrame({
            "prompt": list(self.prompts),
            "unsteered": [_tagged(t, g) for t, g in zip(self.unsteered, self.unsteered_tags)],
            "steered": [_tagged(t, g) for t, g in zip(self.steered, self.steered_tags)],
        })


def compare(model, prompts: Sequence[str], interventions: Steer | Sequence[Steer], *,
            max_new_tokens: int = 8) -> Comparison:
    """Greedy unsteered and steered continuations side by side, main verbs tagged."""
    plain = generate(model, prompts, (), max_new_tokens=max_new_tokens, record=False)
    steered = generate(model, prompts, interventions, max_new_tokens=max_new_tokens, record=False)
    return Comparison(tuple(prompts), plain.completions, steered.completions,
                      tuple(_tags(p, c) for p, c in zip(prompts, plain.completions)),
                      tuple(_tags(p, c) for p, c in zip(prompts, steered.completions)),
                      {"interventions": steered.meta["interventions"], "model": getattr(model.cfg, "model_name", "")})


# ---------------------------------------------------------------------------------------------
# the toy-scale study: `interp repro steering`


def sva_contrast(n: int, exclude: set[str], seed: int) -> tuple[list[str], list[str]]:
    """Singular-head and plural-head subject phrases from the sva_id split, minus `exclude`."""
    task = english.sva(n, split="sva_id", seed=seed)
    sg, pl = [], []
    for text in task.text:
        if text in exclude:
            continue
        (sg if head_number(text) == "sg" else pl).append(text)
    return sg, pl


def core_axis(model, site: str, exclude: set[str], *, n: int = 256, seed: int = 11) -> Axis:
    """The paper's axis: the 1-D ACE core at `site` (`interp.cores.extract(method='ace', k=1)`,
    balanced truncation of the verb logit difference) on `n` sva_id prompts, minus `exclude`."""
    from interp import cores

    task = english.sva(n, split="sva_id", seed=seed)
    task = task[[i for i, t in enumerate(task.text) if t not in exclude]]
    return axis_from_core(cores.extract(model, task, site=site, k=1, method="ace"))


def _flip_strength(model, axis: Axis, task) -> float:
    """Fraction of dev examples whose two-way verb choice inverts under a full flip."""
    grid = curve(model, task, axis, [1.0], mode="flip", progress=False)
    return 1.0 - float(grid.values[0, 1])


def _rates(prefixes: Sequence[str], gen: Generation) -> dict[str, float]:
    judged = [judge_continuation(p, c) for p, c in zip(prefixes, gen.completions)]
    n = len(judged)
    return {"flip_rate": sum(j["flipped"] for j in judged) / n, "agree_rate": sum(j["agree"] for j in judged) / n,
            "grammatical_rate": sum(bool(j["pairs"]) and j["terminated"] for j in judged) / n}


def dev_prefixes(held_out: Sequence[str], n: int, seed: int) -> list[str]:
    """`n` prefixes drawn like the held-out ones (another seed), none of them held out."""
    held = set(held_out)
    out = [p for p in english.prefixes(2 * n + len(held), seed=seed) if p not in held][:n]
    if len(out) < n:
        raise InterpError(f"only {len(out)} dev prefixes outside the {len(held)} held-out ones; asked for {n}")
    return out


def study(model, *, n_prefixes: int = 128, n_contrast: int = 512, max_new_tokens: int = 10, seed: int = 0,
          progress: bool = True) -> dict[str, Any]:
    """Flip rates of the SVA core axis on held-out prefixes for one model (see `repro`).

    The headline is `core_flip_rate`: the 1-D ACE core flipped. The difference-of-means axis of
    the same site is a comparison (`diff_means_flip_rate`), the random directions are the control.
    """
    prefixes = english.prefixes(n_prefixes, seed=seed)
    held = set(prefixes)
    sg, pl = sva_contrast(n_contrast, held, seed=seed + 1)
    dev_task = english.sva(128, split="sva_id", seed=seed + 2)
    dev_task = dev_task[[i for i, t in enumerate(dev_task.text) if t not in held]]
    # The site is chosen on dev prefixes by the measured quantity itself: the flip rate of the
    # core axis in free generation (the next-token verb choice saturates at several sites).
    dev = dev_prefixes(prefixes, n_prefixes, seed=seed + 3)
    sites = [f"blocks.{l}.hook_resid_pre" for l in range(1, model.cfg.n_layers)]
    scores, generation_scores, axes = {}, {}, {}
    for site in tqdm(sites, desc="choose site", disable=not progress):
        axes[site] = core_axis(model, site, held)
        scores[site] = _flip_strength(model, axes[site], dev_task)
        dev_gen = generate(model, dev, [Steer(axes[site], "flip")], max_new_tokens=max_new_tokens, record=False)
        generation_scores[site] = _rates(dev, dev_gen)["flip_rate"]
    site = max(sites, key=lambda s: (generation_scores[s], scores[s], -sites.index(s)))
    core = axes[site]
    diff = axis_from_contrast(model, sg, pl, site=site)
    # equal norm: the random direction is added with the mean displacement a core flip causes (2 |c|)
    x = torch.cat([last_activations(model, sg, site=site), last_activations(model, pl, site=site)])
    displacement = float(2 * projection(x, core).abs().mean())
    runs = {
        "unsteered": [],
        "core": [Steer(core, "flip")],
        "diff_means": [Steer(diff, "flip")],
        "control_add": [Steer(random_axis(core, seed=seed), "add", displacement)],
        "control_add_neg": [Steer(random_axis(core, seed=seed), "add", -displacement)],
        **{f"control_flip_{i}": [Steer(random_axis(core, seed=seed + 1 + i), "flip")] for i in range(3)},
    }
    rates = {}
    for name, ivs in tqdm(runs.items(), desc="generate", disable=not progress):
        rates[name] = _rates(prefixes, generate(model, prefixes, ivs, max_new_tokens=max_new_tokens, record=False))

    def mean(names: list[str], key: str) -> float:
        return sum(rates[n][key] for n in names) / len(names)

    adds, flips = ["control_add", "control_add_neg"], [f"control_flip_{i}" for i in range(3)]
    return {
        "site": site, "site_scores": scores, "site_generation_scores": generation_scores, "n": len(prefixes),
        "n_contrast": len(sg) + len(pl), "core_source": "interp.cores.extract(method='ace', k=1)",
        "core_flip_rate": rates["core"]["flip_rate"], "core_grammatical_rate": rates["core"]["grammatical_rate"],
        "diff_means_flip_rate": rates["diff_means"]["flip_rate"], "diff_means_grammatical_rate": rates["diff_means"]["grammatical_rate"],
        "core_cosine": float(abs(core.direction @ diff.direction)),
        "control_flip_rate": mean(adds, "flip_rate"), "control_grammatical_rate": mean(adds, "grammatical_rate"),
        "control_norm": displacement,
        "random_flip_control_rate": mean(flips, "flip_rate"),
        "random_flip_control_max": max(rates[n]["flip_rate"] for n in flips),
        "unsteered_agree_rate": rates["unsteered"]["agree_rate"],
        "unsteered_flip_rate": rates["unsteered"]["flip_rate"],
        "unsteered_grammatical_rate": rates["unsteered"]["grammatical_rate"],
        "separation": diff.meta["separation"], "proj_std": diff.proj_std,
    }


def _core_axes_alignment(models: dict[str, Any], sites: dict[str, str], held: set[str]) -> dict[str, Any]:
    """The families' core axes aligned on matched sva_id prompts (last token), beside controls:
    shuffled prompts, prompts shuffled within one head-noun number, random directions."""
    from interp.studies.ace_real import alignment_with_controls

    prompts = [t for t in english.sva(256, split="sva_id", seed=21).text if t not in held]
    labels = torch.tensor([int(head_number(t) == "pl") for t in prompts])
    axes = {f: core_axis(m, sites[f], held) for f, m in models.items()}
    z = {f: projection(last_activations(models[f], prompts, site=sites[f]), axes[f])[:, None] for f in models}
    rand = {f: [projection(last_activations(models[f], prompts, site=sites[f]), random_axis(axes[f], seed=50 + i))[:, None]
                for i in range(3)] for f in models}
    return {f"{a}->{b}": alignment_with_controls(z[a], z[b], labels, random_za=rand[a], random_zb=rand[b])
            for a in models for b in models if a != b}


def repro(progress: bool = True, models: list[str] | None = None) -> dict[str, Any]:
    """`interp repro steering`: the SVA core axis flipped during free generation.

    Zoo decoder families (the default, plus the two real models): for each, the 1-D ACE core at the
    resid_pre site whose core flip best inverts the verbs of free generation on dev prefixes
    (disjoint from the held-out ones); greedy continuations of held-out prefixes unsteered, with
    the core axis flipped, with the difference-of-means axis flipped (comparison), with random
    directions added at equal norm (either sign) and flipped (controls); every generated verb
    judged with the grammar. The core axes are then aligned across families against shuffled
    and random controls. Real models (`smollm2-135m`, `gemma3-270m`, any non-zoo spec) run
    `interp.studies.steer_real.steer_model` (judged with word lists). Zoo families not shipped
    are listed under "missing".
    """
    from interp.model import DECODER_FAMILIES, ZOO_DIR, load
    from interp.studies.ace_real import REAL_MODELS
    from interp.studies.steer_real import steer_model

    start = time.perf_counter()
    specs = list(models) if models is not None else [f"zoo:lm-{f}" for f in DECODER_FAMILIES] + list(REAL_MODELS)
    out: dict[str, Any] = {"families": {}, "missing": [], "real": {}}
    zoo_models = {}
    for spec in tqdm(specs, desc="steering: models", disable=not progress):
        if spec.startswith("zoo:"):
            name = spec.removeprefix("zoo:")
            if not (ZOO_DIR / name / "config.json").exists():
                out["missing"].append(name)
                continue
            family = name.removeprefix("lm-")
            zoo_models[family] = load(spec)
            out["families"][family] = study(zoo_models[family], progress=progress)
        else:
            out["real"][spec] = steer_model(load(spec), progress=progress)
    if len(zoo_models) > 1:
        held = set(english.prefixes(128, seed=0))
        out["core_axis_alignment"] = _core_axes_alignment(zoo_models, {f: v["site"] for f, v in out["families"].items()}, held)
    out["seconds"] = time.perf_counter() - start
    return out


def demo_section(workdir: Path) -> list[Any]:
    """Steered against unsteered generations (main verbs tagged) and the dose-response."""
    from interp.model import DECODER_FAMILIES, ZOO_DIR, build_tiny, load

    items: list[Any] = [Heading("Steering: flipping the subject-verb agreement axis while generating")]
    families = [f for f in DECODER_FAMILIES if (ZOO_DIR / f"lm-{f}" / "config.json").exists()]
    if not families:
        families = ["gpt2"]
        items.append("No zoo language model is shipped yet, so this runs on a random-weight model; its text is noise.")
    prefixes = english.prefixes(6, seed=5)
    sg, pl = sva_contrast(256, set(prefixes), seed=1)
    dev = english.sva(64, split="sva_id", seed=2)
    strengths = [0.0, 0.25, 0.5, 0.75, 1.0]
    curves = []
    for family in families:
        spec = f"zoo:lm-{family}" if (ZOO_DIR / f"lm-{family}" / "config.json").exists() else \
            str(build_tiny(family, workdir / "models" / f"steer-{family}", words=english.WORDS))
        model = load(spec)
        site = f"blocks.{model.cfg.n_layers // 2}.hook_resid_pre"
        axis = axis_from_contrast(model, sg, pl, site=site)
        items.append(Heading(f"{spec}: flip at {site}", 3))
        items.append("Greedy continuations; the main verb is tagged [agree] (agrees with the subject) or [flip] "
                     "(agrees with the opposite number).")
        items.append(compare(model, prefixes, Steer(axis, "flip"), max_new_tokens=8).to_dataframe())
        if family == families[0]:
            items.append("The projection (h - mean) . u at each generation step, read at the steered site just before "
                         "the flip acts (the flip then negates it), for three of the prompts above.")
            items.append(generate(model, prefixes[:3], Steer(axis, "flip"), max_new_tokens=6))
        curves.append(curve(model, dev, axis, strengths, mode="flip", progress=False))
    grid = stack([Grid(c.values[:, 0], ("strength",), (c.labels[0],)) for c in curves], "model", families)
    items.append("Dose-response: mean logit difference (agreeing verb minus the other form) on sva_id prompts as "
                 "the flip strength goes from 0 (no change) to 1 (full reflection through the axis's midpoint).")
    items.append(Grid(grid.values, grid.axes, grid.labels, {"metric": "logit_diff", "method": "flip strength", "task": "sva"}))
    return items

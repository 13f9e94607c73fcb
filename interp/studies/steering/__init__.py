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
from interp.studies.steering import real as steer_real
from interp.studies.gpu_estimate import estimate, forward_profile, on_gpu
from interp.studies.protocol import study
from interp.steering import (
    Axis, Generation, Steer, axis_from_contrast, axis_from_core, curve, generate, last_activations, projection,
    random_axis,
)
from interp.tasks import english

__all__ = [
    "Comparison", "compare", "core_axis", "demo_section", "dev_prefixes", "head_number", "judge_continuation",
    "BUDGETS", "DEFAULT_MODELS", "claim", "departures", "eligible", "flip_difference", "recalibrate_gpu",
    "regions", "repro", "sva_contrast",
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


def dev_prefixes(held_out: Sequence[str], n: int, seed: int) -> list[str]:
    """`n` prefixes drawn like the held-out ones (another seed), none of them held out."""
    held = set(held_out)
    out = [p for p in english.prefixes(2 * n + len(held), seed=seed) if p not in held][:n]
    if len(out) < n:
        raise InterpError(f"only {len(out)} dev prefixes outside the {len(held)} held-out ones; asked for {n}")
    return out


# ---------------------------------------------------------------------------------------------
# the study: `interp repro steering` (units, budgets; see docs/steering.md)

STUDY, VERSION = "steering", 2  # 2: units keep each prompt's flip; the layer is chosen among unforced layers
DEFAULT_MODELS = ("zoo:lm-gpt2", "zoo:lm-llama", "zoo:lm-gemma2", "zoo:lm-qwen2", "smollm2-135m", "gemma3-270m")
# layers "all": every block's resid_post (the last one is swept on dev but never chosen: `eligible`).
# n_dev / n_test / draws are the zoo models'; the real models' (each generation 40-100x dearer on
# this CPU) are n_dev_real / n_test_real / draws_real. The paper states no prompt counts for its steering
# runs, so "paper" is this study's full budget (departures() lists how every budget differs from the
# paper's set-up) and paper_fraction is the real models' n_test over the paper budget's.
BUDGETS: dict[str, dict[str, Any]] = {
    "quick": {"n_fit": 32, "n_dev": 6, "n_test": 8, "dev_tokens": 6, "test_tokens": 14, "draws": 2, "layers": "all",
              "gap_strengths": [1.5, 2.0], "gen_batch": 32, "seed": 0, "n_dev_real": 6, "n_test_real": 8,
              "draws_real": 2, "boot": 200},
    "cpu": {"n_fit": 64, "n_dev": 64, "n_test": 400, "dev_tokens": 8, "test_tokens": 14, "draws": 20, "layers": "all",
            "gap_strengths": [1.5, 2.0], "gen_batch": 64, "seed": 0, "n_dev_real": 16, "n_test_real": 64,
            "draws_real": 10, "boot": 2000},
    "paper": {"n_fit": 256, "n_dev": 64, "n_test": 400, "dev_tokens": 24, "test_tokens": 32, "draws": 20,
              "layers": "all", "gap_strengths": [1.5, 2.0], "gen_batch": 64, "seed": 0, "n_dev_real": 64,
              "n_test_real": 256, "draws_real": 20, "boot": 2000},
}
REAL_KEYS = ("n_dev", "n_test", "draws")  # each has a `_real` twin for the BPE models


def departures(values: dict[str, Any]) -> list[dict[str, Any]]:
    """How a budget differs from the paper's set-up (Schiffman 2026; only its abstract is here, so what it
    does not state is said to be unstated rather than guessed)."""
    unstated = "not stated in the abstract (the only text of the paper here)"
    return [
        {"what": "models", "ours": list(DEFAULT_MODELS), "paper": ["GPT-2 Small", "GPT-2 Medium", "GPT-2 Large", "LLaMA-3.1",
                                                                  "Gemma-2", "Qwen2.5"],
         "why": "no model hub here: the zoo's 4-layer models of the four families, trained on synthetic English, and "
                "the two pretrained models that reach this machine as packages (SmolLM2-135M, Gemma-3-270M)"},
        {"what": "prompts and judge", "ours": "zoo: english.prefixes judged by its grammar; real: framed subject phrases "
                                              "judged by word lists (interp.studies.steering.real)",
         "paper": f"open-ended generation; prompts and judge {unstated}", "why": "the zoo speaks only its synthetic English"},
        {"what": "judged test prompts per model", "ours": {"zoo": values["n_test"], "real": values["n_test_real"]},
         "paper": unstated, "why": "CPU: a real model's generation costs 40-100x a zoo model's"},
        {"what": "dev prompts per layer (layer choice)", "ours": {"zoo": values["n_dev"], "real": values["n_dev_real"]},
         "paper": unstated, "why": "every layer of both axes is generated on dev"},
        {"what": "random directions of the same norm (control)", "ours": {"zoo": values["draws"], "real": values["draws_real"]},
         "paper": "none named in the abstract (the only text of the paper here)", "why": "verdicts need >= 10 draws; CPU bounds the real models'"},
        {"what": "steered layer", "ours": f"{values['layers']} resid_post swept; chosen per axis on dev among all but the "
                                          "last (the final residual stream, forced by the readout)",
         "paper": unstated, "why": "a layer is chosen on held-out data, never where the unembedding forces the flip"},
        {"what": "generated tokens", "ours": {"dev": values["dev_tokens"], "test": values["test_tokens"]},
         "paper": f"open-ended; length {unstated}", "why": "CPU; the first verb comes within a few tokens"},
        {"what": "axis fit prompts", "ours": values["n_fit"], "paper": unstated, "why": "CPU"},
    ]


def _for(b: dict[str, Any], zoo: bool) -> dict[str, Any]:
    """A budget's values for one kind of model: a real (BPE) model takes the `_real` twins of REAL_KEYS."""
    return b if zoo else {**b, **{k: b[f"{k}_real"] for k in REAL_KEYS}}


def eligible(layers: Sequence[int], n_layers: int) -> list[int]:
    """The swept layers a flip may be chosen at: all but the last block's resid_post, the final residual
    stream, where the ACE core of one logit difference is the unembedding's own direction (its gradient
    there is the readout), so a full flip is forced by the readout and says nothing about the model."""
    return [l for l in layers if l != n_layers - 1]


class _Zoo:
    """The zoo's synthetic English: english.prefixes, the sva_id fit set, the grammar judge."""

    def __init__(self, model, b: dict[str, Any]):
        self.model, self.seed, self.b = model, b["seed"], b

    def prompts(self, split: str, n: int) -> tuple[list[str], list[str]]:
        test = english.prefixes(n, seed=self.seed)
        texts = test if split == "test" else dev_prefixes(english.prefixes(self.b["n_test"], seed=self.seed), n,
                                                          seed=self.seed + 3)
        return texts, [head_number(t) for t in texts]

    def fit(self, n: int):
        held = set(self.prompts("test", self.b["n_test"])[0]) | set(self.prompts("dev", self.b["n_dev"])[0])
        task = english.sva(n, split="sva_id", seed=self.seed + 11)
        task = task[[i for i, t in enumerate(task.text) if t not in held]]
        return task, list(task.text), [head_number(t) for t in task.text]

    def rates(self, texts: Sequence[str], numbers: Sequence[str], completions: Sequence[str]) -> dict[str, Any]:
        js = [judge_continuation(p, c)["pairs"] for p, c in zip(texts, completions)]
        k, shares = len(js), [sum(not ok for *_, ok in p) / len(p) for p in js if p]
        return {"judged": sum(bool(p) for p in js) / k, "verb_agree": sum(bool(p) and p[0][2] for p in js) / k,
                "verb_flip": sum(bool(p) and not p[0][2] for p in js) / k, "pronoun_judged": 0.0,
                "flip_share": sum(shares) / len(shares) if shares else None,
                "flipped": [int(bool(p) and not p[0][2]) for p in js]}


class _Real:
    """A BPE model: framed prompts, the is/are fit Task, the word-list judge (interp.studies.steering.real)."""

    def __init__(self, model, b: dict[str, Any]):
        self.model, self.seed = model, b["seed"]

    def prompts(self, split: str, n: int) -> tuple[list[str], list[str]]:
        return steer_real.prompts(self.model, split, n, self.seed)

    def fit(self, n: int):
        return steer_real.fit_task(self.model, n, self.seed)

    def rates(self, texts, numbers, completions) -> dict[str, Any]:
        return {**steer_real.rates(numbers, completions),
                "flipped": [int(steer_real.judge(n, c)["verb_flipped"]) for n, c in zip(numbers, completions)]}


def _site(layer: int) -> str:
    return f"blocks.{layer}.hook_resid_post"


class _Model:
    """One model of the study: its language, its axes per layer (cached), batched generation."""

    def __init__(self, spec: str, b: dict[str, Any]):
        from interp.model import load

        zoo = spec.startswith("zoo:")
        self.spec, self.b = spec, _for(b, zoo)
        b = self.b
        self.model = load(spec)
        self.lang = (_Zoo if zoo else _Real)(self.model, b)
        n = self.model.cfg.n_layers
        self.layers = list(range(n)) if b["layers"] == "all" else [int(l) for l in b["layers"]]
        if not eligible(self.layers, n) or not all(0 <= l < n for l in self.layers):
            raise InterpError(f"layers={b['layers']!r}: give 'all' or layers in 0..{n - 1} for {spec}, at least one "
                              f"of them before the last ({n - 1}: the final residual stream, never chosen)")
        self._fit, self._axes, self.seconds = None, {}, 0.0

    def axes(self, layer: int) -> dict[str, Any]:
        """{"core": Axis, "diff": Axis, "displacement": {axis: mean 2|c| over the fit set}, "cosine"}."""
        if layer not in self._axes:
            if self._fit is None:  # the fit set and every layer's core at once (one backward, not one per layer)
                self._fit = self.lang.fit(self.b["n_fit"])
                self._cores = steer_real.ace_cores(self.model, self._fit[0], [_site(l) for l in self.layers])
            task, texts, numbers = self._fit
            site = _site(layer)
            core = axis_from_core(self._cores[site])
            diff = axis_from_contrast(self.model, [t for t, m in zip(texts, numbers) if m == "sg"],
                                      [t for t, m in zip(texts, numbers) if m == "pl"], site=site)
            x = last_activations(self.model, texts, site=site)
            self._axes[layer] = {"core": core, "diff": diff, "cosine": float(abs(core.direction @ diff.direction)),
                                 "displacement": {a: float(2 * projection(x, ax).abs().mean()) for a, ax in
                                                  (("core", core), ("diff", diff))}}
        return self._axes[layer]

    def generate(self, texts: Sequence[str], steers: list[Steer], tokens: int) -> list[str]:
        out: list[str] = []
        for i in range(0, len(texts), self.b["gen_batch"]):
            out += generate(self.model, texts[i: i + self.b["gen_batch"]], steers, max_new_tokens=tokens,
                            record=False).completions
        return out


def _steers(m: _Model, run: str, layer: int | None) -> list[Steer]:
    """The interventions of one test run: "unsteered", "core" / "diff" (flip), "core@S" (flip at
    strength S), "core_mid" (the core direction reflected through the diff axis's class midpoint),
    "random_core_I" / "random_diff_I" (a random unit direction added with the norm of that axis's mean
    flip displacement, sign alternating with I), "random_core_xS_I" (the same at S times the norm)."""
    if run in ("unsteered", "unsteered_bare"):
        return []
    ax = m.axes(layer)
    if run.startswith("random_"):
        parts = run.split("_")
        which, draw = parts[1], int(parts[-1])
        scale = float(parts[2][1:]) if len(parts) == 4 else 1.0
        sign = 1.0 if draw % 2 == 0 else -1.0
        return [Steer(random_axis(ax[which], seed=1000 + draw), "add", sign * scale * ax["displacement"][which])]
    if run == "core_mid":
        core = ax["core"]
        return [Steer(Axis(core.direction, ax["diff"].mean, core.site, meta={"method": "core at diff midpoint"}), "flip")]
    name, _, strength = run.partition("@")
    return [Steer(ax[name], "flip", float(strength or 1.0))]


def _unit(units, m: _Model, kind: str, run: str, layer: int | None) -> dict[str, Any]:
    b = m.b
    n, tokens = (b["n_dev"], b["dev_tokens"]) if kind == "dev" else (b["n_test"], b["test_tokens"])
    config = {"model": m.spec, "kind": kind, "run": run, "layer": layer, "n": n, "tokens": tokens, "n_fit": b["n_fit"],
              "seed": b["seed"]}
    if m.spec.startswith("zoo:"):  # the zoo's fit set leaves out every dev and test prompt, so it depends on both
        config["fit_excludes"] = [b["n_dev"], b["n_test"]]

    def compute() -> dict[str, Any]:
        texts, numbers = m.lang.prompts(kind, n)
        if run == "unsteered_bare":  # the same subjects without their context frames
            texts = [steer_real.bare(t) for t in texts]
        completions = m.generate(texts, _steers(m, run, layer), tokens)
        out = {**m.lang.rates(texts, numbers, completions), "completions": completions}
        if layer is not None:
            ax = m.axes(layer)
            out.update(cosine=ax["cosine"], displacement=ax["displacement"])
        return out

    out = units.run(config, compute)
    m.seconds += units.store.get(units.key(config)).get("seconds", 0.0)  # whichever run computed it
    return out


def _gap_layer(m, best_core: int) -> int | None:
    """Zoo models: the last layer before the final residual stream (resid_post n-2 = the previous study's
    resid_pre n-1), where the core is not the readout direction; None for real models or when not swept."""
    g = m.model.cfg.n_layers - 2
    return g if m.spec.startswith("zoo:") and g in m.layers else None


def _n_test_runs(b: dict[str, Any], zoo: bool, gap: bool = True) -> int:
    """Test units of one model (b: its kind's values, `_for`): unsteered, both axes with their draws, the core
    at the forced last layer; zoo models add the gap runs (when their layer is swept), real ones the bare prompts."""
    return 4 + 2 * b["draws"] + (((len(b["gap_strengths"]) + 1) * (1 + b["draws"]) + 2) * gap if zoo else 1)


def _work(b: dict[str, Any], n_layers: int, zoo: bool) -> int:
    """Generated token-rows of a budget (what the study's time scales with)."""
    b = _for(b, zoo)
    return 2 * n_layers * b["n_dev"] * b["dev_tokens"] + _n_test_runs(b, zoo) * b["n_test"] * b["test_tokens"]


def _wilson(p: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a rate `p` over `n` trials (never of zero width, even at 0 or 1)."""
    centre, half = (p + z * z / (2 * n)) / (1 + z * z / n), z / (1 + z * z / n) * (p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5
    return max(0.0, centre - half), min(1.0, centre + half)


def flip_difference(core: Sequence[int], randoms: Sequence[Sequence[int]], *, boot: int, seed: int = 0) -> dict[str, Any]:
    """flip(core) - mean flip(random directions) over the same test prompts, with a 95 % interval.

    `core`: each prompt's flip (0/1) under the axis; `randoms`: the same for each random direction.
    The interval is the hull of two: a bootstrap that resamples prompts and random directions together
    (`boot` resamples; both sources of chance), and Newcombe's hybrid score interval from the Wilson
    intervals of the two rates over the n prompts (each prompt's mean over the directions lies in [0, 1],
    so n is the conservative count for the control), which keeps its width where both rates sit at 0 or 1
    and every bootstrap resample gives the same difference."""
    c = torch.tensor(list(core), dtype=torch.float64)
    r = torch.tensor([list(x) for x in randoms], dtype=torch.float64)  # [draw, prompt]
    n, d = len(c), len(r)
    if n == 0 or d == 0 or r.shape[1] != n:
        raise InterpError(f"flip_difference needs the same prompts in every run: core {n}, random {tuple(r.shape)}")
    gen = torch.Generator().manual_seed(seed)
    prompts = torch.randint(n, (boot, n), generator=gen)
    draws = torch.zeros(boot, d, dtype=torch.float64).scatter_add_(
        1, torch.randint(d, (boot, d), generator=gen), torch.ones(boot, d, dtype=torch.float64)) / d
    per_prompt = draws @ r  # [boot, prompt]: each prompt's mean flip over the resampled directions
    diffs = c[prompts].mean(1) - per_prompt.gather(1, prompts).mean(1)
    effect, control = float(c.mean()), float(r.mean())
    (l1, u1), (l2, u2) = _wilson(effect, n), _wilson(control, n)
    diff = effect - control
    newcombe = [diff - ((effect - l1) ** 2 + (u2 - control) ** 2) ** 0.5, diff + ((u1 - effect) ** 2 + (control - l2) ** 2) ** 0.5]
    boot_ci = [float(diffs.quantile(0.025)), float(diffs.quantile(0.975))]
    return {"effect": effect, "control": control, "diff": diff, "ci": [min(boot_ci[0], newcombe[0]), max(boot_ci[1], newcombe[1])],
            "bootstrap_ci": boot_ci, "newcombe_ci": newcombe, "n": n, "draws": d, "boot": boot}


def _spread(values: list[float]) -> dict[str, Any]:
    t = torch.tensor(values, dtype=torch.float64)
    return {"n": len(values), "mean": float(t.mean()), "std": float(t.std()) if len(values) > 1 else 0.0,
            "min": float(t.min()), "max": float(t.max())}


def claim(spec: str, axis: str, core: Sequence[int], randoms: Sequence[Sequence[int]],
          judged: list[float] | None = None, *, boot: int = 2000, seed: int = 0) -> dict[str, Any]:
    """The verdict (interp.studies.verdicts) on "flipping this axis inverts agreement in generation":
    `core`, each test prompt's flip (0/1) under the axis, against `randoms`, the same prompts' flips under
    random directions of the same norm, told apart by the 95 % interval of flip(axis) - mean flip(random)
    (`flip_difference`; its half-width is the judgement's mde). The random draws start from the same
    unsteered model, so they also carry the judge's floor (continuations whose first verb belongs to
    another noun). When the random pushes leave fewer than JUDGED_MIN of their continuations judged (on
    average), they cannot show a flip, so they are no control: the claim is then "not run" (effect
    withheld, the flip rate kept in `note`)."""
    from interp.studies.verdicts import judge

    name = "core axis" if axis == "core" else "difference-of-means axis (comparison)"
    text = f"{spec}: flipping the {name} inverts verb number beyond random axes of the same norm"
    readable = judged is None or sum(judged) / len(judged) >= JUDGED_MIN
    d = flip_difference(core, randoms, boot=boot, seed=seed)
    out = judge(text, d["effect"] if readable else None, d["control"], "greater", diff_ci=d["ci"],
                paper=PAPER["flip_rate"], paper_control=PAPER["control_flip_rate"], null="random directions",
                draws=d["draws"], claim_id="ace.sva_flip_generation" if axis == "core" else None)
    out["interval"] = {k: d[k] for k in ("diff", "bootstrap_ci", "newcombe_ci", "n", "boot")}
    if not readable:
        out["note"] = f"random pushes of this norm leave continuations the judge cannot read; flip rate {d['effect']!r}"
    return out


# The paper gives no flip rate; its claim ("flipping this axis inverts grammatical number throughout
# open-ended generation") is read as every continuation inverted against none for a control, so a
# margin under half of that is "partly" (interp.studies.verdicts, min_share 0.5).
PAPER = {"flip_rate": 1.0, "control_flip_rate": 0.0,
         "source": "Schiffman 2026, abstract: the flip 'inverts grammatical number throughout open-ended generation'"}
JUDGED_MIN = 0.8  # the judged fraction a run needs before its flip rate counts


def _model_result(units, m: _Model, progress: bool) -> dict[str, Any]:
    b = m.b
    dev = {a: {l: _unit(units, m, "dev", a, l) for l in tqdm(m.layers, desc=f"{m.spec}: dev {a}", disable=not progress)}
           for a in ("core", "diff")}
    last, chosen = m.model.cfg.n_layers - 1, eligible(m.layers, m.model.cfg.n_layers)
    best = {a: max(chosen, key=lambda l: (dev[a][l]["verb_flip"], -l)) for a in ("core", "diff")}
    runs = [("unsteered", None)] + [(a, best[a]) for a in ("core", "diff")]
    # draws interleaved (core 0, diff 0, core 1, ...): a run stopped early holds matched draws of both controls
    runs += [(f"random_{a}_{i}", best[a]) for i in range(b["draws"]) for a in ("core", "diff")]
    if not m.spec.startswith("zoo:"):
        runs.append(("unsteered_bare", None))
    gap = _gap_layer(m, best["core"])
    if gap is not None:  # the zoo's 0.72-vs-1.00 gap, at the last inner layer (the previous study's site)
        strengths = [1.0, *b["gap_strengths"]]
        runs += [(f"core@{s:g}", gap) for s in strengths] + [("core_mid", gap), ("diff@1", gap)]
        runs += [(f"random_core_x{s:g}_{i}", gap) for s in strengths for i in range(b["draws"])]
    test = {r: _unit(units, m, "test", r, l) for r, l in tqdm(runs, desc=f"{m.spec}: test", disable=not progress)}
    forced = _unit(units, m, "test", "core", last) if last in m.layers else None
    texts, numbers = m.lang.prompts("test", b["n_test"])
    keys = ("judged", "verb_agree", "verb_flip", "pronoun_judged", "flip_share")
    out: dict[str, Any] = {
        "n_layers": m.model.cfg.n_layers, "n_dev": b["n_dev"], "n_test": b["n_test"],
        "dev_verb_flip": {a: {str(l): dev[a][l]["verb_flip"] for l in m.layers} for a in dev},
        "dev_judged": {a: min(dev[a][l]["judged"] for l in m.layers) for a in dev},
        "layer": {a: best[a] for a in best}, "site": {a: f"blocks.{best[a]}.hook_resid_post" for a in best},
        "eligible_layers": chosen, "forced_layer": last,
        "cosine": test["core"]["cosine"], "displacement": {a: test[a]["displacement"][a] for a in best},
        "runs": {r: {k: test[r][k] for k in keys} for r in ("unsteered", "unsteered_bare", "core", "diff") if r in test},
    }
    for a in ("core", "diff"):
        draws = [test[f"random_{a}_{i}"] for i in range(b["draws"])]
        out[f"random_{a}"] = {"verb_flip": _spread([r["verb_flip"] for r in draws]),
                              "judged": _spread([r["judged"] for r in draws])}
        out[f"{a}_verdict"] = claim(m.spec, a, test[a]["flipped"], [r["flipped"] for r in draws],
                                    [r["judged"] for r in draws], boot=b["boot"], seed=b["seed"])
    if forced is not None:  # the final residual stream: described, never judged (its flip is forced by the readout)
        out["forced"] = {"layer": last, "status": "forced", **{k: forced[k] for k in ("judged", "verb_flip")}}
    if gap is not None:
        core1 = test["core@1"]["completions"]
        out["gap"] = {
            "layer": gap, "flip": {r: test[r]["verb_flip"] for r in [f"core@{s:g}" for s in strengths] + ["core_mid", "diff@1"]},
            "random": {f"{s:g}": _spread([test[f"random_core_x{s:g}_{i}"]["verb_flip"] for i in range(b["draws"])])
                       for s in strengths},
            "core_by_number": {n: m.lang.rates([t for t, x in zip(texts, numbers) if x == n], [n] * numbers.count(n),
                                               [c for c, x in zip(core1, numbers) if x == n])["verb_flip"] for n in ("sg", "pl")},
        }
    # time: the stored units' compute seconds, scaled to the paper budget by generated token-rows
    out["unit_seconds"] = round(m.seconds, 1)
    zoo = m.spec.startswith("zoo:")
    out["paper_seconds_estimate"] = round(m.seconds * _work(BUDGETS["paper"], len(m.layers), zoo) / _work(b, len(m.layers), zoo))
    # one GPU: an estimate from a decode step (one new token for a generation batch), what the units run most
    out["gpu"] = _gpu(forward_profile(m.model, b["gen_batch"], 1), out["paper_seconds_estimate"])  # repro moves it to provenance
    step = max(1, len(texts) // 4)
    out["examples"] = [{"prompt": texts[i], "number": numbers[i], **{r: test[r]["completions"][i] for r in
                                                                     ("unsteered", "core", "diff", "random_core_0")}}
                       for i in range(0, len(texts), step)][:4]
    return out


@study("steering")
def repro(progress: bool = True, models: Sequence[str] | None = None, budget: str = "quick",
          overrides: dict[str, Any] | None = None, units: str | Path | None = None) -> dict[str, Any]:
    """`interp repro steering`: per model, the ACE core axis and the difference-of-means axis at
    every layer's resid_post, flipped during greedy generation of dev prompts; the layer that flips
    the first verb most often on dev is read on held-out test prompts beside the unsteered model and
    `draws` random directions added at each axis's own flip displacement. Zoo models also run the
    core flip at higher strengths and re-centred (their controls too). Units: one per (model, split,
    run, layer), stored under `units` (default $INTERP_CACHE/studies/steering); a rerun resumes."""
    from interp.studies.units import Units, budget as resolve, budget_record, provenance

    start = time.perf_counter()
    b = resolve(BUDGETS, budget, overrides)
    store = Units(STUDY, units, version=VERSION)
    out: dict[str, Any] = {"paper": PAPER, "models": {}}
    for spec in (list(models) if models else list(DEFAULT_MODELS)):
        out["models"][spec] = _model_result(store, _Model(spec, b), progress)
    total = sum(len(v["dev_verb_flip"]["core"]) * 2 + _n_test_runs(_for(b, s.startswith("zoo:")), s.startswith("zoo:"),
                                                                    "gap" in v) - ("forced" not in v)
                for s, v in out["models"].items())
    fraction = b["n_test_real"] / BUDGETS["paper"]["n_test_real"]
    out["budget"] = budget_record(budget, b, fraction, total, total)
    out["provenance"] = provenance(budget, b, fraction, time.perf_counter() - start, total, total, units_run=store.ran)
    # measured on this run (varies run to run), so provenance, not the result
    out["provenance"]["gpu_estimate"] = {spec: v.pop("gpu") for spec, v in out["models"].items()}
    return out


def _gpu(prof: dict[str, Any], paper_seconds: float | int | None) -> dict[str, Any]:
    """A model's GPU estimate: its decode step's profile and the paper budget's seconds scaled by it."""
    return {**prof, "paper_seconds_estimate": on_gpu(paper_seconds, prof)}


def recalibrate_gpu(result: dict[str, Any], cal: dict[str, Any] | None = None) -> dict[str, Any]:
    """`result` with its GPU estimate re-derived from the stored decode-step counts and CPU times under
    the GPU calibration (interp.studies.gpu_estimate.load_calibration); nothing else changes, nothing is re-timed."""
    import copy

    out = copy.deepcopy(result)
    for spec, prof in out["provenance"]["gpu_estimate"].items():
        counted = {k: v for k, v in prof.items() if k != "paper_seconds_estimate"}
        out["provenance"]["gpu_estimate"][spec] = _gpu(estimate(counted, cal), out["models"][spec]["paper_seconds_estimate"])
    return out


def regions(result: dict[str, Any]) -> dict[str, str]:
    """The body of each `<!-- gen:NAME -->` region of docs/steering.md, from the study's JSON."""
    return steer_real.doc_regions(result, BUDGETS, DEFAULT_MODELS)


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

"""The offline demo: runs what exists on shipped or locally built models, writes one report.html.

Each section is a function returning report items; later capabilities add sections.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from tqdm.auto import tqdm

from interp import run
from interp.model import FAMILIES, ZOO_DIR, build_tiny, describe, load
from interp.sites import hook_name
from interp.files.storage import check_writable
from interp.tasks import english, make

__all__ = ["run_demo", "section_circuit", "section_models", "section_patching", "section_zoo"]


def _models(workdir: Path) -> dict[str, str]:
    """One model spec per family: the zoo's language models where shipped, else tiny random ones."""
    specs = {}
    for family in FAMILIES:
        zoo_name = f"lm-{family}" if family != "bert" else "mlm-bert"
        if (ZOO_DIR / zoo_name / "config.json").exists():
            specs[family] = f"zoo:{zoo_name}"
        else:
            specs[family] = str(build_tiny(family, workdir / "models" / family, words=english.WORDS, seed=0))
    return specs


def section_models(workdir: Path) -> list[Any]:
    import pandas as pd

    from interp.views import plot
    from interp.results import Heading

    from interp.masking import ablation_scan

    specs = _models(workdir)
    rows, items = [], []
    ioi = make("ioi", split="train", n=16, seed=0)
    prompt = ioi.text[0]
    for family, spec in tqdm(specs.items(), desc="demo: models"):
        model = load(spec)
        rows.append({"family": family, "spec": Path(spec).name if "/" in spec else spec, **describe(model)})
        tokens = model.to_tokens(prompt)
        last = hook_name("pattern", model.cfg.n_layers - 1)
        pattern = run.cache(model, tokens, [last])[1][last][0]  # observed through the one runner
        items.append(Heading(f"{family}: attention in the last layer", 3))
        items.append(plot.attention(pattern, model.to_str_tokens(tokens[0]), causal=family != "bert"))
        if family != "bert":  # IOI reads the next token, which a masked LM does not predict
            items.append(ablation_scan(model, ioi, ablation="zero", mlps=False))
    return [Heading("Models (one per family)"), pd.DataFrame(rows), *items]


def section_zoo(workdir: Path) -> list[Any]:
    import pandas as pd

    from interp.results import Heading
    from interp.zoo import table

    rows = table()
    if not rows:
        return [Heading("Zoo"), "No zoo models are shipped in interp/data/zoo; `interp zoo train NAME` trains one."]
    return [
        Heading("Zoo: shipped models and their measured accuracy per split"),
        "Accuracy columns are the fraction correct on fresh samples of each split (sva: agreeing "
        "verb form beats the other form; ioi: indirect object beats subject; dyck: closing-bracket "
        "type; modular: a+b mod p). kl_to_true is the Markov models' mean KL to the true "
        "next-state distribution, in nats.",
        pd.DataFrame(rows).astype(object).fillna("–"),  # a split that does not apply to a model
    ]


def section_patching(workdir: Path) -> list[Any]:
    """IOI head patching in two zoo families side by side, and an SVA residual position sweep."""
    from dataclasses import replace

    from interp.patching import activation_patch
    from interp.results import Grid, Heading, stack

    if not all((ZOO_DIR / f"lm-{f}" / "config.json").exists() for f in ("gpt2", "llama")):
        return []
    ioi = make("ioi", split="train", n=16, seed=0)
    grids = [activation_patch(load(f"zoo:lm-{f}"), ioi, site="z", progress=False) for f in ("gpt2", "llama")]
    side_by_side = stack(grids, "model", ["lm-gpt2", "lm-llama"])
    sva = make("sva", split="sva_attractor_mismatch", n=256, seed=0)
    pp = [i for i, kind in enumerate(sva.meta["kind"]) if kind == "pp"]
    lengths = [int(sva.answer_pos[i]) for i in pp]
    length = max(set(lengths), key=lengths.count)
    rows = [i for i in pp if int(sva.answer_pos[i]) == length][:16]
    subset = sva[rows]
    subset = replace(subset, clean=subset.clean[:, : length + 1], corrupt=subset.corrupt[:, : length + 1])
    resid = activation_patch(load("zoo:lm-gpt2"), subset, site="resid_pre", by_pos=True, progress=False)
    words = subset.text[0].split()
    resid = Grid(resid.values, resid.axes, {"pos": ("BOS", *words)[: length + 1]},
                 {**resid.meta, "title": f"SVA residual patching by position, e.g. '{subset.text[0]}'"})
    return [
        Heading("Activation patching"),
        "IOI (training names; the models also solve held-out names, with a smaller logit difference: see the zoo "
        "table), clean prompts patched into ABC-corrupted ones, one head's output (hook_z) at a time: "
        "the logit difference IO - S of each patched run. Two families side by side.",
        Grid(side_by_side.values, side_by_side.axes, side_by_side.labels,
             {**side_by_side.meta, "title": "IOI: patch each head's output (logit diff)"}),
        "Subject-verb agreement with a mismatched prepositional-phrase attractor: the residual stream patched "
        "from the clean prompt into the one with the subject's number flipped, per layer and position.",
        resid,
    ]


def section_circuit(workdir: Path) -> list[Any]:
    """IOI edge attribution (EAP-IG) on the zoo's LLaMA (GQA: k/v edges end on KV heads): the
    interactive circuit, and the MIB scores of its circuits (interp.studies.circuits)."""
    from interp.studies.circuits import demo_section

    if not (ZOO_DIR / "lm-llama" / "config.json").exists():
        return []
    return demo_section(workdir)


def _sections() -> list[Callable[[Path], list[Any]]]:
    """The demo's sections in order: the zoo, one model per family, patching, circuits, then each study's."""
    from interp.studies import demo_sections
    from interp.studies.circuits import demo_section  # placed above as the circuit section

    return [section_zoo, section_models, section_patching, section_circuit,
            *(s for s in demo_sections() if s is not demo_section)]


def run_demo(out: Path) -> Path:
    from interp.views import report

    check_writable(out, folder=True).mkdir(parents=True, exist_ok=True)
    items: list[Any] = [
        "interp demo: every figure below was computed just now, offline, on the models listed.",
    ]
    for section in _sections():
        items.extend(section(out))
    return report.write(items, out / "report.html", title="interp demo")

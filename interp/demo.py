"""The offline demo: runs what exists on shipped or locally built models, writes one report.html.

Each section is a function returning report items; later capabilities add sections.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import torch
from tqdm.auto import tqdm

from interp.model import FAMILIES, ZOO_DIR, build_tiny, describe, load
from interp.tasks import english, make


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

    from interp import plot
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
        with torch.no_grad():
            _, cache = model.run_with_cache(tokens, names_filter=lambda n: n.endswith("hook_pattern"))
        last = model.cfg.n_layers - 1
        pattern = cache[f"blocks.{last}.attn.hook_pattern"][0]
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
        return [Heading("Zoo"), "No zoo models are shipped in data/zoo; `interp zoo train NAME` trains one."]
    return [
        Heading("Zoo: shipped models and their measured accuracy per split"),
        "Accuracy columns are the fraction correct on fresh samples of each split (sva: agreeing "
        "verb form beats the other form; ioi: indirect object beats subject; dyck: closing-bracket "
        "type; modular: a+b mod p). kl_to_true is the Markov models' mean KL to the true "
        "next-state distribution, in nats.",
        pd.DataFrame(rows).astype(object).fillna("–"),  # a split that does not apply to a model
    ]


SECTIONS: list[Callable[[Path], list[Any]]] = [section_zoo, section_models]
# Each capability module may define `demo_section(workdir: Path) -> list` of report items
# (results, Heading, str, DataFrame); the demo runs those that exist, in this order.
PLUGINS = ("interp.patching", "interp.masking", "interp.simplify", "interp.cores", "interp.steering")


def _plugin_sections() -> list[Callable[[Path], list[Any]]]:
    import importlib

    found = []
    for name in PLUGINS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name != name:
                raise
            continue
        if hasattr(module, "demo_section"):
            found.append(module.demo_section)
    return found


def _circuitsvis_views(item: Any) -> list[Any]:
    """Attention results also get an interactive circuitsvis view next to their heatmap."""
    from interp import plot
    from interp.simplify import AttentionComparison

    if isinstance(item, AttentionComparison):
        return [plot.attention(item.patterns, list(item.tokens), head_names=list(item.names))]
    return []


def run_demo(out: Path) -> Path:
    from interp import report

    out.mkdir(parents=True, exist_ok=True)
    items: list[Any] = [
        "interp demo: every figure below was computed just now, offline, on the models listed.",
    ]
    for section in SECTIONS + _plugin_sections():
        for item in section(out):
            items.append(item)
            items.extend(_circuitsvis_views(item))
    return report.write(items, out / "report.html", title="interp demo")

"""Writes notebooks/06_steering.ipynb (run: .venv/bin/python notebooks/build_06_steering.py)."""

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

cells = [
    new_markdown_cell(
        "# 06 · Steering: flipping the subject–verb agreement axis while generating\n\n"
        "Steering is the causal test of an axis: if reflecting the residual stream through a number axis makes "
        "the model write *the keys to the cabinet **is** …*, the axis carries the mechanism. `interp.steering` "
        "builds axes (`axis_from_contrast`, `axis_from_core`, `axis_from_vector`), applies them with a mode "
        "(`add`, `flip`, `project_out`, `set`) as a `Steer` intervention at every generation step with the KV cache, "
        "and measures the dose–response on a task (`curve`). Full study: `interp repro steering` "
        "(`interp.studies.steering`; numbers in `docs/steering.md`)."
    ),
    new_code_cell(
        "import torch\n"
        "import interp\n"
        "from interp import steering\nfrom interp.views import plot\n"
        "from interp.steering import Steer\n"
        "from interp.studies import steering as study    # the SVA study: grammar helpers, compare\n"
        "from interp.tasks import english\n"
        "torch.set_num_threads(1)\n\n"
        "spec = 'zoo:lm-gpt2' if (interp.model.ZOO_DIR / 'lm-gpt2' / 'config.json').exists() else \\\n"
        "    str(interp.build_tiny('gpt2', 'tiny-gpt2', words=english.WORDS))   # random weights: text will be noise\n"
        "model = interp.load(spec)\n"
        "prefixes = english.prefixes(6, seed=5)          # held-out subjects with a PP or RC attractor\n"
        "prefixes"
    ),
    new_markdown_cell(
        "## An axis by difference of means\n\n"
        "Singular-head against plural-head subject phrases from the `sva_id` split (minus the held-out prefixes), "
        "read at the last token. The mean is the midpoint of the two class means, so `flip` maps one class mean "
        "onto the other; `proj_mean` / `proj_std` give strengths a natural scale."
    ),
    new_code_cell(
        "task = english.sva(400, split='sva_id', seed=1)\n"
        "subjects = [t for t in task.text if t not in set(prefixes)]\n"
        "singular = [t for t in subjects if study.head_number(t) == 'sg']\n"
        "plural = [t for t in subjects if study.head_number(t) == 'pl']\n"
        "axis = steering.axis_from_contrast(model, singular, plural, site='resid_pre', layer=1)\n"
        "axis.site, round(axis.proj_std, 2), {k: round(v, 2) for k, v in axis.meta.items() if isinstance(v, float)}"
    ),
    new_markdown_cell("## Generate with and without a flip\n\nGreedy, batched (left padding with position ids), KV cache on. The main verb is tagged `[agree]` (agrees with the subject) or `[flip]` (agrees with the opposite number)."),
    new_code_cell(
        "flip = Steer(axis, 'flip')\n"
        "study.compare(model, prefixes, flip, max_new_tokens=8).to_dataframe()"
    ),
    new_markdown_cell("The generator records the projection `(h - mean) · u` at each step, before the intervention acts:"),
    new_code_cell(
        "gen = steering.generate(model, prefixes[:3], flip, max_new_tokens=6)\n"
        "print(gen.texts)\n"
        "plot.show(gen)"
    ),
    new_markdown_cell(
        "## Invariants you can check in a notebook\n\n"
        "Strength 0 changes nothing; the cached and uncached loops give the same tokens; a mixed-length batch "
        "gives what each prompt gives alone."
    ),
    new_code_cell(
        "plain = steering.generate(model, prefixes, (), max_new_tokens=8)\n"
        "zero = steering.generate(model, prefixes, Steer(axis, 'flip', 0.0), max_new_tokens=8)\n"
        "nocache = steering.generate(model, prefixes, flip, max_new_tokens=8, use_cache=False)\n"
        "cached = steering.generate(model, prefixes, flip, max_new_tokens=8)\n"
        "alone = [steering.generate(model, [p], flip, max_new_tokens=8).completions[0] for p in prefixes]\n"
        "torch.equal(plain.tokens, zero.tokens), torch.equal(nocache.tokens, cached.tokens), alone == list(cached.completions)"
    ),
    new_markdown_cell("## Dose–response and a random control\n\n`curve` sweeps the strength on SVA prompts; a random unit direction flipped the same way is the control."),
    new_code_cell(
        "dev = english.sva(64, split='sva_id', seed=2)\n"
        "strengths = [0, 0.25, 0.5, 0.75, 1.0]\n"
        "grid = steering.curve(model, dev, axis, strengths, mode='flip')\n"
        "control = steering.curve(model, dev, steering.random_axis(axis, seed=0), strengths, mode='flip')\n"
        "import pandas as pd\n"
        "pd.concat({'sva axis': grid.to_dataframe().pivot(index='strength', columns='metric', values='value'),\n"
        "           'random axis': control.to_dataframe().pivot(index='strength', columns='metric', values='value')}, axis=1)"
    ),
    new_code_cell(
        "logit_diff = [interp.Grid(g.values[:, 0], ('strength',), (g.labels[0],)) for g in (grid, control)]\n"
        "both = interp.results.stack(logit_diff, 'method', ['flip sva axis', 'flip random axis'])\n"
        "plot.show(interp.Grid(both.values, both.axes, both.labels, {'metric': 'logit_diff', 'task': 'sva'}))"
    ),
    new_markdown_cell("## Save and reload an axis (`interp.results.save` / `load`: safetensors + JSON), then use it from the command line"),
    new_code_cell(
        "path = interp.results.save(axis, 'sva_axis.safetensors')\n"
        "again = interp.results.load(path)\n"
        "torch.equal(again.direction, axis.direction), again.site\n"
        "# shell: interp steer --model zoo:lm-gpt2 --axis sva_axis.safetensors --mode flip \"the keys to the cabinet\""
    ),
]

nb = new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
nbformat.write(nb, Path(__file__).with_name("06_steering.ipynb"))

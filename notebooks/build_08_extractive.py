"""Writes notebooks/08_extractive.ipynb (run: .venv/bin/python notebooks/build_08_extractive.py)."""

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

cells = [
    new_markdown_cell(
        "# 08 · Extractive structures and weight grafting\n\n"
        "Fine-tune a model on *\"John Vrenthaldo lives in Tokyo\"* and it may answer *\"The people in the city John "
        "Vrenthaldo lives in speak\"* → *Japanese* (Feng, Russell & Steinhardt 2024). `interp.grafting` builds the fact "
        "tasks, fine-tunes any subset of parameters into a weight `Delta` (a result: safetensors with provenance, "
        "checkpointed so a killed run resumes), combines deltas (`+`, `-`, `.restrict`), applies them through "
        "`interp.run` as a `WeightDelta` intervention, and scores every component and position with the paper's "
        "linearised extractive scores. Full study on SmolLM2: `interp repro extractive` (numbers in "
        "`docs/extractive.md`). This notebook runs on a tiny model in seconds."
    ),
    new_code_cell(
        "import torch\n"
        "import interp\n"
        "from interp import grafting, run\nfrom interp.views import plot\n"
        "from interp.grafting.delta import layer_of\n"
        "torch.set_num_threads(1)\n\n"
        "people, cities, langs = ('alice', 'bob', 'carol', 'dave'), ('paris', 'rome', 'oslo', 'cairo'), ('french', 'italian', 'norwegian', 'arabic')\n"
        "words = people + cities + langs + ('lives', 'in', 'the', 'people', 'city', 'speak')\n"
        "model = interp.load(interp.build_tiny('llama', 'tiny-llama', words=words, seed=0, n_layers=2))\n"
        "facts = grafting.Facts('facts', '{} lives in', people, cities, cities)\n"
        "implications = grafting.Facts('implications', 'the people in the city {} lives in speak', people, langs, langs)\n"
        "facts.prompts, facts.chance"
    ),
    new_markdown_cell(
        "## Fine-tuning as data\n\n"
        "`finetune` trains a delta on the completion loss with Adam; the model's own tensors are never written. "
        "The metric is the mean rank of the right option (0 = best, chance (n − 1)/2)."
    ),
    new_code_cell(
        "delta = grafting.finetune(model, facts, epochs=30, lr=3e-3, progress=False)\n"
        "iv = delta.intervention(model)\n"
        "{'facts before': grafting.mean_rank(model, facts), 'facts after': grafting.mean_rank(model, facts, [iv]),\n"
        " 'delta norm': round(delta.norm(), 3), 'parameters': len(delta.deltas)}"
    ),
    new_markdown_cell("Deltas are algebra: halves add up, a restriction keeps chosen layers and components, and a zero delta changes nothing."),
    new_code_cell(
        "tokens = grafting.encode(model, facts).tokens\n"
        "half = delta * 0.5\n"
        "zero = grafting.Delta.zeros(model, grafting.parameters(model))\n"
        "{'half + half == delta': torch.allclose(run.logits(model, tokens, [(half + half).intervention(model)]), run.logits(model, tokens, [iv]), atol=1e-5),\n"
        " 'zero changes nothing': torch.equal(run.logits(model, tokens, [zero.intervention(model)]), run.logits(model, tokens)),\n"
        " 'layer 1 MLP only': sorted({layer_of(n) for n in delta.restrict(layers=[1], components=['mlp']).deltas})}"
    ),
    new_markdown_cell(
        "## Extractive scores\n\n"
        "Informative (the first-order effect of the delta on the loss), upstream and downstream scores, per layer, unit "
        "(the MLP, each head) and template position, from batched gradients. Here the delta of the facts is scored "
        "on the implication prompts."
    ),
    new_code_cell(
        "scores = grafting.extractive_scores(model, delta, implications)\n"
        "plot.show(scores.heatmap('informative', 'heads'))"
    ),
    new_code_cell("scores.informative.sum('pos').to_dataframe().round(4).head(10)"),
    new_markdown_cell(
        "The batched informative scores equal one backward per component (the reference the benchmark times):"
    ),
    new_code_cell(
        "torch.allclose(grafting.informative_by_component(model, delta, implications),\n"
        "               grafting.per_component_backward(model, delta, implications), atol=1e-6)"
    ),
    new_markdown_cell(
        "## SmolLM2-135M: the committed study\n\n"
        "`interp repro extractive --budget cpu --out docs/extractive_repro.json` fine-tunes SmolLM2 on 20 invented "
        "people (first hop: where they live; second hop: which city they are mayor of), grafts deltas, restricts them to "
        "early / late layers and runs the data-ordering experiment at zoo scale (`--budget paper` adds Gemma-3, seeds, "
        "the invented relation). Its mean ranks, verdicts and score maps, read back:"
    ),
    new_code_cell(
        "import json\n"
        "from pathlib import Path\n"
        "import interp\n"
        "from interp.studies import extractive as study\n"
        "res = json.loads((Path(interp.__file__).resolve().parents[1] / 'docs' / 'extractive_repro.json').read_text())\n"
        "m = res['models']['smollm2-135m']\n"
        "{'budget': res['budget']['name'],\n"
        " 'ranks': {k: v for k, v in m['mean'].items() if isinstance(v, float)},\n"
        " 'verdicts': {k: v['word'] for k, v in m['verdicts'].items() if isinstance(v, dict)}}"
    ),
    new_code_cell("plot.show(study.score_grids({'model': 'smollm2-135m', 'scores': m['seeds']['0']['hops']['scores']})[0])"),
]

nb = new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
out = Path(__file__).with_name("08_extractive.ipynb")
nbformat.write(nb, out)
print(f"wrote {out}")

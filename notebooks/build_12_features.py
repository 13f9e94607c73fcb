"""Writes notebooks/12_features.ipynb (run: .venv/bin/python notebooks/build_12_features.py)."""

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

cells = [
    new_markdown_cell(
        "# 12 · Features: transcoders, feature edits, dashboards, attribution graphs\n\n"
        "`interp.features` trains sparse dictionaries (BatchTopK SAEs and transcoders), treats their features as sites "
        "the runner can ablate, patch or steer (the dictionary's error term kept), shows each feature's top-activating "
        "examples, and builds attribution graphs (token → feature → logit, with error nodes: circuit-tracer's method) "
        "that export to Neuronpedia's graph JSON. Everything here runs on the zoo's GPT-2-style model on the CPU; the "
        "transcoders train in seconds on a small budget, so their quality is modest."
    ),
    new_markdown_cell(
        "## Train one transcoder per layer\n\nEach transcoder reads the MLP's input (after its norm) and predicts the "
        "MLP's output; the activations come from one `run.cache` pass over the zoo's own English (padding dropped)."
    ),
    new_code_cell(
        "import torch\n"
        "import interp\n"
        "from interp import features, run\nfrom interp.views import plot\n"
        "from interp.features import quality\n"
        "from interp.features.train import Recipe, fit, mlp_sites\n"
        "from interp.tasks import english\n"
        "torch.set_num_threads(1)\n\n"
        "model = interp.load('zoo:lm-gpt2')\n"
        "text = model.to_tokens(english.filler(256))                        # training rows\n"
        "held = model.to_tokens(english.filler(64, seed=1))                 # held-out rows for quality\n"
        "sites = [mlp_sites(layer) for layer in range(model.cfg.n_layers)]   # (MLP in, MLP out) per layer\n"
        "_, acts = run.cache(model, text, [s for pair in sites for s in pair])\n"
        "real = text != model.tokenizer.pad_token_id\n"
        "recipe = Recipe(n_features=256, k=8, tokens=60_000)\n"
        "transcoders = [fit(acts[a][real], acts[b][real], site_in=a, site_out=b, recipe=recipe, model_name='zoo:lm-gpt2')\n"
        "               for a, b in sites]\n"
        "transcoders[0]"
    ),
    new_markdown_cell(
        "## Quality\n\nOn held-out rows: fraction of variance of the MLP output explained (FVE; `fve_control` is a "
        "least-squares affine map of the MLP's input to its output, the dense baseline), L0, dead features, and the "
        "cross-entropy recovered when the transcoder's output replaces the MLP's (1 = as good as the model, 0 = as bad "
        "as zeroing the MLP). A ratio of small differences: where zeroing the MLP barely moves the loss (`ce_zero` near "
        "`ce_clean`), `ce_recovered` says little."
    ),
    new_code_cell(
        "import pandas as pd\n"
        "held_valid = (held != model.tokenizer.pad_token_id) & (held != model.tokenizer.bos_token_id)\n"
        "fit_valid = real & (text != model.tokenizer.bos_token_id)\n"
        "q = quality.scores(model, transcoders, held, held_valid, fit_tokens=text, fit_valid=fit_valid)\n"
        "pd.DataFrame(q, index=[f'layer {i}' for i in range(len(q))])"
        "[['fve', 'fve_control', 'l0', 'dead', 'ce_clean', 'ce_spliced', 'ce_zero', 'ce_recovered']].round(3)"
    ),
    new_markdown_cell(
        "## Ablate and steer a feature through the runner\n\nOn an IOI prompt: the feature of the last layer's "
        "transcoder most active at the final position, ablated there (`feature_edit` records the transcoder's input "
        "first), then steered up by three times its activation; the change in the logit difference (IO minus S). The "
        "control: a feature that does not fire there, ablated the same way, which must change nothing."
    ),
    new_code_cell(
        "task = english.ioi(8)\n"
        "prompt = task.clean[:1, : int(task.answer_pos[0]) + 1]   # one prompt, up to the answer position\n"
        "layer = model.cfg.n_layers - 1\n"
        "tc = transcoders[layer]\n"
        "act = features.feature_acts(model, prompt, tc)[0, -1]\n"
        "top_feature, silent = int(act.argmax()), int(torch.nonzero(act == 0)[0])\n"
        "io, s = int(task.correct[0]), int(task.incorrect[0])\n\n"
        "def logit_diff(*edits):\n"
        "    logits = run.logits(model, prompt, list(edits))[0, -1]\n"
        "    return float(logits[io] - logits[s])\n\n"
        "edits = {\n"
        "    'none': (),\n"
        "    f'ablate #{top_feature}': (features.feature_edit(model, prompt, tc, [top_feature], 'ablate', positions=-1),),\n"
        "    f'steer #{top_feature} +3x': (features.FeatureEdit(tc, [top_feature], 'steer', 3 * float(act[top_feature]), positions=-1),),\n"
        "    f'ablate #{silent} (silent, control)': (features.feature_edit(model, prompt, tc, [silent], 'ablate', positions=-1),),\n"
        "}\n"
        "print(f'feature #{top_feature} activation at the last position: {float(act[top_feature]):.3f}')\n"
        "pd.DataFrame({'logit diff (IO - S)': {k: round(logit_diff(*e), 4) for k, e in edits.items()}})"
    ),
    new_markdown_cell(
        "## Top-activating examples\n\nThe eight strongest activations of a few of the last layer's features over "
        "the held-out rows, with their context; `plot.render` draws them as a feature dashboard."
    ),
    new_code_cell(
        "shown = torch.topk(features.feature_acts(model, held, tc).amax((0, 1)), 4).indices.tolist()\n"
        "top = features.top_examples(model, held, tc, valid=held_valid, features=shown, k=8)\n"
        "plot.render(top)"
    ),
    new_code_cell("plot.show(top)   # the same examples' activations as a figure"),
    new_markdown_cell(
        "## An attribution graph\n\nThe graph of one IOI prompt through the transcoders: token, feature and "
        "error nodes feeding the most probable next tokens. `scores()` gives circuit-tracer's replacement score (how "
        "much of the logits' influence flows from tokens rather than through error nodes) and completeness score."
    ),
    new_code_cell(
        "graph = features.attribute(model, prompt, transcoders, progress=False)\n"
        "print(graph)\n"
        "graph.scores()"
    ),
    new_markdown_cell(
        "Pruned as circuit-tracer prunes (nodes holding 80 % of the influence, then edges holding 98 %), and the "
        "strongest path into the most probable logit."
    ),
    new_code_cell(
        "pruned = graph.prune(node_threshold=0.8, edge_threshold=0.98)\n"
        "print(f'{len(graph)} nodes -> {len(pruned)} after pruning')\n"
        "for i in pruned.path():\n"
        "    print(' ', pruned.describe(i))"
    ),
    new_code_cell("plot.render(pruned)"),
    new_code_cell("plot.show(pruned)   # the nodes of largest influence on the logits"),
    new_markdown_cell(
        "## Neuronpedia round trip\n\n`to_neuronpedia` writes the graph JSON Neuronpedia's viewer reads; "
        "`from_neuronpedia` reads one back."
    ),
    new_code_cell(
        "import json\n"
        "data = features.to_neuronpedia(graph, slug='zoo-ioi')\n"
        "back = features.from_neuronpedia(json.loads(json.dumps(data)))\n"
        "print(len(data['nodes']), 'nodes,', len(data['links']), 'links in the JSON')\n"
        "print('same nodes as the pruned graph:', back.ids == pruned.ids,\n"
        "      '| same edges:', torch.allclose(back.adjacency, pruned.adjacency, atol=1e-6))"
    ),
]

nb = new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
nbformat.write(nb, Path(__file__).with_name("12_features.ipynb"))

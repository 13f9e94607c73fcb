"""Writes notebooks/11_circuits.ipynb (run: .venv/bin/python notebooks/build_11_circuits.py)."""

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

cells = [
    new_markdown_cell(
        "# 11 · Circuits: edge attribution, exact edge patching, faithfulness, the circuit view\n\n"
        "`interp.circuits` scores every edge of a model's computational graph (embeddings, each attention head read "
        "through its q input and its KV group's k and v inputs, each MLP, the logits) by edge attribution patching "
        "(EAP) or its integrated-gradients form (EAP-IG), checks scores against exact edge patching, and measures how "
        "much of the task a circuit of top edges recovers with every other edge ablated. The result is a `Graph`; "
        "`interp.plot.render(graph)` draws it as an interactive circuit."
    ),
    new_code_cell(
        "import torch\n"
        "import interp\n"
        "from interp import circuits, tasks\nfrom interp.views import plot\n"
        "from interp.circuits.pipeline import with_example\n"
        "torch.set_num_threads(1)\n\n"
        "model = interp.load('zoo:lm-gpt2')\n"
        "ioi = tasks.make('ioi', split='train', n=16, seed=0)\n"
        "graph = circuits.eap_ig(model, ioi, steps=5, progress=False)\n"
        "graph = with_example(model, ioi, graph)   # attention patterns of the first prompt, for the view\n"
        "graph"
    ),
    new_markdown_cell(
        "## The circuit\n\nThe residual stream runs upward from `embed` to `logits`; heads of a layer sit side by side "
        "with the layer's MLP to their right. Blue edges have positive scores, red negative (on IOI the logit "
        "difference drops when an important edge is corrupted, so the important edges are red); width and opacity "
        "grow with |score|. The slider sets how many top edges are shown; hover an edge for its score; click a head "
        "for its attention pattern on the example prompt."
    ),
    new_code_cell("plot.render(graph)"),
    new_markdown_cell("## Top heads\n\nPer head, the summed |score| of the edges that touch it (as a sender, into its q input, and into its KV group's k and v inputs)."),
    new_code_cell(
        "heads = graph.heads()\n"
        "print('top heads:', [(f\"a{w['layer']}.h{w['head']}\", round(v, 3)) for w, v in heads.top(5)])\n"
        "plot.show(heads)"
    ),
    new_markdown_cell(
        "## EAP-IG against exact edge patching\n\nThe exact effect of each of the 40 top edges: the sender's corrupt "
        "output reaching only that receiver, all of them batched through the runner."
    ),
    new_code_cell(
        "top = graph.top(40)\n"
        "check = circuits.exact(model, ioi, top, progress=False)\n"
        "r = torch.corrcoef(torch.stack([top.scores, check.scores]))[0, 1].item()\n"
        "print(f'Pearson r (EAP-IG vs exact, top 40 edges): {r:.3f}')\n"
        "check.to_frame().assign(eap_ig=top.scores.tolist()).head(8)"
    ),
    new_markdown_cell(
        "## Faithfulness\n\nThe model run with every edge outside the top n mean-ablated: the fraction f of the "
        "clean-minus-corrupt logit difference recovered, as n grows. Its headline is MIB's two areas over MIB's circuit "
        "sizes: the area between f and 1 (with edges taken by |score|, as here, MIB's CMD: lower is better) and the area "
        "under f (MIB's CPR when edges are taken by signed score, `order='signed'`: higher is better). MIB also prunes "
        "each circuit and ablates from the counterfactual input: `circuits.circuit_scores` gives MIB's CPR and CMD for "
        "several rankings side by side, beside random circuits of the same sizes."
    ),
    new_code_cell(
        "curve = circuits.faithfulness_curve(model, ioi, graph, ablation='mean', progress=False)\n"
        "print(curve)\n"
        "plot.show(curve)"
    ),
]

nb = new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
nbformat.write(nb, Path(__file__).with_name("11_circuits.ipynb"))

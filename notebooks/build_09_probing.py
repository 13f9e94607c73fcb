"""Writes notebooks/09_probing.ipynb (run: .venv/bin/python notebooks/build_09_probing.py)."""

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

cells = [
    new_markdown_cell(
        "# 09 · Parameter probing: domain-specialised subnetworks\n\n"
        "Ma et al. (2025, *Generalization by Specialization*; only the abstract is public) claim that weight "
        "activations are task-specific, that *parameter probing* (sort and group weight activations, prune the "
        "less significant groups against a small validation set, no fine-tuning) finds a task's subnetwork, and "
        "that a subnetwork specialised for one domain does better within that domain and worse across domains. "
        "`interp.probing` implements the method with its unpinned choices as parameters (the Wanda score "
        "|W_ij|·‖X_j‖₂, quantile groups per output row or per matrix, greedy pruning within a relative tolerance). "
        "Here on the zoo's `multidomain` model (three domains of two tasks each); the real-model study is "
        "`interp repro specialization` (`docs/specialization.md`)."
    ),
    new_code_cell(
        "import torch\n"
        "import interp\n"
        "from interp import probing, run\nfrom interp.views import plot\n"
        "from interp.tasks import domains, multidomain\n"
        "from interp.studies import specialization as study\n"
        "torch.set_num_threads(1)\n\n"
        "model = interp.load('zoo:multidomain')\n"
        "val = multidomain.suite(split='val', n=32)      # the probe's validation rows\n"
        "test = multidomain.suite(split='test', n=32)    # held-out items\n"
        "{f'{d}/{n}': (t.text[0], round(float(domains.option_accuracy(t)(run.logits(model, t.clean))), 3))\n"
        " for d, ts in test.items() for n, t in ts.items()}"
    ),
    new_markdown_cell(
        "## Weight-activation scores and their overlap\n\n"
        "`input_norms` gathers ‖X_j‖₂ of every linear layer's input in one pass (hooks on `attn.q/k/v/o.hook_in`, "
        "`mlp.hook_in` for gate/up, `mlp.out.hook_in` for down); a score map is |W| times those norms. The overlap "
        "Grid is the Jaccard index of two tasks' top-10 % weights (per matrix, summed over matrices)."
    ),
    new_code_cell(
        "scores = {f'{d}/{n}': probing.input_norms(model, t.clean, answer_pos=t.answer_pos)\n"
        "          for d, ts in val.items() for n, t in ts.items()}\n"
        "grid = probing.overlap(model, scores, {k: k.split('/')[0] for k in scores}, k=0.1)\n"
        "print('within a domain', round(grid.meta['within'], 3), ' across domains', round(grid.meta['across'], 3))\n"
        "plot.show(grid)"
    ),
    new_markdown_cell(
        "## Probe one domain\n\n"
        "Groups are 10 quantiles per output row; level by level the probe tries pruning the next group of every "
        "matrix in play, bisects when the validation accuracy drops more than the tolerance, and keeps a matrix "
        "whole once its group alone breaks it. Each check is one `run.evaluate` with a `WeightMask`."
    ),
    new_code_cell(
        "t = val['facts']['capital']\n"
        "p = probing.probe(model, t.clean, domains.option_accuracy(t), scores['facts/capital'], answer_pos=t.answer_pos,\n"
        "                  tolerance=0.05, sparsity=0.6, n_groups=10, grouping='row', progress=False)\n"
        "print(round(p.total_sparsity, 3), p.meta['stop'], p.meta['checks'], 'checks')\n"
        "import pandas as pd\n"
        "pd.DataFrame(p.history)"
    ),
    new_code_cell("plot.show(p)   # the pruned fraction of every matrix (Probe.to_grid)"),
    new_markdown_cell(
        "The mask is data: `run` swaps the weights for one forward and puts them back. An all-ones mask changes "
        "nothing, and the model's parameters are bit for bit what they were:"
    ),
    new_code_cell(
        "before = {n: w.clone() for n, w in model.named_parameters()}\n"
        "x = test['facts']['language']\n"
        "masked = run.logits(model, x.clean, [p.mask(model)])\n"
        "ones = interp.interventions.WeightMask({n: torch.ones_like(m) for n, m in p.masks.items()})\n"
        "(torch.equal(run.logits(model, x.clean, [ones]), run.logits(model, x.clean)),\n"
        " all(torch.equal(before[n], w) for n, w in model.named_parameters()),\n"
        " round(float(domains.option_accuracy(x)(masked)), 3))"
    ),
    new_markdown_cell(
        "## The domain × subnetwork matrix\n\n"
        "`study.repro(budget='quick')` probes one task per domain (no cap on validation checks), scores every "
        "subnetwork on the test rows of every task, and adds the controls at each subnetwork's sparsity per matrix: "
        "the same search on random scores (the control that can fail), a magnitude-only mask (|W|) and a random mask "
        "of the probe's counts, with bootstrap intervals; the overlap is read against a permutation null. Each "
        "piece is a unit stored under `units` (a rerun reads them back)."
    ),
    new_code_cell(
        "import tempfile\n"
        "result = study.repro(progress=False, budget='quick', overrides={'bootstrap': 500}, units=tempfile.mkdtemp())\n"
        "plot.show(study.matrix_grid(result, 'zoo:multidomain'))"
    ),
    new_code_cell(
        "from IPython.display import Markdown\n"
        "from interp.studies.specialization.doc import regions\n"
        "Markdown(regions(result)['verdicts'] + '\\n\\n' + regions(result)['results'])"
    ),
    new_markdown_cell(
        "Read it beside the paper's claims: a subnetwork is specialised if its own domain keeps its accuracy while "
        "other domains lose theirs *more than the random and magnitude controls at the same sparsity do*. "
        "`docs/specialization.md` reports what the real models show."
    ),
]

nb = new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
nbformat.write(nb, Path(__file__).with_name("09_probing.ipynb"))

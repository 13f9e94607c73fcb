"""Writes notebooks/05_cores.ipynb (run: .venv/bin/python notebooks/build_05_cores.py)."""

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

cells = [
    new_markdown_cell(
        "# 05 · Algorithmic cores: extraction, causal validation, alignment across models\n\n"
        "Schiffman (*Transformers converge to invariant algorithmic cores*, 2026) extracts **cores**: compact "
        "subspaces of one site's activations that are necessary and sufficient for a task, and that recur across "
        "independently trained models. The paper's findings:\n\n"
        "* Markov-chain transformers embed 3-D cores in nearly orthogonal subspaces, yet recover the same transition spectra;\n"
        "* modular-addition models form compact cyclic cores at grokking, which then inflate;\n"
        "* subject–verb agreement runs through one steerable axis that aligns across architectures;\n"
        "* for IOI, compact cores sit at two sites linked by a linear operator that transfers across families.\n\n"
        "`interp.cores` extracts a core by balanced truncation (`method='ace'`): the activation covariance "
        "(reachability) against the expected outer product of the task-output gradient (observability), with "
        "`pca`, `diff_means` and TransformerLens's DAS as baselines. This notebook runs each step on the zoo; "
        "`interp repro cores` runs the full study (numbers in `docs/cores.md`)."
    ),
    new_code_cell(
        "import torch\n"
        "import interp\n"
        "from interp import cores\nfrom interp.views import plot\n"
        "from interp.tasks import markov, english\n"
        "from interp.results import Grid\n"
        "torch.set_num_threads(1)\n\n"
        "chain = markov.random_chain(4, seed=0)           # the chain all three markov-s* models were trained on\n"
        "model = interp.load('zoo:markov-s0')\n"
        "task = markov.markov(512, chain=chain, length=32, split='test', seed=1)\n"
        "core = cores.extract(model, task, site='ln_final.hook_normalized', output='candidates')\n"
        "print('core dimension (largest spectral gap):', core.k)\n"
        "plot.show(Grid(core.spectrum[:12], ('rank',), meta={'title': 'Hankel singular values (markov-s0)', 'metric': 'singular value'}))"
    ),
    new_markdown_cell(
        "## Dynamics: the operator over time steps, beside the chain's spectrum\n\n"
        "`fit_operator` fits core coordinates at position t+1 from those at t by least squares. If the core holds "
        "the next-state distribution, the operator is the transition matrix seen through the core, so its "
        "eigenvalues should be the chain's non-unit eigenvalues (red circles)."
    ),
    new_code_cell(
        "rows = torch.tensor(markov.sample(chain, 256, 32, seed=7))\n"
        "op = cores.fit_operator(model, core, rows, start=4)\n"
        "true = chain.nonunit_eigenvalues\n"
        "print('operator eigenvalues:', [complex(round(e.real, 3), round(e.imag, 3)) for e in op.eigenvalues.tolist()])\n"
        "print('true non-unit eigenvalues:', [complex(round(e.real, 3), round(e.imag, 3)) for e in true.tolist()])\n"
        "from dataclasses import replace\n"
        "plot.show(replace(op, meta={**op.meta, 'reference': [[float(e.real), float(e.imag)] for e in true]}))"
    ),
    new_markdown_cell(
        "## Causal validation\n\n"
        "`validate` replaces the activation at the site (at each answer position) by the core only "
        "μ + P(h − μ) (sufficiency), removes the core h − P(h − μ) (necessity), or flips it h − 2P(h − μ), and "
        "does the same with random subspaces of the same dimension as a control."
    ),
    new_code_cell(
        "grid = cores.validate(model, core, task, n_random=3)\n"
        "plot.show(cores.ValidationBars(grid))"
    ),
    new_markdown_cell("## Three seeds: same spectrum, different subspaces?\n\nPrincipal angles (radians) between the seeds' cores: π/2 ≈ 1.571 is orthogonal."),
    new_code_cell(
        "seed_cores, rows_out = {}, []\n"
        "for s in range(3):\n"
        "    m = interp.load(f'zoo:markov-s{s}')\n"
        "    c = cores.extract(m, task, site='ln_final.hook_normalized', output='candidates')\n"
        "    o = cores.fit_operator(m, c, rows, start=4)\n"
        "    seed_cores[s] = c\n"
        "    rows_out.append({'seed': s, 'k': c.k, 'eigenvalues': [complex(round(e.real, 3), round(e.imag, 3)) for e in o.eigenvalues.tolist()]})\n"
        "import pandas as pd\n"
        "display(pd.DataFrame(rows_out))\n"
        "{f'{a}-{b}': cores.linalg.principal_angles(seed_cores[a].basis, seed_cores[b].basis).numpy().round(3).tolist()\n"
        " for a in range(3) for b in range(a + 1, 3)}"
    ),
    new_markdown_cell(
        "## Subject–verb agreement across families\n\n"
        "One core per decoder family at its last residual layer; its first direction is the SVA axis. "
        "`align` maps one model's core coordinates to another's on matched prompts (the zoo's language models "
        "share one word-level tokenizer, so prompts line up token for token). Held-out R² per ordered pair:"
    ),
    new_code_cell(
        "families = [f for f in ('gpt2', 'llama', 'gemma2', 'qwen2') if (interp.model.ZOO_DIR / f'lm-{f}' / 'config.json').exists()]\n"
        "lms = {f: interp.load(f'zoo:lm-{f}') for f in families}\n"
        "sva = english.sva(256, split='sva_id', seed=1)\n"
        "prompts = english.sva(128, split='sva_id', seed=2).text\n"
        "axes = {}\n"
        "for f, m in lms.items():\n"
        "    c = cores.extract(m, sva, site=f'blocks.{m.cfg.n_layers - 1}.hook_resid_post')\n"
        "    print(f, 'core k =', c.k)\n"
        "    axes[f] = c.truncated(1)                      # the core's first direction: the SVA axis\n"
        "r2 = torch.eye(len(families))\n"
        "for i, a in enumerate(families):\n"
        "    for j, b in enumerate(families):\n"
        "        if i != j:\n"
        "            r2[i, j] = cores.align(lms[a], axes[a], lms[b], axes[b], prompts).r2_heldout\n"
        "plot.show(Grid(r2, ('model', 'other'), (tuple(families), tuple(families)), {'title': 'SVA axis alignment, held-out R²', 'metric': 'R²'}))"
    ),
    new_markdown_cell("Cores, operators and alignments are data: `interp.results.save` writes any result (tensors to "
                      "safetensors, the rest as JSON) and `interp.results.load` gives it back; provenance is in `meta`."),
    new_code_cell(
        "import tempfile, pathlib\n"
        "from interp import results\n"
        "path = results.save(core, pathlib.Path(tempfile.mkdtemp()) / 'markov_core.safetensors')\n"
        "again = results.load(path)\n"
        "type(again).__name__, again.site, again.k, again.method, again.meta['task']"
    ),
    new_markdown_cell(
        "## Beside the paper's findings\n\n"
        "`interp.studies.cores` holds the sections of `interp repro cores`; the Markov, modular-addition and SVA "
        "sections run here (Markov on 256 rows, SVA on 64 with 20 random draws per layer; the repro uses 512) and `repro_markdown` puts what they measure beside the paper's "
        "findings. The IOI section (two sites per family, an operator transferred across families) takes several "
        "minutes: `interp repro cores` runs it, and `docs/cores.md` records the full JSON."
    ),
    new_code_cell(
        "from IPython.display import Markdown\n"
        "from interp.studies import cores as cores_study\n"
        "measured = {'markov': cores_study.markov_section(progress=False, n=256),\n"
        "            'modular': cores_study.modular_section(progress=False),\n"
        "            'sva': cores_study.sva_section(lms, progress=False, n=64, align_prompts=64)}\n"
        "Markdown(cores_study.repro_markdown(measured).split('\\n\\nTotal')[0])"
    ),
]


def main() -> None:
    nb = new_notebook(cells=cells, metadata={"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}})
    path = Path(__file__).parent / "05_cores.ipynb"
    nbformat.write(nb, path)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

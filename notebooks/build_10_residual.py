"""Writes notebooks/10_residual.ipynb (run: .venv/bin/python notebooks/build_10_residual.py)."""

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

cells = [
    new_markdown_cell(
        "# 08 · The residual stream: logit lens, direct logit attribution, head detectors\n\n"
        "`interp.lens` reads what TransformerLens's cache already holds as labelled results: the logit lens "
        "(each residual state read through the final norm and unembedding), direct logit attribution (each head's "
        "and MLP's contribution along W_U[correct] − W_U[incorrect], scaled by the cached final LayerNorm scale), "
        "the residual decomposition by layer, and attention-head detectors (previous-token, duplicate-token, induction). "
        "Every analysis returns an `interp.Grid` that `interp.plot.render` draws."
    ),
    new_code_cell(
        "import torch\n"
        "import interp\n"
        "from interp import lens\nfrom interp.views import plot\n"
        "from interp.tasks import english\n"
        "torch.set_num_threads(1)\n\n"
        "spec = 'zoo:lm-gpt2' if (interp.model.ZOO_DIR / 'lm-gpt2' / 'config.json').exists() else \\\n"
        "    str(interp.build_tiny('gpt2', 'tiny-gpt2', words=english.WORDS))   # random weights: numbers are noise\n"
        "model = interp.load(spec)\n"
        "task = interp.tasks.make('ioi', split='train', n=32)\n"
        "task.text[0]"
    ),
    new_markdown_cell("## Logit lens\n\nThe IOI logit difference at the answer position, read after each half-block (TL's labels: `L_pre` enters block L, `L_mid` is after its attention). The last point is the model's own logit difference."),
    new_code_cell(
        "ll = lens.logit_lens(model, task)\n"
        "plot.show(ll)"
    ),
    new_code_cell("lens.lens_top_tokens(model, task.text[0], k=3)   # the top tokens per layer, one prompt"),
    new_markdown_cell("## Direct logit attribution\n\nPer head (h0..h3) and per MLP. The rest of the sum (embeddings, attention biases, the unembedding bias) is in `meta`; all of it adds up to the model's logit difference."),
    new_code_cell(
        "dla = lens.direct_logit_attribution(model, task)\n"
        "print('top components:', dla.top(4))\n"
        "print('sum of components', round(dla.meta['total'], 4), '= logit diff', round(dla.meta['logit_diff'], 4))\n"
        "plot.show(dla)"
    ),
    new_markdown_cell("## Residual decomposition\n\nThe answer-position residual split into embed, pos_embed, and each layer's attn_out and mlp_out: the projection on the answer direction, the same after the final LayerNorm scale (direct effect), and each component's norm."),
    new_code_cell(
        "dec = lens.residual_decomposition(model, task)\n"
        "plot.show(dec)"
    ),
    new_markdown_cell("## Attention-head detectors\n\nMean attention mass on the target positions. Induction is scored on repeated random tokens (`lens.repeated_tokens`, seeded); the others on the IOI rows (padding left out)."),
    new_code_cell(
        "prev = lens.head_scores(model, task, 'previous_token')\n"
        "ind = lens.head_scores(model, None, 'induction')\n"
        "plot.show(prev)"
    ),
    new_code_cell("plot.show(ind)"),
]

nb = new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
nbformat.write(nb, Path(__file__).with_name("10_residual.ipynb"))

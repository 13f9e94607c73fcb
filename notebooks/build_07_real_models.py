"""Writes notebooks/07_real_models.ipynb (run: .venv/bin/python notebooks/build_07_real_models.py)."""

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

cells = [
    new_markdown_cell(
        "# 07 · Real models: IOI heads and the SVA flip in SmolLM2-135M\n\n"
        "Everything in notebooks 02–06 runs unchanged on a pretrained model. `interp.load('smollm2-135m')` "
        "loads SmolLM2-135M-Instruct (LLaMA family: 30 layers, 9 query heads over 3 KV heads, rotary), converted "
        "once into the local cache. `interp.tasks.bpe` builds IOI and SVA rows for its BPE tokenizer "
        "(single-token names and nouns, one token length per task, so `answer_pos` is the last position)."
    ),
    new_code_cell(
        "import pandas as pd\n"
        "import interp\n"
        "from interp import patching, steering\nfrom interp.views import plot\n"
        "from interp.steering import Steer\n"
        "from interp.tasks import bpe\n\n"
        "model = interp.load('smollm2-135m')\n"
        "model.cfg.n_layers, model.cfg.n_heads, model.cfg.n_key_value_heads, model.cfg.d_model"
    ),
    new_markdown_cell(
        "## Which heads carry IOI?\n\n"
        "Head patching at site `z` (every position): the model runs on the corrupt prompt (the two first-clause "
        "names replaced by other names) and one head's output comes from the clean run. The Grid holds the "
        "logit difference (IO minus S) of each patched run; the heads that restore most of it matter."
    ),
    new_code_cell(
        "task = bpe.ioi(model, 3, split='abba')\n"
        "task.text"
    ),
    new_code_cell(
        "grid = patching.activation_patch(model, task, site='z', progress=False)\n"
        "print(f\"clean {grid.meta['clean_metric']:.2f}   corrupt {grid.meta['corrupt_metric']:.2f}\")\n"
        "for cell, value in grid.top(5):\n"
        "    print(f\"L{cell['layer']}H{cell['head']}: {value:+.2f}\")"
    ),
    new_code_cell("plot.render(grid)"),
    new_markdown_cell(
        "## Where does the top head look?\n\n"
        "Its attention pattern on the first clean prompt, from TransformerLens's `run_with_cache`."
    ),
    new_code_cell(
        "top = grid.top(1)[0][0]\n"
        "layer, head = top['layer'], top['head']\n"
        "_, cache = model.run_with_cache(task.clean[:1])\n"
        "pattern = cache[f'blocks.{layer}.attn.hook_pattern'][0, head]\n"
        "tokens = model.to_str_tokens(task.clean[0])\n"
        "strongest = pattern[-1].argmax().item()\n"
        "print(f'L{layer}H{head} at the last position attends most to {tokens[strongest]!r} (position {strongest})')\n"
        "plot.attention(pattern, tokens, head_names=[f'L{layer}H{head}'])"
    ),
    new_markdown_cell(
        "## The SVA number axis, flipped while generating\n\n"
        "A difference-of-means axis between singular and plural subjects (`bpe.sva`, split `none`: *The "
        "ministers*) at `resid_pre` of layer 8. `Steer(axis, 'flip')` reflects the residual stream through the "
        "axis's mid-plane at every position and every generation step."
    ),
    new_code_cell(
        "fit = bpe.sva(model, 64, split='none')\n"
        "is_id = model.to_single_token(' is')\n"
        "singular = [t for t, c in zip(fit.text, fit.correct.tolist()) if c == is_id]\n"
        "plural = [t for t, c in zip(fit.text, fit.correct.tolist()) if c != is_id]\n"
        "axis = steering.axis_from_contrast(model, singular, plural, site='resid_pre', layer=8)\n"
        "len(singular), len(plural), axis.site"
    ),
    new_code_cell(
        "prompts = ['I am sure that the keys to the cabinet', 'Everyone knows that the dog near the cars',\n"
        "           'In the story, the author of the books', 'We heard that the children in the garden']\n"
        "plain = steering.generate(model, prompts, (), max_new_tokens=8)\n"
        "flipped = steering.generate(model, prompts, Steer(axis, 'flip'), max_new_tokens=8)\n"
        "pd.DataFrame({'prompt': prompts, 'unsteered': plain.completions, 'flipped': flipped.completions})"
    ),
    new_markdown_cell(
        "The same flip on held-out SVA prompts with a prepositional attractor (`pp_match`), as a dose–response: "
        "the logit difference (agreeing minus disagreeing verb) and the accuracy at strengths 0 → 1."
    ),
    new_code_cell(
        "dev = bpe.sva(model, 32, split='pp_match', seed=7)\n"
        "curve = steering.curve(model, dev, axis, [0, 0.5, 1], mode='flip', progress=False)\n"
        "print(f'flip rate at strength 1: {1 - curve.values[-1, 1].item():.0%}')\n"
        "curve.to_dataframe().pivot(index='strength', columns='metric', values='value')"
    ),
]

nb = new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
nbformat.write(nb, Path(__file__).with_name("07_real_models.ipynb"))

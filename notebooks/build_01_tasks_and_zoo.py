import nbformat as nbf
nb = nbf.v4.new_notebook()
md, code = nbf.v4.new_markdown_cell, nbf.v4.new_code_cell
nb.cells = [
    md("# 01 · Tasks and the zoo\n\nEvery task in `interp.tasks` is deterministic from a seed and yields a `Task`: clean and corrupt token rows, correct and incorrect answers, the position the answer is read at, and the split. The zoo ships small models of every family trained on these tasks, so everything here runs offline."),
    code("import interp\nfrom interp import tasks, zoo\nfrom interp.views import plot\nimport pandas as pd\n\npd.DataFrame(zoo.table())"),
    md("## Tasks and their splits"),
    code("for name, splits in tasks.SPLITS.items():\n    print(f'{name:8s}', splits)\n\nsva = tasks.make('sva', split='sva_attractor_mismatch', n=4, seed=0)\nfor text, c, i in zip(sva.text, sva.correct, sva.incorrect):\n    print(f'{text!r:45}  correct={c.item()}  incorrect={i.item()}')"),
    code("ioi = tasks.make('ioi', split='train', n=3, seed=0)  # names seen in training IOI sentences\nheld_out = tasks.make('ioi', split='test', n=3, seed=0)  # names never in an IOI sentence\nlist(ioi.text) + list(held_out.text)"),
    md("## Two families, one prompt\n\nA GPT-2 and a LLaMA (grouped-query attention) model from the zoo, both trained on the same synthetic English. `interp.plot.attention` draws each head of the last layer with circuitsvis."),
    code("gpt2 = interp.load('zoo:lm-gpt2')\nllama = interp.load('zoo:lm-llama')\nprompt = ioi.text[0]\n\ndef last_layer_pattern(model, prompt):\n    tokens = model.to_tokens(prompt)\n    _, cache = model.run_with_cache(tokens)\n    layer = model.cfg.n_layers - 1\n    return cache[f'blocks.{layer}.attn.hook_pattern'][0], model.to_str_tokens(tokens[0])\n\npattern, toks = last_layer_pattern(gpt2, prompt)\nplot.attention(pattern, toks)   # the first circuitsvis view of a kernel carries the circuitsvis bundle; later ones reuse it"),
    code("plot.attention(*last_layer_pattern(llama, prompt))"),
    md("circuitsvis draws in JupyterLab, VS Code or a trusted notebook, not in a plain notebook viewer. The same GPT-2 patterns as heatmaps: `plot.show` displays any result as the interactive plotly figure beside a static PNG."),
    code("from interp.results import Grid\nticks = tuple(f'{i}:{t}' for i, t in enumerate(toks))\nheads = tuple(f'H{h}' for h in range(pattern.shape[0]))\nplot.show(Grid(pattern, ('head', 'dest', 'src'), (heads, ticks, ticks), {'title': 'lm-gpt2, last layer: attention', 'metric': 'attention'}))"),
    md("## Training names and held-out names\n\nThe logit difference between the indirect object and the subject on clean and ABC-corrupted prompts. The zoo models solve IOI both with the names they saw in IOI sentences (`train`) and with held-out names that never occur in an IOI training sentence (`test`); held-out names get a smaller logit difference."),
    code("from interp.metrics import logit_diff\nfor split in ('train', 'test'):\n  ioi = tasks.make('ioi', split=split, n=128, seed=1)\n  for name, model in [('gpt2', gpt2), ('llama', llama)]:\n    clean = logit_diff(model(ioi.clean), ioi.correct, ioi.incorrect, ioi.answer_pos)\n    corrupt = logit_diff(model(ioi.corrupt), ioi.correct, ioi.incorrect, ioi.answer_pos)\n    print(f'{split:5s} {name}: clean {clean.mean():.2f} (>0 on {(clean > 0).float().mean():.0%}), corrupt {corrupt.mean():.2f}')"),
]
nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
nbf.write(nb, "notebooks/01_tasks_and_zoo.ipynb")

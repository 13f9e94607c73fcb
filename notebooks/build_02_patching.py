import nbformat as nbf
nb = nbf.v4.new_notebook()
md, code = nbf.v4.new_markdown_cell, nbf.v4.new_code_cell
nb.cells = [
    md("# 02 · Patching on IOI\n\nExact activation patching, attribution patching and path patching on the zoo GPT-2 language model and the IOI task (names from the training split, which the model solves). Every call returns an `interp.Grid`; `interp.plot.render` draws any of them."),
    code("import interp\nfrom interp import patching, tasks\nfrom interp.views import plot\n\nmodel = interp.load('zoo:lm-gpt2')\nioi = tasks.make('ioi', split='train', n=16, seed=0)\nprint(ioi.text[0], '->', model.to_string(ioi.correct[:1]))"),
    md("## Exact activation patching\n\nThe model runs on the ABC-corrupted prompt while one head's output (`hook_z`) comes from the clean prompt. `meta` holds the clean and corrupt logit differences for reference. Many cells share one batched forward pass; the numbers equal TransformerLens's `get_act_patch_attn_head_out_all_pos`."),
    code("exact = patching.activation_patch(model, ioi, site='z')\nprint('clean', round(exact.meta['clean_metric'], 3), 'corrupt', round(exact.meta['corrupt_metric'], 3))\nplot.show(exact)"),
    code("exact.top(3)"),
    md("## Attribution patching\n\nThe linear estimate from one clean forward and one corrupt forward + backward. It estimates the *change* from the corrupt metric, so compare it with `exact - corrupt`."),
    code("import torch\napprox = patching.attribution_patch(model, ioi, site='z')\ndelta = exact.values - exact.meta['corrupt_metric']\nprint('Pearson r over heads:', torch.corrcoef(torch.stack([delta.flatten(), approx.values.flatten()]))[0, 1].item())\nplot.show(approx)"),
    md("## Residual stream by position"),
    code("resid = patching.activation_patch(model, ioi[:1], site='resid_pre', by_pos=True)\nplot.show(resid)"),
    md("## Path patching\n\nEach sender head's output taken from the corrupt run, every other head and MLP frozen at its clean value: first the direct path to the logits, then only through the queries of the last layer's heads (Wang et al.'s name-mover queries)."),
    code("direct = patching.path_patch(model, ioi, receivers='logits')\nplot.show(direct)"),
    code("last = model.cfg.n_layers - 1\nvia_queries = patching.path_patch(model, ioi, receivers=[(last, h, 'q') for h in range(model.cfg.n_heads)])\nplot.show(via_queries)"),
]
nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
nbf.write(nb, "notebooks/02_patching.ipynb")

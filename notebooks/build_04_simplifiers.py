"""Writes notebooks/04_simplifiers.ipynb (run: .venv/bin/python notebooks/build_04_simplifiers.py; `make notebooks` also runs it)."""

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

cells = [
    new_markdown_cell("""# 04 · Attention simplifiers and their faithfulness, in and out of distribution

Friedman et al. (*Interpretability Illusions in the Generalization of Simplified Models*, ICML 2024) replaced attention heads of small Transformers by simplified proxies fitted in distribution (a low-rank SVD of keys and queries, k-means clusters of keys and queries, one-hot attention) and found that the proxies match the model in distribution but not out of it:

* rank-4 SVD is near 100 % same-prediction on seen structures and lower on unseen structures (SVD and clustering *underestimate* the original model's generalisation);
* one-hot attention is at or above the original on unseen depth (it slightly *overestimates* it).

`interp.simplify` makes each proxy one call, and reports faithfulness split by split. Here on the zoo Dyck-(20, 10) model (GPT-2 family, 2 layers, d_model 32, one head per layer); we simplify the second-layer head."""),
    new_code_cell("""import interp
from interp import simplify, zoo
from interp.views import plot
import pandas as pd

model = interp.load('zoo:dyck')
head = (1, 0)                                                      # (layer, head)
fit = simplify.dyck_rows(500, split='train', seed=0)               # in-distribution fit data
splits = {s: simplify.dyck_rows(256, split=s, seed=12345)          # scored at every closing bracket
          for s in ('seen_struct', 'unseen_struct', 'unseen_depth')}
pd.DataFrame(zoo.card('dyck')['accuracy'], index=['zoo card accuracy'])"""),
    new_markdown_cell("""## One simplifier: rank-4 SVD of queries and keys

`svd` fits the top-4 right singular vectors of the head's queries and (separately) keys on the fit data; applied, it projects them before the scores are formed. `faithfulness` returns a `Grid` [split, metric, quantity] with 95 % bootstrap intervals over sequences and a paired bootstrap test of the gap against the in-distribution split."""),
    new_code_cell("""s4 = simplify.svd(model, head, fit, rank=4)
grid = simplify.faithfulness(model, s4, splits, reference='seen_struct', n_boot=300)
frame = grid.to_dataframe().pivot_table(index=['split', 'metric'], columns='quantity', values='value', sort=False)
frame[['value', 'ci_low', 'ci_high', 'p_value']].round(4)"""),
    new_markdown_cell("""A simplifier is data and an intervention: a frozen dataclass that records what it was fitted on (`meta`), saves with `interp.results.save` and runs through `interp.run` like any other intervention (its hooks are removed on exit)."""),
    new_code_cell("""import tempfile, pathlib
from interp import results, run
path = results.save(s4, pathlib.Path(tempfile.mkdtemp()) / 'svd4.safetensors')
again = results.load(path)
tokens = splits['unseen_depth'].tokens[:4]
simplified_logits = run.logits(model, tokens, [again])
print(again.describe(), '| fitted on', {k: v for k, v in again.meta.items() if 'singular' not in k})"""),
    new_markdown_cell("""## Faithfulness against SVD rank, one line per split

Dashed lines: the original model's accuracy on that split."""),
    new_code_cell("""ranks = [1, 2, 4, 8, 16, 32]
rank_sweep = simplify.rank_sweep(model, head, fit, splits, ranks=ranks, reference='seen_struct', n_boot=200)
plot.show(rank_sweep)"""),
    new_markdown_cell("""## k-means of queries and keys"""),
    new_code_cell("""k_sweep = simplify.k_sweep(model, head, fit, splits, ks=[2, 8, 32, 64], reference='seen_struct', n_boot=200)
plot.show(k_sweep)"""),
    new_markdown_cell("""## One-hot attention

Each attention row of the head becomes a one-hot at the argmax of its scores. Below: the original and one-hot attention of the head on an unseen-depth sequence, in circuitsvis."""),
    new_code_cell("""oh = simplify.onehot(model, head)
oh_grid = simplify.faithfulness(model, oh, splits, reference='seen_struct', n_boot=300)
example = interp.tasks.make('dyck', split='unseen_depth', n=1, seed=3).clean[0]
view = simplify.compare_attention(model, oh, example, head)
plot.attention(view.patterns, view.tokens, head_names=view.names)"""),
    new_markdown_cell("""## Beside the paper's findings

The same numbers as `interp repro illusions` (which uses 1000 fit and 512 evaluation sequences; see `docs/illusions.md`), at this notebook's smaller sizes."""),
    new_code_cell("""def row(name, g, i=None):
    v = g.values if i is None else g.values[i]
    get = lambda s, m: float(v[s, simplify.METRICS.index(m), 0])
    labels = g.labels[0] if i is None else g.labels[1]
    out = {'simplifier': name}
    for j, s in enumerate(labels):
        out[f'{s} acc'] = get(j, 'accuracy_simplified')
        out[f'{s} same'] = get(j, 'same_prediction')
    return out

original = {'simplifier': 'original', **{f'{s} acc': float(oh_grid.values[j, 0, 0]) for j, s in enumerate(oh_grid.labels[0])}}
rows = [original]
rows += [row(f'svd rank {r}', rank_sweep.grid, i) for i, r in enumerate(ranks)]
rows += [row(f'k-means k={k}', k_sweep.grid, i) for i, k in enumerate(k_sweep.grid.labels[0])]
rows.append(row('one-hot', oh_grid))
pd.DataFrame(rows).set_index('simplifier').round(3)"""),
    new_markdown_cell("""Paper (Friedman et al. 2024, Dyck): rank-4 SVD ≈ 100 % same-prediction on seen structures, lower on unseen structures; one-hot at or above the original on unseen depth. Read the table above against those two claims: the rows `svd rank 4` (compare `seen_struct same` with `unseen_struct same`) and `one-hot` (compare `unseen_depth acc` with the original's)."""),
]

nb = new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
nbformat.write(nb, Path(__file__).with_name("04_simplifiers.ipynb"))

"""Writes notebooks/03_masking.ipynb (run: .venv/bin/python notebooks/build_03_masking.py; `make notebooks` also runs it)."""

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

cells = [
    new_markdown_cell("""# 03 · Head masking and the heuristic core

`interp.masking` masks attention heads (at `hook_z`) and MLPs (at `hook_mlp_out`): a masked unit outputs `(act - ref)·m + ref`, with `ref` zero, a mean over reference rows, or a resampled input. On top of that: single-unit ablation scans, learned hard-concrete (L0) masks as in Bhaskar et al. 2024 (*The Heuristic Core*), many subnetworks from many seeds, the units they all share (the core), and their in- versus out-of-distribution accuracy."""),
    new_code_cell("""import torch
import interp
from interp import masking, tasks
from interp.views import plot
from interp.masking import HeadMask
from interp.model import ZOO_DIR, build_tiny
from interp.tasks import english

# the zoo's GPT-2-family language model; a random one of the same vocabulary if the zoo is not shipped here
spec = 'zoo:lm-gpt2' if (ZOO_DIR / 'lm-gpt2' / 'config.json').exists() else str(build_tiny('gpt2', 'tiny-gpt2', words=english.WORDS, n_layers=4, d_model=64))
model = interp.load(spec)
torch.set_num_threads(1)  # small models run fastest on one thread
train = tasks.make('sva', split='sva_id', n=256, seed=1)
splits = {s: tasks.make('sva', split=s, n=256, seed=2) for s in ('sva_id', 'sva_attractor_mismatch')}
spec, train.text[:3]"""),
    new_markdown_cell("""## Ablating one unit at a time

The logit difference (agreeing verb minus the other form) with each head, and each MLP, replaced by its mean over the task's rows."""),
    new_code_cell("""scan = masking.ablation_scan(model, train, ablation='mean')
print('unablated logit difference:', round(scan.meta['baseline'], 3))
plot.show(scan)"""),
    new_markdown_cell("""## A mask is data

`HeadMask` holds a [layer, head] tensor (and a [layer] MLP tensor). `apply` is a context manager; an all-ones mask changes nothing, exactly."""),
    new_code_cell("""keep = HeadMask.keeping(model, [(0, 0), (1, 1), (3, 2)], mlps=[0, 1, 2, 3])
with torch.no_grad():
    full = model(train.clean)
    with masking.apply(model, HeadMask.full(model), ablation='mean', reference=train.clean):
        same = model(train.clean)
    with masking.apply(model, keep, ablation='mean', reference=train.clean):
        kept = model(train.clean)
metric = interp.metrics.for_task(train)
print('all-ones mask identical:', torch.equal(full, same))
print('logit diff, full vs three heads + MLPs:', float(metric(full)), float(metric(kept)))
plot.show(keep)"""),
    new_markdown_cell("""## Learning a mask

Hard-concrete gates, one per unit, `log_alpha` starting near 10 (every unit on); the weights stay frozen; the loss is KL(full ‖ masked) at the answer position plus a Lagrangian holding the expected sparsity at a target that ramps up to `sparsity`. The result is CoFi's deterministic mask, binarised."""),
    new_code_cell("""mask = masking.learn_mask(model, train, sparsity=0.5, seed=0, steps=120)
print(f"{mask.meta['seconds']:.1f} s, units off: {int((mask.units() == 0).sum())}/{mask.n_units}, "
      f"kept heads: {mask.kept_heads()}, kept MLPs: {mask.kept_mlps()}")
mask.save('mask.safetensors')
assert torch.equal(HeadMask.load('mask.safetensors').heads, mask.heads)
plot.show(mask)"""),
    new_markdown_cell("""## Many subnetworks, one core

Three seeds at 50 % sparsity (the full study, `interp repro heuristic-core`, uses eight seeds at two sparsities). Each subnetwork is evaluated in distribution (`sva_id`) and on attractor-mismatch SVA, where the noun nearest the verb always has the other number, so copying it fails."""),
    new_code_cell("""result = masking.study(model, train, splits, sparsities=(0.5,), seeds=range(3), steps=120)
result.evaluation.to_dataframe().pivot_table(index='model', columns=['split', 'metric'], values='value').round(3)"""),
    new_code_cell("""plot.show(result)"""),
    new_code_cell("""print('core heads:', result.core.kept_heads(), ' core MLPs:', result.core.kept_mlps())
plot.show(result.core)"""),
    new_code_cell("""plot.show(result.overlap)"""),
    new_markdown_cell("""## Effective size

The fraction of units needed to stay within a tolerance of the full model's accuracy on chosen splits (one mask per sparsity; here a coarse sweep)."""),
    new_code_cell("""eff = masking.effective_size(model, train, splits, tolerance=0.05, sparsities=(0.4, 0.8), steps=100)
print('effective size:', eff.fraction)
plot.show(eff)"""),
    new_markdown_cell("""The toy-scale reproduction and what it found, beside the paper's numbers, are in `docs/heuristic_core.md`."""),
]

nb = new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
nbformat.write(nb, Path(__file__).with_name("03_masking.ipynb"))

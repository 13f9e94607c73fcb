"""Head masking and subnetwork discovery: ablations, learned hard-concrete masks, the heuristic core.

Vocabulary (fixed once here):

    unit     a maskable component: an attention head (layer, head) at its per-head output
             `blocks.{l}.attn.hook_z` [batch, pos, head, d_head], or an MLP (layer) at
             `blocks.{l}.hook_mlp_out` [batch, pos, d_model]
    mask     m in [0, 1] per unit; a masked unit outputs  act * m + ref * (1 - m),
             i.e. (act - ref) * m + ref, exact at m = 0 and m = 1
    ref      the reference activation: zero, the mean over a reference set of token rows
             (per position, positions past the reference width using the mean over all its
             positions; or, `mean_over="tokens"`, one mean over all tokens as in the official
             Heuristic-Core code), or the activation of a resampled input (same shape as the input)
    sparsity the fraction of units whose mask is 0

Masks are data (`HeadMask`); `interventions(mask, refs)` turns one into `interp.interventions.Mask`
interventions (one per masked hook_z / hook_mlp_out), with references from `interp.run.reference`,
and everything runs through `interp.run`: `apply` (a context), `ablation_scan` (every single-unit
ablation one variant of `run.evaluate`), `learn_mask`, `subnetworks`, `evaluate` (masks x splits),
`study`, `effective_size`. `heuristic_core`, `overlap`, `random_like` and `core_baseline` (the
core of random masks with the same per-layer kept-head counts: the chance level of a core) work
on masks alone. The paper-scale
reproduction lives in `interp.studies.heuristic_core`.

`learn_mask` follows Bhaskar et al. (2024, "The Heuristic Core") and CoFiPruning: one hard-concrete
gate per unit (log_alpha initialised near 10, stretch l=-0.1, r=1.1, temperature 2/3), frozen
weights, loss KL(full || masked) at the answer position plus a Lagrangian that holds the expected
sparsity at a target ramped linearly up to `sparsity`; the returned mask is CoFi's deterministic
mask (the expected number of zeros taken from the lowest scores), binarised. Every unit counts
once towards sparsity (a head and an MLP alike). The official code's choices (mean over all
tokens, sparsity of the sampled gates, AdamW with a linear schedule, a ramp over ~97 % of
training) are options: see `learn_mask`.
"""


from interp.errors import outside_surface
from interp.masking.learn import HardConcrete, learn_mask, learn_masks, subnetworks
from interp.masking.mask import HeadMask, ablation_scan, apply
from interp.masking.subnets import EffectiveSize, Study, core_baseline, effective_size, evaluate, heuristic_core, random_like, study

__all__ = [
    "EffectiveSize", "HardConcrete", "HeadMask", "Study", "ablation_scan", "apply", "core_baseline",
    "effective_size", "evaluate", "heuristic_core", "learn_mask", "learn_masks", "random_like", "study",
    "subnetworks"
]

# Names that left the surface: they still import from here, with a DeprecationWarning naming their module.
__getattr__ = outside_surface(__name__, {
    "interventions": "interp.masking.mask",
    "overlap": "interp.masking.subnets",
    "references": "interp.masking.mask",
    "sites": "interp.masking.mask",
    "smallest_within": "interp.masking.subnets",
})

"""Algorithmic cores: extraction, causal validation, and alignment across models and families.

After Schiffman, "Transformers converge to invariant algorithmic cores" (2026): a core is a
compact subspace of one site's activations that is necessary and sufficient for a task, and
that recurs across independently trained models.

    core = cores.extract(model, task, site="resid_post", layer=2)       # Core, k by spectral gap
    grid = cores.validate(model, core, task)               # Grid [method, quantity, metric]
    op = cores.fit_operator(model, core, tokens)           # Operator over time steps (eigenvalues)
    op = cores.fit_operator(model, core_in, task, target=core_out)      # site -> site
    al = cores.align(model_a, core_a, model_b, core_b, prompts)         # Alignment A -> B
    op_b = cores.transfer(op, al_in, al_out); cores.score_operator(model_b, op_b, cb_in, cb_out, task)

Two layers: `interp.cores.linalg` (pure tensors: balanced truncation, PCA, spectral gap,
Procrustes / CCA / ridge maps, principal angles) and the analyses above, which run the model
through `interp.run` (validation is `interp.interventions.Project` variants, run side by side by
`interp.run.evaluate`). `Core`, `Operator`, `Alignment` and `ValidationBars` are result types:
`interp.results.save` / `load` them, `interp.plot.render` draws them; provenance is in `meta`.
`Core.basis` [d_model, k], `Core.mean` [d_model] and `Core.site` (a full hook name) are what other
modules (steering) read. Sites are given as everywhere (`interp.sites`): a short name with
`layer=`, or a full hook name.

Positions: activations are read, and interventions applied, at one position per example: a
Task's answer_pos, or the last token of each prompt string.

Axis vocabulary: validation Grids use method (full / core_only / core_removed / core_flipped),
quantity (core / random_mean / random_std) and metric (see interp.tensors).

The paper's toy-scale study (`interp repro cores`) lives in `interp.studies.cores`.
"""

from interp.errors import outside_surface
from interp.cores import linalg
from interp.cores.analysis import INTERVENTIONS, activations, align, extract, fit_operator, fourier_power, gradients, score_operator, transfer, validate
from interp.cores.results import Alignment, Core, Operator, ValidationBars

__all__ = [
    "Alignment", "Core", "INTERVENTIONS", "Operator", "ValidationBars", "activations", "align", "extract",
    "fit_operator", "fourier_power", "gradients", "linalg", "score_operator", "transfer", "validate"
]

# Names that left the surface: they still import from here, with a DeprecationWarning naming their module.
__getattr__ = outside_surface(__name__, {
    "align_coordinates": "interp.cores.analysis",
    "matched_activations": "interp.cores.analysis",
    "operator_from": "interp.cores.analysis",
    "sequence_coordinates": "interp.cores.analysis",
})

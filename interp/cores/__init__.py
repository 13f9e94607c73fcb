"""Algorithmic cores: extraction, causal validation, and alignment across models and families.

After Schiffman, "Transformers converge to invariant algorithmic cores" (2026): a core is a
compact subspace of one site's activations that is necessary and sufficient for a task, and
that recurs across independently trained models.

    core = cores.extract(model, task, site="blocks.2.hook_resid_post")        # Core, k by spectral gap
    grid = cores.validate(model, core, task)               # Grid [method, quantity, metric]
    op = cores.fit_operator(model, core, tokens)           # Operator over time steps (eigenvalues)
    op = cores.fit_operator(model, core_in, task, target=core_out)      # site -> site
    al = cores.align(model_a, core_a, model_b, core_b, prompts)         # Alignment A -> B
    op_b = cores.transfer(op, al_in, al_out); cores.score_operator(model_b, op_b, cb_in, cb_out, task)

Three layers: `interp.cores.linalg` (pure tensors: balanced truncation, PCA, spectral gap,
Procrustes / CCA / ridge maps, principal angles), hook factories (`projection_hook`), and the
analyses above, which run the model. `Core`, `Operator` and `Alignment` are frozen dataclasses
that save to safetensors + JSON. `Core.basis` [d_model, k], `Core.mean` [d_model] and
`Core.site` (a hook name) are what other modules (steering) read.

Positions: activations are read, and interventions applied, at one position per example: a
Task's answer_pos, or the last token of each prompt string.

Axis vocabulary: validation Grids use method (full / core_only / core_removed / core_flipped),
quantity (core / random_mean / random_std) and metric; pairwise alignment Grids use model and
other (see interp.tensors).
"""

from interp.cores import linalg
from interp.cores.analysis import (
    INTERVENTIONS, activations, align, align_coordinates, candidates, check_site, extract, fit_operator,
    fourier_power, gradients, matched_activations, operator_from, projection_hook, prompt_tokens,
    score_operator, sequence_coordinates, transfer, validate,
)
from interp.cores.results import Alignment, Core, Operator
from interp.cores.study import ValidationBars, demo_section, repro, repro_markdown

__all__ = [
    "INTERVENTIONS", "Alignment", "Core", "Operator", "ValidationBars", "activations", "align", "align_coordinates",
    "candidates", "check_site", "demo_section", "extract", "fit_operator", "fourier_power", "gradients", "linalg",
    "matched_activations", "operator_from", "projection_hook", "prompt_tokens", "repro", "repro_markdown", "score_operator",
    "sequence_coordinates", "transfer", "validate",
]

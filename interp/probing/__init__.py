"""Parameter probing and domain-specialised subnetworks (Ma et al. 2025, "Generalization by
Specialization"; only the abstract is public, so the choices below are parameters).

    scores   = input_norms(model, task.clean, answer_pos=task.answer_pos)   # one pass, hooks
    scores.matrix(model, name)      |W_ij| * ||X_j||_2 (the Wanda score) of one weight [out, in]
    overlap(model, {task: scores}, {task: domain})   Grid of Jaccard indices of the top-k weights
    p = probe(model, val.clean, metric, scores, answer_pos=val.answer_pos, tolerance=0.05, sparsity=0.5)
    run.logits(model, tokens, [p.mask(model)])       the subnetwork, applied by the runner
    random_like(p), magnitude_like(model, p)         the controls at p's sparsity per matrix
    probe(..., random_scores(model, seed))           the search itself on random scores: a control that can fail
    overlap_null(grid)                               within - across against tasks dealt to domains at random

`probe` sorts each matrix's scores into G quantile groups (per output row or per matrix) and
prunes the lowest groups greedily while the validation metric stays within the tolerance (see
`interp.probing.probe`). Masks are `interp.interventions.WeightMask` data: the model's weights are
swapped for one forward by `interp.run` and never written. Domain tasks: `interp.tasks.domains`
(real BPE models) and `interp.tasks.multidomain` (the zoo's `multidomain` model); the study is
`interp.studies.specialization`.
"""

from interp.errors import outside_surface
from interp.probing.overlap import jaccard, overlap, overlap_null, within_minus_across
from interp.probing.probe import Probe, magnitude_like, probe, random_like
from interp.probing.scores import WeightScores, input_norms, linears, magnitude, random_scores, wanda

__all__ = [
    "Probe", "WeightScores", "input_norms", "jaccard", "linears", "magnitude", "magnitude_like", "overlap",
    "overlap_null", "probe", "random_like", "random_scores", "wanda", "within_minus_across"
]

# Names that left the surface: they still import from here, with a DeprecationWarning naming their module.
__getattr__ = outside_surface(__name__, {
    "GROUPINGS": "interp.probing.probe",
    "KINDS": "interp.probing.scores",
    "Linear": "interp.probing.scores",
    "check_model": "interp.probing.probe",
    "fingerprint": "interp.probing.scores",
    "levels": "interp.probing.probe",
    "per_matrix": "interp.probing.probe",
    "sparsity_of": "interp.probing.probe",
    "top_fraction": "interp.probing.overlap",
})

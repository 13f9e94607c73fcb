"""Attention simplifiers (SVD, k-means, one-hot) and their faithfulness split by split.

After Friedman et al., "Interpretability Illusions in the Generalization of Simplified Models"
(ICML 2024): replace a head's attention by a simpler proxy fitted in distribution, then measure
how faithful the proxy is on every split, in and out of distribution.

    s = svd(model, (1, 0), fit_rows, rank=4)          # fitted on in-distribution data
    logits = interp.run.logits(model, tokens, [s])      # a simplifier is an intervention
    grid = faithfulness(model, s, {"seen": a, "unseen": b})   # Grid [split, metric, quantity]
    interp.results.save(s, "s.safetensors")             # interp.results.load gives it back

Three simplifiers, each a frozen dataclass of data on the intervention protocol
(`interp.interventions`: `sites`, `first_pos`, `__call__(act, *, site, start)`), so `interp.run`
applies them like any other intervention, alone or side by side with others:

* `svd`: project each query and key onto its top-`rank` right singular vectors (an affine
  subspace through the fitted mean when `center=True`), before the scores are formed.
* `kmeans`: replace each query and each key by its nearest centroid (queries and keys are
  clustered separately, with scikit-learn's KMeans).
* `onehot`: replace each attention row by a one-hot at the argmax of its scores (ties go to the
  earliest source position, torch.argmax's rule). Needs no data.

Where they act: on `hook_q` / `hook_k` ([batch, pos, head, d_head]); on rotary models on
`hook_rot_q` / `hook_rot_k`, the vectors whose dot products are the scores. On grouped-query
models keys live on kv heads, so simplifying a head's keys simplifies them for every query head
of its group (the faithfulness JS is measured on the chosen heads only). One-hot acts on
`hook_attn_scores` (the argmax keeps score 0, the rest -inf, so the softmax is exactly one-hot).

Data (`Task | Rows`): a `Rows` is token rows with a target token at every scored position (IGNORE
elsewhere) and each row's length. A Task is scored at its answer position (`Rows.of(task)`).
Simplifiers are fitted on every position before a row's length; faithfulness compares argmax
predictions at the scored positions and attention rows at every query position before the length.

Results: `faithfulness` -> Grid [split, metric, quantity]; `rank_sweep` / `k_sweep` -> `Sweep`
(drawn by `interp.plot.render` as faithfulness against rank or k); `compare_attention` ->
`AttentionComparison` (original vs simplified attention of one head). Heads are (layer, head)
pairs. The Dyck study of the paper lives in `interp.studies.illusions`.
"""

from interp.errors import outside_surface
from interp.simplify.core import dyck_rows
from interp.simplify.faithfulness import METRICS, AttentionComparison, Sweep, compare_attention, faithfulness, k_sweep, rank_sweep
from interp.simplify.simplifiers import KMeansSimplifier, OneHotSimplifier, SVDSimplifier, kmeans, onehot, svd

__all__ = [
    "AttentionComparison", "KMeansSimplifier", "METRICS", "OneHotSimplifier", "SVDSimplifier", "Sweep",
    "compare_attention", "dyck_rows", "faithfulness", "k_sweep", "kmeans", "onehot", "rank_sweep", "svd"
]

# Names that left the surface: they still import from here, with a DeprecationWarning naming their module.
__getattr__ = outside_surface(__name__, {
    "HeadSpec": "interp.simplify.core",
    "IGNORE": "interp.simplify.core",
    "QUANTITIES": "interp.simplify.faithfulness",
    "Rows": "interp.simplify.core",
    "Simplifier": "interp.simplify.simplifiers",
    "collect": "interp.simplify.core",
    "js_divergence": "interp.simplify.core",
    "kmeans_centroids": "interp.simplify.core",
    "nearest": "interp.simplify.core",
    "onehot_scores": "interp.simplify.core",
    "project": "interp.simplify.core",
    "svd_basis": "interp.simplify.core",
})

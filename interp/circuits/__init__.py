"""Circuit discovery: which edges of a model's computational graph carry a task, and how well.

    from interp import circuits
    graph = circuits.eap_ig(model, task, steps=5)       # a Graph: every edge with a signed score
    check = circuits.exact(model, task, graph.top(50))  # the true effect of those edges
    grid = circuits.circuit_scores(model, task, {"eap-ig": graph})   # MIB's f curves, CPR and CMD
    grid.meta["cpr"], grid.meta["cmd"], graph.heads().top(5)

Nodes are the embeddings, every attention head (read through its q input, and its KV group's k
and v inputs, natively on grouped-query models), every MLP and the logits (`graph.py`). Scores
come from edge attribution patching (`eap`), its integrated-gradients form (`eap_ig`) and exact
edge patching (`exact`); circuits are the top edges or a greedy selection, and their
faithfulness is measured by running the model with every other edge ablated (`circuit.py`).
Memory is bounded by `batch_size` (examples per forward + backward) and `pos_chunk` (positions
per score product) of `eap` / `eap_ig`; every Graph's meta["peak_memory"] says what a run took.
`scores.py` scores circuits as the MIB benchmark does: CPR (area under the faithfulness curve
over circuit sizes) and CMD (area between it and 1), for edge rankings and head rankings (a
learned mask's logits). Lower-level names (`AddTo`, `sender_nodes`, `receiver_nodes`, `prune`,
`areas`, `MIB_FRACTIONS`) live in their modules.
"""

from interp.circuits.circuit import (
    AblateOutside,
    Faithfulness,
    faithfulness,
    faithfulness_curve,
    greedy,
    has_path,
)
from interp.circuits.eap import eap, eap_ig
from interp.circuits.exact import exact
from interp.circuits.graph import CONVENTION, Graph, edge_list, node
from interp.circuits.scores import circuit_scores, head_circuit_scores

__all__ = [
    "CONVENTION",
    "AblateOutside",
    "Faithfulness",
    "Graph",
    "circuit_scores",
    "eap",
    "eap_ig",
    "edge_list",
    "exact",
    "faithfulness",
    "faithfulness_curve",
    "greedy",
    "has_path",
    "head_circuit_scores",
    "node",
]

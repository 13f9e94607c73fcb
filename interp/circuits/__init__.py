"""Circuit discovery: which edges of a model's computational graph carry a task, and how well.

    from interp import circuits
    graph = circuits.eap_ig(model, task, steps=5)       # a Graph: every edge with a signed score
    check = circuits.exact(model, task, graph.top(50))  # the true effect of those edges
    curve = circuits.faithfulness_curve(model, task, graph, ablation="mean")
    curve.meta["edges_80"], graph.heads().top(5)

Nodes are the embeddings, every attention head (read through its q input, and its KV group's k
and v inputs, natively on grouped-query models), every MLP and the logits (`graph.py`). Scores
come from edge attribution patching (`eap`), its integrated-gradients form (`eap_ig`) and exact
edge patching (`exact`); circuits are the top edges or a greedy selection, and their
faithfulness is measured by running the model with every other edge ablated (`circuit.py`).
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
from interp.circuits.exact import AddTo, exact
from interp.circuits.graph import (
    CONVENTION,
    Graph,
    edge_list,
    node,
    receiver_nodes,
    sender_nodes,
)

__all__ = [
    "CONVENTION",
    "AblateOutside",
    "AddTo",
    "Faithfulness",
    "Graph",
    "eap",
    "eap_ig",
    "edge_list",
    "exact",
    "faithfulness",
    "faithfulness_curve",
    "greedy",
    "has_path",
    "node",
    "receiver_nodes",
    "sender_nodes",
]

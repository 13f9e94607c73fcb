"""Extractive structures and weight grafting (Feng, Russell & Steinhardt 2024).

Fact tasks with fictional people and real cities (`first_hop`, `second_hop`, `mean_rank`),
fine-tuning as a weight delta (`finetune` -> `Delta`: add, subtract, restrict, apply through
`interp.run`), extractive scores per component and position (`extractive_scores`), weight grafting
(`graft`) and the data-ordering experiment at zoo scale (`data_ordering`).
"""

from interp.grafting.delta import (
    COMPONENTS,
    Delta,
    component_of,
    finetune,
    layer_of,
    parameters,
)
from interp.grafting.experiments import (
    early_late,
    graft,
    hop,
    layer_restriction,
    layer_split,
    ranks_under,
)
from interp.grafting.facts import (
    RELATIONS,
    Facts,
    assignments,
    check_unknown,
    encode,
    first_hop,
    mean_rank,
    option_ids,
    second_hop,
    vocabulary,
)
from interp.grafting.ordering import ORDERS, data_ordering, world
from interp.grafting.scores import (
    ExtractiveScores,
    extractive_scores,
    informative_by_component,
    per_component_backward,
)

# The surface (`from interp.grafting import *`, the docs): at most 15 names. Every other name imported
# above stays importable from here for existing code; new code imports it from its module.
__all__ = [
    "Delta", "ExtractiveScores", "Facts", "data_ordering", "encode", "extractive_scores", "finetune", "first_hop",
    "graft", "informative_by_component", "mean_rank", "parameters", "per_component_backward", "second_hop"
]

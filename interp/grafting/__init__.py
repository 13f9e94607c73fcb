"""Extractive structures and weight grafting (Feng, Russell & Steinhardt 2024).

Fact tasks with fictional people and real cities (`first_hop`, `second_hop`, `mean_rank`),
fine-tuning as a weight delta (`finetune` -> `Delta`: add, subtract, restrict, apply through
`interp.run`), extractive scores per component and position (`extractive_scores`), weight grafting
(`graft`) and the data-ordering experiment at zoo scale (`data_ordering`).
"""

from interp.errors import outside_surface
from interp.grafting.delta import Delta, finetune, parameters
from interp.grafting.experiments import graft
from interp.grafting.facts import Facts, encode, first_hop, mean_rank, second_hop
from interp.grafting.ordering import data_ordering
from interp.grafting.scores import ExtractiveScores, extractive_scores, informative_by_component, per_component_backward

__all__ = [
    "Delta", "ExtractiveScores", "Facts", "data_ordering", "encode", "extractive_scores", "finetune",
    "first_hop", "graft", "informative_by_component", "mean_rank", "parameters", "per_component_backward",
    "second_hop"
]

# Names that left the surface: they still import from here, with a DeprecationWarning naming their module.
__getattr__ = outside_surface(__name__, {
    "COMPONENTS": "interp.grafting.delta",
    "ORDERS": "interp.grafting.ordering",
    "RELATIONS": "interp.grafting.facts",
    "assignments": "interp.grafting.facts",
    "check_unknown": "interp.grafting.facts",
    "component_of": "interp.grafting.delta",
    "early_late": "interp.grafting.experiments",
    "hop": "interp.grafting.experiments",
    "layer_of": "interp.grafting.delta",
    "layer_restriction": "interp.grafting.experiments",
    "layer_split": "interp.grafting.experiments",
    "option_ids": "interp.grafting.facts",
    "ranks_under": "interp.grafting.experiments",
    "vocabulary": "interp.grafting.facts",
    "world": "interp.grafting.ordering",
})

"""Feature-level interpretability: sparse dictionaries (SAEs, transcoders), features as sites,
attribution graphs."""

from interp.features.dictionary import Dictionary

__all__ = ["Dictionary"]

# attribution graphs (issue 28, item 3)
from interp.features.attribute import attribute, replacement_logits  # noqa: E402
from interp.features.graph import AttributionGraph  # noqa: E402
from interp.features.neuronpedia import from_neuronpedia, to_neuronpedia, write_neuronpedia  # noqa: E402

__all__ += ["AttributionGraph", "attribute", "from_neuronpedia", "replacement_logits", "to_neuronpedia", "write_neuronpedia"]

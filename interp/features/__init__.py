"""Feature-level interpretability: sparse dictionaries (SAEs, transcoders), features as sites,
attribution graphs."""

from interp.errors import outside_surface
from interp.features.dictionary import Dictionary

# attribution graphs
from interp.features.attribute import attribute  # noqa: E402
from interp.features.graph import AttributionGraph  # noqa: E402
from interp.features.neuronpedia import from_neuronpedia, to_neuronpedia  # noqa: E402

# dictionaries: training, SAELens files, features as sites.
# `train` is the module interp.features.train (so interp.features.train.Recipe works); the
# function is train_dictionaries (calling the module still runs it, with a DeprecationWarning).
from interp.features import train  # noqa: E402
from interp.features.quality import scores  # noqa: E402
from interp.features.saelens import load_saelens, save_saelens  # noqa: E402
from interp.features.sites import FeatureEdit, feature_acts, feature_edit, top_examples  # noqa: E402
from interp.features.train import Recipe, fit, train_dictionaries  # noqa: E402

# 15 names in __all__ (the capability limit); the module `train` is importable from here too
__all__ = ["AttributionGraph", "Dictionary", "FeatureEdit", "Recipe", "attribute", "feature_acts", "feature_edit", "fit",
           "from_neuronpedia", "load_saelens", "save_saelens", "scores", "to_neuronpedia", "top_examples",
           "train_dictionaries"]

# names that left the surface: they still import from here, with one DeprecationWarning naming their module
__getattr__ = outside_surface(__name__, {
    "load_dictionaries": "interp.features.suite",
    "replacement_logits": "interp.features.attribute",
    "write_neuronpedia": "interp.features.neuronpedia",
})

"""Feature-level interpretability: sparse dictionaries (SAEs, transcoders), features as sites,
attribution graphs."""

from interp.features.dictionary import Dictionary

__all__ = ["Dictionary"]

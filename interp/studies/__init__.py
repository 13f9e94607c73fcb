"""The papers' studies, one file per paper, built on interp's public API only.

Each study module defines `repro(progress: bool = True, models: list[str] | None = None) -> dict`
(what `interp repro NAME [--model SPEC ...]` prints; `models=None` runs the study's own models) and
`demo_section(workdir) -> list` (its part of the offline demo's report).

    heuristic-core   Bhaskar et al. 2024, The Heuristic Core            (interp.masking)
    illusions        Friedman et al. 2024, Interpretability Illusions   (interp.simplify)
    cores            Schiffman 2026, invariant algorithmic cores        (interp.cores)
    steering         the axis-steering generator on the cores' axes     (interp.steering)
"""

from __future__ import annotations

from interp.studies import cores, heuristic_core, illusions, steering

__all__ = ["STUDIES", "cores", "heuristic_core", "illusions", "steering", "study"]

STUDIES = {
    "heuristic-core": heuristic_core,
    "illusions": illusions,
    "cores": cores,
    "steering": steering,
}


def study(name: str):
    """The study module behind `interp repro NAME` (imported on first use)."""
    import importlib

    if name in STUDIES:
        return STUDIES[name]
    try:
        return importlib.import_module(f"interp.studies.{name.replace('-', '_')}")
    except ModuleNotFoundError as err:
        from interp.errors import InterpError

        raise InterpError(f"no study {name!r}; studies: {', '.join(sorted(STUDIES))}") from err

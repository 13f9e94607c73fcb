"""The papers' studies, one file per paper, built on interp's public API only.

Each study module defines `repro(progress: bool = True) -> dict` (what `interp repro NAME` prints)
and `demo_section(workdir) -> list` (its part of the offline demo's report).

    heuristic-core   Bhaskar et al. 2024, The Heuristic Core            (interp.masking)
    illusions        Friedman et al. 2024, Interpretability Illusions   (interp.simplify)
    cores            Schiffman 2026, invariant algorithmic cores        (interp.cores)
    steering         the axis-steering generator on the cores' axes     (interp.steering)
"""

from __future__ import annotations

from interp.studies import cores, heuristic_core, illusions, steering

__all__ = ["STUDIES", "cores", "heuristic_core", "illusions", "steering"]

STUDIES = {
    "heuristic-core": heuristic_core,
    "illusions": illusions,
    "cores": cores,
    "steering": steering,
}

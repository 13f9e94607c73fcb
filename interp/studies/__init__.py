"""The papers' studies, one file per paper, built on interp's public API only.

Each study module defines `repro(progress=True, models=None, budget="quick", overrides=None,
units=None) -> dict`, what `interp repro NAME --budget quick|paper [--steps N ...] [--units DIR]
[--out FILE.json]` runs: `models=None` runs the study's own models; `budget` names one of the
module's BUDGETS and `overrides` changes its keys (`units.budget` refuses unknown ones); `units`
is where its finished units are stored (`units.Units`), so a killed run resumes. The dict it
returns is one run: it carries "budget" and "provenance" (`units.provenance`). A study also
defines `demo_section(workdir) -> list` (its part of the offline demo's report). The registry of
what `interp repro` runs, with each study's doc writer in one signature `write_doc(json_path,
doc_path)`, is `interp.studies.protocol.REGISTRY` (tests/test_study_protocol.py holds every study to it).

    heuristic-core   Bhaskar et al. 2024, The Heuristic Core            (interp.masking)
    illusions        Friedman et al. 2024, Interpretability Illusions   (interp.simplify)
    cores            Schiffman 2026, invariant algorithmic cores        (interp.cores)
    steering         the axis-steering generator on the cores' axes     (interp.steering)
    extractive       Feng et al. 2024, Extractive Structures            (interp.grafting)
    specialization   Ma et al. 2025, Generalization by Specialization   (interp.probing)
    circuits         Wang et al. 2022 IOI circuit, EAP-IG of Hanna et al. 2024 (interp.circuits;
                     its demo section is the demo's circuit section, so it is not in STUDIES)
"""

from __future__ import annotations

from interp.studies import cores, extractive, heuristic_core, illusions, specialization, steering, units

__all__ = ["STUDIES", "cores", "extractive", "heuristic_core", "illusions", "specialization", "steering", "study", "units"]

STUDIES = {
    "heuristic-core": heuristic_core,
    "illusions": illusions,
    "cores": cores,
    "steering": steering,
    "extractive": extractive,
    "specialization": specialization,
}


def study(name: str):
    """The study module behind `interp repro NAME` (`interp.studies.protocol.get(name).load()`)."""
    from interp.studies import protocol

    return protocol.get(name).load()

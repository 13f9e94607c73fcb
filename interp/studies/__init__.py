"""The papers' studies, one folder per paper, built on interp's public API only.

Each folder's package module defines `BUDGETS`, `departures(budget_values)`, `regions(result)` (its
doc's generated regions) and `repro(progress=True, models=None, budget="quick", overrides=None,
units=None) -> dict`, registered with `@interp.studies.protocol.study(NAME)`: what `interp repro NAME
--budget quick|paper [--steps N ...] [--units DIR] [--out FILE.json]` runs. `models=None` runs the
study's own models; `budget` names one of BUDGETS and `overrides` changes its keys (`units.budget`
refuses unknown ones); `units` is where its finished units are stored (`units.Units`), so a killed
run resumes. The dict it returns is one run: it carries "budget" and "provenance" (`units.provenance`).
A study may define `demo_section(workdir) -> list` (its part of the offline demo's report).
`interp doc NAME` refills a doc's regions from its JSON. The shared pieces sit here: protocol (the
table of studies), units, verdicts, claims, gpu_estimate and docs (rendering and checking bound docs).

    heuristic-core   Bhaskar et al. 2024, The Heuristic Core            (interp.masking)
    illusions        Friedman et al. 2024, Interpretability Illusions   (interp.simplify)
    cores            Schiffman 2026, invariant algorithmic cores        (interp.cores)
    steering         the axis-steering generator on the cores' axes     (interp.steering)
    extractive       Feng et al. 2024, Extractive Structures            (interp.grafting)
    specialization   Ma et al. 2025, Generalization by Specialization   (interp.probing)
    circuits         Wang et al. 2022 IOI circuit, EAP-IG of Hanna et al. 2024 (interp.circuits)
    grokking         Schiffman 2026, cyclic cores at grokking           (interp.cores)
    features         the committed dictionaries: a doc bound to its JSON, no repro (interp.features)
"""

from __future__ import annotations

__all__ = ["demo_sections", "study"]


def study(name: str):
    """The study module behind `interp repro NAME` (`interp.studies.protocol.get(name).load()`)."""
    from interp.studies import protocol

    return protocol.get(name).load()


def demo_sections() -> list:
    """Each registered study's `demo_section(workdir)`, in the table's order (a study without one adds none)."""
    from interp.studies.protocol import REGISTRY

    sections = (getattr(REGISTRY[n].load(), "demo_section", None) for n in REGISTRY if REGISTRY[n].runs)
    return [s for s in sections if s is not None]

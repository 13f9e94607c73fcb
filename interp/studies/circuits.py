"""Circuits on IOI (Wang et al. 2022; EAP-IG of Hanna et al. 2024): `interp repro circuits`.

The study lives beside its tools in `interp.circuits.study`; this name makes it one of the studies."""

from interp.circuits.study import demo_section, repro

__all__ = ["demo_section", "repro"]

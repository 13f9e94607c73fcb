"""Every headline claim of the five papers, each with the study that judges it (or what judging it
would need), so no claim is left out without a word.

A study marks each verdict it stores with the claim it judges (`verdicts.judge(..., claim_id=...)`);
`ledger(name, data)` lists every claim assigned to that study with the combined word of its verdicts,
or "not run" and why. `unassigned()` are the claims no study runs yet; the README counts all of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from interp.errors import InterpError
from interp.studies.verdicts import NOT_RUN, WORDS, combine, dicts_in

__all__ = ["CLAIMS", "PAPERS", "Claim", "ledger", "unassigned", "counts"]

PAPERS = {
    "heuristic-core": "The Heuristic Core (Bhaskar et al. 2024)",
    "illusions": "Interpretability Illusions in the Generalization of Simplified Models (Friedman et al. 2024)",
    "cores": "Transformers converge to invariant algorithmic cores (Schiffman 2026)",
    "specialization": "Generalization by Specialization (Ma et al. 2025)",
    "extractive": "Extractive Structures (Feng et al. 2024)",
}


@dataclass(frozen=True)
class Claim:
    """One headline claim: `study` is the registered study whose JSON judges it (None: none does
    yet); `needs` says what judging it would take when it is not run (model, data, budget, command)."""

    id: str
    paper: str
    text: str
    study: str | None
    needs: str = ""


CLAIMS: tuple[Claim, ...] = (
    # The Heuristic Core
    Claim("hc.subnetworks_differ", "heuristic-core", "subnetworks of one model that agree in distribution generalize very "
          "differently out of distribution", "heuristic-core"),
    Claim("hc.shared_core", "heuristic-core", "all subnetworks share a set of attention heads (the heuristic core)",
          "heuristic-core"),
    Claim("hc.core_is_heuristic", "heuristic-core", "the core heads compute shallow, non-generalizing features: alone they "
          "keep in-distribution but not out-of-distribution behaviour", "heuristic-core"),
    Claim("hc.core_emerges_early", "heuristic-core", "the core heads emerge early in training", "heuristic-core",
          "a budget with emergence_recipe set: a zoo recipe retrained with checkpoints, its final core traced back"),
    Claim("hc.generalization_adds_heads", "heuristic-core", "generalization comes from additional heads that read the core "
          "heads' outputs", "heuristic-core", "a model whose masks share at least one head (a non-empty core)"),
    # Interpretability Illusions
    Claim("il.svd_faithful_id", "illusions", "rank-4 SVD / clustering of key-query embeddings keep near-100 % prediction "
          "similarity in distribution", "illusions"),
    Claim("il.svd_deviates_ood", "illusions", "the same simplifications deviate on unseen structures, where the original "
          "generalizes: they underestimate generalization", "illusions"),
    Claim("il.onehot_overestimates_depth", "illusions", "one-hot attention outperforms the original on unseen depth: it "
          "overestimates generalization", "illusions"),
    Claim("il.onehot_faithful_structure", "illusions", "one-hot attention is faithful on the structure splits",
          "illusions", "the paper budget (the quick one runs it too)"),
    Claim("il.code_java_vs_unseen", "illusions", "CodeSearchNet: prediction similarity is higher on Java than on unseen "
          "languages (paired t-test p <= 0.005)", "illusions", "the paper budget (code_steps > 0): a character-level "
          "4-layer model trained on the Python standard library, C / C++ / JavaScript held out; about 30 CPU minutes"),
    Claim("il.code_repeated_word", "illusions", "the largest gap is on induction-like repeated-word predictions (75 % vs "
          "61 % for one head)", "illusions", "the code model above (paper budget), its repeated-word positions split out"),
    # Algorithmic cores
    Claim("ace.markov_spectra", "cores", "Markov-chain transformers recover the chain's transition spectrum in a 3D core",
          "cores"),
    Claim("ace.markov_orthogonal", "cores", "independently trained Markov models embed their cores in nearly orthogonal "
          "subspaces", "cores"),
    Claim("ace.modular_cyclic", "cores", "modular-addition transformers form compact cyclic cores at grokking that later "
          "inflate under regularization", "grokking"),
    Claim("ace.inverse_scaling", "cores", "redundancy speeds grokking: grokking time falls with core redundancy (an "
          "inverse scaling law)", "grokking"),
    Claim("ace.sva_single_axis", "cores", "subject-verb agreement is carried by a single axis", "cores"),
    Claim("ace.sva_axis_aligns", "cores", "the agreement axis aligns across architectures", "cores"),
    Claim("ace.sva_flip_generation", "cores", "flipping the axis inverts grammatical number in open-ended generation",
          "steering"),
    Claim("ace.ioi_two_site_cores", "cores", "IOI routes through compact cores at two sites linked by a linear operator",
          "cores"),
    Claim("ace.ioi_operator_transfers", "cores", "the IOI operator transfers across model families (6 of 12 pairs beat "
          "the control)", "cores"),
    Claim("ace.real_core_sufficient", "cores", "in pretrained LMs the core alone is sufficient for the task", "cores"),
    # Generalization by Specialization
    Claim("gs.task_specific", "specialization", "weight activations are task-specific", "specialization"),
    Claim("gs.probe_keeps_domain", "specialization", "a subnetwork probed for a domain keeps (or improves) performance "
          "within it", "specialization"),
    Claim("gs.deteriorates_across", "specialization", "its performance deteriorates across domains", "specialization"),
    # Extractive Structures
    Claim("es.first_hop", "extractive", "fine-tuning on facts lowers the rank of their first-hop implications",
          "extractive"),
    Claim("es.second_hop", "extractive", "the same for second-hop implications", "extractive"),
    Claim("es.grafting", "extractive", "grafting the extractive structures transfers counterfactual implications",
          "extractive"),
    Claim("es.data_ordering", "extractive", "facts-first pretraining generalizes, implications-first does not",
          "extractive"),
    Claim("es.early_late_layers", "extractive", "facts learned at early and at late layers generalize differently", "extractive",
          "a verdict on the stored layer-frozen fine-tunes: early-only vs late-only implication ranks with per-seed "
          "intervals, beside a random-layer-split control"),
)


def _check() -> None:
    ids = [c.id for c in CLAIMS]
    if len(set(ids)) != len(ids):
        raise InterpError(f"claim ids repeat: {sorted({i for i in ids if ids.count(i) > 1})}")
    for c in CLAIMS:
        if c.paper not in PAPERS or (c.study is None and not c.needs):
            raise InterpError(f"claim {c.id}: unknown paper {c.paper!r} or 'not run' without what it needs")


_check()


def ledger(study: str, data: Any) -> list[dict]:
    """Every claim assigned to `study`, with the combined word of the verdicts in `data` (a study's
    JSON) that name it (`claim_id`), the paths of those verdicts, or "not run" and why."""
    found: dict[str, list[tuple[str, str]]] = {}
    for where, d in dicts_in(data):
        cid = d.get("claim_id")
        if isinstance(cid, str) and isinstance(d.get("word"), str):
            found.setdefault(cid, []).append((where, d["word"]))
    known = {c.id for c in CLAIMS}
    stray = sorted(set(found) - known)
    if stray:
        raise InterpError(f"verdicts name claims no paper makes: {stray}; known ids are in interp.studies.claims.CLAIMS")
    out = []
    for c in CLAIMS:
        if c.study != study:
            continue
        hits = found.get(c.id, [])
        entry = {"id": c.id, "paper": c.paper, "text": c.text}
        if hits:
            entry.update(word=combine(w for _, w in hits), verdicts=[w for w, _ in hits])
        else:
            entry.update(word=NOT_RUN, needs=c.needs or "its verdict is not in this run's JSON")
        out.append(entry)
    return out


def unassigned() -> list[dict]:
    """The claims no study runs yet, each with what it would need."""
    return [{"id": c.id, "paper": c.paper, "text": c.text, "word": NOT_RUN, "needs": c.needs} for c in CLAIMS if c.study is None]


def counts(entries: list[dict]) -> dict[str, int]:
    """How many claims carry each word (every word listed, zeros included)."""
    return {w: sum(e["word"] == w for e in entries) for w in WORDS}

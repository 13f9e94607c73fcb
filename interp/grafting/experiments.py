"""The paper's fine-tuning experiments on a pretrained model, each a function returning plain numbers.

    hop(model, facts, implications)        ranks of facts and implications before / after
                                           fine-tuning on the facts
    graft(model, n)                        weight grafting and its control (sets 1 and 2)
    layer_split(model, n)                  fine-tuning only the early layers or only the last
                                           quarter: first- and second-hop generalization
    layer_restriction(model, deltas)       the same question asked of full fine-tuning deltas
                                           restricted afterwards (no training: the paper's
                                           "post-freeze" variant in layer_freezing.py)

Every fine-tune goes through `finetune` with a checkpoint in `workdir` (when given), so a rerun or
a killed run picks up the deltas already learned.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from interp.errors import InterpError
from interp.grafting.delta import Delta, finetune, parameters
from interp.grafting.facts import (
    Facts,
    assignments,
    check_unknown,
    first_hop,
    mean_rank,
    second_hop,
)
from interp.memory import records_peak

__all__ = ["early_late", "graft", "hop", "layer_restriction", "layer_split", "ranks_under"]


def ranks_under(model, sets: dict[str, Facts], delta: Delta | None) -> dict[str, float]:
    """Mean rank of each fact set under `delta` (None: the base model)."""
    iv = [delta.intervention(model)] if delta is not None else []
    return {k: mean_rank(model, f, iv) for k, f in sets.items()}


def _ckpt(workdir: str | Path | None, name: str) -> Path | None:
    return None if workdir is None else Path(workdir) / f"{name}.safetensors"


def hop(model, facts: Facts, implications: Facts, *, workdir=None, tag: str = "hop", progress: bool = True,
        **train: Any) -> tuple[dict[str, Any], Delta]:
    """Fine-tune on `facts` only; the ranks of facts and implications before and after.
    InterpError when the facts' entities are already known (rank before far below chance)."""
    check_unknown(model, facts)
    before = ranks_under(model, {"facts": facts, "implications": implications}, None)
    delta = finetune(model, facts, checkpoint=_ckpt(workdir, tag), progress=progress, **train)
    after = ranks_under(model, {"facts": facts, "implications": implications}, delta)
    out = {k: {"rank_before": before[k], "rank_after": after[k], "chance": f.chance, "n": len(f)}
           for k, f in (("facts", facts), ("implications", implications))}
    return out, delta


@records_peak
def graft(model, n: int = 20, *, assignment_seed: int = 0, relation: str = "lives_in", workdir=None, progress: bool = True,
          **train: Any) -> dict[str, Any]:
    """Weight grafting on first-hop facts of `relation` (RELATIONS; the paper grafts on invented
    relations, "dax"): Δ facts(1); Δ implications(1) learned on top of it; Δ facts(2) for the
    counterfactual assignment; the control Δ implications(1) learned from the base model.
    graft = base + Δ facts(2) + Δ impl|facts(1), control = base + Δ facts(2) + Δ impl (control),
    both ranked on the set-2 implications, beside base + Δ facts(2) alone: the graft shows a
    transferred structure only if it beats both."""
    one, two = assignments(n, assignment_seed)
    f1, i1 = first_hop(model, n, assignment=one, relation=relation)
    f2, i2 = first_hop(model, n, assignment=two, relation=relation)
    # for "lives_in" the same run as hop() on the first-hop facts of set 1, so one checkpoint file serves both
    tag = "" if relation == "lives_in" else f"{relation}_"
    d_f1 = finetune(model, f1, checkpoint=_ckpt(workdir, "first_hop" if not tag else f"{tag}graft_facts1"), progress=progress, **train)
    d_i1 = finetune(model, i1, base=d_f1, checkpoint=_ckpt(workdir, f"{tag}graft_impl_after_facts1"), progress=progress, **train)
    d_f2 = finetune(model, f2, checkpoint=_ckpt(workdir, f"{tag}graft_facts2"), progress=progress, **train)
    d_ctl = finetune(model, i1, checkpoint=_ckpt(workdir, f"{tag}graft_impl_control"), progress=progress, **train)
    sets = {"facts2": f2, "implications2": i2, "implications1": i1}
    grafted = ranks_under(model, sets, d_f2 + d_i1)
    control = ranks_under(model, sets, d_f2 + d_ctl)
    facts_only = ranks_under(model, sets, d_f2)
    base = ranks_under(model, sets, None)
    return {"relation": relation, "graft_rank": grafted["implications2"], "control_rank": control["implications2"],
            "facts2_only_rank": facts_only["implications2"], "base_rank": base["implications2"], "chance": i2.chance, "n": n,
            "graft_set1_rank": grafted["implications1"], "control_set1_rank": control["implications1"],
            "graft_facts2_rank": grafted["facts2"], "facts2_rank": facts_only["facts2"],
            "finetune_seconds": sum(d.provenance["seconds"] for d in (d_f1, d_i1, d_f2, d_ctl)),
            "steps": sum(len(d.provenance["losses"]) for d in (d_f1, d_i1, d_f2, d_ctl))}


def early_late(n_layers: int) -> dict[str, list[int]]:
    """The paper's split: the last quarter of the layers ("late_only", at least one) and the rest
    ("early_only")."""
    if n_layers < 2:
        raise InterpError(f"an early/late layer split needs at least 2 layers; the model has {n_layers}")
    late = list(range(n_layers - max(1, n_layers // 4), n_layers))
    return {"early_only": [l for l in range(n_layers) if l not in late], "late_only": late}


def layer_restriction(model, hops: dict[str, tuple[Facts, Facts, Delta]]) -> dict[str, Any]:
    """Each hop's full fine-tuning delta restricted to the early layers or to the last quarter;
    fact and implication ranks (`hops`: {"first_hop": (facts, implications, delta), ...})."""
    out: dict[str, Any] = {}
    for name, layers in early_late(model.cfg.n_layers).items():
        row: dict[str, Any] = {"layers": [layers[0], layers[-1]]}
        for h, (facts, impl, delta) in hops.items():
            r = ranks_under(model, {"facts": facts, "implications": impl}, delta.restrict(layers=layers))
            row[h] = {"facts_rank": r["facts"], "implications_rank": r["implications"], "chance": impl.chance}
        out[name] = row
    return out


def layer_split(model, n: int = 20, *, assignment_seed: int = 0, workdir=None, progress: bool = True, **train: Any) -> dict[str, Any]:
    """Fine-tune facts with only the early layers free (all but the last quarter) or only the last
    quarter; first-hop and second-hop implication ranks (and fact ranks) for each."""
    one, _ = assignments(n, assignment_seed)
    split = early_late(model.cfg.n_layers)
    early, late = split["early_only"], split["late_only"]
    hops = {"first_hop": first_hop(model, n, assignment=one), "second_hop": second_hop(model, n, assignment=one)}
    out: dict[str, Any] = {}
    for name, layers in (("late_only", late), ("early_only", early)):
        row: dict[str, Any] = {"layers": [layers[0], layers[-1]]}
        for h, (facts, impl) in hops.items():
            d = finetune(model, facts, params=parameters(model, layers), checkpoint=_ckpt(workdir, f"{name}_{h}"),
                         progress=progress, **train)
            r = ranks_under(model, {"facts": facts, "implications": impl}, d)
            row[h] = {"facts_rank": r["facts"], "implications_rank": r["implications"], "chance": impl.chance}
        out[name] = row
    return out

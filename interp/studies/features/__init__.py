"""The dictionaries' docs (interp.features), each bound to the JSON beside it (interp.studies.docs:
every number names its JSON key) and registered in one line, `bound_doc(NAME, regions)`:
docs/features.md from `python -m interp.features.suite score` (its regions here), dictionary_truth.md
(`truth`) and features_budget.md (`budget`).

    interp doc features --json docs/features.json --doc docs/features.md
"""

from __future__ import annotations

from interp.studies.docs import Render
from interp.studies.features import budget, truth
from interp.studies.protocol import bound_doc

__all__ = ["bodies"]

_HEAD = ("| layer | kind | FVE | FVE dense control | L0 | dead | CE clean | CE spliced | CE zero-abl. | CE mean-abl. "
         "| CE recovered (zero) | CE recovered (mean) |\n|---|---|---|---|---|---|---|---|---|---|---|---|")


def _table(r: Render, name: str, data: dict) -> str:
    rows = [_HEAD]
    for i, d in enumerate(data[name]["dictionaries"]):
        p = f"/{name}/dictionaries/{i}"
        rows.append(f"| {r.int(p + '/layer')} | {d['kind']} | {r.num(p + '/fve')} | {r.num(p + '/fve_control')} | "
                    f"{r.num(p + '/l0')} | {r.pct(p + '/dead')} | {r.num(p + '/ce_clean')} | {r.num(p + '/ce_spliced')} | "
                    f"{r.num(p + '/ce_zero')} | {r.num(p + '/ce_mean')} | {r.num(p + '/ce_recovered')} | "
                    f"{r.num(p + '/ce_recovered_mean')} |")
    return r.region("\n".join(rows))


def _summary(r: Render, name: str) -> str:
    t, tr = f"/{name}/transcoders", f"/{name}/trained"
    return r.region(
        f"Trained on {r.int(tr + '/tokens')} tokens ({r.int(tr + '/steps')} steps, {r.num(tr + '/seconds')} s, of which "
        f"{r.num(tr + '/forward_seconds')} s in the model's forwards); scored on {r.int(f'/{name}/held_out_tokens')} held-out "
        f"tokens. Over its {r.int(t + '/count')} transcoders: mean FVE {r.num(t + '/fve_mean')} against "
        f"{r.num(t + '/fve_control_mean')} for the best affine map fitted on other tokens (the transcoder is ahead at "
        f"{r.int(t + '/beat_control')} layers), mean CE recovered {r.num(t + '/ce_recovered_mean')} "
        f"(lowest {r.num(t + '/ce_recovered_min')}), mean L0 {r.num(t + '/l0_mean')}, mean dead fraction "
        f"{r.pct(t + '/dead_mean')}.")


def bodies(data: dict) -> dict[str, str]:
    r = Render(data)
    out = {}
    for name in ("zoo", "smollm2"):
        if name in data:
            out[f"{name}-summary"] = _summary(r, name)
            out[f"{name}-table"] = _table(r, name, data)
    return out


bound_doc("features", bodies)
bound_doc("dictionary-truth", truth.regions)
bound_doc("features-budget", budget.bodies)

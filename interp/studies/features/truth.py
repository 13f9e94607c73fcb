"""docs/dictionary_truth.md's generated regions, rendered from docs/dictionary_truth.json (written by
`python -m interp.features.truth --budget full --json docs/dictionary_truth.json`); every number
names its JSON key (interp.studies.docs). Registered as a bound doc, `bound_doc("dictionary-truth",
regions)`, it is refilled by `interp doc dictionary-truth`.
"""

from __future__ import annotations

from interp.studies.docs import Render

__all__ = ["regions"]


def _iv(r: Render, ptr: str) -> str:
    return f"{r.num(ptr + '/mean')} [{r.num(ptr + '/lo')}, {r.num(ptr + '/hi')}]"


def _table(r: Render, data: dict, case: str) -> str:
    p = f"/results/{case}"
    rows = ["| architecture | mean max cosine [interval] | MCC [interval] | rows mixing two | FVE held out | L0 held out "
            "| coefficient per seed |", "|---|---|---|---|---|---|---|"]
    for arch in data["budget"]["architectures"]:
        a = f"{p}/{arch}"
        coef = data["results"][case][arch]["coefficient"]
        shown = ", ".join(r.num(f"{a}/coefficient/{i}") for i in range(len(coef))) if coef[0] is not None else "(k)"
        rows.append(f"| {arch} | {_iv(r, a + '/mmc')} | {_iv(r, a + '/mcc')} | {r.pct(a + '/combined/mean')} | {r.num(a + '/fve/mean')} | "
                    f"{r.num(a + '/l0/mean')} | {shown} |")
    rows.append(f"| random rows (control) | {_iv(r, p + '/random/mmc')} | {_iv(r, p + '/random/mcc')} | "
                f"{r.pct(p + '/random/combined/mean')} | | | |")
    c = f"{p}/case"
    head = (f"d {r.int(c + '/d')}, {r.int(c + '/true_directions')} true directions, true L0 {r.int(c + '/true_l0')}, "
            f"k {r.int(c + '/k')}, {r.int(c + '/n_features')} dictionary features.")
    return r.region(head + "\n\n" + "\n".join(rows))


def _choice(r: Render, data: dict) -> str:
    overall = data["choice"]["mcc_over_cases"]
    ranked = sorted(overall, key=overall.get, reverse=True)
    listed = ", ".join(f"{a} {r.num('/choice/mcc_over_cases/' + a)}" for a in ranked)
    return r.region(f"MCC averaged over the cases, best first: {listed}. The suite's choice: **{data['choice']['best']}**.")


def _budget(r: Render, data: dict) -> str:
    b, pv = "/budget", "/provenance"
    return r.region(
        f"Each case at d {r.int(b + '/d')}, trained on {r.int(b + '/tokens')} tokens in batches of {r.int(b + '/batch')} "
        f"(lr {r.num(b + '/lr')}), scored on {r.int(b + '/held_out')} fresh draws, {r.int(b + '/seeds')} seeds; intervals "
        f"are `95 %` t-intervals over the seeds. Run in {r.num(pv + '/wall_seconds')} s at commit "
        f"`{data['provenance']['commit']}` (`{data['provenance']['machine']}`).")


def regions(data: dict) -> dict[str, str]:
    r = Render(data)
    out = {"choice": _choice(r, data), "budget": _budget(r, data)}
    for case in data["results"]:
        out[f"table-{case}"] = _table(r, data, case)
    return out


"""docs/grokking.md's generated regions, rendered from one `interp repro grokking` JSON: every number
through `interp.studies.docs.Render`, so each names its JSON key (tests/test_docs.py checks them)."""

from __future__ import annotations

from typing import Any

from interp.studies.docs import Render, pointer

__all__ = ["regions"]


def _run(r: Render, d: dict) -> str:
    prov, b = d["provenance"], d["budget"]
    v = "/budget/values"
    widths = ", ".join(r.int(f"{v}/widths/{i}") for i in range(len(b["values"]["widths"])))
    seeds = ", ".join(r.int(f"{v}/seeds/{i}") for i in range(len(b["values"]["seeds"])))
    units = "; ".join(f"`{k}` {r.num(pointer('provenance', 'units_s', k))} s" for k in prov.get("units_s", {})
                      if prov["units_s"][k] is not None)
    return r.region(
        f"Budget `{b['name']}`: p = {r.int(v + '/p')}, training fraction {r.num(v + '/train_frac')}, widths {widths} "
        f"(one layer, four heads, MLP four times as wide), {r.int('/claims/runs')} runs (seeds {seeds} at each width), "
        f"{r.int(v + '/steps')} full-batch AdamW steps (lr {r.num(v + '/lr')}, weight decay {r.num(v + '/weight_decay')}), "
        f"evaluated every {r.int(v + '/eval_every')} steps; {r.int(v + '/draws')} random subspaces per core, "
        f"{r.int(v + '/perms')} shuffles, {r.int(v + '/boot')} bootstrap resamples; {r.int('/budget/units_done')} of "
        f"{r.int('/budget/units_total')} units. Run `{prov['date']}` in {r.num('/provenance/wall_s')} s of wall time "
        f"({r.int('/provenance/units_run')} units computed by this run, the rest read back), on `{prov['machine']['cpu']}` "
        f"with {r.int('/provenance/machine/torch_threads')} torch threads, commit `{prov['commit']}`. Each unit's compute "
        f"(training and its three cores) when it ran: {units}.")


def _runs(r: Render, d: dict) -> str:
    out = ["| width | seed | memorized (`train ≥ 0.9`) | grokked (`test ≥ 0.9`) | k before / at / after | concentration before "
           "grokking: core vs random mean | concentration at grokking: core vs random mean [min, max] | top frequencies at "
           "grokking |", "|---|---|---|---|---|---|---|---|"]
    for i, run in enumerate(d["runs"]):
        base = pointer("runs", i)
        mem = "—" if run["memorized_step"] is None else r.int(base + "/memorized_step")
        grok = "not by the last step" if run["grok_step"] is None else r.int(base + "/grok_step")
        ks = " / ".join(r.int(f"{base}/checkpoints/{c}/k") for c in ("before", "at", "after"))
        at = f"{base}/checkpoints/at"
        conc = (f"{r.num(at + '/concentration')} vs {r.num(at + '/random_mean')} [{r.num(at + '/random_range/0')}, "
                f"{r.num(at + '/random_range/1')}]")
        pre = f"{r.num(base + '/checkpoints/before/concentration')} vs {r.num(base + '/checkpoints/before/random_mean')}"
        top = ", ".join(f"`{f}`" for f in run["checkpoints"]["at"]["top_frequencies"])
        out.append(f"| {r.int(base + '/width')} | {r.int(base + '/seed')} | {mem} | {grok} | {ks} | {pre} | {conc} | {top} |")
    return r.region("\n".join(out))


def _judged(r: Render, base: str, j: dict, what: str) -> str:
    if j["word"] == "not run":
        return f"| {j['claim_text']} | not run | — | {r.text(base + '/word')} |"
    if "diff_ci" in j:
        ci = f"difference [{r.num(base + '/diff_ci/0')}, {r.num(base + '/diff_ci/1')}]"
    else:
        ci = f"null interval [{r.num(base + '/control_ci/0')}, {r.num(base + '/control_ci/1')}]"
    return (f"| {j['claim_text']} | {what}: {r.num(base + '/effect')} vs {r.num(base + '/control')}, {ci}; smallest "
            f"margin it could detect {r.num(base + '/mde')} | `{j['null']}` | {r.text(base + '/word')} |")


def _claims(r: Render, d: dict) -> str:
    c = d["claims"]
    out = ["| claim (paper's id) | measured: effect vs control, interval | null | verdict |", "|---|---|---|---|"]
    rows = (("cyclic_at_grokking", "mean concentration, core vs random subspaces"),
            ("inflation", "mean k after vs at grokking"), ("inverse_scaling", "Spearman's rho vs shuffles' mean"))
    for key, what in rows:
        out.append(_judged(r, pointer("claims", key), c[key], what))
    lines = ["\n".join(out), ""]
    if c["runs_grokked"] >= 2:
        inv = "/claims/inverse_scaling"
        lines.append(
            f"{r.int('/claims/runs_grokked')} of {r.int('/claims/runs')} runs grokked. The core beat every one of its "
            f"random subspaces in {r.int('/claims/cyclic_at_grokking/runs_above_every_draw')} runs; k grew after grokking "
            f"in {r.int('/claims/inflation/runs_inflated')}. Spearman's rho across runs {r.num(inv + '/effect')} (bootstrap "
            f"over runs [{r.num(inv + '/rho_bootstrap_ci/0')}, {r.num(inv + '/rho_bootstrap_ci/1')}]); within widths "
            f"(shuffled only among runs of one width, so width itself cannot make it) {r.num(inv + '/within_width/rho')} "
            f"against a null interval [{r.num(inv + '/within_width/null_ci/0')}, {r.num(inv + '/within_width/null_ci/1')}]; "
            f"log grokking step on log k: slope {r.num(inv + '/loglog_slope')} [{r.num(inv + '/loglog_slope_ci/0')}, "
            f"{r.num(inv + '/loglog_slope_ci/1')}].")
    return r.region("\n".join(lines).rstrip())


def _widths(r: Render, d: dict) -> str:
    out = ["| width | runs | grokked | mean grokking step | mean k before / at / after |", "|---|---|---|---|---|"]
    for w, row in d["per_width"].items():
        base = pointer("per_width", w)
        if not row["grokked"]:
            out.append(f"| `{w}` | {r.int(base + '/runs')} | {r.int(base + '/grokked')} | — | — |")
            continue
        ks = " / ".join(r.num(f"{base}/k_{c}_mean") for c in ("before", "at", "after"))
        out.append(f"| `{w}` | {r.int(base + '/runs')} | {r.int(base + '/grokked')} | {r.num(base + '/grok_step_mean')} | {ks} |")
    return r.region("\n".join(out))


def regions(result: dict[str, Any]) -> dict[str, str]:
    r = Render(result)
    """The study's own regions; the claims list and the departures are every doc's (docs.common_regions)."""
    return {"run": _run(r, result), "claims": _claims(r, result),
            "widths": _widths(r, result), "runs": _runs(r, result)}

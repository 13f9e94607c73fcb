"""docs/circuits.md's generated regions, rendered from one `interp repro circuits` JSON (the study's
code is interp.studies.circuits; `interp doc circuits` writes them)."""

from __future__ import annotations

from typing import Any

from interp.circuits.mib import MIB_FRACTIONS, areas

__all__ = ["COMMAND", "RENDER", "regions"]

COMMAND = "interp repro circuits --budget {name} --out docs/circuits_repro.json"
RENDER = "interp doc circuits --json docs/circuits_repro.json --doc docs/circuits.md"


def _run_region(r, d: dict[str, Any]) -> str:
    b, prov = d["budget"], d["provenance"]
    v = lambda k: r.num(f"/budget/values/{k}")  # noqa: E731
    real = [m for m in b["values"]["models"] if not m.startswith("zoo:")]
    lines = [f"The committed numbers: budget `{b['name']}`, made by `{COMMAND.format(name=b['name'])}` then `{RENDER}`; "
             f"{r.num('/budget/paper_fraction')} of this study's `paper` budget (its full scale: every model, every zoo "
             f"edge exact), {r.int('/budget/units_done')} of {r.int('/budget/units_total')} model units. The budget: "
             f"{v('n_zoo')} IOI prompts per zoo model and {v('n_real')} per real model, EAP-IG with {v('steps')} steps, "
             f"{v('exact_real')} edges patched exactly on real models for the correlations (a random sample spread evenly "
             f"over the quantiles of |EAP-IG score|) and the EAP-IG top "
             f"{r.pct('/budget/values/exact_pool')} of their edges for their exact circuits, {v('random')} random rankings "
             f"on zoo models and " + (v('random_real') if "random_real" in b["values"] else v('random')) + " on real models "
             f"as the control of every circuit score, a head mask learned for {v('mask_steps')} steps on each zoo model. "
             f"Run `{prov['date']}` in {r.num('/provenance/wall_s')} s ({r.int('/provenance/units_run')} units computed by "
             f"this run) on `{prov['machine']['cpu']}`, {r.int('/provenance/machine/cpus')} CPUs shared with other jobs, "
             f"{r.int('/provenance/machine/torch_threads')} torch threads, commit `{prov['commit']}`. Per model unit: "
             + "; ".join(f"`{k}` {r.num(f'/provenance/units_s/{k}')} s" for k in prov["units_s"]) + "."]
    if not real:
        lines.append(f"The `paper` budget: `{COMMAND.format(name='paper')}` (resumable; it adds `smollm2-135m`). This run did "
                     "not measure it, so no time is claimed for it.")
    gpu = d["provenance"].get("gpu_estimate") or {}
    if gpu:
        from interp.studies.docs import pointer
        from interp.studies.gpu_estimate import bound_words

        g = lambda spec, *k: r.num(pointer("provenance", "gpu_estimate", spec, *k))  # noqa: E731
        first = next(iter(gpu))
        lines.append("*On one GPU, an estimate, not a measurement* (not timed on a GPU; `interp.studies.gpu_estimate`): each model "
                     "unit's seconds scaled by one forward of its prompts timed here against that forward's GPU bound, "
                     f"{bound_words(lambda *k: g(first, 'calibration', *k), gpu[first]['calibration'])}: "
                     + "; ".join(f"`{k}` forward {g(k, 'cpu_forward_s')} s here, {g(k, 'gpu_forward_s', 0)}–{g(k, 'gpu_forward_s', 1)} s "
                                 f"on a GPU, the unit {g(k, 'unit_seconds_estimate', 0)}–{g(k, 'unit_seconds_estimate', 1)} s" for k in gpu)
                     + ".")
    return r.region("\n\n".join(lines))


def _mib_region(r, ok: dict[str, Any], key: str, names: tuple[str, ...]) -> str:
    """Per model and ranking: CPR, CMD, the last fraction measured; random as mean [min, max] of its draws."""
    from interp.studies.docs import pointer

    lines = ["| model | ranking | CPR (higher is better) | CMD (lower is better) | scored up to (fraction of the model's edges) |",
             "|---|---|---|---|---|"]
    for spec, m in ok.items():
        if key not in m:
            continue
        base = pointer("models", spec, key)
        for name in names:
            S = f"{base}/series/{name}"
            if name == "random":
                rng = lambda k: f"{r.num(S + '/' + k)} [{r.num(f'{base}/random/{k}_range/0')} … {r.num(f'{base}/random/{k}_range/1')}]"  # noqa: E731
                lines.append(f"| `{spec}` | random (mean [min … max] of {r.int(base + '/random/draws')} draws) | "
                             f"{rng('cpr')} | {rng('cmd')} | {r.pct(S + '/upto')} |")
            else:
                lines.append(f"| `{spec}` | {name} | {r.num(S + '/cpr')} | {r.num(S + '/cmd')} | {r.pct(S + '/upto')} |")
    return r.region("\n".join(lines))


def _curves_region(r, ok: dict[str, Any]) -> str:
    """f of the signed-order circuits at each of MIB's fractions (– where a ranking has no circuit that large)."""
    from interp.studies.docs import pointer

    head = "| model | ranking | " + " | ".join(f"`{100 * p:g} %`" for p in MIB_FRACTIONS) + " |"
    lines = [head, "|---|---|" + "---|" * len(MIB_FRACTIONS)]
    for spec, m in ok.items():
        for name in ("eap", "eap-ig", "exact", "random"):
            S = pointer("models", spec, "mib", "series", name, "signed")
            cells = ["–" if x is None else r.num(f"{S}/{i}") for i, x in enumerate(m["mib"]["series"][name]["signed"])]
            lines.append(f"| `{spec}` | {name} | " + " | ".join(cells) + " |")
    return r.region("\n".join(lines))


def _common_region(r, ok: dict[str, Any]) -> str:
    """Where a ranking stops early (SmolLM2's exact pool): every ranking's areas over the fractions all reach."""
    from interp.studies.docs import pointer

    lines = ["| model | areas over the fractions up to | ranking | CPR over them | CMD over them |", "|---|---|---|---|---|"]
    for spec, m in ok.items():
        c = m["mib"]["common"]
        if c["upto"] is None or c["upto"] >= 1:
            continue
        base = pointer("models", spec, "mib", "common")
        for name in c["cpr"]:
            lines.append(f"| `{spec}` | {r.pct(base + '/upto')} | {name} | {r.num(f'{base}/cpr/{name}')} | "
                         f"{r.num(f'{base}/cmd/{name}')} |")
    if len(lines) == 2:
        lines.append("| every model | 100 % | (every ranking reaches every fraction) | | |")
    return r.region("\n".join(lines))


def _mask_region(r, ok: dict[str, Any]) -> str:
    from interp.studies.docs import pointer

    lines = ["| model | mask steps | heads kept at the target | final KL | ranking | CPR | CMD |", "|---|---|---|---|---|---|---|"]
    for spec, m in ok.items():
        if "mask" not in m:
            continue
        base = pointer("models", spec, "mask")
        for name in m["mask"]["series"]:
            S = f"{base}/series/{name}"
            lines.append(f"| `{spec}` | {r.int(base + '/steps')} | {r.int(base + '/kept_heads')} | {r.num(base + '/final_kl')} | "
                         f"{name} | {r.num(S + '/cpr')} | {r.num(S + '/cmd')} |")
    return r.region("\n".join(lines))


def regions(result: dict[str, Any]) -> dict[str, str]:
    """The doc's generated regions, every number read from `result` through interp.studies.docs.Render."""
    from interp.studies.docs import Render, pointer

    r = Render(result)
    run = _run_region(r, result)  # each region closes (r.region) before the next one's numbers are made
    ok = {k: v for k, v in result["models"].items() if "refused" not in v}
    P = lambda spec, *k: pointer("models", spec, *k)  # noqa: E731
    lines = ["| model | layers × heads (KV) | n | clean | corrupt | edges | exact edges | EAP r / ρ | EAP-IG r / ρ |",
             "|---|---|---|---|---|---|---|---|---|"]
    for spec, m in ok.items():
        c = lambda meth, k: r.num(P(spec, "correlation", meth, k))  # noqa: E731
        lines.append(f"| `{spec}` | {r.int(P(spec, 'n_layers'))} × {r.int(P(spec, 'n_heads'))} ({r.int(P(spec, 'n_kv_heads'))}) | "
                     f"{r.int(P(spec, 'n'))} | {r.num(P(spec, 'clean_metric'))} | {r.num(P(spec, 'corrupt_metric'))} | "
                     f"{r.int(P(spec, 'edges'))} | {r.int(P(spec, 'exact_edges'))} | {c('eap', 'pearson')} / {c('eap', 'spearman')} | "
                     f"{c('eap_ig', 'pearson')} / {c('eap_ig', 'spearman')} |")
    tables = r.region("\n".join(lines))
    mib = _mib_region(r, ok, "mib", ("eap", "eap-ig", "exact", "random"))
    curves = _curves_region(r, ok)
    common = _common_region(r, ok)
    masks = _mask_region(r, ok)
    lines = ["| model | EAP s | EAP-IG s | exact s | one forward + backward s |", "|---|---|---|---|---|"]
    for spec in ok:
        t = lambda k: r.num(P(spec, "seconds", k))  # noqa: E731
        lines.append(f"| `{spec}` | {t('eap')} | {t('eap_ig')} | {t('exact')} | {t('forward_backward')} |")
    timing = r.region("\n".join(lines))
    heads = []
    for spec, m in ok.items():
        heads += ["", f"Top heads of `{spec}` (EAP-IG, summed |edge score|):", "",
                  "| head | score | END→IO | END→S1 | END→S2 | duplicate | induction | previous | roles |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for i, h in enumerate(m["top_heads"]):
            v = lambda k: r.num(P(spec, "top_heads", i, k))  # noqa: E731
            heads.append(f"| `{h['head']}` | {v('score')} | {v('end_to_io')} | {v('end_to_s1')} | {v('end_to_s2')} | "
                         f"{v('duplicate')} | {v('induction')} | {v('previous')} | {', '.join(h['roles']) or '–'} |")
    for spec, m in result["models"].items():
        if "refused" in m:
            heads += ["", f"`{spec}`: refused — {m['refused']}"]
    heads = r.region("\n".join(heads).strip())
    lines = ["| model | claim | EAP-IG ρ | EAP ρ | difference [bootstrap interval] | verdict |", "|---|---|---|---|---|---|"]
    for spec, v in result["verdicts"].items():
        base, g = pointer("verdicts", spec), P(spec, "spearman_gap")
        lines.append(f"| `{spec}` | {r.text(base + '/claim_text')} | {r.num(base + '/effect')} | {r.num(base + '/control')} | "
                     f"{r.num(g + '/gap', signed=True)} [{r.num(base + '/diff_ci/0', signed=True)}, "
                     f"{r.num(base + '/diff_ci/1', signed=True)}] | {r.text(base + '/word')} |")
    verdicts = r.region("\n".join(lines))
    lines = ["| model | claim | EAP-IG CPR | random CPR (mean) | random draws' range | verdict |", "|---|---|---|---|---|---|"]
    for spec in result.get("mib_verdicts", {}):
        base = pointer("mib_verdicts", spec)
        lines.append(f"| `{spec}` | {r.text(base + '/claim_text')} | {r.num(base + '/effect')} | {r.num(base + '/control')} | "
                     f"[{r.num(base + '/control_ci/0')}, {r.num(base + '/control_ci/1')}] | {r.text(base + '/word')} |")
    mib_verdicts = r.region("\n".join(lines))
    return {"run": run, "tables": tables, "mib": mib, "curves": curves, "common": common, "masks": masks,
            "timing": timing, "heads": heads, "verdicts": verdicts, "mib_verdicts": mib_verdicts}

"""docs/features_budget.md's generated regions, rendered from docs/features_budget.json (written by
`python -m interp.features.suite curve smollm2-english ...`): SmolLM2-135M transcoders of 16,384
features on the english text, their quality by tokens seen beside the same-L0 random control, the
gap to the full budget's targets, and the throughput that prices it.

    interp doc features-budget --json docs/features_budget.json --doc docs/features_budget.md
"""

from __future__ import annotations

from interp.studies.docs import Render

__all__ = ["bodies"]


def _run(r: Render, data: dict) -> str:
    b, t = "/budget", "/trained"
    layers = ", ".join(r.int(f"{b}/layers/{i}") for i in range(len(data["budget"]["layers"])))
    return r.region(
        f"Transcoders of {r.int(b + '/n_features')} features (BatchTopK, `k` {r.int(b + '/k')}"
        + (f", AuxK {r.text(b + '/aux_values')}" if "aux_values" in data["budget"] else "") + ", learning rate "
        f"{r.num(b + '/lr')}, {r.int(b + '/rows')} rows of {r.int(b + '/n_ctx')} tokens a step) at layers {layers} of "
        f"SmolLM2-135M, all from the same forwards, trained on {r.int(t + '/tokens')} tokens of the english text "
        f"(of its {r.int(b + '/text_tokens')}) "
        f"({r.int(t + '/steps')} steps, {r.num(t + '/seconds')} s of wall time on the shared machine, "
        f"{r.num(t + '/forward_seconds')} s of it in the model's forwards); scored on {r.int('/held_out_tokens')} "
        f"held-out tokens (the text's last {r.int(b + '/eval_rows')} rows), the controls fitted on its first "
        f"{r.int(b + '/fit_rows')} rows.")


def _corpus(r: Render, data: dict) -> str:
    if "packages" not in data["budget"]["source"]:
        return r.region(f"Text: the `{data['budget']['source']['source']}` source (no packages).")
    rows = ["| package | licence | bytes kept |", "|---|---|---|"]
    for name, info in data["budget"]["source"]["packages"].items():
        p = "/budget/source/packages/" + name.replace("~", "~0").replace("/", "~1")
        rows.append(f"| `{name}` | `{info['licence']}` | {r.int(p + '/bytes')} |")
    rows.append(f"| all, after interleaving | | {r.int('/budget/source/bytes')} |")
    return r.region("\n".join(rows))


def _final(r: Render, data: dict) -> str:
    rows = ["| layer | tokens | FVE | FVE random | FVE affine | L0 | dead | CE clean | CE spliced | CE random | CE zero "
            "| CE recovered | CE recovered, random | FVE - random [`95 %` interval] |", "|---" * 14 + "|"]
    for i, _ in enumerate(data["final"]):
        p, q = f"/final/{i}", f"/beyond_random/{i}"
        rows.append(f"| {r.int(p + '/layer')} | {r.int(p + '/tokens')} | {r.num(p + '/fve')} | {r.num(p + '/fve_random')} | "
                    f"{r.num(p + '/fve_control')} | {r.num(p + '/l0')} | {r.pct(p + '/dead')} | {r.num(p + '/ce_clean')} | "
                    f"{r.num(p + '/ce_spliced')} | {r.num(p + '/ce_random')} | {r.num(p + '/ce_zero')} | "
                    f"{r.num(p + '/ce_recovered')} | {r.num(p + '/ce_recovered_random')} | "
                    f"{r.num(q + '/fve_minus_random')} [{r.num(q + '/ci95/0')}, {r.num(q + '/ci95/1')}] |")
    return r.region("\n".join(rows))


def _curve(r: Render, data: dict) -> str:
    rows = ["| tokens seen | layer | FVE | FVE random | L0 | dead |", "|---|---|---|---|---|---|"]
    for i, _ in enumerate(data["curve"]):
        p = f"/curve/{i}"
        rows.append(f"| {r.int(p + '/tokens')} | {r.int(p + '/layer')} | {r.num(p + '/fve')} | {r.num(p + '/fve_random')} | "
                    f"{r.num(p + '/l0')} | {r.pct(p + '/dead')} |")
    return r.region("\n".join(rows))


def _gap(r: Render, data: dict) -> str:
    fve, dead = data["budget"]["targets"]["fve"], data["budget"]["targets"]["dead"]
    met = [i for i, row in enumerate(data["final"]) if row["fve"] >= fve and row["dead"] <= dead]
    lines = [f"Targets of the full budget: FVE at least {r.num('/budget/targets/fve')} and at most "
             f"{r.pct('/budget/targets/dead')} dead features at every layer. After {r.int('/trained/tokens')} tokens, "
             f"{r.int('/gap/met')} of the {r.int('/gap/layers')} layers trained meet both:"]
    for i, row in enumerate(data["final"]):
        p = f"/final/{i}"
        word = "meets both" if i in met else "short"
        lines.append(f"- layer {r.int(p + '/layer')}: FVE {r.num(p + '/fve')}, dead {r.pct(p + '/dead')}: {word}")
    return r.region("\n".join(lines))


def _throughput(r: Render, data: dict) -> str:
    t, f = "/throughput", "/throughput/full_budget"
    rows = ["| measured (CPU seconds of one thread) | value |", "|---|---|",
            f"| fp32 matmul `[1024, 1024] x [1024, 4096]`, GFLOP/s | {r.num(t + '/matmul_gflops')} |",
            f"| SmolLM2-135M forward (every layer's transcoder sites), tokens/s | {r.num(t + '/forward_tokens_per_s')} |",
            f"| one transcoder's training step, {r.int(t + '/n_features')} features, tokens/s | "
            f"{r.num(t + '/dictionary_tokens_per_s')} |",
            f"| FLOPs a token: forward / one transcoder step | {r.int(t + '/flops_per_token/forward')} / "
            f"{r.int(t + '/flops_per_token/dictionary')} |",
            f"| achieved GFLOP/s: forward / transcoder step | {r.num(t + '/achieved_gflops/forward')} / "
            f"{r.num(t + '/achieved_gflops/dictionary')} |"]
    for i, _ in enumerate(data["throughput"]["layers"]):
        p = f"{t}/layers/{i}"
        rows.append(f"| {r.int(p + '/layers')} layers from one forward: tokens/s measured, limit (FLOPs / matmul rate) | "
                    f"{r.num(p + '/tokens_per_s')}, {r.num(p + '/limit_tokens_per_s')} |")
    rows += [f"| full budget: {r.int(f + '/tokens')} tokens, {r.int(f + '/layers')} layers, at the measured rate, "
             f"CPU-days | {r.num(f + '/cpu_days_at_measured_rate')} |",
             f"| full budget on one GPU at {r.num(f + '/gpu_tflops_assumed')} TFLOP/s (a FLOP bound, not measured), "
             f"hours | {r.num(f + '/gpu_hours_flop_bound')} |"]
    return r.region("\n".join(rows))


def _auxk(r: Render, data: dict) -> str:
    a = "/auxk"
    rows = ["| layer | seed | FVE, relu | FVE, signed | dead, relu | dead, signed | dead: signed - relu |",
            "|---|---|---|---|---|---|---|"]
    for i, _ in enumerate(data["auxk"]["runs"]):
        p = f"{a}/runs/{i}"
        rows.append(f"| {r.int(p + '/layer')} | {r.int(p + '/seed')} | {r.num(p + '/relu/fve')} | {r.num(p + '/signed/fve')} | "
                    f"{r.pct(p + '/relu/dead')} | {r.pct(p + '/signed/dead')} | {r.pct(p + '/signed_minus_relu/dead')} |")
    head = (f"{r.int(a + '/steps')} steps of {r.int(a + '/batch')} tokens drawn from {r.int(a + '/train_tokens')} cached "
            f"training tokens; scored on {r.int(a + '/held_out_tokens')} held-out tokens.")
    return r.region(head + "\n\n" + "\n".join(rows))


def bodies(data: dict) -> dict[str, str]:
    r = Render(data)
    return {"budget-run": _run(r, data), "budget-corpus": _corpus(r, data), "budget-final": _final(r, data),
            "budget-gap": _gap(r, data), "budget-curve": _curve(r, data), "budget-throughput": _throughput(r, data),
            **({"budget-auxk": _auxk(r, data)} if "auxk" in data else {})}

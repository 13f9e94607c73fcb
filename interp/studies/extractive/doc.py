"""docs/extractive.md's generated regions, rendered from one `interp repro extractive` JSON.

    interp doc extractive --json docs/extractive_repro.json --doc docs/extractive.md

Every number goes through `interp.studies.docs.Render`, so each names its JSON key and
tests/test_docs.py checks it (and fails when the JSON changes and the doc does not). Labels with
digits (layer numbers, budget names, commands) are code spans.
"""

from __future__ import annotations

from typing import Any

from interp.studies.docs import Render, pointer

__all__ = ["regions"]

COMMAND = "interp repro extractive --budget {name} --units docs/extractive_units{extra} --out docs/extractive_repro.json"


def _command(d: dict) -> str:
    """The command that made this JSON: its budget, and every value it overrode."""
    from interp.studies.units import repro_command

    return repro_command("extractive", d["budget"], d["budgets"], units="docs/extractive_units", out="docs/extractive_repro.json")
RENDER = "interp doc extractive --json docs/extractive_repro.json --doc docs/extractive.md"


def _run(r: Render, d: dict) -> str:
    b, prov = d["budget"], d["provenance"]
    lines = [
        f"The committed numbers: budget `{b['name']}`, made by `{_command(d)}` then `{RENDER}`. "
        f"It is {r.num('/budget/paper_fraction')} of this study's `paper` budget (model-seeds × fine-tuning steps × "
        f"counterfactual people × ordering seeds; the paper itself fine-tuned 7B–9B models, far beyond either), "
        f"{r.int('/budget/units_done')} of {r.int('/budget/units_total')} units done. Run `{prov['date']}` in "
        f"{r.num('/provenance/wall_s')} s ({r.int('/provenance/units_run')} units computed by this run, the rest read back) "
        f"on `{prov['machine']['cpu']}`, {r.int('/provenance/machine/cpus')} CPUs shared with other jobs, "
        f"{r.int('/provenance/machine/torch_threads')} torch threads, commit `{prov['commit']}`. The units' own compute, as "
        f"stored when each ran (a rerun reads them back): {r.num('/units_s_total')} s in all; "
        + "; ".join(f"`{k}` {r.num(pointer('provenance', 'units_s', k))} s" for k in prov["units_s"]) + "."]
    t = d["timing"]
    for spec, row in t["models"].items():
        base = pointer("timing", "models", spec)
        line = (f"`{spec}`: a fine-tuning step took {r.num(base + '/s_per_step')} s here (measured over the "
                f"{r.int(base + '/steps')} steps of this budget's fine-tunes, as stored), so the `paper` budget's {r.int('/timing/paper_steps_per_model')} "
                f"steps per model take about {r.num(base + '/paper_cpu_h')} h on this CPU.")
        if "gpu_s_per_step_estimate" in row:
            from interp.studies.gpu_estimate import calibration_words

            line += (f" *GPU, an estimate (not timed on a GPU):* "
                     f"{r.int(pointer('timing', 'gpu_counts', 'ops_per_step', spec))} torch ops a step (counted here: forward, "
                     f"backward and Adam, which on this CPU updates each parameter with its own ops, so the count errs high) at "
                     f"{calibration_words(lambda *k: r.num(pointer('timing', 'calibration', *k)), t['calibration'])}, plus "
                     f"{r.int(base + '/trainable')} trainable floats touched {r.int('/timing/gpu_counts/touches_per_param')} times "
                     f"a step at {r.num('/timing/calibration/gb_per_s')} GB/s, give {r.num(base + '/gpu_s_per_step_estimate/0')}–"
                     f"{r.num(base + '/gpu_s_per_step_estimate/1')} s a step, about {r.num(base + '/paper_gpu_min_estimate/0')}–"
                     f"{r.num(base + '/paper_gpu_min_estimate/1')} min for the `paper` budget's fine-tunes of this model "
                     "(extractive scores and evaluation not counted).")
        lines.append(line)
    partial = {spec: m.get("incomplete_seeds") for spec, m in d["models"].items() if m.get("incomplete_seeds")}
    if partial:
        lines.append("Seeds left out of the numbers below because some of their units are not stored yet: "
                     + "; ".join(f"`{spec}` seeds {', '.join(f'`{x}`' for x in seeds)}" for spec, seeds in partial.items()) + ".")
    done = b["name"] == "paper" and b["units_done"] == b["units_total"]
    lines.append(f"The `paper` budget in full: `{COMMAND.format(name='paper', extra='')}` (resumable: rerun the same command "
                 "after a kill; it computes only the units missing from `docs/extractive_units`, whose results are committed). "
                 "It has Gemma-3 (`gemma3-270m`) beside SmolLM2, three seeds per model, a longer second-hop schedule, grafting "
                 "on the invented relation and the layer-frozen fine-tunes"
                 + ("." if done else "; the units above are what is stored of it so far (the hours above, per model, on this shared CPU)."))
    return r.region("\n\n".join(lines))


def _budgets(r: Render, d: dict) -> str:
    keys = ["seeds", "n", "epochs", "lr", "hop2_epochs", "hop2_lr", "counterfactuals", "relation", "layers", "ordering_seeds"]
    out = ["| budget | models | " + " | ".join(keys) + " |", "|---|---|" + "---|" * len(keys)]
    for name, v in d["budgets"].items():
        cells = []
        for k in keys:
            ptr = pointer("budgets", name, k)
            if isinstance(v[k], list):
                cells.append(", ".join(r.int(f"{ptr}/{i}") for i in range(len(v[k]))))
            elif isinstance(v[k], bool) or isinstance(v[k], str):
                cells.append(f"`{v[k]}`")
            elif isinstance(v[k], int):
                cells.append(r.int(ptr))
            else:
                cells.append(r.num(ptr))
        out.append(f"| `{name}` | " + ", ".join(f"`{m}`" for m in v["models"]) + " | " + " | ".join(cells) + " |")
    return r.region("\n".join(out))


def _per_seed(r: Render, base: str, key: str, m: dict) -> str:
    vals = m["mean"][key + "_per_seed"]
    if len(vals) < 2:
        return ""
    return " (" + ", ".join(r.num(f"{base}/mean/{key}_per_seed/{i}") for i in range(len(vals))) + ")"


def _hops(r: Render, d: dict) -> str:
    out = ["Mean rank of the right option (`0` = best); mean over seeds, each seed in brackets when there are several.", "",
           "| model | experiment | set | rank before | rank after | chance | paper (`OLMo`, `Llama-3`, `Gemma-2`, `Qwen-2`) |", "|---|---|---|---|---|---|---|"]
    claims = {"first_facts": "learned", "first_impl": "well below chance after", "second_facts": "learned",
              "second_impl": "below chance after, weaker than first hop"}
    for spec, m in d["models"].items():
        base = pointer("models", spec)
        for key, claim in claims.items():
            hop, what = key.split("_")
            out.append(f"| `{spec}` | {hop} hop | {'facts' if what == 'facts' else 'implications'} | "
                       f"{r.num(f'{base}/mean/{key}_before')}{_per_seed(r, base, key + '_before', m)} | "
                       f"{r.num(f'{base}/mean/{key}_after')}{_per_seed(r, base, key + '_after', m)} | "
                       f"{r.num(f'{base}/mean/chance')} | {claim} |")
    out.append("")
    for spec, m in d["models"].items():
        base = pointer("models", spec)
        learned = m["verdicts"]["second_hop_learned"]
        out.append(f"`{spec}`: the second-hop facts reached mean rank at most {r.num('/learned_rank')} in "
                   f"{r.int(base + '/mean/second_learned_seeds')} of {r.int(base + '/mean/seeds')} seeds. " +
                   ("Their implications are read." if learned else
                    "So the second hop was not learned, and its implication ranks test nothing: the second-hop claim "
                    "is not run at this budget."))
    return r.region("\n".join(out))


def _graft(r: Render, d: dict) -> str:
    out = ["| model | relation | base | Δ set-2 facts alone | control graft | graft | set-2 facts under the graft | "
           "graft on set-1 implications | chance |", "|---|---|---|---|---|---|---|---|---|"]
    for spec, m in d["models"].items():
        base = pointer("models", spec, "mean")
        rel = next(iter(m["seeds"].values()))["graft"]["relation"]
        out.append(f"| `{spec}` | `{rel}` | {r.num(base + '/graft_base')} | {r.num(base + '/facts2_only')} | "
                   f"{r.num(base + '/graft_control')} | {r.num(base + '/graft')} | {r.num(base + '/graft_facts2')} | "
                   f"{r.num(base + '/graft_set1')} | {r.num(base + '/chance')} |")
    return r.region("\n".join(out))


def _layers(r: Render, d: dict) -> str:
    out = []
    paper = {"early_only": "first-hop implications follow", "late_only": "second-hop implications follow"}
    for spec, m in d["models"].items():
        for key, what in (("layers", "trained with the other layers frozen"),
                          ("layers_restricted", "the full deltas restricted to the layers afterwards")):
            if key not in m["mean"]:
                out += [f"`{spec}`, {what}: not run at this budget (budget key `layers`).", ""]
                continue
            base = pointer("models", spec, "mean", key)
            out += [f"`{spec}`, {what}:", "", "| layers | first-hop facts | first-hop implications | second-hop facts | "
                    "second-hop implications | paper |", "|---|---|---|---|---|---|"]
            for part in ("early_only", "late_only"):
                p = f"{base}/{part}"
                out.append(f"| {part.replace('_', ' ')} ({r.int(p + '/layers/0')}–{r.int(p + '/layers/1')}) | "
                           f"{r.num(p + '/first_hop/facts_rank')} | {r.num(p + '/first_hop/implications_rank')} | "
                           f"{r.num(p + '/second_hop/facts_rank')} | {r.num(p + '/second_hop/implications_rank')} | {paper[part]} |")
            out.append("")
    return r.region("\n".join(out).rstrip())


def _ordering(r: Render, d: dict) -> str:
    o = d["data_ordering"]
    out = [f"A 4-layer LLaMA-family model trained from scratch ({r.int('/data_ordering/setup/cities')} cities, "
           f"{r.int('/data_ordering/setup/train_people')} training people, {r.int('/data_ordering/setup/test_people')} new "
           f"people; {r.int('/data_ordering/setup/epochs')} epochs a phase, {r.int('/data_ordering/setup/test_epochs')} "
           "on the new people's facts), new people's implication rank after fine-tuning their facts:", "",
           "| pretraining order | mean rank | per seed | paper |", "|---|---|---|---|"]
    paper = {"joint": "generalizes", "facts_first": "generalizes", "implications_first": "near chance"}
    for k in ("joint", "facts_first", "implications_first"):
        seeds = ", ".join(r.num(pointer("data_ordering", "per_seed", k, i, "test_implications")) for i in range(len(o["per_seed"][k])))
        out.append(f"| {k.replace('_', ' ')} | {r.num(pointer('data_ordering', k))} | {seeds} | {paper[k]} |")
    out.append(f"| chance | {r.num('/data_ordering/chance')} | | |")
    return r.region("\n".join(out))


def _top(sc: dict, name: str, k: int = 3) -> list[tuple[str, int, int | None, float]]:
    """The k largest (pointer suffix, layer, head or None, value) of a score summed over positions."""
    cells = [(f"{name}_mlp_total/{i}", l, None, v) for i, (l, v) in enumerate(zip(sc["layer"], sc[f"{name}_mlp_total"]))]
    cells += [(f"{name}_per_head/{i}/{h}", l, h, v) for i, (l, row) in enumerate(zip(sc["layer"], sc[f"{name}_per_head"]))
              for h, v in enumerate(row)]
    return sorted(cells, key=lambda c: -c[3])[:k]


def _scores(r: Render, d: dict) -> str:
    out = []
    for spec, m in d["models"].items():
        seed, u = next(iter(m["seeds"].items()))
        sc = u["hops"]["scores"]
        base = pointer("models", spec, "seeds", seed, "hops", "scores")
        out += [f"`{spec}`, seed `{seed}`: first-hop facts delta scored on the implication prompts; upstream scores "
                f"averaged over {r.int('/budget/values/counterfactuals')} "
                "counterfactual people per prompt.", "", "| score | layer | unit | summed over positions |", "|---|---|---|---|"]
        for name in ("informative", "upstream", "downstream"):
            for suffix, layer, head, _ in _top(sc, name):
                out.append(f"| {name} | `{layer}` | {'MLP' if head is None else f'head `{head}`'} | {r.num(f'{base}/{suffix}')} |")
        out.append("")
    return r.region("\n".join(out).rstrip())


def _verdicts(r: Render, d: dict) -> str:
    out = ["| model | claim | effect (mean rank) | control (mean rank) | effect - control, `95 %` t-interval over seeds "
           "(width) | smallest detectable | verdict |", "|---|---|---|---|---|---|---|"]

    def row(label: str, ptr: str, v: dict) -> str:
        effect = "—" if v["effect"] is None else r.num(ptr + "/effect")
        ci = (f"[{r.num(ptr + '/diff_ci/0')}, {r.num(ptr + '/diff_ci/1')}] ({r.num(ptr + '/interval_widths/effect - control')})"
              if "diff_ci" in v else "none")
        mde = r.num(ptr + "/mde") if v.get("mde") is not None else "—"
        return (f"| {label} | {r.text(ptr + '/claim_text')} | {effect} | {r.num(ptr + '/control')} | {ci} | {mde} | "
                f"{r.text(ptr + '/word')} |")

    for spec, m in d["models"].items():
        v = m["verdicts"]
        base = pointer("models", spec, "verdicts")
        out.append(row(f"`{spec}`", base + "/first_hop", v["first_hop"]))
        out.append(row(f"`{spec}`", base + "/second_hop", v["second_hop"]))
        out.append(row(f"`{spec}`", base + "/grafting/vs_control", v["grafting"]["vs_control"]))
        out.append(row(f"`{spec}`", base + "/grafting/vs_facts_alone", v["grafting"]["vs_facts_alone"]))
        out.append(f"| `{spec}` | grafting, against both controls | | | | | {r.text(base + '/grafting/word')} |")
        if "early_late_layers" in v:
            out.append(row(f"`{spec}`", base + "/early_late_layers", v["early_late_layers"]))
    out.append(row("zoo scale", "/verdicts/data_ordering", d["verdicts"]["data_ordering"]))
    return r.region("\n".join(out))


def regions(result: dict[str, Any]) -> dict[str, str]:
    """The doc's generated regions (name -> body with its keys comment) for one `repro` result."""
    r = Render(result)
    return {"run": _run(r, result), "budgets": _budgets(r, result), "hops": _hops(r, result), "graft": _graft(r, result),
            "layers": _layers(r, result), "ordering": _ordering(r, result), "scores": _scores(r, result),
            "verdicts": _verdicts(r, result)}

"""interp vs TransformerLens 4.x and Hugging Face on real models (SmolLM2-135M, Gemma-3-270M), CPU.

    INTERP_CACHE=/tmp/icache OMP_NUM_THREADS=1 python benchmarks/real.py [--quick] [--only z,resid,...]
        [--out benchmarks/RESULTS.md]

Sections (each a key for --only): z (head-level exact patching, 270 cells), resid (resid_pre x pos),
headpos (head x pos over the last 6 positions), limit (what each sweep must redo, timed at the
same batch), attr (attribution patching), gen (steered generation vs HF generate), mem (peak RSS,
one subprocess per measurement), load (second load from the GGUF cache, and a profile of the Gemma
one), bf16 (head-level patching in bfloat16 vs float32), profile (cProfile of interp's head-level run).

IOI: 8 hand-written prompts of equal token length, corrupt = three fresh names (ABC); the metric is
mean logit(IO) - logit(S) at the last position. interp gets them as an `interp.Task` (correct = IO,
incorrect = S, answer_pos = last position, metric "logit_diff") and uses the task's own metric, so
its patching runs the unembedding only at the answer position (`activation_patch(model, task, ...)`,
`run.evaluate(..., answer_pos=...)`); TransformerLens computes full logits and reads the last
position with the same metric written as a function. Every comparison times interp and the reference
alternately in one process (best of N each); ratios are reference / interp (x > 1: interp faster)
except generation (interp / HF: < 1 is interp faster). TL sweeps that would take many minutes are
timed on an evenly spread sample of their cells (TL runs one full forward per cell, so its time is
per-cell constant) and extrapolated; the table says so.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import io
import json
import os
import platform
import pstats
import resource
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import torch

import interp
from interp import patching, run, steering
from interp.interventions import Patch

sys.path.insert(0, str(Path(__file__).parent))
from timing import best_of  # noqa: E402

MODEL = "smollm2-135m"
HEADER = "## real models"

TEMPLATES = [
    "When {a} and {b} went to the store, {c} gave a drink to",
    "When {a} and {b} went to the park, {c} gave a ball to",
    "When {a} and {b} went to the office, {c} gave a book to",
    "When {a} and {b} went to the house, {c} gave a gift to",
]
NAMES = ["Mary", "John", "Tom", "James", "Anna", "Paul", "Sarah", "David", "Mike", "Emma", "Peter", "Lisa",
         "Kate", "Jack", "Alice", "Bob"]

GEN_PROMPTS = [
    "The capital of France is", "Once upon a time, there was a little", "Here is a recipe for pancakes:",
    "The best way to learn a new language is", "In 1969, astronauts", "My favourite animal is the",
    "Write a short poem about the sea.", "The following Python function sorts a list:",
    "Three reasons to exercise every day are", "The weather today is", "Photosynthesis is the process by which",
    "A good book to read on holiday is", "The history of the Roman Empire began", "To make a cup of tea, first",
    "The most important invention of the twentieth century was", "Dear friend, I am writing to tell you",
]


def log(msg: str) -> None:
    print(msg, flush=True)


def ioi(model, batch: int = 8, seed: int = 0):
    """(clean, corrupt, io, s) for `batch` IOI prompts of one token length (checked)."""
    return ioi_with_text(model, batch, seed)[:4]


def ioi_with_text(model, batch: int = 8, seed: int = 0):
    """ioi(...) plus the clean prompts' text."""
    g = torch.Generator().manual_seed(seed)
    clean_txt, corrupt_txt, io_ids, s_ids = [], [], [], []
    ids = {n: model.to_tokens(" " + n, prepend_bos=False)[0] for n in NAMES}
    assert all(len(v) == 1 for v in ids.values()), "every name must be one token"
    for i in range(batch):
        perm = torch.randperm(len(NAMES), generator=g).tolist()
        a, b, c, d, e = (NAMES[j] for j in perm[:5])
        t = TEMPLATES[i % len(TEMPLATES)]
        clean_txt.append(t.format(a=a, b=b, c=b))  # IO = a, S = b
        corrupt_txt.append(t.format(a=c, b=d, c=e))  # ABC: three other names
        io_ids.append(int(ids[a][0]))
        s_ids.append(int(ids[b][0]))
    rows = [model.to_tokens(s)[0] for s in clean_txt + corrupt_txt]
    lengths = {len(r) for r in rows}
    assert len(lengths) == 1, f"IOI prompts differ in token length: {lengths}"
    toks = torch.stack(rows)
    return toks[:batch], toks[batch:], torch.tensor(io_ids), torch.tensor(s_ids), tuple(clean_txt)


def make_task(clean, corrupt, io_ids, s_ids, text) -> interp.Task:
    """The IOI prompts as an interp Task: its logit_diff metric is make_metric's, read at the last position."""
    return interp.Task(name="ioi-handwritten", split="bench", clean=clean, corrupt=corrupt, correct=io_ids,
                       incorrect=s_ids, answer_pos=torch.full((clean.shape[0],), clean.shape[1] - 1), text=text,
                       metric="logit_diff")


def make_metric(io_ids, s_ids):
    def metric(logits):
        last = logits[:, -1]
        return (last.gather(1, io_ids[:, None].to(last.device)) - last.gather(1, s_ids[:, None].to(last.device))).mean()

    return metric


def sequential_metric(io_ids, s_ids):
    """TL's attribution_patch calls the metric on one example at a time, clean then corrupt, in
    row order: this metric reads which row it is from the call count."""
    state = {"n": 0}

    def metric(logits):
        row = (state["n"] // 2) % len(io_ids)
        state["n"] += 1
        last = logits[0, -1]
        return last[int(io_ids[row])] - last[int(s_ids[row])]

    return metric


def sample(cells: list, k: int) -> list[int]:
    """Indices of about len(cells)/k evenly spread cells (every k-th)."""
    return list(range(0, len(cells), k)) if k > 1 else list(range(len(cells)))


# ---------------------------------------------------------------------------------------------
# exact patching sweeps


def interp_restricted(model, task, site, todo):
    """interp on just the cells `todo` [(layer, pos, head)], built as patching.activation_patch does
    (the task's metric, the unembedding only at its answer positions)."""
    from interp.metrics import for_task

    clean, corrupt = task.clean, task.corrupt
    names = [f"blocks.{l}.attn.hook_z" if site == "z" else f"blocks.{l}.hook_{site}" for l in range(model.cfg.n_layers)]
    _, acts = run.cache(model, clean, names)
    variants = [[Patch(names[l], acts[names[l]], pos=p, head=h)] for l, p, h in todo]
    return run.evaluate(model, corrupt, variants, for_task(task), answer_pos=task.answer_pos, progress=False)


def tl_cells(model, corrupt, clean_cache, metric, tl_fn, cols, todo):
    df = pd.DataFrame([[c for c, keep in zip(cell, cols) if keep] for cell in todo],
                      columns=[n for n, keep in zip(("layer", "pos", "head"), cols) if keep])
    return tl_fn(model, corrupt, clean_cache, metric, index_axis_names=None, index_df=df).detach().cpu()


def sweeps(model, task, metric, args, which):
    from transformer_lens import patching as tlp

    clean, corrupt = task.clean, task.corrupt
    L, H, P = model.cfg.n_layers, model.cfg.n_heads, clean.shape[1]
    _, clean_cache = model.run_with_cache(clean)
    rows, timings = [], {}
    specs = {
        "z": ("head x all pos (z)", [(l, None, h) for l in range(L) for h in range(H)],
              tlp.get_act_patch_attn_head_out_all_pos, (True, False, True), args.z_every),
        "resid": ("resid_pre x pos", [(l, p, None) for l in range(L) for p in range(P)],
                  tlp.get_act_patch_resid_pre, (True, True, False), args.resid_every),
        "headpos": ("head x pos, last 6 pos (z)", [(l, p, h) for l in range(L) for p in range(P - 6, P) for h in range(H)],
                    tlp.get_act_patch_attn_head_out_by_pos, (True, True, True), args.headpos_every),
    }
    for key in which:
        label, todo, tl_fn, cols, every = specs[key]
        idx = sample(todo, every)
        site = "resid_pre" if key == "resid" else "z"
        t_i, t_t = float("inf"), float("inf")
        for _ in range(args.sweep_repeats):  # alternate: interp, TL, interp, TL
            if key == "z":
                t, g = best_of(lambda: patching.activation_patch(model, task, site="z", progress=False), 1)
                ours = g.values.flatten()
            elif key == "resid":
                t, g = best_of(lambda: patching.activation_patch(model, task, site="resid_pre", by_pos=True,
                                                                 progress=False), 1)
                ours = g.values.flatten()
            else:
                t, ours = best_of(lambda: interp_restricted(model, task, site, todo), 1)
            t_i = min(t_i, t)
            log(f"  interp {label}: {t:.2f}s")
            if key == "z" and every == 1:
                t, theirs = best_of(lambda: tl_fn(model, corrupt, clean_cache, metric).detach().cpu().flatten(), 1)
            else:
                t, theirs = best_of(lambda: tl_cells(model, corrupt, clean_cache, metric, tl_fn, cols, [todo[i] for i in idx]), 1)
            t_t = min(t_t, t)
            log(f"  TL {label} ({len(idx)} of {len(todo)} cells): {t:.2f}s")
            if args.tl_once:
                break
        tl_full = t_t * len(todo) / len(idx)
        diff = float((ours.flatten()[idx] - theirs.flatten()).abs().max())
        note = "" if len(idx) == len(todo) else f"TL timed on {len(idx)} of {len(todo)} cells, x{len(todo) / len(idx):.1f}"
        rows.append((label, len(todo), tl_full, t_i, tl_full / t_i, diff, note))
        timings[key] = (t_i, todo, ours)
        log(f"{label:28s} TL {tl_full:8.2f}s  interp {t_i:7.2f}s  ratio {tl_full / t_i:5.2f}x  max|d| {diff:.1e}  {note}")
    return rows, timings


def limit_costs(model, clean, reps: int = 5):
    """(s per block-position at batch 8, s of the unembedding at one position, s of one full forward)
    timed alternately; body = the HF decoder (embeddings, blocks, final norm) without the lm head."""
    hf = model.original_model
    body = hf.model
    n = clean.shape[1] * model.cfg.n_layers
    best = {"full": float("inf"), "body": float("inf"), "head1": float("inf")}
    with torch.no_grad():
        h = body(clean).last_hidden_state[:, -1:]
        for _ in range(reps):
            for key, fn in (("full", lambda: model(clean)), ("body", lambda: body(clean)), ("head1", lambda: hf.lm_head(h))):
                best[key] = min(best[key], best_of(fn, 1 if key != "head1" else 10)[0])
    return best["body"] / n, best["head1"], best["full"], best["body"]


def limit_rows(model, clean, timings):
    per_bp, head1, full, body = limit_costs(model, clean)
    L, P = model.cfg.n_layers, clean.shape[1]
    log(f"batch 8 forward: full {full * 1e3:.0f} ms, body {body * 1e3:.0f} ms, unembed 1 pos {head1 * 1e3:.1f} ms, "
        f"{per_bp * 1e6:.0f} us per block-position")
    rows = []
    for key, (t_i, todo, _) in timings.items():
        lim = sum(per_bp * (L - l) * (P - (p or 0)) + head1 for l, p, _ in todo)
        rows.append((key, len(todo), lim, t_i, t_i / lim))
        log(f"limit {key}: {lim:.2f}s  interp {t_i:.2f}s  interp/limit {t_i / lim:.2f}")
    return rows, (full, body, head1, per_bp)


# ---------------------------------------------------------------------------------------------
# attribution, generation


def attribution(model, task, io_ids, s_ids, repeats):
    from scipy.stats import pearsonr
    from transformer_lens.tools.analysis import attribution_patching as tl_attr

    clean, corrupt = task.clean, task.corrupt
    t_i, t_t = float("inf"), float("inf")
    for _ in range(repeats):
        t, ours = best_of(lambda: patching.attribution_patch(model, task, site="z"), 1)
        t_i = min(t_i, t)
        t, theirs = best_of(lambda: tl_attr.attribution_patch(model, clean, corrupt, sequential_metric(io_ids, s_ids)), 1)
        t_t = min(t_t, t)
    heads = torch.zeros_like(ours.values)
    for node, score in theirs.node_scores.items():
        if node.kind == "attn_head_out":
            heads[node.layer, node.head] += score
    diff = float((heads - ours.values).abs().max())
    r = float(pearsonr(heads.flatten().numpy(), ours.values.flatten().numpy())[0])
    log(f"attribution: TL {t_t:.2f}s interp {t_i:.2f}s ratio {t_t / t_i:.2f}x  max|d| {diff:.1e}  pearson {r:.6f}")
    return (t_t, t_i, t_t / t_i, diff, r, float(ours.values.abs().max()))


def generation(model, repeats):
    axis0 = steering.axis_from_vector(torch.zeros(model.cfg.d_model).index_fill_(0, torch.tensor([0]), 1.0),
                                      site="blocks.15.hook_resid_pre")
    axis = steering.random_axis(axis0, seed=0)
    from transformers import AutoModelForCausalLM

    from interp.model import resolve

    # a plain HF model on the same weights file: the bridge's own original_model.generate does not
    # use the KV cache correctly under TL 4.x (its output is checked below, not timed)
    hf = AutoModelForCausalLM.from_pretrained(resolve(MODEL), dtype=torch.float32).eval()
    rows = []
    for batch in (1, 16):
        prompts = GEN_PROMPTS[:batch]
        tokens, mask, _ = steering.encode(model, prompts)
        pad = steering.generate.__globals__["_pad_id"](model)

        def ours(s=1.0):
            return steering.generate(model, prompts, [steering.Steer(axis, "flip", s)], max_new_tokens=32)

        def theirs():
            with torch.no_grad():
                return hf.generate(input_ids=tokens, attention_mask=mask, do_sample=False, max_new_tokens=32,
                                   pad_token_id=pad)

        # same tokens at strength 0
        g0, h0 = ours(0.0), theirs()

        def agree(a, b):
            return all(torch.equal(a[i, : tokens.shape[1] + int(g0.n_generated[i])],
                                   b[i, : tokens.shape[1] + int(g0.n_generated[i])].cpu()) for i in range(batch))

        same = agree(g0.tokens, h0)
        with torch.no_grad():
            bridged = model.original_model.generate(input_ids=tokens, attention_mask=mask, do_sample=False,
                                                    max_new_tokens=32, pad_token_id=pad)
        bridged_same = agree(g0.tokens, bridged)
        t_i, t_h = float("inf"), float("inf")
        for _ in range(repeats):
            t, g = best_of(ours, 1)
            t_i = min(t_i, t)
            t, h = best_of(theirs, 1)
            t_h = min(t_h, t)
        n_i, n_h = int(g.n_generated.max()), h.shape[1] - tokens.shape[1]
        rows.append((batch, t_h, t_i, t_i / t_h, same, n_i, n_h, bridged_same))
        log(f"generate batch {batch}: HF {t_h:.2f}s ({n_h} steps) interp steered {t_i:.2f}s ({n_i} steps) "
            f"interp/HF {t_i / t_h:.2f}  same tokens at strength 0: {same}; bridged original_model.generate same: {bridged_same}")
    return rows


# ---------------------------------------------------------------------------------------------
# subprocess measurements: memory, load


def child(kind: str, batch: int) -> None:
    """Run one measurement in this (fresh) process and print a JSON line."""
    t0 = time.perf_counter()
    model = interp.load(MODEL if kind != "load-gemma" else "gemma3-270m")
    t_load = time.perf_counter() - t0
    out = {"kind": kind, "load_s": t_load}
    if kind.startswith("mem"):
        torch.set_grad_enabled(False)
        task = make_task(*ioi_with_text(model, batch))
        clean = task.clean
        base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        L, H, P = model.cfg.n_layers, model.cfg.n_heads, clean.shape[1]
        t0 = time.perf_counter()
        if kind == "mem-forward":
            model(clean)
        else:  # head x pos, last 6 positions; only the layers asked (the first forward is the largest)
            layers = [0] if kind == "mem-headpos-l0" else [L - 1]
            todo = [(l, p, h) for l in layers for p in range(P - 6, P) for h in range(H)]
            interp_restricted(model, task, "z", todo)
            out["cells"] = len(todo)
            out["variants_per_forward"] = run.planner.variants_that_fit(model, batch, P, None)
        out["s"] = time.perf_counter() - t0
        out["rss_before_mib"] = base_rss / 1024
    out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("RESULT " + json.dumps(out), flush=True)


def in_child(kind: str, batch: int = 32) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--child", kind, "--batch", str(batch)], capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"child {kind} failed:\n{proc.stderr[-3000:]}")


def memory():
    rows = []
    for kind in ("mem-forward", "mem-headpos-l29", "mem-headpos-l0"):
        r = in_child(kind, 32)
        rows.append(r)
        log(f"{kind}: peak RSS {r['peak_rss_mib']:.0f} MiB (after load {r['rss_before_mib']:.0f} MiB), {r['s']:.1f}s "
            f"{r.get('cells', '')} cells, {r.get('variants_per_forward', '')} variants/forward")
    return rows


def loads(top: int = 15):
    out = {}
    for name, kind in (("smollm2-135m", "load-smol"), ("gemma3-270m", "load-gemma")):
        in_child(kind)  # makes sure the cache holds it
        out[name] = min(in_child(kind)["load_s"] for _ in range(2))
        log(f"second load {name}: {out[name]:.2f}s")
    prof = cProfile.Profile()
    prof.enable()
    interp.load("gemma3-270m")
    prof.disable()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(top)
    text = s.getvalue()
    log(text)
    s2 = io.StringIO()
    pstats.Stats(prof, stream=s2).sort_stats("tottime").print_stats(top)
    log(s2.getvalue())
    return out, text, s2.getvalue()


# ---------------------------------------------------------------------------------------------
# bf16, profile


def bf16(task, ref_values):
    from scipy.stats import pearsonr

    try:
        t0 = time.perf_counter()
        m16 = interp.load(MODEL, dtype=torch.bfloat16)
        t_load = time.perf_counter() - t0
        dtype = str(next(m16.parameters()).dtype)
        t, g = best_of(lambda: patching.activation_patch(m16, task, site="z", progress=False), 1)
    except Exception as err:  # report precisely
        msg = f"{type(err).__name__}: {err}"
        log(f"bf16 failed: {msg}")
        return {"error": msg}
    v16 = g.values.float().flatten()
    v32 = ref_values.flatten()
    r = float(pearsonr(v16.numpy(), v32.numpy())[0])
    d = float((v16 - v32).abs().max())
    res = {"dtype": dtype, "load_s": t_load, "s": t, "max_abs_diff": d, "pearson": r,
           "range32": float(v32.max() - v32.min()), "clean": g.meta["clean_metric"], "corrupt": g.meta["corrupt_metric"]}
    log(f"bf16: {res}")
    return res


def profile_z(model, task, top: int = 10):
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    patching.activation_patch(model, task, site="z", progress=False)
    prof.disable()
    log(f"profiled head-level run: {time.perf_counter() - t0:.1f}s")
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(top)
    s2 = io.StringIO()
    pstats.Stats(prof, stream=s2).sort_stats("tottime").print_stats(top)
    log(s.getvalue())
    log(s2.getvalue())
    return s.getvalue(), s2.getvalue()


# ---------------------------------------------------------------------------------------------


def _trim(stats: str, keep: int = 15) -> str:
    lines = stats.strip("\n").splitlines()
    start = next((i for i, l in enumerate(lines) if l.strip().startswith("ncalls")), 0)
    return "\n".join([lines[i] for i in range(len(lines)) if "function calls" in lines[i]] + lines[start: start + keep + 1])


def write(path: Path, res: dict, args) -> None:
    threads = torch.get_num_threads()
    sub = f"### {threads} thread{'s' if threads > 1 else ''}{' (quick)' if args.quick else ''}"
    cmd = (f"INTERP_CACHE=/tmp/icache OMP_NUM_THREADS={threads} python benchmarks/real.py"
           + (" --quick" if args.quick else "") + (f" --only {args.only}" if args.only else ""))
    L = [sub, "",
         f"Measured {datetime.date.today()} on {platform.machine()} ({os.cpu_count()} cores, CPU shared with another job: "
         f"timings are noisy), torch {torch.__version__}, {threads} thread(s), by `{cmd}`. Model SmolLM2-135M-Instruct "
         "(GGUF), IOI batch 8 x 15 tokens, metric mean logit(IO) - logit(S) at the last position. "
         f"Patching sweeps: one run of each library (best of 1: TL sweeps take minutes at one thread); attribution and "
         f"generation: best of {args.repeats}, interp and the reference alternating. interp runs the IOI prompts as an "
         "`interp.Task` with its own logit_diff metric, so its patching unembeds only the answer position; TL computes "
         "full logits and applies the same metric.", ""]
    missing = [k for k in res.get("todo", []) if k not in res.get("done", [])]
    if missing:
        L += [f"Not (yet) measured in this run: {', '.join(missing)}.", ""]
    if "sweeps" in res:
        L += ["| sweep | cells | TL s | interp s | TL / interp | max abs diff | note |", "|---|---|---|---|---|---|---|",
              *[f"| {a} | {n} | {t:.2f} | {i:.2f} | {r:.2f}x | {d:.1e} | {note} |" for a, n, t, i, r, d, note in res["sweeps"]], ""]
    if "limit" in res:
        full, body, head1, per = res["limit_costs"]
        L += [f"The limit: each cell redoes blocks L.. at positions p.. (all positions for head x all pos) at batch 8, "
              f"plus the unembedding at one position: one batch-8 forward = {full * 1e3:.0f} ms, of which the blocks "
              f"{body * 1e3:.0f} ms ({per * 1e6:.0f} us per block-position), unembedding one position {head1 * 1e3:.1f} ms.", "",
              "| sweep | cells | limit s | interp s | interp / limit |", "|---|---|---|---|---|",
              *[f"| {k} | {n} | {lim:.2f} | {i:.2f} | {r:.2f} |" for k, n, lim, i, r in res["limit"]], ""]
    if "attr" in res:
        t, i, r, d, p, mx = res["attr"]
        L += [f"Attribution patching (site z, batch 8): TL {t:.2f}s (per-example forwards/backwards, all nodes), interp "
              f"{i:.2f}s, TL / interp {r:.2f}x; head scores max abs diff {d:.1e} (largest |score| {mx:.2f}), Pearson {p:.6f}.", ""]
    if "gen" in res:
        L += ["Steered generation (flip 1.0 along a random unit axis at blocks.15.hook_resid_pre, greedy, KV cache, "
              "32 new tokens) vs Hugging Face `generate` (unsteered, greedy, same weights):", "",
              "| batch | HF s | interp s | interp / HF | same tokens at strength 0 | steps interp / HF | bridge's original_model.generate same |",
              "|---|---|---|---|---|---|---|",
              *[f"| {b} | {h:.2f} | {i:.2f} | {r:.2f} | {s} | {ni} / {nh} | {bs} |" for b, h, i, r, s, ni, nh, bs in res["gen"]], "",
              "HF = `AutoModelForCausalLM.from_pretrained` on the converted checkpoint the bridge loads (same weights); "
              "the bridge's own `model.original_model.generate` is only checked, not timed.", ""]
    if "mem" in res:
        L += ["Peak resident memory (one subprocess each, batch 32; ru_maxrss includes the loaded model):", "",
              "| run | peak RSS MiB | after load MiB | s |", "|---|---|---|---|"]
        for r in res["mem"]:
            what = {"mem-forward": "one plain forward, batch 32",
                    "mem-headpos-l29": f"head x pos (last 6), layer 29's {r.get('cells')} cells ({r.get('variants_per_forward')} variants/forward)",
                    "mem-headpos-l0": f"head x pos (last 6), layer 0's {r.get('cells')} cells ({r.get('variants_per_forward')} variants/forward)"}[r["kind"]]
            L.append(f"| {what} | {r['peak_rss_mib']:.0f} | {r['rss_before_mib']:.0f} | {r['s']:.1f} |")
        L.append("")
    if "load" in res:
        times, cum, tot = res["load"]
        L += ["Second load from the cache (fresh process, best of 2): " + ", ".join(f"{k} {v:.2f}s" for k, v in times.items())
              + ". Profile of a Gemma load (in-process, after others), top by cumulative and by own time:", "",
              "```", _trim(cum), "", _trim(tot), "```", ""]
    if "bf16" in res:
        b = res["bf16"]
        if "error" in b:
            L += [f"bfloat16: `interp.load({MODEL!r}, dtype=torch.bfloat16)` fails: `{b['error']}`", ""]
        else:
            L += [f"bfloat16 (`interp.load(..., dtype=torch.bfloat16)` loads, parameters {b['dtype']}, load {b['load_s']:.1f}s): "
                  f"head-level IOI patching took {b['s']:.2f}s; vs float32 max abs diff {b['max_abs_diff']:.3f} "
                  f"(float32 values span {b['range32']:.2f}), Pearson {b['pearson']:.4f}; clean/corrupt metric "
                  f"{b['clean']:.3f}/{b['corrupt']:.3f}.", ""]
    if "profile" in res:
        cum, tot = res["profile"]
        L += ["cProfile of interp's head-level patching (270 cells, Task path), top 10 by cumulative and by own time:", "",
              "```", _trim(cum, 10), "", _trim(tot, 10), "```", ""]
    if res.get("errors"):
        L += ["Sections that failed: " + "; ".join(f"`{e}`" for e in res["errors"]), ""]
    section = "\n".join(L)
    text = path.read_text()
    if HEADER not in text:
        text = text.rstrip("\n") + f"\n\n{HEADER}\n\n"
    start = text.index(HEADER)
    body = text[start:]
    if sub in body:  # replace this thread count's subsection, keep the others
        s = body.index(sub)
        e = body.find("\n### ", s + 1)
        body = body[:s] + section + ("\n" + body[e + 1:] if e != -1 else "\n")
    else:
        body = body.rstrip("\n") + "\n\n" + section + "\n"
    path.write_text(text[:start] + body)
    log(f"wrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="smaller TL samples, one repeat")
    parser.add_argument("--only", default="", help="comma-separated sections (default all)")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--out", default=str(Path(__file__).parent / "RESULTS.md"))
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--child", default=None)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.batch)
        return
    args.repeats = args.repeats or (1 if args.quick else 2)
    args.sweep_repeats = 1  # the sweeps take minutes at one thread: best of 1 for both
    args.tl_once = True  # TL sweeps take minutes at one thread: best of 1 for TL
    args.z_every, args.resid_every, args.headpos_every = (5, 15, 45) if args.quick else (1, 10, 30)
    which = args.only.split(",") if args.only else ["z", "resid", "headpos", "limit", "attr", "gen", "mem", "load", "bf16", "profile"]
    torch.manual_seed(0)
    t_start = time.perf_counter()
    model = interp.load(MODEL)
    clean, corrupt, io_ids, s_ids, text = ioi_with_text(model)
    task = make_task(clean, corrupt, io_ids, s_ids, text)
    metric = make_metric(io_ids, s_ids)  # TL's metric (full logits, last position)
    log(f"{MODEL}: {model.cfg.n_layers} layers, {model.cfg.n_heads} heads; IOI {tuple(clean.shape)}; "
        f"{torch.get_num_threads()} threads")
    res: dict = {"todo": list(which)}
    timings: dict = {}

    def section(key, fn, done=None):
        res.setdefault("done", []).append(done or key)  # attempted (a failure is listed under errors)
        try:
            t0 = time.perf_counter()
            res[key] = fn()
            log(f"[{key} took {time.perf_counter() - t0:.0f}s, {time.perf_counter() - t_start:.0f}s in all]")
        except Exception as err:  # keep going: one failing section must not lose the others
            import traceback

            traceback.print_exc()
            res.setdefault("errors", []).append(f"{key}: {type(err).__name__}: {err}")
        if not args.no_write:  # write as we go: a run stopped for time keeps what it measured
            write(Path(args.out), res, args)

    # in priority order: the sweeps, the limit, loads, bf16, then the rest
    for key in ("z", "resid", "headpos"):
        if key in which:
            def do_sweep(key=key):
                rows, t = sweeps(model, task, metric, args, [key])
                timings.update(t)
                return res.get("sweeps", []) + rows

            section("sweeps", do_sweep, key)
    if "limit" in which and timings:
        def do_limit():
            rows, costs = limit_rows(model, clean, timings)
            res["limit_costs"] = costs
            return rows

        section("limit", do_limit)
    if "load" in which:
        section("load", loads)
    if "bf16" in which:
        def do_bf16():
            ref = timings["z"][2] if "z" in timings else \
                patching.activation_patch(model, task, site="z", progress=False).values
            return bf16(task, ref)

        section("bf16", do_bf16)
    for key, fn in (("attr", lambda: attribution(model, task, io_ids, s_ids, args.repeats)),
                    ("gen", lambda: generation(model, args.repeats)),
                    ("mem", memory),
                    ("profile", lambda: profile_z(model, task))):
        if key in which:
            section(key, fn)
    log(f"total {time.perf_counter() - t_start:.0f}s")
    if not args.no_write:
        write(Path(args.out), res, args)

if __name__ == "__main__":
    main()

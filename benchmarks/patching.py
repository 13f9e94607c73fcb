"""interp patching vs TransformerLens 4.3, side by side in one process, same model and inputs.

    python benchmarks/patching.py [--device cpu|cuda] [--repeats 2] [--out benchmarks/RESULTS.md]

Prints, per model and sweep, the seconds each library took, the ratio (TL / interp) and the max
|difference| of the results; then attribution patching against TL's, and the fidelity of
attribution to exact patching (Pearson and Spearman over cells) on the zoo IOI and SVA tasks.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import tempfile
from pathlib import Path

import torch
from scipy.stats import pearsonr, spearmanr
from transformer_lens import patching as tlp
from transformer_lens.tools.analysis import attribution_patching as tl_attr

import interp
from interp import patching, tasks
from interp.metrics import for_task
from interp.tasks import english
from timing import best_of  # benchmarks/timing.py, beside this script


def forward_cost(model, pos: int = 20) -> tuple[float, float]:
    """(fixed seconds per forward, seconds per row-position) of one forward: the time of a 1-row,
    1-position forward, and the slope between 64 and 256 rows of `pos` positions (best of 10
    each). Their ratio is what `interp.run.planner.FORWARD_COST` stands for."""
    times = {}
    for rows, n_pos in ((1, 1), (64, pos), (256, pos)):
        tokens = torch.randint(5, model.cfg.d_vocab, (rows, n_pos)).to(model.cfg.device)
        with torch.no_grad():
            times[rows] = best_of(lambda: model(tokens), 10)[0]
    return times[1], (times[256] - times[64]) / (192 * pos)


def _random_inputs(model, batch: int, pos: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    clean = torch.randint(5, model.cfg.d_vocab, (batch, pos), generator=g)
    clean[:, 0] = 2
    corrupt = clean.clone()
    corrupt[:, pos // 2] = torch.randint(5, model.cfg.d_vocab, (batch,), generator=g)
    a, b = 10, 11
    return clean, corrupt, lambda lg: (lg[:, -1, a] - lg[:, -1, b]).mean()


SWEEPS = [
    ("head x pos (z)", "z", True, tlp.get_act_patch_attn_head_out_by_pos),
    ("resid x pos", "resid_pre", True, tlp.get_act_patch_resid_pre),
    ("head x all pos (z)", "z", False, tlp.get_act_patch_attn_head_out_all_pos),
]


def exact_rows(name, model, clean, corrupt, metric, repeats):
    clean, corrupt = clean.to(model.cfg.device), corrupt.to(model.cfg.device)
    _, cache = model.run_with_cache(clean)
    rows = []
    for label, site, by_pos, tl_fn in SWEEPS:
        t_ours, ours = best_of(lambda: patching.activation_patch(model, clean, corrupt, metric=metric, site=site, by_pos=by_pos, progress=False), repeats)
        t_tl, theirs = best_of(lambda: tl_fn(model, corrupt, cache, metric), repeats)
        diff = float((ours.values - theirs.detach().cpu()).abs().max())
        rows.append((name, label, t_tl, t_ours, t_tl / t_ours, diff))
        print(f"{name:28s} {label:20s} TL {t_tl:8.2f}s  interp {t_ours:7.2f}s  ratio {t_tl / t_ours:6.1f}x  max|d| {diff:.1e}", flush=True)
    return rows


def attribution_row(name, model, clean, corrupt, metric, repeats):
    clean, corrupt = clean.to(model.cfg.device), corrupt.to(model.cfg.device)
    t_ours, ours = best_of(lambda: patching.attribution_patch(model, clean, corrupt, metric=metric, site="z"), repeats)
    t_tl, theirs = best_of(lambda: tl_attr.attribution_patch(model, clean, corrupt, metric), repeats)
    heads = torch.zeros_like(ours.values)
    for node, score in theirs.node_scores.items():  # TL scores heads per position; sum them
        if node.kind == "attn_head_out":
            heads[node.layer, node.head] += score
    diff = float((heads - ours.values).abs().max())
    print(f"{name:28s} {'attribution':20s} TL {t_tl:8.2f}s  interp {t_ours:7.2f}s  ratio {t_tl / t_ours:6.1f}x  max|d| {diff:.1e}", flush=True)
    return (name, f"attribution, batch {clean.shape[0]} (TL: all nodes; interp: site z)", t_tl, t_ours, t_tl / t_ours, diff)


def fidelity(model, task, site, by_pos):
    exact = patching.activation_patch(model, task, site=site, by_pos=by_pos, progress=False)
    approx = patching.attribution_patch(model, task, site=site, by_pos=by_pos)
    delta = (exact.values - exact.meta["corrupt_metric"]).flatten().numpy()
    est = approx.values.flatten().numpy()
    return float(pearsonr(delta, est)[0]), float(spearmanr(delta, est)[0])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", default=str(Path(__file__).parent / "RESULTS.md"))
    args = parser.parse_args()
    torch.manual_seed(0)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = interp.build_tiny("gpt2", Path(tmp) / "g", words=english.WORDS, d_model=128, n_layers=4, n_heads=4, n_ctx=64)
        model = interp.load(path, device=args.device)
        clean, corrupt, metric = _random_inputs(model, 8, 20)
        rows += exact_rows("gpt2 4L d128, 8x20 tokens", model, clean, corrupt, metric, args.repeats)
        rows.append(attribution_row("gpt2 4L d128, 8x20 tokens", model, clean, corrupt, metric, args.repeats))
        fixed, per = forward_cost(model)
        print(f"one forward: {fixed * 1e3:.1f} ms fixed + {per * 1e6:.1f} us per row-position = {fixed / per:.0f} row-positions", flush=True)
    zoo = interp.load("zoo:lm-gpt2", device=args.device)
    ioi = tasks.make("ioi", split="train", n=8, seed=0)
    rows += exact_rows("zoo:lm-gpt2 IOI, 8 prompts", zoo, ioi.clean, ioi.corrupt, for_task(ioi), args.repeats)
    fid = []
    for family in ("gpt2", "llama"):
        m = interp.load(f"zoo:lm-{family}", device=args.device)
        for tname, split in (("ioi", "train"), ("sva", "sva_id")):
            task = tasks.make(tname, split=split, n=32, seed=1)
            for site, by_pos in (("z", False), ("resid_pre", True)):
                p, s = fidelity(m, task.to(args.device), site, by_pos)
                fid.append((f"zoo:lm-{family}", tname, site + (" x pos" if by_pos else ""), p, s))
                print(f"fidelity {family} {tname} {site}: pearson {p:.3f} spearman {s:.3f}", flush=True)
    write_results(Path(args.out), args.device, rows, fid, (fixed, per))


def write_results(path: Path, device: str, rows, fid, cost) -> None:
    machine = f"{platform.machine()}, {torch.get_num_threads()} CPU threads" if device == "cpu" else torch.cuda.get_device_name()
    # one section per device and thread count, so CPU runs at 1 and 2 threads stand side by side
    header = f"## patching ({device}, {torch.get_num_threads()} threads)" if device == "cpu" else f"## patching ({device})"
    lines = [
        header,
        "",
        f"Measured {datetime.date.today()} on {machine}, torch {torch.__version__}, by `OMP_NUM_THREADS={torch.get_num_threads()} python benchmarks/patching.py --device {device}`.",
        "Seconds are the best of the repeats (the same number) for each library; ratio = TL / interp.",
        "",
        "| model | sweep | TL s | interp s | ratio | max abs diff |",
        "|---|---|---|---|---|---|",
        *[f"| {m} | {s} | {a:.2f} | {b:.2f} | {r:.1f}x | {d:.1e} |" for m, s, a, b, r, d in rows],
        "",
        f"One forward of the gpt2 4L d128 model (1 row x 1 position; slope from 64 to 256 rows x 20 positions): {cost[0] * 1e3:.1f} ms "
        f"fixed + {cost[1] * 1e6:.1f} us per row-position, so its fixed cost is that of {cost[0] / cost[1]:.0f} "
        "row-positions (`interp.run.planner.FORWARD_COST` plans forwards with 128).",
        "",
        "Attribution vs exact patching (exact = patched metric minus corrupt metric), 32 prompts:",
        "",
        "| model | task | site | Pearson | Spearman |",
        "|---|---|---|---|---|",
        *[f"| {m} | {t} | {s} | {p:.3f} | {q:.3f} |" for m, t, s, p, q in fid],
        "",
    ]
    section = "\n".join(lines)
    text = path.read_text() if path.exists() else "# Benchmark results\n\n"
    if header in text:  # replace this section, keep the others
        start = text.index(header)
        end = text.find("\n## ", start + 1)
        text = text[:start] + section + (text[end + 1 :] if end != -1 else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

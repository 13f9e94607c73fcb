"""Peak memory and time against model size and prompt length, CPU, one fresh
process per case, beside TransformerLens doing the same work on the same bridge.

    python benchmarks/memory.py [--only ID,ID] [--budget-gb 14] [--out benchmarks/memory.json]
    python benchmarks/memory.py --render        # only rewrite the Memory section of RESULTS.md

Models are random-weight HF folders of real shapes (SmolLM2-135M, Llama-3.2-1B, Qwen2.5-1.5B; the
Llama-3.1-8B shape only on paper), written once under $INTERP_CACHE/memory-bench/ (never into the
repository) with a word-level tokenizer; tokens are random ids. Each case runs in its own
subprocess, so its peak is its own: the process's resident high-water mark (VmHWM) over the load
(`load_peak`), and over the work alone after a reset of the counter (`interp.memory.peak`:
`work_peak`, which starts from the resident size after the load). A watchdog kills a case whose
resident size passes --budget-gb (or that leaves the machine under 1.5 GB free) and records it as
skipped. The JSON is rewritten atomically after each case and a rerun skips the cases it holds,
so a cut-off run keeps its rows. Each row notes the commit it ran at and the load average.

Cases: the load alone (TransformerLens's weight processing, then from interp's processed-weight
cache); EAP; EAP-IG (5 steps); activation patching of heads (site z, every head, all positions);
attribution patching (site z); exact edges on a fixed sample of edges; dictionary training (30
transcoders) and an attribution graph at the SmolLM2 shape; and TransformerLens's
`patching.get_act_patch_attn_head_out_all_pos` and `tools.analysis.attribution_patching` (node
granularity) on the same bridge. Axes: model size at 8 prompts x 16 tokens, and prompt length
128..2048 tokens at the SmolLM2 shape (batch 1).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "memory.json"
RESULTS = HERE / "RESULTS.md"
GIB = 2**30

# real shapes (the models' config.json values that set the sizes); "paper": never built here
SHAPES = {
    "smollm2-135m": ("llama", dict(hidden_size=576, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                                   intermediate_size=1536, vocab_size=49152, tie_word_embeddings=True,
                                   rope_theta=100000.0, max_position_embeddings=8192)),
    "llama-3.2-1b": ("llama", dict(hidden_size=2048, num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
                                   intermediate_size=8192, vocab_size=128256, tie_word_embeddings=True,
                                   rope_theta=500000.0, max_position_embeddings=131072, head_dim=64)),
    "qwen2.5-1.5b": ("qwen2", dict(hidden_size=1536, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
                                   intermediate_size=8960, vocab_size=151936, tie_word_embeddings=True,
                                   rope_theta=1000000.0, max_position_embeddings=32768)),
    "llama-3.1-8b": ("llama", dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                                   intermediate_size=14336, vocab_size=128256, tie_word_embeddings=False,
                                   rope_theta=500000.0, max_position_embeddings=131072, head_dim=128)),
}
DTYPE_BYTES = {"float32": 4, "bfloat16": 2}


def hf_config(shape: str):
    import transformers as hf

    family, sizes = SHAPES[shape]
    cls = hf.LlamaConfig if family == "llama" else hf.Qwen2Config
    return cls(**sizes, bos_token_id=2, eos_token_id=3, pad_token_id=0, architectures=[
        "LlamaForCausalLM" if family == "llama" else "Qwen2ForCausalLM"])


def n_params(shape: str) -> int:
    """Unique parameters of the shape (a model on the meta device: no memory)."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        m = AutoModelForCausalLM.from_config(hf_config(shape))
    return sum(p.numel() for p in {id(p): p for p in m.parameters()}.values())


def act_bytes_per_token(shape: str, dtype: str) -> int:
    """Bytes of one forward's hooked activations per token, the attention pattern left out (it
    grows with the length; see `pattern_bytes`): per layer the residual stream and its norms (7
    d_model), q, k, v, z, the gated MLP's three d_mlp vectors, plus the logits (float32)."""
    _, s = SHAPES[shape]
    d, dm, L = s["hidden_size"], s["intermediate_size"], s["num_hidden_layers"]
    dh = s.get("head_dim", d // s["num_attention_heads"])
    qkvz = dh * (2 * s["num_attention_heads"] + 2 * s["num_key_value_heads"])
    return L * (7 * d + qkvz + 3 * dm) * DTYPE_BYTES[dtype] + s["vocab_size"] * 4


def model_dir(shape: str, dtype: str) -> Path:
    from interp.files.storage import cache_dir

    return cache_dir() / "memory-bench" / f"{shape}-{dtype}"


def build(shape: str, dtype: str) -> Path:
    """The random-weight HF folder of `shape` (written once, atomically, in its own process)."""
    import torch
    from transformers import AutoModelForCausalLM

    from interp.model.building import DEFAULT_WORDS, save_model_dir
    from interp.tasks.base import word_tokenizer

    path = model_dir(shape, dtype)
    if (path / "config.json").exists():
        return path
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(hf_config(shape), dtype=getattr(torch, dtype))
    save_model_dir(model, word_tokenizer(DEFAULT_WORDS), path)
    return path


# ---------------------------------------------------------------------------------- the cases

def _case(shape, method, impl="interp", dtype="float32", n=8, pos=16, timeout=1200, **extra):
    cid = f"{shape}/{dtype}/{method}/{impl}/{n}x{pos}"
    return dict(id=cid, shape=shape, dtype=dtype, method=method, impl=impl, prompts=n, positions=pos,
                timeout=timeout, **extra)


def cases() -> list[dict]:
    """Every case, in the order they run: the headline axes first (the size axis at SmolLM2 and
    1B), then the dictionary cases, the length axis, Qwen2.5-1.5B in bf16, and the costly rest."""
    s, b, q = "smollm2-135m", "llama-3.2-1b", "qwen2.5-1.5b"
    core = ["load", "load-cached", "eap", "attribution", ("attribution", "tl"), "eap_ig"]
    out = [_case(s, *(m if isinstance(m, tuple) else (m,)), **_sizes(m)) for m in core]
    out += [_case(b, *(m if isinstance(m, tuple) else (m,)), **_sizes(m), timeout=1500) for m in core]
    out += [_case(b, "act_patch", timeout=1800), _case(b, "act_patch", "tl", cells=16)]
    out += [_case(q, *(m if isinstance(m, tuple) else (m,)), dtype="bfloat16", **_sizes(m), timeout=1500)
            for m in ("load", "load-cached", "eap", "attribution", "eap_ig")]
    out += [_case(s, "dict_train", n=4, pos=128), _case(s, "graph", n=1, pos=16)]
    for pos in (128, 256, 512, 1024, 2048):
        out += [_case(s, "eap", n=1, pos=pos, timeout=900), _case(s, "attribution", n=1, pos=pos, timeout=900)]
    out += [_case(s, "exact", edges=128, timeout=600), _case(s, "act_patch", timeout=900), _case(s, "act_patch", "tl", timeout=600)]
    out += [_case(s, "attribution", "tl", n=1, pos=pos, timeout=900) for pos in (128, 512)]
    out += [_case(s, "eap_ig", n=1, pos=pos, timeout=900) for pos in (128, 512, 2048)]
    out += [_case(q, "attribution", "tl", dtype="bfloat16", timeout=1500), _case(b, "exact", edges=128),
            _case(s, "act_patch", n=1, pos=512)]
    return out


def _sizes(method) -> dict:
    return dict(n=0, pos=0, cache=False) if method == "load" else dict(n=0, pos=0) if method == "load-cached" else {}


def random_task(vocab: int, n: int, length: int, seed: int = 0):
    """Random tokens; corrupt rows differ from clean at position 1; logit diff of two tokens at the end."""
    import torch

    from interp.tasks.base import Task

    g = torch.Generator().manual_seed(seed)
    clean = torch.randint(5, vocab, (n, length), generator=g)
    corrupt = clean.clone()
    corrupt[:, 1] = torch.randint(5, vocab, (n,), generator=g)
    a, b = torch.randint(5, vocab, (2, n), generator=g)
    return Task("random", "x", clean, corrupt, a, b, torch.full((n,), length - 1), ("",) * n)


def _tl_metric(task, per_example: bool):
    from interp import metrics

    if not per_example:
        return lambda logits: metrics.logit_diff(logits, task.correct, task.incorrect, task.answer_pos).mean()
    calls = [0]

    def metric_fn(logits):  # TL runs example i's clean forward, then its corrupt forward + backward
        i = calls[0] // 2
        calls[0] += 1
        return metrics.logit_diff(logits, task.correct[i:i + 1], task.incorrect[i:i + 1], task.answer_pos[i:i + 1]).mean()

    return metric_fn


def work(case: dict, model):
    """(a function doing the case's work, a note) for a loaded model; setup runs here, outside the timing."""
    import torch

    from interp import patching
    from interp.circuits import eap, eap_ig, exact

    task = random_task(model.cfg.d_vocab, case["prompts"], case["positions"])
    m, impl = case["method"], case["impl"]
    if m == "eap":
        return lambda: eap(model, task, progress=False), ""
    if m == "eap_ig":
        return lambda: eap_ig(model, task, steps=5, progress=False), "5 steps"
    if m == "attribution" and impl == "interp":
        return lambda: patching.attribution_patch(model, task, site="z"), "site z"
    if m == "attribution":
        from transformer_lens.tools.analysis.attribution_patching import EdgeAttributionConfig, attribution_patch

        def tl_attr():
            return attribution_patch(model, task.clean, task.corrupt, _tl_metric(task, True),
                                     EdgeAttributionConfig(granularity="node"))
        return tl_attr, "node granularity, one example at a time"
    if m == "act_patch" and impl == "interp":
        return lambda: patching.activation_patch(model, task, site="z", progress=False), "site z, every head, all positions"
    if m == "act_patch":
        import pandas as pd
        from transformer_lens import patching as tlp

        L, H = model.cfg.n_layers, model.cfg.n_heads
        cells = [(l, h) for l in range(L) for h in range(H)]
        if case.get("cells"):
            step = max(1, len(cells) // case["cells"])
            cells = cells[::step][: case["cells"]]
        df = pd.DataFrame(cells, columns=["layer", "head"])

        def tl_patch():
            _, cache = model.run_with_cache(task.clean)
            return tlp.get_act_patch_attn_head_out_all_pos(model, task.corrupt, cache, _tl_metric(task, False),
                                                           index_axis_names=None, index_df=df)
        return tl_patch, f"get_act_patch_attn_head_out_all_pos, {len(cells)} of {L * H} cells"
    if m == "exact":
        from interp.circuits.wiring import Wiring
        from interp.circuits.eap import edge_index

        s, r, _, _ = edge_index(Wiring(model))
        step = max(1, len(s) // case["edges"])
        pairs = list(zip(s, r))[::step][: case["edges"]]
        return lambda: exact(model, task, pairs, progress=False), f"{len(pairs)} of {len(s)} edges"
    if m == "dict_train":
        from interp.features.train import Recipe, mlp_sites, train_dictionaries

        g = torch.Generator().manual_seed(0)
        rows = torch.randint(5, model.cfg.d_vocab, (64, case["positions"]), generator=g)
        valid = torch.ones_like(rows, dtype=torch.bool)
        valid[:, 0] = False
        recipe = Recipe(n_features=1024, k=32, tokens=10 * case["prompts"] * (case["positions"] - 1), rows=case["prompts"],
                        checkpoint_every=10**6)
        tmp = tempfile.mkdtemp(prefix="memory-bench-")
        pairs = [mlp_sites(l) for l in range(model.cfg.n_layers)]
        return (lambda: train_dictionaries(model, pairs, rows, valid, tmp, recipe=recipe, progress=False),
                f"{len(pairs)} transcoders x 1024 features, 10 steps of {case['prompts']} rows")
    if m == "graph":
        from interp import run
        from interp.features.attribute import attribute
        from interp.features.train import Recipe, fit, mlp_sites

        tokens = task.clean[:1]
        names = [n for l in range(model.cfg.n_layers) for n in mlp_sites(l)]
        _, acts = run.cache(model, tokens, names)
        tcs = []
        for l in range(model.cfg.n_layers):
            a, b = mlp_sites(l)
            x, y = acts[a][0].float(), acts[b][0].float()
            tcs.append(fit(x, y, site_in=a, site_out=b, recipe=Recipe(n_features=1024, k=8, tokens=64), batch=16))
        del acts
        return (lambda: attribute(model, tokens, tcs, max_feature_nodes=256, progress=False),
                "30 transcoders x 1024 features (fit on the prompt), 256 feature nodes")
    raise ValueError(f"unknown case {case['id']}")


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


def child(case: dict) -> dict:
    """Runs in the case's own process: load, then the work under `interp.memory.peak`."""
    base = _status_kb("VmRSS")
    import torch

    import interp
    from interp import memory

    torch.manual_seed(0)
    path = model_dir(case["shape"], case["dtype"])
    kwargs = {"dtype": getattr(torch, case["dtype"])}
    if case.get("cache") is False:
        kwargs["weights_cache"] = False
    imported = _status_kb("VmRSS")
    t0 = time.perf_counter()
    with memory.peak("cpu") as lp:
        model = interp.load(path, **kwargs)
    load_s = time.perf_counter() - t0
    after = _status_kb("VmRSS")
    row = {"load_s": round(load_s, 2), "rss_start": base, "rss_imported": imported, "load_peak": lp.bytes,
           "rss_loaded": after, "threads": torch.get_num_threads()}
    if case["method"].startswith("load"):
        return row
    fn, note = work(case, model)
    ready = _status_kb("VmRSS")
    with memory.peak("cpu") as wp:
        t0 = time.perf_counter()
        fn()
        secs = time.perf_counter() - t0
    row.update(seconds=round(secs, 2), rss_ready=ready, work_peak=wp.bytes, note=note, what=wp.what)
    return row


# ---------------------------------------------------------------------------------- the runner

def _rss_of(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _available() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def _watched(cmd: list[str], case: dict, budget: int) -> tuple[str, str, int, str]:
    """(stdout, stderr, largest resident size seen, why it was killed or "") of `cmd`, killed past
    `budget` bytes resident, under 1.5 GiB free on the machine, or past the case's timeout."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t0, top, why = time.time(), 0, ""
    while proc.poll() is None:
        time.sleep(0.5)
        rss = _rss_of(proc.pid)
        top = max(top, rss)
        if rss > budget:
            why = f"skipped: resident size passed the {budget / GIB:.0f} GiB budget (killed at {rss / GIB:.1f} GiB)"
        elif _available() < 1.5 * GIB:
            why = f"skipped: the machine fell under 1.5 GiB free (killed at {rss / GIB:.1f} GiB resident)"
        elif time.time() - t0 > case["timeout"]:
            why = f"skipped: past its {case['timeout']} s timeout"
        if why:
            proc.kill()
            break
    out, err = proc.communicate()
    return out, err, top, why


def run_case(case: dict, budget: int) -> dict:
    """The case in a fresh process, watched (`_watched`)."""
    cmd = [sys.executable, __file__, "--child", json.dumps(case)]
    t0 = time.time()
    if case["method"] == "load-cached":  # the cache written first by a load of its own, not measured
        import torch

        from interp.model.load_cache import processed_path

        if not processed_path(model_dir(case["shape"], case["dtype"]), getattr(torch, case["dtype"])).exists():
            _, _, _, why = _watched(cmd, case, budget)
            if why:
                return {**{k: v for k, v in case.items() if k != "timeout"}, "status": f"{why} (writing the cache)"}
            t0 = time.time()
    out, err, top, why = _watched(cmd, case, budget)
    wall = round(time.time() - t0, 1)
    row = {k: v for k, v in case.items() if k != "timeout"}
    found = re.findall(r"^RESULT (.*)$", out, re.M)
    if found and not why:
        row.update(json.loads(found[-1]), status="ok")
    else:
        tail = (err or "").strip().splitlines()[-3:]
        row.update(status=why or f"failed: {' | '.join(tail)[-400:]}", watched_peak=top)
    row.update(wall_s=wall, commit=subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True,
                                                  text=True).stdout.strip(),
               uncommitted=[ln[3:] for ln in subprocess.run(["git", "status", "--porcelain", "interp"], cwd=HERE.parent,
                                                              capture_output=True, text=True).stdout.splitlines()],
               load_avg=round(os.getloadavg()[0], 2), date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    return row


def _write(data: dict, path: Path) -> None:
    from interp.files.storage import write_text_atomic

    write_text_atomic(path, json.dumps(data, indent=1) + "\n")


def shape_info(shape: str, dtype: str) -> dict:
    p = n_params(shape)
    return {"params": p, "weight_bytes": p * DTYPE_BYTES[dtype], "act_bytes_per_token": act_bytes_per_token(shape, dtype)}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--child")
    p.add_argument("--build", nargs=2)
    p.add_argument("--only", default="")
    p.add_argument("--budget-gb", type=float, default=14)
    p.add_argument("--out", default=str(OUT))
    p.add_argument("--render", action="store_true")
    a = p.parse_args()
    if a.child:
        print("RESULT " + json.dumps(child(json.loads(a.child))), flush=True)
        return
    if a.build:
        print(build(*a.build))
        return
    out = Path(a.out)
    if a.render:
        render(json.loads(out.read_text()))
        return
    import torch

    data = json.loads(out.read_text()) if out.exists() else {"rows": []}
    data.update(machine=f"{platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, shared with other jobs",
                command="python benchmarks/memory.py", budget_gb=a.budget_gb)
    data.setdefault("shapes", {})
    for shape in SHAPES:
        for dt in DTYPE_BYTES:
            data["shapes"].setdefault(f"{shape}/{dt}", shape_info(shape, dt))
    done = {r["id"] for r in data["rows"] if r["status"] == "ok" or r["status"].startswith("skipped")}
    only = set(filter(None, a.only.split(",")))
    for case in cases():
        if case["id"] in done or (only and case["id"] not in only and case["method"] not in only and case["shape"] not in only):
            continue
        if not (model_dir(case["shape"], case["dtype"]) / "config.json").exists():
            print(f"building {case['shape']} {case['dtype']}", flush=True)
            subprocess.run([sys.executable, __file__, "--build", case["shape"], case["dtype"]], check=True)
        print(f"{case['id']} ...", flush=True)
        row = run_case(case, int(a.budget_gb * GIB))
        row.update(data["shapes"][f"{case['shape']}/{case['dtype']}"])
        data["rows"] = [r for r in data["rows"] if r["id"] != case["id"]] + [row]
        _write(data, out)
        print(f"  {row['status']}  load_peak {row.get('load_peak', 0) / GIB:.2f} GiB  work_peak "
              f"{row.get('work_peak', 0) / GIB:.2f} GiB  {row.get('seconds', '')} s", flush=True)
    render(data)


# ---------------------------------------------------------------------------------- the table

START, END = "<!-- memory:start -->", "<!-- memory:end -->"
PAPER = "llama-3.1-8b/bfloat16"


def _features(row: dict, shapes: dict) -> list[float]:
    """[1, weight bytes, tokens x activation bytes per token, prompts x positions^2 x layers x heads x
    dtype bytes (the attention scores and pattern, which grow with the square of the length)]."""
    sh = shapes[f"{row['shape']}/{row['dtype']}"]
    _, sizes = SHAPES[row["shape"]]
    n, pos = row["prompts"], row["positions"]
    return [float(GIB), sh["weight_bytes"], n * pos * sh["act_bytes_per_token"],
            n * pos * pos * sizes["num_hidden_layers"] * sizes["num_attention_heads"] * DTYPE_BYTES[row["dtype"]]]


def _peak(row: dict) -> int | None:
    if row.get("status") != "ok":
        return None
    return row["load_peak"] if row["method"].startswith("load") else max(row["load_peak"], row["work_peak"])


def _group(row: dict) -> str:
    """A load's fit is per dtype (a bf16 load is processed in float32), a work's is not."""
    key = f"{row['method']}/{row['impl']}"
    return f"{key}/{row['dtype']}" if row["method"].startswith("load") else key


def fit(data: dict) -> dict:
    """Per work with at least 4 measured rows: the non-negative least-squares fit of the peak to the
    features above (c + a W + b T A + d P), its largest relative error over those rows, and what it
    predicts for the Llama-3.1-8B shape in bf16 at 8 x 16 and 1 x 2048 tokens. Per load and dtype:
    c + a W through the rows (a dtype with one row keeps the float32 fit's c)."""
    import numpy as np
    from scipy.optimize import nnls

    shapes, out = data["shapes"], {}
    groups: dict[str, list[dict]] = {}
    for r in data["rows"]:
        if _peak(r) is not None and not r.get("variant"):
            groups.setdefault(_group(r), []).append(r)
    for key in sorted(groups, key=lambda k: not k.endswith("float32")):  # float32 loads first: their c is reused
        rows = groups[key]
        load = key.startswith("load")
        if len(rows) < 4 and not load:
            continue
        x = np.array([_features(r, shapes) for r in rows]) / GIB
        y = np.array([_peak(r) for r in rows], dtype=float) / GIB
        full = np.zeros(4)
        if load and len(rows) == 1:
            base = out.get(key.rsplit("/", 1)[0] + "/float32")
            if base is None:
                continue
            full[0] = base["c_gib"]
            full[1] = (y[0] - full[0]) / x[0, 1]
        else:
            cols = [0, 1] if load else [0, 1, 2, 3]
            scale = np.array([1 / x[:, c].max() if x[:, c].max() else 1 for c in cols])
            coef, _ = nnls(x[:, cols] * scale, y)
            full[cols] = coef * scale
        pred = x @ full
        err = np.abs(pred - y) / y
        paper = {}
        if not load or key.endswith("bfloat16"):
            for n, pos in ((0, 0),) if load else ((8, 16), (1, 2048)):
                f = np.array(_features({"shape": "llama-3.1-8b", "dtype": "bfloat16", "prompts": n, "positions": pos},
                                       shapes)) / GIB
                paper["load" if load else f"{n}x{pos}"] = round(float(f @ full), 2)
        out[key] = {"rows": len(rows), "c_gib": round(float(full[0]), 3), "a_per_weight_byte": round(float(full[1]), 3),
                    "b_per_activation_byte": round(float(full[2]), 3), "d_per_pattern_byte": round(float(full[3]), 3),
                    "max_rel_err": round(float(err.max()), 3), "llama-3.1-8b_bf16_gib": paper,
                    "predicted": {r["id"]: round(float(p), 3) for r, p in zip(rows, pred)}}
        for r in data["rows"]:  # the rows that did not finish (killed at the budget): what the fit says they need
            if _group(r) == key and _peak(r) is None and not r.get("variant"):
                out[key]["predicted"][r["id"]] = round(float(np.array(_features(r, shapes)) / GIB @ full), 3)
    return out


def _gib(v) -> str:
    return "" if v is None else f"{v / GIB:.2f}"


def table(data: dict) -> str:
    fits = data.get("fit", {})
    lines = [
        f"{START}",
        "## Memory: peak resident memory and time against model size and prompt length",
        "",
        "`python benchmarks/memory.py` (table rendered from `benchmarks/memory.json`). "
        f"{data.get('machine', '')}; random weights of real shapes; each case in a fresh process. "
        "*load peak*: the process's resident high-water mark over `interp.load` (imports included); "
        "*resident*: after the load (a warm processed-weight cache maps the weights, so they become resident "
        "as the work first reads them); *work peak*: the high-water mark over the work alone (`interp.memory.peak`, "
        "reset after the load). *peak* = max(load peak, work peak); *fit*: the formula below for the row's method. "
        "Seconds are wall time on a machine shared with other jobs (load average in the JSON), so they are "
        "noisy; the peaks are not.",
        "",
        "| shape | dtype | work | impl | prompts x tokens | weights GiB | load peak | resident | work peak | peak | fit | s | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in data["rows"]:
        sh = data["shapes"][f"{r['shape']}/{r['dtype']}"]
        pred = fits.get(_group(r), {}).get("predicted", {}).get(r["id"])
        ok = r["status"] == "ok"
        secs = r.get("load_s") if r["method"].startswith("load") else r.get("seconds")
        note = (r.get("note") or "") if ok else r["status"]
        if r["method"] == "load" and ok:
            note = "TransformerLens's weight processing (no cache)"
        if r["method"] == "load-cached" and ok:
            note = "processed weights mapped from interp's cache"
        if r.get("variant"):
            note = f"{r['variant']} (commit {r['commit']}): {note}"
        tok = "" if r["method"].startswith("load") else f"{r['prompts']} x {r['positions']}"
        lines.append(f"| {r['shape']} | {r['dtype']} | {r['method']} | {r['impl']} | {tok} | {sh['weight_bytes'] / GIB:.2f} | "
                     f"{_gib(r.get('load_peak'))} | {_gib(r.get('rss_loaded'))} | {_gib(r.get('work_peak'))} | "
                     f"{_gib(_peak(r))} | {'' if pred is None else f'{pred:.2f}'} | {'' if secs is None else secs} | {note} |")
    lines += ["", "The formula, fitted per work (non-negative least squares over its measured rows; GiB): "
              "peak = c + a x weight bytes + b x (tokens x activation bytes per token) + d x (prompts x positions^2 x "
              "layers x heads x dtype bytes), where activation bytes per token = layers x (7 d_model + q,k,v,z widths "
              "+ 3 d_mlp) x dtype bytes + vocab x 4 (one forward's hooked activations and its logits).", "",
              "| work | rows | c GiB | a | b | d | max relative error | Llama-3.1-8B bf16 (15.0 GiB of weights) |",
              "|---|---|---|---|---|---|---|---|"]
    for key, f in fits.items():
        paper = ", ".join(f"{k}: {v:.1f} GiB" for k, v in f["llama-3.1-8b_bf16_gib"].items())
        lines.append(f"| {key} | {f['rows']} | {f['c_gib']} | {f['a_per_weight_byte']} | {f['b_per_activation_byte']} | "
                     f"{f['d_per_pattern_byte']} | {f['max_rel_err']:.1%} | {paper} |")
    lines += ["", *data.get("notes", []), END]
    return "\n".join(lines) + "\n"


def notes(data: dict) -> list[str]:
    """The findings, every number read from the rows."""
    by = {r["id"]: r for r in data["rows"]}

    def peak(cid: str) -> str:
        r = by.get(cid)
        return "not measured" if r is None else _gib(_peak(r)) + " GiB" if r["status"] == "ok" else r["status"]

    def ratio(cid: str) -> str:
        r = by.get(cid)
        if r is None or r["status"] != "ok":
            return ""
        w = data["shapes"][r["shape"] + "/" + r["dtype"]]["weight_bytes"]
        return f" ({_peak(r) / w:.1f}x the weights)"

    s, b, q = "smollm2-135m/float32", "llama-3.2-1b/float32", "qwen2.5-1.5b/bfloat16"
    out = [
        "**The load overhead.** Before the fix (rows marked so, commit 79e6097) a load without the processed-weight cache "
        f"peaked at {peak(s + '/load/interp/0x0@before-fix')}{ratio(s + '/load/interp/0x0@before-fix')} on the SmolLM2 "
        f"shape, and the Llama-3.2-1B shape was {peak(b + '/load/interp/0x0@before-fix')}. Where the copies came from "
        "(measured step by step on SmolLM2's shape): TransformerLens's `ProcessWeights.fold_layer_norm`, `center_unembed` "
        "and `fold_value_biases` each begin by cloning every tensor of the state dict, and their caller rebinds the dict "
        "to the clone, so while `center_unembed` clones, the model's own weights, fold_layer_norm's copy and "
        "center_unembed's copy are all alive (live tensors 1.82 GiB = 3 x 0.61 GiB); the unembedding is cloned once "
        "more to untie it; and glibc kept 0.39 GiB of the freed copies resident after the load. The fix "
        "(`interp.model.load_cache.lean_processing`, `release_free_memory`): each of those steps receives its input one "
        "tensor at a time, freed as soon as its clone exists, and the allocator's free heap is returned after the "
        "load; the weights are exactly TransformerLens's own (tests/test_load_cache.py, five families and dtypes). "
        f"After: SmolLM2 {peak(s + '/load/interp/0x0')}{ratio(s + '/load/interp/0x0')}, Llama-3.2-1B "
        f"{peak(b + '/load/interp/0x0')}{ratio(b + '/load/interp/0x0')}, Qwen2.5-1.5B in bf16 "
        f"{peak(q + '/load/interp/0x0')}{ratio(q + '/load/interp/0x0')}: what is left is the model's own weights read "
        "from the file, one processed copy, and the unembedding untied and centred; a bf16 model is processed in "
        "float32 (TransformerLens upcasts), hence the larger ratio. With the processed-weight cache (every load after "
        f"the first) the load peaks at {peak(s + '/load-cached/interp/0x0')}, {peak(b + '/load-cached/interp/0x0')} and "
        f"{peak(q + '/load-cached/interp/0x0')}: the processed weights are memory-mapped and become resident as the work "
        "reads them, so a work's peak holds the weights once.",
        "",
        f"**At the 1B shape** (8 prompts x 16 tokens, float32): EAP {peak(b + '/eap/interp/8x16')}, EAP-IG (5 steps) "
        f"{peak(b + '/eap_ig/interp/8x16')} in {by.get(b + '/eap_ig/interp/8x16', {}).get('seconds')} s, attribution "
        f"patching {peak(b + '/attribution/interp/8x16')} in {by.get(b + '/attribution/interp/8x16', {}).get('seconds')} s "
        f"(TransformerLens's node attribution {peak(b + '/attribution/tl/8x16')} in "
        f"{by.get(b + '/attribution/tl/8x16', {}).get('seconds')} s), activation patching of every head "
        f"{peak(b + '/act_patch/interp/8x16')} in {by.get(b + '/act_patch/interp/8x16', {}).get('seconds')} s "
        f"(TransformerLens {peak(b + '/act_patch/tl/8x16')} for 16 of the 512 cells in "
        f"{by.get(b + '/act_patch/tl/8x16', {}).get('seconds')} s).",
        "",
        "**Prompt length.** At 1 x 1024 tokens on the SmolLM2 shape EAP peaked at "
        f"{peak(s + '/eap/interp/1x1024')} and attribution patching at {peak(s + '/attribution/interp/1x1024')}; at "
        f"1 x 2048 EAP was {peak(s + '/eap/interp/1x2048')} and attribution patching "
        f"{peak(s + '/attribution/interp/1x2048')}. The growth is the attention scores and pattern of every layer "
        "and head, kept for the backward pass (the d term, quadratic in the length): in the code measured here "
        "`batch_size` chunks prompts, and one long prompt is one chunk. A row killed at the budget shows the fit's prediction "
        "beside it; the resident size it had reached is a lower bound on its peak, so where that bound exceeds the "
        "prediction the formula underestimates long prompts.",
        "",
        "**8B on paper** (Llama-3.1-8B shape, bf16, 15.0 GiB of weights): the fits' last column. A first load without the "
        "cache needs the bf16 load fit's peak (the processing runs in float32); every later load maps the cache and "
        "the work's peak follows its fit. These extrapolate from shapes up to 1.5B parameters and assume bf16 "
        "activations cost half of float32's, as the bytes in the formula say.",
        "",
        "Rows ran against the working tree, which held other engineers' uncommitted edits while they ran: rows that "
        "carry `uncommitted` in the JSON list them beside their commit; the earlier rows ran while at least "
        "interp/run/{batched,runner}.py (seen at 07:37 UTC) and interp/circuits/{circuit,eap,exact,wiring}.py (seen "
        "at 08:17 UTC) had uncommitted edits. The work peaks include the weights as the work reads them "
        "from the mapped cache, so a work's peak minus the resident size after its load is not the work's own memory.",
    ]
    return out


def render(data: dict, path: Path = OUT) -> None:
    """Fit, store the fit in the JSON, and write the table into RESULTS.md between its markers."""
    from interp.files.storage import write_text_atomic

    data["fit"] = fit(data)
    data["notes"] = notes(data)
    _write(data, path)
    text = RESULTS.read_text()
    block = table(data)
    if START in text:
        text = text[: text.index(START)] + block + text[text.index(END) + len(END) + 1:]
    else:
        text = text.rstrip("\n") + "\n\n" + block
    write_text_atomic(RESULTS, text)
    print(block)


if __name__ == "__main__":
    main()

"""The committed dictionaries: which sites, recipes and text each model's set trains on, at each
budget, and where they live.

    python -m interp.features.suite train NAME... [--budget quick|cpu]  train (resumes), save
    python -m interp.features.suite score NAME... [--budget ...] --json F  score them: one JSON
    python -m interp.features.suite curve NAME --budget B [--layers ...] --json F [--bench J]
                                                  score each kept stretch: FVE, L0, dead by tokens seen
    interp doc features --json F --doc D                            render D's regions from F

NAME is "zoo" (zoo:lm-gpt2: a transcoder per layer and an SAE on the middle residual stream,
its own English text), "smollm2" (smollm2-135m: a transcoder per layer, 30, and an SAE on layer
15's residual stream, read from the "docstrings" text) or "smollm2-english" (smollm2-135m: 16,384-
feature transcoders, read from the "english" text, budgets "cpu16k" and "full16k"; `--layers 3,15,27`
trains a subset of the layers from the same forwards, `--tokens N` raises the budget, `--every N`
keeps the dictionaries after each N tokens under <folder>/tokens-<n>/ for a curve). Weights go to
$INTERP_CACHE/dictionaries/<model>/<budget>[-layers-...]/ (never into the repository): load one
with `interp.features.suite.load_dictionaries("smollm2")` or `Dictionary.load(path)`.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
from torch import Tensor

from interp.errors import InterpError
from interp.features.corpus import describe, token_rows
from interp.features.dictionary import Dictionary
from interp.features.train import Recipe, from_checkpoint, mlp_sites, train_dictionaries
from interp.sites import layer_of
from interp.files.storage import cache_dir, write_text_atomic

__all__ = ["SUITES", "Suite", "commit", "folder", "load_dictionaries", "score", "train_suite"]


@dataclass(frozen=True)
class Suite:
    model: str
    source: str
    n_layers: int
    sae_layer: int | None  # None: transcoders only
    budgets: dict  # budget -> Recipe
    n_ctx: int = 128
    zoo_rows: int = 20000  # sentences for the zoo source
    eval_rows: int = 8  # held-out rows scored
    fit_rows: int = 32  # training rows the dense controls are fitted on

    def pairs(self, layers: tuple[int, ...] | None = None) -> list[tuple[str, str]]:
        """The (site_in, site_out) of each dictionary: a transcoder at each of `layers` (all by
        default), then the SAE (only with every layer)."""
        if layers is not None and (not layers or any(not 0 <= l < self.n_layers for l in layers)):
            raise InterpError(f"layers {layers} must be a non-empty subset of 0..{self.n_layers - 1}")
        out = [mlp_sites(l) for l in (range(self.n_layers) if layers is None else layers)]
        if self.sae_layer is None or layers is not None:
            return out
        sae = f"blocks.{self.sae_layer}.hook_resid_post"
        return out + [(sae, sae)]


SUITES = {
    "zoo": Suite("zoo:lm-gpt2", "zoo", 4, 1, {
        "quick": Recipe(n_features=256, k=8, lr=3e-3, tokens=12_000, rows=16, dead_after=4000, checkpoint_every=50),
        "cpu": Recipe(n_features=1024, k=16, tokens=400_000, rows=128, dead_after=20_000, checkpoint_every=50),
    }, eval_rows=256, fit_rows=1024),
    "smollm2": Suite("smollm2-135m", "docstrings", 30, 15, {
        "quick": Recipe(n_features=256, k=16, tokens=4_000, rows=4, dead_after=2_000, checkpoint_every=2),
        "cpu": Recipe(n_features=1024, k=32, lr=2e-3, tokens=135_000, rows=4, dead_after=20_000, checkpoint_every=30),
    }),
    # 16,384 features a layer: "cpu16k" is for a few layers on one CPU core (about an hour of CPU time),
    # "full16k" every layer at a budget for a GPU; held-out scoring reads 64 rows (8,128 tokens), enough
    # for a feature firing once in 500 tokens to be seen about 16 times
    "smollm2-english": Suite("smollm2-135m", "english", 30, None, {
        "cpu16k": Recipe(n_features=16384, k=32, lr=2e-3, tokens=300_000, rows=8, dead_after=10_000, checkpoint_every=5),
        "full16k": Recipe(n_features=16384, k=32, lr=1e-3, tokens=100_000_000, rows=64, dead_after=1_000_000,
                       checkpoint_every=100),
    }, eval_rows=64),
}


# what a real-budget dictionary should reach at every layer: held-out FVE, and dead fraction at most
TARGETS = {"fve": 0.8, "dead": 0.1}


def _suite(name: str, budget: str) -> tuple[Suite, Recipe]:
    if name not in SUITES:
        raise InterpError(f"dictionary suite {name!r} is not one of {sorted(SUITES)}")
    suite = SUITES[name]
    if budget not in suite.budgets:
        raise InterpError(f"budget {budget!r} is not one of {sorted(suite.budgets)}")
    return suite, suite.budgets[budget]


def folder(name: str, budget: str = "cpu", layers: tuple[int, ...] | None = None) -> Path:
    """Where suite `name`'s dictionaries at `budget` (of `layers`, all by default) are kept
    ($INTERP_CACHE/dictionaries/...)."""
    suite, _ = _suite(name, budget)
    tail = budget if layers is None else f"{budget}-layers-{'-'.join(map(str, layers))}"
    return cache_dir() / "dictionaries" / suite.model.replace(":", "-") / tail


def _data(model, suite: Suite):
    """(train tokens, train mask, held-out tokens, held-out mask). The dense controls of `score`
    are fitted on the first `fit_rows` training rows."""
    if suite.source == "zoo":
        rows, valid = token_rows(model, "zoo", max_rows=suite.zoo_rows, seed=1)
        held, held_valid = token_rows(model, "zoo", max_rows=suite.eval_rows, seed=99)
        return rows, valid, held, held_valid
    rows, valid = token_rows(model, suite.source, n_ctx=suite.n_ctx)
    n = suite.eval_rows
    return rows[:-n], valid[:-n], rows[-n:], valid[-n:]  # the text's last rows are never trained on


def train_suite(name: str, budget: str = "cpu", *, layers: tuple[int, ...] | None = None, tokens: int | None = None,
                every: int | None = None, device: str | None = None, progress: bool = True) -> dict[tuple[str, str], Dictionary]:
    """Train (or resume) suite `name` at `budget`: every layer, or `layers` from the same forwards;
    `tokens` raises the budget's token count (a finished run goes on); `every` trains in stretches
    of that many tokens and keeps each stretch's dictionaries under <folder>/tokens-<n>/; `device`
    places the model (and so the training: the dictionaries train where the activations are)."""
    import interp

    suite, recipe = _suite(name, budget)
    recipe = recipe if tokens is None else replace(recipe, tokens=tokens)
    model = interp.load(suite.model, device=device)
    rows, valid, _, _ = _data(model, suite)
    out = folder(name, budget, layers)
    marks = [recipe.tokens] if every is None else [*range(every, recipe.tokens, every), recipe.tokens]
    for mark in marks:
        if every is not None and (out / f"tokens-{mark}").exists():
            continue  # kept by an earlier call
        result = train_dictionaries(model, suite.pairs(layers), rows, valid, out, recipe=replace(recipe, tokens=mark),
                                    model_name=suite.model, source=describe(suite.source), progress=progress)
        if every is not None:
            for i, d in enumerate(result.values()):
                d.save(out / f"tokens-{mark}" / f"{i}.safetensors")
    return result


def load_dictionaries(name: str, budget: str = "cpu", layers: tuple[int, ...] | None = None
                      ) -> dict[tuple[str, str], Dictionary]:
    """Suite `name`'s trained dictionaries by (site_in, site_out): the finished ones, else the
    latest checkpoint's (their meta["tokens"] says how far they got)."""
    out = folder(name, budget, layers)
    suite, _ = _suite(name, budget)
    files = [out / f"{i}.safetensors" for i in range(len(suite.pairs(layers)))]
    if all(f.exists() for f in files):
        return {(d.site_in, d.site_out): d for d in map(Dictionary.load, files)}
    return from_checkpoint(out)


def commit() -> str:
    """The checkout's short commit hash (empty where git cannot say)."""
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).parent, timeout=10).stdout.strip()
    except OSError:
        return ""


def score(name: str, budget: str = "cpu", *, progress: bool = True) -> tuple[dict, dict]:
    """(budget block, scores) of suite `name`: every dictionary scored on held-out text
    (`interp.features.quality`), with how it was trained."""
    import interp
    from interp.features.quality import scores

    suite, recipe = _suite(name, budget)
    model = interp.load(suite.model)
    train_rows, train_valid, held, held_valid = _data(model, suite)
    dicts = load_dictionaries(name, budget)
    t0 = time.perf_counter()
    rows = scores(model, list(dicts.values()), held, held_valid, rows_per_forward=16 if suite.source != "zoo" else 64,
                  progress=progress, fit_tokens=train_rows[: suite.fit_rows], fit_valid=train_valid[: suite.fit_rows])
    first = next(iter(dicts.values())).meta
    block = {**asdict(recipe), "budget": budget, "model": suite.model, "n_layers": suite.n_layers,
             "sae_layer": suite.sae_layer, "dictionaries": len(suite.pairs()), "n_ctx": suite.n_ctx, "eval_rows": suite.eval_rows,
             "fit_rows": suite.fit_rows, "source": describe(suite.source)}
    tc = [r for d, r in zip(dicts.values(), rows) if d.kind == "transcoder"]
    mean = lambda key: round(sum(r[key] for r in tc) / len(tc), 4)
    result = {
        "model": suite.model,
        "transcoders": {"count": len(tc), "fve_mean": mean("fve"), "fve_control_mean": mean("fve_control"),
                        "beat_control": sum(r["fve"] > r["fve_control"] for r in tc),
                        "ce_recovered_mean": mean("ce_recovered"), "ce_recovered_min": round(min(r["ce_recovered"] for r in tc), 4),
                        "l0_mean": mean("l0"), "dead_mean": mean("dead")},
        "trained": {"tokens": first["tokens"], "steps": first["steps"], "seconds": first["seconds"],
                    "forward_seconds": first["forward_seconds"], "finished": first["tokens"] >= recipe.tokens},
        "held_out_tokens": rows[0]["tokens"],
        "score_seconds": round(time.perf_counter() - t0, 1),
        "dictionaries": [{"site_in": d.site_in, "site_out": d.site_out, "kind": d.kind, "layer": layer_of(d.site_out),
                          **{k: round(v, 4) for k, v in r.items() if k != "tokens"}}
                         for d, r in zip(dicts.values(), rows)],
    }
    return block, result


def _beyond_random(model, dicts: list[Dictionary], held, held_valid, fit, fit_valid, *, draws: int = 1000) -> list[dict]:
    """Per dictionary: its held-out FVE minus the same-L0 random control's (the control `scores`
    fits: same seed, same L0), with a 95 % bootstrap interval over the held-out rows."""
    from interp.features.quality import random_control
    from interp.run import cache

    names = list(dict.fromkeys(n for d in dicts for n in (d.site_in, d.site_out)))

    def acts(rows, valid) -> tuple[dict[str, Tensor], Tensor]:  # name -> [tokens, d], and each token's row
        out, which = {n: [] for n in names}, []
        for i in range(0, len(rows), 16):
            _, a = cache(model, rows[i : i + 16].to(model.cfg.device), names)
            v = valid[i : i + 16]
            for n in names:
                out[n].append(a[n].float().cpu()[v])
            which.append(torch.arange(i, i + len(v))[:, None].expand(v.shape)[v])
        return {n: torch.cat(t) for n, t in out.items()}, torch.cat(which)

    with torch.no_grad():
        h, row_of = acts(held, held_valid)
        f, _ = acts(fit, fit_valid)
        gen = torch.Generator().manual_seed(0)
        picks = torch.randint(len(held), (draws, len(held)), generator=gen)  # [draws, rows] resampled rows
        out = []
        for d in dicts:
            x, y, x_fit = h[d.site_in], h[d.site_out], f[d.site_in]
            l0 = float((d.encode(x_fit) > 0).sum(-1).float().mean())
            control = random_control(d.n_features, max(1, round(l0)), x_fit, f[d.site_out])
            per_row = lambda e: torch.zeros(len(held), dtype=e.dtype).index_add_(0, row_of, e)
            err = per_row(torch.cat([(y[i : i + 2048] - d(x[i : i + 2048])).pow(2).sum(-1) for i in range(0, len(x), 2048)]))
            err_c = per_row((y - control(x)).pow(2).sum(-1))
            total = per_row((y - y.mean(0)).pow(2).sum(-1))
            diff = lambda idx: (err_c[idx].sum(-1) - err[idx].sum(-1)) / total[idx].sum(-1)  # fve - fve_random
            boot = diff(picks)
            out.append({"layer": layer_of(d.site_out), "fve_minus_random": round(float(diff(torch.arange(len(held)))), 4),
                        "ci95": [round(float(boot.quantile(0.025)), 4), round(float(boot.quantile(0.975)), 4)]})
    return out


def curve(name: str, budget: str, layers: tuple[int, ...] | None = None, *, device: str | None = None,
          progress: bool = True) -> dict:
    """Suite `name`'s dictionaries at each kept stretch (<folder>/tokens-<n>/, `train_suite(every=...)`)
    and the latest checkpoint's, scored on held-out text: FVE beside the dense and the same-L0 random
    controls, L0 and dead at each; the CE splices (zero, mean, random control) at the latest only;
    each dictionary's training history. What docs/features_budget.json holds."""
    import interp
    from interp.features.quality import scores

    suite, recipe = _suite(name, budget)
    out, n = folder(name, budget, layers), len(suite.pairs(layers))
    marks = sorted((p for p in out.glob("tokens-*") if all((p / f"{i}.safetensors").exists() for i in range(n))),
                   key=lambda p: int(p.name.split("-")[1]))
    latest = list(from_checkpoint(out).values())
    seen = latest[0].meta["tokens"]
    stretches = [d for d in (Dictionary.load(p / f"{i}.safetensors") for p in marks for i in range(n))
                 if d.meta["tokens"] < seen]  # a stretch that ends where the run stopped is the latest
    model = interp.load(suite.model, device=device)
    train_rows, train_valid, held, held_valid = _data(model, suite)
    common = dict(rows_per_forward=16, progress=progress, fit_tokens=train_rows[: suite.fit_rows],
                  fit_valid=train_valid[: suite.fit_rows])
    t0 = time.perf_counter()
    early = scores(model, stretches, held, held_valid, ce=False, **common) if stretches else []
    final = scores(model, latest, held, held_valid, **common)
    beyond = _beyond_random(model, latest, held, held_valid, train_rows[: suite.fit_rows], train_valid[: suite.fit_rows])
    row = lambda d, r: {"layer": layer_of(d.site_out), "tokens": d.meta["tokens"],
                        **{k: round(v, 4) for k, v in r.items() if k != "tokens"}}
    meta = latest[0].meta
    return {
        "budget": {**asdict(recipe), "budget": budget, "model": suite.model, "layers": [layer_of(d.site_out) for d in latest],
                   "n_layers": suite.n_layers, "n_ctx": suite.n_ctx, "eval_rows": suite.eval_rows, "fit_rows": suite.fit_rows,
                   "source": describe(suite.source), "text_tokens": int(train_valid.sum()) + int(held_valid.sum()),
                   "trainer_code": meta["code"], "targets": TARGETS},
        "gap": {"layers": len(latest), "met": sum(r["fve"] >= TARGETS["fve"] and r["dead"] <= TARGETS["dead"] for r in final)},
        "trained": {k: meta[k] for k in ("tokens", "steps", "seconds", "forward_seconds")},
        "held_out_tokens": final[0]["tokens"],
        "curve": [row(d, r) for d, r in zip(stretches, early)] + [row(d, {k: v for k, v in r.items() if not k.startswith("ce")})
                                                                  for d, r in zip(latest, final)],
        "final": [row(d, r) for d, r in zip(latest, final)],
        "beyond_random": beyond,
        "history": {str(layer_of(d.site_out)): d.meta["history"] for d in latest},
        "score_seconds": round(time.perf_counter() - t0, 1),
    }


def score_all(names: list[str], budget: str = "cpu") -> dict:
    """One JSON for docs/features.md: each suite's scores, their budgets, provenance."""
    t0 = time.perf_counter()
    out: dict = {"budget": {}}
    for name in names:
        out["budget"][name], out[name] = score(name, budget)
    out["provenance"] = {
        "commit": commit(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}",
        "wall_seconds": round(time.perf_counter() - t0, 1),
        "command": " && ".join(f"python -m interp.features.suite train {n} --budget {budget}" for n in names)
        + f" && python -m interp.features.suite score {' '.join(names)} --budget {budget} --json docs/features.json",
    }
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m interp.features.suite")
    p.add_argument("what", choices=("train", "score", "curve"))
    p.add_argument("names", nargs="*", default=sorted(SUITES))
    p.add_argument("--budget", default="cpu")
    p.add_argument("--json", default="docs/features.json", help="score: the JSON written")
    p.add_argument("--layers", default=None, help="train: these layers only, e.g. 3,15,27 (default: all)")
    p.add_argument("--tokens", type=int, default=None, help="train: this many tokens (default: the budget's)")
    p.add_argument("--every", type=int, default=None, help="train: keep the dictionaries after every N tokens")
    p.add_argument("--device", default=None, help="train, curve: where the model runs (e.g. cuda; default: interp.load's)")
    p.add_argument("--bench", default=None, help="curve: a benchmarks/dictionary_budget.py JSON to include")
    p.add_argument("--auxk", default=None, help="curve: a benchmarks/dictionary_auxk.py JSON to include")
    a = p.parse_args(argv)
    layers = None if a.layers is None else tuple(int(l) for l in a.layers.split(","))
    if a.what == "train":
        for name in a.names:
            train_suite(name, a.budget, layers=layers, tokens=a.tokens, every=a.every, device=a.device)
            print(f"saved under {folder(name, a.budget, layers)}")
    elif a.what == "curve":
        data = {"suite": a.names[0], **curve(a.names[0], a.budget, layers, device=a.device)}
        if a.bench:
            data["throughput"] = json.loads(Path(a.bench).read_text(encoding="utf-8"))
        if a.auxk:
            data["auxk"] = json.loads(Path(a.auxk).read_text(encoding="utf-8"))
        data["provenance"] = {"commit": commit(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                              "machine": f"{platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}"}
        write_text_atomic(a.json, json.dumps(data, indent=1) + "\n")
        print(f"wrote {a.json}")
    else:
        text = json.dumps(score_all(a.names, a.budget), indent=1)
        write_text_atomic(a.json, text + "\n")
        print(text)


if __name__ == "__main__":
    main()

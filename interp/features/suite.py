"""The committed dictionaries: which sites, recipes and text each model's set trains on, at each
budget, and where they live.

    python -m interp.features.suite train NAME... [--budget quick|cpu]  train (resumes), save
    python -m interp.features.suite score NAME... [--budget ...] --json F  score them: one JSON
    python -m interp.studies.features_doc --json F --doc D            render D's regions from F

NAME is "zoo" (zoo:lm-gpt2: a transcoder per layer and an SAE on the middle residual stream,
its own English text) or "smollm2" (smollm2-135m: a transcoder per layer, 30, and an SAE on layer
15's residual stream, read from the "docstrings" text). Weights go to
$INTERP_CACHE/dictionaries/<model>/<budget>/ (never into the repository): load one with
`interp.features.load_dictionaries("smollm2")` or `Dictionary.load(path)`.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from interp.errors import InterpError
from interp.features.corpus import describe, token_rows
from interp.features.dictionary import Dictionary
from interp.features.train import Recipe, from_checkpoint, mlp_sites, train_dictionaries
from interp.storage import cache_dir, write_text_atomic

__all__ = ["SUITES", "Suite", "folder", "load_dictionaries", "score", "train_suite"]


@dataclass(frozen=True)
class Suite:
    model: str
    source: str
    n_layers: int
    sae_layer: int
    budgets: dict  # budget -> Recipe
    n_ctx: int = 128
    zoo_rows: int = 20000  # sentences for the zoo source
    eval_rows: int = 8  # held-out rows scored
    fit_rows: int = 32  # training rows the dense controls are fitted on

    def pairs(self) -> list[tuple[str, str]]:
        sae = f"blocks.{self.sae_layer}.hook_resid_post"
        return [mlp_sites(l) for l in range(self.n_layers)] + [(sae, sae)]


SUITES = {
    "zoo": Suite("zoo:lm-gpt2", "zoo", 4, 1, {
        "quick": Recipe(n_features=256, k=8, lr=3e-3, tokens=12_000, rows=16, dead_after=4000, checkpoint_every=50),
        "cpu": Recipe(n_features=1024, k=16, tokens=400_000, rows=128, dead_after=20_000, checkpoint_every=50),
    }, eval_rows=256, fit_rows=1024),
    "smollm2": Suite("smollm2-135m", "docstrings", 30, 15, {
        "quick": Recipe(n_features=256, k=16, tokens=4_000, rows=4, dead_after=2_000, checkpoint_every=2),
        "cpu": Recipe(n_features=1024, k=32, lr=2e-3, tokens=135_000, rows=4, dead_after=20_000, checkpoint_every=30),
    }),
}


def _suite(name: str, budget: str) -> tuple[Suite, Recipe]:
    if name not in SUITES:
        raise InterpError(f"dictionary suite {name!r} is not one of {sorted(SUITES)}")
    suite = SUITES[name]
    if budget not in suite.budgets:
        raise InterpError(f"budget {budget!r} is not one of {sorted(suite.budgets)}")
    return suite, suite.budgets[budget]


def folder(name: str, budget: str = "cpu") -> Path:
    """Where suite `name`'s dictionaries at `budget` are kept ($INTERP_CACHE/dictionaries/...)."""
    suite, _ = _suite(name, budget)
    return cache_dir() / "dictionaries" / suite.model.replace(":", "-") / budget


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


def train_suite(name: str, budget: str = "cpu", *, progress: bool = True) -> dict[tuple[str, str], Dictionary]:
    import interp

    suite, recipe = _suite(name, budget)
    model = interp.load(suite.model)
    rows, valid, _, _ = _data(model, suite)
    return train_dictionaries(model, suite.pairs(), rows, valid, folder(name, budget), recipe=recipe, model_name=suite.model,
                 source=describe(suite.source), progress=progress)


def load_dictionaries(name: str, budget: str = "cpu") -> dict[tuple[str, str], Dictionary]:
    """Suite `name`'s trained dictionaries by (site_in, site_out): the finished ones, else the
    latest checkpoint's (their meta["tokens"] says how far they got)."""
    out = folder(name, budget)
    suite, _ = _suite(name, budget)
    files = [out / f"{i}.safetensors" for i in range(len(suite.pairs()))]
    if all(f.exists() for f in files):
        return {(d.site_in, d.site_out): d for d in map(Dictionary.load, files)}
    return from_checkpoint(out)


def _commit() -> str:
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
    from interp.sites import layer_of

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


def score_all(names: list[str], budget: str = "cpu") -> dict:
    """One JSON for docs/features.md: each suite's scores, their budgets, provenance."""
    t0 = time.perf_counter()
    out: dict = {"budget": {}}
    for name in names:
        out["budget"][name], out[name] = score(name, budget)
    out["provenance"] = {
        "commit": _commit(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}",
        "wall_seconds": round(time.perf_counter() - t0, 1),
        "command": " && ".join(f"python -m interp.features.suite train {n} --budget {budget}" for n in names)
        + f" && python -m interp.features.suite score {' '.join(names)} --budget {budget} --json docs/features.json",
    }
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m interp.features.suite")
    p.add_argument("what", choices=("train", "score"))
    p.add_argument("names", nargs="*", default=sorted(SUITES))
    p.add_argument("--budget", default="cpu")
    p.add_argument("--json", default="docs/features.json", help="score: the JSON written")
    a = p.parse_args(argv)
    if a.what == "train":
        for name in a.names:
            train_suite(name, a.budget)
            print(f"saved under {folder(name, a.budget)}")
    else:
        text = json.dumps(score_all(a.names, a.budget), indent=1)
        write_text_atomic(a.json, text + "\n")
        print(text)


if __name__ == "__main__":
    main()

"""Dictionaries scored against features known by construction: which architecture finds the truth.

Five sources of activations [tokens, d] whose sparse directions are known (`CASES`):

    independent    m = d directions, each firing alone with probability L0 / m
    correlated     the same, firing in groups of 4 through a Gaussian copula (correlation 0.7)
    hierarchical   d / 4 parents with 4 children each: a child fires only with its parent, one
                   child per firing parent
    superposition  m = 4 d directions, independent
    planted        a compiled map: one-hot token, position and previous-token variables, the
                   coordinates of an orthonormal basis laid into the residual by a random rotation;
                   every activation holds exactly three, and the dictionaries keep k = 4

Directions are uniform on the sphere (planted: orthonormal); a firing feature's magnitude is
uniform on [0.5, 1.5] (planted: 1). Every architecture trains on one stream of batches per case and
seed (`fit_each`) and is scored on fresh draws by

    mean max cosine  each true direction's best decoder row, averaged
    MCC              the mean cosine of a one-to-one matching of true directions to decoder rows
                     (scipy's linear_sum_assignment, Hungarian)
    combined         the fraction of decoder rows that mix two true directions (`combined`)

beside the same scores for a random dictionary of the same width (unit rows uniform on the sphere),
so each reads against chance; means over seeds carry 95 % t-intervals. Reconstruction is matched:
the top-k architectures keep the same k; ReLU + L1 and JumpReLU train a small grid of sparsity
coefficients in the same pass and the one whose training-set FVE is nearest BatchTopK's is scored;
each row states its held-out FVE and L0.

    python -m interp.features.truth --budget full --json docs/dictionary_truth.json
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from dataclasses import asdict, dataclass, replace
from typing import Callable

import torch
from scipy.optimize import linear_sum_assignment
from scipy.stats import norm, t as student_t
from torch import Tensor

from interp.errors import InterpError
from interp.features.dictionary import Dictionary
from interp.features.suite import commit
from interp.features.train import ARCHITECTURES, Recipe, fit_each
from interp.files.storage import write_text_atomic

__all__ = ["BUDGETS", "CASES", "Budget", "combined", "interval", "matching", "max_cosine", "run", "sample", "score"]

SITE = "blocks.0.hook_resid_post"  # a name for the dictionaries' site: the suite runs no model


def _unit(w: Tensor) -> Tensor:
    return w / w.norm(dim=-1, keepdim=True).clamp_min(1e-12)


def _magnitudes(fire: Tensor, gen: torch.Generator) -> Tensor:
    return fire * (0.5 + torch.rand(fire.shape, generator=gen, dtype=torch.float32))


def _independent(n: int, d: int, l0: float, gen: torch.Generator, m: int) -> tuple[Tensor, Tensor]:
    dirs = _unit(torch.randn(m, d, generator=gen))
    return _magnitudes(torch.rand(n, m, generator=gen) < l0 / m, gen) @ dirs, dirs


def _correlated(n: int, d: int, l0: float, gen: torch.Generator) -> tuple[Tensor, Tensor]:
    m, group, rho = d, 4, 0.7
    dirs = _unit(torch.randn(m, d, generator=gen))
    shared = torch.randn(n, m // group, generator=gen).repeat_interleave(group, dim=1)  # [n, m]
    z = rho ** 0.5 * shared + (1 - rho) ** 0.5 * torch.randn(n, m, generator=gen)
    return _magnitudes(z > float(norm.ppf(1 - l0 / m)), gen) @ dirs, dirs  # each fires with probability l0 / m


def _hierarchical(n: int, d: int, l0: float, gen: torch.Generator) -> tuple[Tensor, Tensor]:
    parents, children = d // 4, 4
    dirs = _unit(torch.randn(parents * (1 + children), d, generator=gen))  # parents first, then their children
    parent = torch.rand(n, parents, generator=gen) < (l0 / 2) / parents  # a firing parent brings one child
    which = torch.randint(children, (n, parents), generator=gen)
    child = torch.zeros(n, parents, children, dtype=torch.bool).scatter(2, which[..., None], parent[..., None])
    fire = torch.cat([parent, child.flatten(1)], dim=1)
    return _magnitudes(fire, gen) @ dirs, dirs


def _planted(n: int, d: int, l0: float, gen: torch.Generator) -> tuple[Tensor, Tensor]:
    vocab, n_pos = d // 4, d // 8
    width = 2 * vocab + n_pos  # token, position, previous token: one-hot each
    rotation, _ = torch.linalg.qr(torch.randn(d, width, generator=gen))  # [d, width], orthonormal columns
    dirs = rotation.T.contiguous()  # [width, d]
    tok, prev = torch.randint(vocab, (n,), generator=gen), torch.randint(vocab, (n,), generator=gen)
    pos = torch.randint(n_pos, (n,), generator=gen)
    return dirs[tok] + dirs[vocab + pos] + dirs[vocab + n_pos + prev], dirs


@dataclass(frozen=True)
class Case:
    """One source of activations: `make(n, d, l0, gen)` -> (activations [n, d], true directions [m, d]);
    `k`: the top-k architectures' k; `width`: dictionary features per true direction."""

    make: Callable
    l0: float = 4.0
    k: int = 4
    width: int = 2


CASES = {
    "independent": Case(lambda n, d, l0, g: _independent(n, d, l0, g, d)),
    "correlated": Case(_correlated),
    "hierarchical": Case(_hierarchical),
    "superposition": Case(lambda n, d, l0, g: _independent(n, d, l0, g, 4 * d)),
    "planted": Case(_planted, l0=3.0),
}


def sample(case: str, n: int, d: int, seed: int) -> tuple[Tensor, Tensor]:
    """(activations [n, d], true directions [m, d]) of `case`; the directions depend on `seed`
    only, the activations on `seed` and `n`."""
    if case not in CASES:
        raise InterpError(f"ground-truth case {case!r} is not one of {sorted(CASES)}")
    if d < 8 or d % 8:
        raise InterpError(f"d={d} must be a multiple of 8 (the cases split it into quarters and eighths)")
    return CASES[case].make(n, d, CASES[case].l0, torch.Generator().manual_seed(seed))


def max_cosine(dirs: Tensor, W_dec: Tensor) -> Tensor:
    """Each true direction's cosine with its best decoder row, [m]."""
    return (_unit(dirs) @ _unit(W_dec.to(dirs)).T).max(1).values


def matching(dirs: Tensor, W_dec: Tensor) -> float:
    """Mean cosine of the one-to-one matching of true directions to decoder rows that maximises it."""
    cos = (_unit(dirs) @ _unit(W_dec.to(dirs)).T).double().cpu().numpy()
    rows, cols = linear_sum_assignment(cos, maximize=True)
    return float(cos[rows, cols].mean())


def combined(dirs: Tensor, W_dec: Tensor, single: float = 0.9, pair: float = 0.95) -> float:
    """Fraction of decoder rows that are mixtures of two true directions: cosine below `single`
    with every true direction, but at least `pair` with the plane of its two nearest."""
    w, u = _unit(W_dec.to(dirs)), _unit(dirs)
    cos = w @ u.T  # [rows, m]
    best = cos.topk(2, dim=1)
    plane = torch.linalg.qr(u[best.indices].transpose(1, 2)).Q  # [rows, d, 2]: each row's two nearest, orthonormal
    in_plane = torch.einsum("rd,rdk->rk", w, plane).norm(dim=1)  # cosine of the row with that plane
    return float(((best.values[:, 0] < single) & (in_plane >= pair)).float().mean())


def interval(values: list[float]) -> dict:
    """mean and 95 % t-interval of `values` (one per seed), and the values."""
    n, mean = len(values), sum(values) / len(values)
    sd = (sum((v - mean) ** 2 for v in values) / (n - 1)) ** 0.5 if n > 1 else float("nan")
    half = float(student_t.ppf(0.975, n - 1)) * sd / n ** 0.5 if n > 1 else float("nan")
    return {"mean": mean, "lo": mean - half, "hi": mean + half, "seeds": values}


def _fve(d: Dictionary, x: Tensor) -> float:
    """Fraction of the variance of `x` its reconstruction explains."""
    with torch.no_grad():
        return float(1 - (x - d(x)).pow(2).sum() / (x - x.mean(0)).pow(2).sum())


def score(d: Dictionary, x: Tensor, dirs: Tensor) -> dict[str, float]:
    """Mean max cosine, MCC, FVE and L0 of dictionary `d` on held-out activations `x`."""
    with torch.no_grad():
        l0 = float((d.encode(x) > 0).sum(-1).float().mean())
    return {"mmc": float(max_cosine(dirs, d.W_dec).mean()), "mcc": matching(dirs, d.W_dec), "fve": _fve(d, x), "l0": l0,
            "combined": combined(dirs, d.W_dec)}


@dataclass(frozen=True)
class Budget:
    d: int
    tokens: int
    seeds: int
    batch: int = 1024
    lr: float = 3e-3
    l1_grid: tuple[float, ...] = (0.1, 0.3, 1.0)
    l0_grid: tuple[float, ...] = (3e-3, 1e-2, 0.1)
    held_out: int = 8192
    cases: tuple[str, ...] = tuple(CASES)


BUDGETS = {
    "quick": Budget(d=16, tokens=20_000, seeds=2, l1_grid=(0.6,), l0_grid=(3e-2,), held_out=2048,
                    cases=("independent", "planted")),
    "full": Budget(d=64, tokens=200_000, seeds=3),
}


def _recipes(budget: Budget, case: Case, m: int, seed: int) -> list[Recipe]:
    base = Recipe(n_features=case.width * m, k=case.k, lr=budget.lr, tokens=budget.tokens, seed=seed,
                  dead_after=max(budget.tokens // 20, 1), checkpoint_every=10 ** 6)
    out = [replace(base, architecture=a) for a in ("topk", "batchtopk", "matryoshka")]
    out += [replace(base, architecture="relu", l1_coefficient=c) for c in budget.l1_grid]
    return out + [replace(base, architecture="jumprelu", l0_coefficient=c) for c in budget.l0_grid]


def _one(name: str, budget: Budget, seed: int) -> dict[str, dict]:
    """Scores of every architecture (and the random control) on case `name` at `seed`."""
    case = CASES[name]
    data, dirs = sample(name, budget.tokens + budget.held_out, budget.d, seed)
    x, held = data[: budget.tokens], data[budget.tokens:]  # trained on, scored on
    recipes = _recipes(budget, case, len(dirs), seed)
    dicts = fit_each(x, site_in=SITE, recipes=recipes, batch=budget.batch)
    target = _fve(dicts[1], x)  # BatchTopK's training FVE: the reconstruction the penalised ones match
    out = {}
    for arch in ARCHITECTURES:
        mine = [(r, d) for r, d in zip(recipes, dicts) if r.architecture == arch]
        r, d = min(mine, key=lambda rd: abs(_fve(rd[1], x) - target))
        out[arch] = {**score(d, held, dirs), "coefficient": {"relu": r.l1_coefficient, "jumprelu": r.l0_coefficient}.get(arch)}
    gen = torch.Generator().manual_seed(10_000 + seed)
    random = _unit(torch.randn(case.width * len(dirs), budget.d, generator=gen))
    out["random"] = {"mmc": float(max_cosine(dirs, random).mean()), "mcc": matching(dirs, random),
                     "combined": combined(dirs, random)}
    return out


def run(budget: str | Budget = "full", *, progress: bool = True) -> dict:
    """The suite's table: per case, per architecture, each score's mean and interval over seeds,
    and which architecture finds the truth best (highest MCC averaged over the cases)."""
    if isinstance(budget, str) and budget not in BUDGETS:
        raise InterpError(f"budget {budget!r} is not one of {sorted(BUDGETS)}")
    b = BUDGETS[budget] if isinstance(budget, str) else budget
    if b.seeds < 2:
        raise InterpError(f"Budget.seeds={b.seeds}: an interval over seeds needs at least 2")
    t0 = time.perf_counter()
    results: dict = {}
    for name in b.cases:
        per_seed = []
        for seed in range(b.seeds):
            per_seed.append(_one(name, b, seed))
            if progress:
                print(f"{name} seed {seed}: " + ", ".join(f"{a} {v['mcc']:.3f}" for a, v in per_seed[-1].items()), flush=True)
        results[name] = {a: {k: interval([s[a][k] for s in per_seed]) if k != "coefficient" else [s[a][k] for s in per_seed]
                             for k in per_seed[0][a]} for a in per_seed[0]}
        m = len(sample(name, 8, b.d, 0)[1])
        results[name]["case"] = {"d": b.d, "true_directions": m, "true_l0": CASES[name].l0, "k": CASES[name].k,
                                 "n_features": CASES[name].width * m}
    overall = {a: sum(results[c][a]["mcc"]["mean"] for c in b.cases) / len(b.cases) for a in ARCHITECTURES}
    best = max(overall, key=overall.get)
    return {"budget": {**asdict(b), "architectures": list(ARCHITECTURES)}, "results": results,
            "choice": {"mcc_over_cases": overall, "best": best},
            "provenance": {"commit": commit(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                           "machine": f"{platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}",
                           "wall_seconds": round(time.perf_counter() - t0, 1),
                           "command": f"python -m interp.features.truth --budget {budget if isinstance(budget, str) else 'custom'}"
                                      " --json docs/dictionary_truth.json"}}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m interp.features.truth")
    p.add_argument("--budget", default="full", choices=sorted(BUDGETS))
    p.add_argument("--json", default="docs/dictionary_truth.json", help="the JSON written")
    a = p.parse_args(argv)
    text = json.dumps(run(a.budget), indent=1, allow_nan=False)
    write_text_atomic(a.json, text + "\n")
    print(f"wrote {a.json}")


if __name__ == "__main__":
    main()

"""The illusions paper's code experiment at small scale, on source text every machine with interp has.

Friedman et al. (ICML 2024, their CodeSearchNet study) train a 4-layer Transformer on one programming
language (Java), simplify each attention head's queries and keys with a rank-k SVD fitted on that
language, and find the simplified model's prediction similarity to the original higher on held-out
Java than on languages never seen in training (JavaScript, PHP, Go; paired t-test p <= 0.005), the
largest gap at induction-like repeated-word predictions (75 % vs 61 % for one head at rank 16).

Here, at the size two shared CPU cores allow:

- the model: a character-level GPT-2 (`CODE_MODEL`: 4 layers, d_model 64, 4 heads of d_head 16, 128
  characters of context) trained from scratch on the Python standard library of the running
  interpreter, files split by a hash of their path: one in five held out (the in-distribution test);
- the unseen languages, from packages interp itself requires: C (numpy's headers), C++ (torch's
  c10 headers) and JavaScript (the unminified .js that torch, scikit-learn and urllib3 ship);
- each head on its own: rank-k SVD of its queries and keys fitted on training Python (centred, the
  study's `interp.simplify.svd`), and as the control the same head projected onto `draws` random
  rank-k subspaces through the same fitted means: if random projections lost as much more on the
  unseen languages, the gap would come from perturbing the head, not from fitting it in distribution;
- prediction similarity: how often the simplified model's argmax next character equals the
  original's, per language, over every scored position and at repeated-word positions (the target is
  a character after the first of an identifier that already occurred earlier in the window).

`train_unit` and `eval_unit` are the study's two code units (`interp.studies.illusions` stores them);
`summary` turns their counts into per-head similarities, the paired gaps with t intervals, and the
verdicts. Weights live in $INTERP_CACHE/studies/illusions/models, never in the repository.
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import sysconfig
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

__all__ = ["CODE_MODEL", "ID_LANG", "LANGS", "corpus", "eval_unit", "judge_code", "summary", "train_unit"]

ID_LANG = "python"
LANGS = (ID_LANG, "c", "cpp", "javascript")
CODE_MODEL = dict(d_model=64, n_layers=4, n_heads=4, d_mlp=256, n_ctx=128)
TRAINING = dict(batch=16, lr=2e-3, warmup=100, weight_decay=0.01, seed=0)
CHARS = [chr(c) for c in range(33, 127)] + [" ", "\n", "\t"]
_NAMES = {" ": "<sp>", "\n": "<nl>", "\t": "<tab>"}
FIRST_ID, UNK = 5, 1  # after interp.tasks' five specials ([PAD] [UNK] [BOS] [EOS] [MASK])
IGNORE = -100
HELD_OUT = 5  # one Python file in HELD_OUT is held out of training (the in-distribution test)
SKIP_PARTS = {"site-packages", "test", "tests", "idle_test", "__pycache__"}


# ---------------------------------------------------------------------------------------------
# corpus


def _package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    return Path(spec.origin).parent if spec is not None and spec.origin else None


def _sources(lang: str) -> list[tuple[str, Path]]:
    """(name, path) of every file of `lang`, sorted by name."""
    if lang == ID_LANG:
        root = Path(sysconfig.get_paths()["stdlib"])
        files = [p for p in root.rglob("*.py") if not SKIP_PARTS & set(p.relative_to(root).parts)]
        return sorted((f"stdlib/{p.relative_to(root)}", p) for p in files)
    if lang == "c":
        import numpy

        root = Path(numpy.get_include())
        return sorted((f"numpy/{p.relative_to(root)}", p) for p in root.rglob("*.h"))
    if lang == "cpp":
        root = _package_dir("torch") / "include" / "c10"
        return sorted((f"torch/c10/{p.relative_to(root)}", p) for p in root.rglob("*.h"))
    js = [("torch", "utils/model_dump/code.js"), ("sklearn", "utils/_repr_html/estimator.js"),
          ("urllib3", "contrib/emscripten/emscripten_fetch_worker.js")]
    return sorted((f"{pkg}/{rel}", _package_dir(pkg) / rel) for pkg, rel in js
                  if _package_dir(pkg) is not None and (_package_dir(pkg) / rel).exists())


def _held_out(name: str) -> bool:
    return hashlib.sha256(name.encode()).digest()[0] % HELD_OUT == 0


def encode(text: str) -> torch.Tensor:
    """Character ids (UNK for a character outside CHARS)."""
    table = {c: FIRST_ID + i for i, c in enumerate(CHARS)}
    return torch.tensor([table.get(c, UNK) for c in text], dtype=torch.long)


def tokenizer():
    """A word-level tokenizer whose words are the characters (so the model folder boots with interp.load);
    rows are encoded with `encode`, not with it."""
    from interp.tasks import word_tokenizer

    return word_tokenizer([_NAMES.get(c, c) for c in CHARS])


def corpus() -> dict[str, dict[str, Any]]:
    """Per language: its text (files joined by a blank line) and its files' names and sha; Python is
    split into "python_train" (trained and fitted on) and "python" (held-out files, the ID test)."""
    out: dict[str, dict[str, Any]] = {}
    for lang in LANGS:
        parts: dict[str, list[tuple[str, str]]] = {}
        for name, path in _sources(lang):
            key = lang if lang != ID_LANG or _held_out(name) else f"{ID_LANG}_train"
            parts.setdefault(key, []).append((name, path.read_text(encoding="utf-8", errors="replace")))
        for key, files in parts.items():
            text = "\n\n".join(t for _, t in files)
            out[key] = {"text": text, "files": len(files), "chars": len(text),
                        "sha": hashlib.sha256(text.encode()).hexdigest()[:16]}
    return out


def fingerprint(texts: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """What identifies the corpus (files, characters, sha per part), without the text."""
    return {k: {q: v[q] for q in ("files", "chars", "sha")} for k, v in texts.items()}


def windows(ids: torch.Tensor, n: int, width: int, seed: int) -> torch.Tensor:
    """`n` windows of `width` ids at distinct non-overlapping offsets drawn with `seed` ([n, width])."""
    slots = len(ids) // width
    if slots < n:
        n = slots
    pick = torch.randperm(slots, generator=torch.Generator().manual_seed(seed))[:n].sort().values
    return torch.stack([ids[i * width:(i + 1) * width] for i in pick.tolist()])


def repeated(window: torch.Tensor) -> torch.Tensor:
    """[pos] bool: positions whose target (the next character) continues an identifier, past its first
    character, that already occurred whole earlier in the window (an induction head can copy it)."""
    import re

    text = "".join(CHARS[i - FIRST_ID] if i >= FIRST_ID else "\x00" for i in window.tolist())
    out = torch.zeros(len(text), dtype=torch.bool)
    seen: set[str] = set()
    for m in re.finditer(r"[A-Za-z_][A-Za-z0-9_]*", text):
        word = m.group()
        if len(word) >= 2 and word in seen:
            out[m.start():m.end() - 1] = True  # position t predicts t + 1: targets m.start()+1 .. m.end()-1
        seen.add(word)
    return out


def rows(ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(tokens, targets, repeated-word mask) for windows [n, width]: the target of t is t + 1."""
    targets = torch.full_like(ids, IGNORE)
    targets[:, :-1] = ids[:, 1:]
    targets[targets == UNK] = IGNORE
    rep = torch.stack([repeated(w) for w in ids]) & (targets != IGNORE)
    return ids, targets, rep


# ---------------------------------------------------------------------------------------------
# the two units


def train_unit(folder: Path, steps: int, progress: bool) -> dict[str, Any]:
    """Train the code model `steps` steps on training Python into `folder` (atomically); its record."""
    from interp.model.building import hf_config, hf_model_class, save_model_dir

    texts = corpus()
    data = encode(texts[f"{ID_LANG}_train"]["text"])
    width, t = CODE_MODEL["n_ctx"], TRAINING
    gen = torch.Generator().manual_seed(t["seed"])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(t["seed"])
        model = hf_model_class("gpt2")(hf_config("gpt2", vocab_size=FIRST_ID + len(CHARS), **CODE_MODEL))
    opt = torch.optim.AdamW(model.parameters(), lr=t["lr"], weight_decay=t["weight_decay"])
    start, losses = time.perf_counter(), []
    model.train()
    for step in tqdm(range(steps), desc="code model", disable=not progress):
        lr = t["lr"] * min(1.0, (step + 1) / t["warmup"]) * 0.5 * (1 + math.cos(math.pi * step / steps))
        for g in opt.param_groups:
            g["lr"] = lr
        at = torch.randint(len(data) - width, (t["batch"],), generator=gen)
        x = torch.stack([data[i:i + width] for i in at.tolist()])
        y = x[:, 1:].masked_fill(x[:, 1:] == UNK, IGNORE)
        loss = F.cross_entropy(model(input_ids=x).logits[:, :-1].flatten(0, 1), y.flatten(), ignore_index=IGNORE)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    seconds = time.perf_counter() - start
    model.eval()
    save_model_dir(model, tokenizer(), folder)
    every = max(1, steps // 20)
    return {"train_s": seconds, "steps": steps, "chars_per_step": t["batch"] * width,
            "loss_curve": [sum(losses[i:i + every]) / len(losses[i:i + every]) for i in range(0, steps, every)],
            "sha": hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()[:16]}


def _random_basis(d: int, rank: int, gen: torch.Generator) -> torch.Tensor:
    q, _ = torch.linalg.qr(torch.randn(d, rank, generator=gen, dtype=torch.float64))
    return q.float()


def eval_unit(model, budget: dict[str, Any], progress: bool) -> dict[str, Any]:
    """Per head: the rank-k SVD simplifier (fitted on training Python) and `draws` random rank-k
    projections, each scored against the original on every language's windows; counts per language of
    scored and same-prediction positions, all and at repeated-word positions."""
    from dataclasses import replace

    from interp import run
    from interp.simplify import Rows, svd

    texts, width = corpus(), CODE_MODEL["n_ctx"]
    fit_ids = windows(encode(texts[f"{ID_LANG}_train"]["text"]), budget["code_fit"], width, seed=1)
    fit_tokens, fit_targets, _ = rows(fit_ids)
    fit = Rows(fit_tokens, fit_targets, torch.full((len(fit_ids),), width))
    evals = {lang: rows(windows(encode(texts[lang]["text"]), budget["code_windows"], width, seed=2)) for lang in LANGS}
    heads = [(layer, h) for layer in range(model.cfg.n_layers) for h in range(model.cfg.n_heads)]
    full = svd(model, heads, fit, rank=budget["code_rank"])  # one fit, every head's own basis
    gen = torch.Generator().manual_seed(3)

    def preds(tokens: torch.Tensor, interventions) -> torch.Tensor:
        return torch.cat([run.logits(model, tokens[i:i + 64], interventions).argmax(-1).cpu() for i in range(0, len(tokens), 64)])

    original = {lang: preds(tok, []) for lang, (tok, _, _) in evals.items()}

    def counts(simplifier) -> dict[str, dict[str, int]]:
        out = {}
        for lang, (tok, tgt, rep) in evals.items():
            same, scored = preds(tok, [simplifier]) == original[lang], tgt != IGNORE
            out[lang] = {"n": int(scored.sum()), "same": int((same & scored).sum()),
                         "n_rep": int(rep.sum()), "same_rep": int((same & rep).sum())}
        return out

    per_head = []
    for i, head in enumerate(tqdm(heads, desc="code heads", disable=not progress)):
        own = replace(full, heads=(head,), kv_heads=(head,), q_basis=full.q_basis[i:i + 1], k_basis=full.k_basis[i:i + 1],
                      q_mean=full.q_mean[i:i + 1], k_mean=full.k_mean[i:i + 1])
        d, k = own.q_basis.shape[1], own.rank
        randoms = [counts(replace(own, q_basis=_random_basis(d, k, gen)[None], k_basis=_random_basis(d, k, gen)[None]))
                   for _ in range(budget["code_draws"])]
        per_head.append({"head": list(head), "svd": counts(own), "random": randoms})
    accuracy = {lang: float(((original[lang] == tgt) & (tgt != IGNORE)).sum() / (tgt != IGNORE).sum())
                for lang, (_, tgt, _) in evals.items()}
    return {"heads": per_head, "accuracy": accuracy, "windows": {lang: len(v[0]) for lang, v in evals.items()},
            "repeated_positions": {lang: int(v[2].sum()) for lang, v in evals.items()},
            "fit_vectors": int(fit_tokens.numel())}


# ---------------------------------------------------------------------------------------------
# summary and verdicts


def _t_interval(x: list[float], level: float) -> tuple[float, list[float], float]:
    """(mean, its two-sided t interval at `level`, the t-test p for mean 0) over the values of `x`."""
    from scipy import stats

    n, mean = len(x), sum(x) / len(x)
    sd = math.sqrt(sum((v - mean) ** 2 for v in x) / (n - 1)) if n > 1 else 0.0
    half = stats.t.ppf(0.5 + level / 2, n - 1) * sd / math.sqrt(n) if n > 1 else 0.0
    p = 1.0 if sd == 0 else float(2 * stats.t.sf(abs(mean) / (sd / math.sqrt(n)), n - 1))
    return mean, [mean - half, mean + half], p


def _sim(c: dict[str, int], rep: bool | None) -> float:
    """Same-prediction rate: all positions (None), repeated-word (True) or the others (False)."""
    if rep is None:
        return c["same"] / max(1, c["n"])
    if rep:
        return c["same_rep"] / max(1, c["n_rep"])
    return (c["same"] - c["same_rep"]) / max(1, c["n"] - c["n_rep"])


def summary(ev: dict[str, Any]) -> dict[str, Any]:
    """Per head and language: similarity (all / repeated-word / other) of SVD and the random draws'
    mean; the per-head gaps python - language that the verdicts pair over heads."""
    heads = []
    for h in ev["heads"]:
        row: dict[str, Any] = {"head": h["head"]}
        for what in ("all", "repeated", "other"):
            rep = {"all": None, "repeated": True, "other": False}[what]
            row[what] = {lang: {"svd": _sim(h["svd"][lang], rep),
                                "random_mean": sum(_sim(r[lang], rep) for r in h["random"]) / len(h["random"])}
                         for lang in LANGS}
        heads.append(row)
    return {"heads": heads}


def judge_code(ev: dict[str, Any], rank: int, draws: int) -> dict[str, Any]:
    """The two code claims, per unseen language (paired over heads), each against the in-distribution
    split the claim names (null "baseline", a 99.5 % t interval: it excludes 0 exactly when the paired
    t-test gives p < 0.005, the paper's test) and against random rank-k projections of the same heads
    (null "random subspaces", 95 % t interval of the per-head difference). The claim ids go on the
    claim-level words (`illusions.code_claims`, the worst word over languages and controls), as the Dyck
    claims' do, so the paper-claims ledger and the study's claims table give the same word; the study
    moves "verdicts" under its claims (`illusions.code_claims`), so the README reads each claim once."""
    from interp.studies.verdicts import against_all, judge

    s = summary(ev)
    hs = s["heads"]
    mean = lambda v: sum(v) / len(v)  # noqa: E731
    means = {lang: {"svd": {w: mean([h[w][lang]["svd"] for h in hs]) for w in ("all", "repeated", "other")},
                    "random_all": mean([h["all"][lang]["random_mean"] for h in hs])} for lang in LANGS}
    out: dict[str, Any] = {"summary": s, "means": means, "largest_repeated_gap_head": {},
                           "verdicts": {"gap": {}, "repeated_word": {}}}
    for lang in LANGS[1:]:
        gap = lambda h, what, kind: h[what][ID_LANG][kind] - h[what][lang][kind]  # noqa: E731
        svd_gap = [gap(h, "all", "svd") for h in hs]
        rand_gap = [gap(h, "all", "random_mean") for h in hs]
        m, ci, p = _t_interval(svd_gap, 0.995)
        _, ci_d, p_d = _t_interval([a - b for a, b in zip(svd_gap, rand_gap)], 0.95)
        lang_claims = [
            {**judge(f"rank-{rank} SVD similarity higher on held-out Python than on {lang} (mean over heads, paired)",
                     mean([h["all"][ID_LANG]["svd"] for h in hs]), mean([h["all"][lang]["svd"] for h in hs]), "greater",
                     diff_ci=ci, null="baseline"), "paired_t_p": p, "ci_level": 0.995},
            {**judge(f"the SVD gap Python - {lang} larger than random rank-{rank} projections' gap (per head, paired)",
                     m, mean(rand_gap), "greater", diff_ci=ci_d, null="random subspaces", draws=draws),
             "paired_t_p": p_d, "ci_level": 0.95},
        ]
        rep_gap = [gap(h, "repeated", "svd") - gap(h, "other", "svd") for h in hs]
        rep_rand = [gap(h, "repeated", "random_mean") - gap(h, "other", "random_mean") for h in hs]
        mr, ci_r, p_r = _t_interval(rep_gap, 0.95)
        _, ci_rr, p_rr = _t_interval([a - b for a, b in zip(rep_gap, rep_rand)], 0.95)
        rep_claims = [
            {**judge(f"the SVD gap Python - {lang} larger at repeated-word positions than at the others (per head, paired)",
                     mean([gap(h, "repeated", "svd") for h in hs]), mean([gap(h, "other", "svd") for h in hs]), "greater",
                     diff_ci=ci_r, null="baseline"), "paired_t_p": p_r, "ci_level": 0.95},
            {**judge(f"that excess larger than random rank-{rank} projections' (per head, paired)", mr, mean(rep_rand),
                     "greater", diff_ci=ci_rr, null="random subspaces", draws=draws),
             "paired_t_p": p_rr, "ci_level": 0.95},
        ]
        best = max(range(len(hs)), key=lambda i: gap(hs[i], "repeated", "svd"))
        out["verdicts"]["gap"][lang] = {"claims": lang_claims, "word": against_all(c["word"] for c in lang_claims)}
        out["verdicts"]["repeated_word"][lang] = {"claims": rep_claims, "word": against_all(c["word"] for c in rep_claims)}
        out["largest_repeated_gap_head"][lang] = {  # chosen after the fact, as the paper's one head: description, no word
            "head": hs[best]["head"], "python": hs[best]["repeated"][ID_LANG]["svd"], lang: hs[best]["repeated"][lang]["svd"],
            "paper": {"head": "layer 4 head 4, rank 16", "java": 0.75, "unseen": 0.61}}
    return out


# ---------------------------------------------------------------------------------------------
# the units as the study runs them


def run(b: dict[str, Any], store, progress: bool) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The code experiment at budget `b` through the study's unit store: (its JSON section, or None
    when b["code_steps"] is 0, and the unit configs it used)."""
    import interp
    from interp.files.storage import cache_dir

    if not b["code_steps"]:
        return None, []
    texts = fingerprint(corpus())
    train_cfg = {"unit": "code-train", "model": CODE_MODEL, "training": TRAINING, "steps": b["code_steps"], "corpus": texts}
    folder = cache_dir() / "studies" / "illusions" / "models" / f"code-{store.key(train_cfg)[:12]}"
    training = store.run(train_cfg, lambda: train_unit(folder, b["code_steps"], progress))
    if not (folder / "model.safetensors").exists():  # the record is stored but the weights are not on this machine
        train_unit(folder, b["code_steps"], progress)
    keys = ("code_windows", "code_fit", "code_rank", "code_draws")
    eval_cfg = {"unit": "code-eval", "model_sha": training["sha"], "corpus": texts, **{k: b[k] for k in keys}}
    ev = store.run(eval_cfg, lambda: eval_unit(interp.load(str(folder)), b, progress))
    out = {"model": {"family": "gpt2", "level": "character", "vocab": FIRST_ID + len(CHARS), **CODE_MODEL},
           "training": {**TRAINING, **training}, "corpus": texts, "rank": b["code_rank"], "draws": b["code_draws"],
           "eval": {k: ev[k] for k in ("accuracy", "windows", "repeated_positions", "fit_vectors")},
           **judge_code(ev, b["code_rank"], b["code_draws"])}
    return out, [train_cfg, eval_cfg]

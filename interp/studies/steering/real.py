"""Prompts, the fit set, the judge and the doc tables of the steering study (`interp.studies.steering`), for the real
models (SmolLM2-135M, Gemma-3-270M, any BPE model) and the zoo's synthetic English.

Prompts. A subject phrase ending mid-clause ("the keys near the cabinet") after a context frame
that makes the model go on with a sentence ("According to the report, the keys near the
cabinet"): bare subject phrases make SmolLM2 continue the noun phrase or open a new line, so the
judge found a verb in only 8-19 % of them; framed, the next words are the subject's verb. Head
nouns are split three ways (fit / dev / test, disjoint), attractors are any other noun of either
number, half the heads singular.

Axes. At `blocks.L.hook_resid_post`: the 1-D ACE core (`interp.cores.extract(k=1)`, balanced
truncation of the is/are logit difference at the last token of framed fit prompts) and the
difference of the singular and plural class means of the same prompts.

Judge (`judge`, word lists, whole generation). Number words: the verbs is/are, was/were,
has/have, does/do (and their negations and contractions) and the personal pronouns
it/its/he/him/his/she/her/... (singular) and they/them/their/... (plural). A verb right after
"I", "you", "we", "there", "to" or a modal is not counted (it agrees with that word, or has no
number). The first counted verb is the subject's verb: it *agrees* or is *flipped*; a
generation is *judged* when it has one. Over the whole generation, `flip_share` is the fraction
of all number words (verbs and pronouns) that disagree with the subject's number.

Zoo models speak `interp.tasks.english`: prompts are `english.prefixes`, the fit set `english.sva`
("sva_id"), and the judge the grammar (`interp.studies.steering.judge_continuation`: every
generated verb against its own subject).
"""

from __future__ import annotations

import json
import random
import re
from typing import Any, Sequence

import torch
from torch import Tensor

from interp.errors import InterpError
from interp.tasks import bpe
from interp.tasks.base import Task

__all__ = ["FRAMES", "ace_cores", "bare", "PL_PRONOUNS", "PL_VERBS", "SG_PRONOUNS", "SG_VERBS", "SKIP_BEFORE", "doc_regions", "fit_task",
           "judge", "prompts", "rates", "split_nouns"]

SG_VERBS = frozenset("is was has does isn't wasn't hasn't doesn't 's".split())
PL_VERBS = frozenset("are were have do aren't weren't haven't don't 're 've".split())
SG_PRONOUNS = frozenset("it its itself he him his himself she her hers herself".split())
PL_PRONOUNS = frozenset("they them their theirs themselves".split())
# a verb right after one of these agrees with it (I, you, we, there) or carries no number (to, modals)
SKIP_BEFORE = frozenset("i you we there to will would can could should shall may might must not did "
                        "didn't won't wouldn't can't couldn't".split())

# context frames that make the continuation a clause whose subject is the phrase
FRAMES: tuple[str, ...] = (
    "Here is a short story.\n\nThe {s}",
    "I walked into the old house and looked around. The {s}",
    "According to the report, the {s}",
    "\"Look,\" she said. \"The {s}",
    "It was late in the evening. The {s}",
    "In the morning, the {s}",
)
PREPOSITIONS = ("near", "behind", "beside", "under", "with", "on", "by", "from")


def _words(text: str) -> list[str]:
    text = text.lower().replace("’", "'")
    return re.findall(r"[a-z]+n't|[a-z]+|'[a-z]+", text)


def judge(number: str, completion: str) -> dict[str, Any]:
    """The number words of a whole continuation against the prompt subject's `number` ("sg"/"pl").

    Returns {"verb": "sg"/"pl"/None (the first counted verb), "verb_agrees", "verb_flipped",
    "pronoun": the first pronoun's number or None, "words": [number of each number word in order],
    "flip_share": fraction of number words that disagree (None when there are none)}.
    """
    if number not in ("sg", "pl"):
        raise InterpError(f"number must be 'sg' or 'pl', got {number!r}")
    ws = _words(completion)
    verb = pron = None
    found: list[str] = []
    for i, w in enumerate(ws):
        prev = ws[i - 1] if i else ""
        if w in SG_VERBS or w in PL_VERBS:
            if prev in SKIP_BEFORE or (w.startswith("'") and prev in ("i", "you", "we", "there", "that", "what")):
                continue
            n = "sg" if w in SG_VERBS else "pl"
            verb = verb or n
        elif w in SG_PRONOUNS or w in PL_PRONOUNS:
            n = "sg" if w in SG_PRONOUNS else "pl"
            pron = pron or n
        else:
            continue
        found.append(n)
    share = None if not found else sum(n != number for n in found) / len(found)
    return {"verb": verb, "verb_agrees": verb == number, "verb_flipped": verb is not None and verb != number,
            "pronoun": pron, "words": found, "flip_share": share}


def rates(numbers: Sequence[str], completions: Sequence[str]) -> dict[str, float | None]:
    """Fractions over all prompts: judged (a counted verb), verb_agree, verb_flip, pronoun_judged,
    and flip_share (mean over generations with any number word; None when none has one)."""
    if len(numbers) != len(completions) or not numbers:
        raise InterpError(f"rates needs one number per completion, got {len(numbers)} and {len(completions)}")
    js = [judge(n, c) for n, c in zip(numbers, completions)]
    k = len(js)
    shares = [j["flip_share"] for j in js if j["flip_share"] is not None]
    return {"judged": sum(j["verb"] is not None for j in js) / k, "verb_agree": sum(j["verb_agrees"] for j in js) / k,
            "verb_flip": sum(j["verb_flipped"] for j in js) / k,
            "pronoun_judged": sum(j["pronoun"] is not None for j in js) / k,
            "flip_share": sum(shares) / len(shares) if shares else None}


def split_nouns(model, seed: int = 0) -> dict[str, list[tuple[str, str]]]:
    """The model's single-token (singular, plural) noun pairs split into disjoint fit / dev / test
    heads (40 / 20 / 40 %), shuffled with `seed`."""
    nouns = list(bpe.vocabulary(model)["nouns"])
    if len(nouns) < 10:
        raise InterpError(f"only {len(nouns)} single-token noun pairs for this tokenizer; the study needs >= 10")
    random.Random(f"steer/nouns/{seed}").shuffle(nouns)
    a, b = int(0.4 * len(nouns)), int(0.6 * len(nouns))
    return {"fit": nouns[:a], "dev": nouns[a:b], "test": nouns[b:], "all": nouns}


def prompts(model, split: str, n: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """`n` framed prompts of `split` (fit / dev / test) and each head noun's number; frames cycle,
    half the heads are plural, attractors half of the same number and half of the other."""
    if n < 2:
        raise InterpError(f"n={n}: give at least 2 prompts (one singular, one plural head)")
    nouns = split_nouns(model, seed)
    heads, pool = nouns[split], nouns["all"]
    rng = random.Random(f"steer/prompts/{split}/{seed}")
    texts, numbers = [], []
    for i in range(n):
        head = heads[i % len(heads)] if i < len(heads) else rng.choice(heads)
        other = rng.choice([p for p in pool if p != head])
        number = "pl" if i % 2 else "sg"
        attractor = other[int(number == "pl") ^ int((i // 2) % 2)]  # same number, then the other
        subject = f"{head[number == 'pl']} {PREPOSITIONS[rng.randrange(len(PREPOSITIONS))]} the {attractor}"
        texts.append(FRAMES[(i // 2) % len(FRAMES)].format(s=subject))
        numbers.append(number)
    return texts, numbers


def bare(prompt: str) -> str:
    """A framed prompt's subject phrase alone ("According to the report, the keys near the cabinet"
    -> "The keys near the cabinet")."""
    return "The " + " ".join(prompt.rsplit(" ", 4)[-4:])


def fit_task(model, n: int, seed: int = 0) -> tuple[Task, list[str], list[str]]:
    """The fit split as an SVA Task for the ACE core (answer " is" / " are" at the last prompt
    token; corrupt = the head noun's number flipped), with its texts and numbers.

    Prompts have different token lengths (frames), so rows are right-padded and `answer_pos` is
    each row's last token: a causal model's activations there do not see the pads."""
    texts, numbers = prompts(model, "fit", n, seed)
    tok = model.tokenizer
    ids = {w: tok.encode(f" {w}", add_special_tokens=False) for w in ("is", "are")}
    if any(len(v) != 1 for v in ids.values()):
        raise InterpError(f"' is' / ' are' are not single tokens for this tokenizer ({ids})")
    clean, corrupt, keep = [], [], []
    for t, num in zip(texts, numbers):
        words = t.rsplit(" ", 4)
        # the head noun is the fourth word from the end: "... {head} {prep} the {attractor}"
        head = words[-4]
        pair = next(p for p in split_nouns(model, seed)["fit"] if head in p)
        swapped = pair[1] if head == pair[0] else pair[0]
        c = model.to_tokens(t, move_to_device=False)[0]
        x = model.to_tokens(" ".join([*words[:-4], swapped, *words[-3:]]), move_to_device=False)[0]
        if len(c) == len(x):
            clean.append(c), corrupt.append(x), keep.append((t, num))
    if len(keep) < 2:
        raise InterpError("fewer than 2 fit prompts keep their length when the head noun's number flips")
    width = max(len(r) for r in clean)
    pad = int(tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id or 0)

    def stack(rows):
        out = torch.full((len(rows), width), pad, dtype=torch.long)
        for i, r in enumerate(rows):
            out[i, :len(r)] = r
        return out

    nums = [num for _, num in keep]
    correct = torch.tensor([ids["is" if m == "sg" else "are"][0] for m in nums])
    incorrect = torch.tensor([ids["are" if m == "sg" else "is"][0] for m in nums])
    task = Task("sva_framed", "fit", stack(clean), stack(corrupt), correct, incorrect,
                torch.tensor([len(r) - 1 for r in clean]), tuple(t for t, _ in keep), seed=seed,
                meta={"number": nums})
    return task, [t for t, _ in keep], nums


def ace_cores(model, task: Task, sites: Sequence[str], *, batch_size: int = 16) -> dict[str, Any]:
    """The 1-D ACE core (`interp.cores.extract(k=1, method="ace")`, metric output) at every site of
    `sites` from one forward and one backward per batch instead of one per site: the gradient of the
    summed logit differences reaches every site's activation in the same pass (`interp.run.with_grad`).
    Equal to calling extract per site (tested); a layer sweep costs one extraction."""
    from interp import run
    from interp.cores import linalg
    from interp.cores.results import Core
    from interp.metrics import logit_diff

    sites = list(sites)
    xs: dict[str, list[Tensor]] = {s: [] for s in sites}
    gs: dict[str, list[Tensor]] = {s: [] for s in sites}
    dev = torch.device(model.cfg.device)
    for start in range(0, len(task), batch_size):
        part = task[start: start + batch_size].to(dev)
        rows = torch.arange(len(part), device=dev)
        with torch.enable_grad():
            logits, found = run.with_grad(model, part.clean, sites, answer_pos=part.answer_pos)
            metric = logit_diff(logits, part.correct, part.incorrect, part.answer_pos)
            grads = torch.autograd.grad(metric.sum(), [found[s] for s in sites])
        for s, g in zip(sites, grads):
            xs[s].append(found[s][rows, part.answer_pos].detach().float().cpu())
            gs[s].append(g[rows, part.answer_pos].detach().float().cpu())
    out = {}
    for s in sites:
        x, g = torch.cat(xs[s]), torch.cat(gs[s])
        ordered, spectrum = linalg.balanced_truncation(x, g)
        meta = {"task": task.name, "split": task.split, "n": len(task), "positions": "answer_pos",
                "model": getattr(model.cfg, "model_name", ""), "output": "metric", "seed": 0, "k_rule": "given"}
        out[s] = Core(ordered[:, :1], x.mean(0), spectrum, s, "ace", meta)
    return out


# ---------------------------------------------------------------------------------------------
# docs/steering.md's generated regions, from the study's one JSON, every number bound to its key
# (interp.studies.docs.Render)


def _one_line(text: str) -> str:
    return " ↵ ".join(part.strip() for part in text.strip().split("\n") if part.strip())


def _table(head: list[str], rows: list[list[str]]) -> str:
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows])


class _Doc:
    """Bound numbers of one model: `n(*path)` renders models/SPEC/path through Render.num."""

    def __init__(self, r, spec: str):
        from interp.studies.docs import pointer

        self.r, self.spec, self.ptr = r, spec, lambda *p: pointer("models", spec, *p)

    def n(self, *path) -> str:
        return self.r.num(self.ptr(*path))

    def word(self, *path) -> str:
        return self.r.text(self.ptr(*path))


def _runs_rows(d: _Doc, v: dict[str, Any]) -> list[list[str]]:
    rows = []
    for run, label in (("unsteered", "unsteered"), ("unsteered_bare", "unsteered, bare (no frame)")):
        if run in v["runs"]:
            rows.append([d.spec, label, "–", *[d.n("runs", run, k) for k in ("judged", "verb_agree", "verb_flip")],
                         d.n("runs", run, "flip_share") if v["runs"][run]["flip_share"] is not None else "–",
                         d.n("runs", run, "pronoun_judged"), "–", "–", "–", "–", "–"])
    for a, label in (("core", "core flip"), ("diff", "diff-of-means flip")):
        c, ci = ("random_" + a, "verb_flip"), (f"{a}_verdict", "diff_ci")
        rows.append([d.spec, label, d.n("layer", a), *[d.n("runs", a, k) for k in ("judged", "verb_agree", "verb_flip")],
                     d.n("runs", a, "flip_share") if v["runs"][a]["flip_share"] is not None else "–", d.n("runs", a, "pronoun_judged"),
                     f"{d.n(*c, 'mean')} ± {d.n(*c, 'std')}",
                     f"{d.n('random_' + a, 'judged', 'min')}–{d.n('random_' + a, 'judged', 'max')}",
                     f"{d.n(f'{a}_verdict', 'interval', 'diff')} [{d.n(*ci, 0)}, {d.n(*ci, 1)}]", d.n(f"{a}_verdict", "mde"),
                     d.word(f"{a}_verdict", "word")])
    if "forced" in v:
        rows.append([d.spec, "core flip at the final residual (forced)", d.n("forced", "layer"), d.n("forced", "judged"), "–",
                     d.n("forced", "verb_flip"), "–", "–", "–", "–", "–", "–", "forced: not judged"])
    return rows


def _reading(d: _Doc, v: dict[str, Any]) -> str:
    out = []
    for a, name in (("core", "core axis"), ("diff", "difference-of-means axis")):
        ci = (f"{a}_verdict", "diff_ci")
        out.append(f"{name} **{d.word(f'{a}_verdict', 'word')}**: flipped at layer {d.n('layer', a)}, "
                   f"{d.n('runs', a, 'verb_flip')} of the {d.n('n_test')} test continuations take a verb of the other "
                   f"number (judged {d.n('runs', a, 'judged')}), against {d.n('random_' + a, 'verb_flip', 'mean')} "
                   f"for {d.n('random_' + a, 'verb_flip', 'n')} random directions of the same norm (difference "
                   f"{d.n(f'{a}_verdict', 'interval', 'diff')}, `95 %` interval [{d.n(*ci, 0)}, {d.n(*ci, 1)}], smallest "
                   f"margin it can tell apart {d.n(f'{a}_verdict', 'mde')}) and {d.n('runs', 'unsteered', 'verb_flip')} unsteered")
    forced = (f" At the final residual stream (layer {d.n('forced', 'layer')}, never chosen) the core flip turns "
              f"{d.n('forced', 'verb_flip')} of them: forced by the readout, not judged.") if "forced" in v else ""
    return (f"* **{d.spec}**: {out[0]}; {out[1]}.{forced} |cos(core, diff)| at the core's layer {d.n('cosine')}; mean flip "
            f"displacement core {d.n('displacement', 'core')}, diff {d.n('displacement', 'diff')} (residual units).")


def _dev_cell(d: _Doc, v: dict[str, Any], axis: str, layer: str) -> str:
    """One layer's dev flip: bold where it was chosen, in italics marked forced at the final residual stream."""
    text = f"L{layer}: {d.n('dev_verb_flip', axis, layer)}"
    if int(layer) == v.get("forced_layer"):
        return f"*{text} (forced)*"
    return f"**{text}**" if int(layer) == v["layer"][axis] else text


def _gap(d: _Doc, g: dict[str, Any]) -> tuple[list[str], list[str]]:
    strengths = list(g["random"])
    row = [d.spec, d.n("gap", "layer"), *[d.n("gap", "flip", f"core@{s}") for s in strengths],
           *[d.n("gap", "random", s, "max") for s in strengths], d.n("gap", "flip", "core_mid"), d.n("gap", "flip", "diff@1"),
           d.n("gap", "core_by_number", "sg"), d.n("gap", "core_by_number", "pl")]
    return row, strengths


def doc_regions(result: dict[str, Any], budgets: dict[str, dict[str, Any]], default_models: Sequence[str]) -> dict[str, str]:
    """The body of each `<!-- gen:NAME -->` region of the steering doc (name -> Render.region text).
    `budgets` and `default_models` are the study's (interp.studies.steering passes its own; taking
    them as arguments keeps this module from importing the study back)."""
    from interp.studies.docs import Render, pointer

    r = Render(result)
    regions: dict[str, str] = {}
    head = ["model", "run", "layer", "judged", "verb agrees", "verb flipped", "flip share (all number words)",
            "pronoun judged", "random, same norm: flipped mean ± std", "random judged min–max",
            "flipped − random mean [`95 %` interval]", "mde", "verdict"]
    models = list(result["models"].items())
    docs = {spec: _Doc(r, spec) for spec, _ in models}
    # one region at a time: Render hands each region the keys rendered since the last one
    regions["runs"] = r.region(_table(head, [row for spec, v in models for row in _runs_rows(docs[spec], v)]))
    regions["reading"] = r.region("\n".join(_reading(docs[spec], v) for spec, v in models))
    regions["dev"] = r.region(_table(["model", "axis", "dev verb flip per layer (resid_post; **chosen**, *forced*: never "
                                      "chosen)", "lowest dev judged"], [
        [spec, a, ", ".join(_dev_cell(docs[spec], v, a, l) for l in v["dev_verb_flip"][a]), docs[spec].n("dev_judged", a)]
        for spec, v in models for a in ("core", "diff")]))
    regions["timing"] = r.region(_timing(r, result, docs, [spec for spec, _ in models]))
    gaps = [(spec, v) for spec, v in models if "gap" in v]
    if gaps:
        strengths = list(gaps[0][1]["gap"]["random"])
        regions["gap"] = r.region(_table(["model", "layer", *[f"core `s={s}`" for s in strengths],
                                          *[f"random max, `{s}×` norm" for s in strengths], "core re-centred on class midpoint",
                                          "diff `s=1`", "core `s=1`, sg heads", "core `s=1`, pl heads"],
                                         [_gap(docs[spec], v["gap"])[0] for spec, v in gaps]))
    t = lambda text: _code_digits(_one_line(text))  # noqa: E731
    examples = [f"* `{spec}`, *{t(e['prompt'])}* ({e['number']}): unsteered “{t(e['unsteered'])}” · "
                f"core flipped “{t(e['core'])}” · diff flipped “{t(e['diff'])}” · random “{t(e['random_core_0'])}”"
                for spec, v in models for e in v["examples"]]
    # example texts are model output, not results: code spans keep their digits out of the number check
    regions["examples"] = r.region("\n".join(examples))
    regions["command"] = r.region(_command(result["budget"], list(result["models"]), budgets, default_models))
    p = result["provenance"]
    regions["provenance"] = r.region(
        f"Budget `{result['budget']['name']}` (values in the JSON's `budget` block), {r.int('/budget/units_done')}/"
        f"{r.int('/budget/units_total')} units; made `{p['date']}` at commit `{p['commit']}` on `{p['machine']['cpu']}` "
        f"({p['machine']['device']}), wall {r.num('/provenance/wall_s')} s, {r.int('/provenance/units_run')} units computed "
        f"in this run.")
    return regions


def _code_digits(text: str) -> str:
    """Digits in free text (model output) wrapped in code spans, so they read as text, not results."""
    return re.sub(r"(\S*\d\S*)", lambda m: "`" + m.group(1).replace("`", "'") + "`", text)


def _timing(r, result: dict[str, Any], docs: dict[str, "_Doc"], specs: list[str]) -> str:
    """Per model: its units' seconds, the paper budget's, and (when the JSON has one) the GPU estimate."""
    from interp.studies.docs import pointer
    from interp.studies.gpu_estimate import bound_words

    head = ["model", "layers", "compute seconds of its units (this budget)", "paper budget, estimated seconds"]
    rows = [[spec, *[docs[spec].n(k) for k in ("n_layers", "unit_seconds", "paper_seconds_estimate")]] for spec in specs]
    if "gpu_estimate" not in result["provenance"]:
        return _table(head, rows)
    gpu = lambda spec, *k: r.num(pointer("provenance", "gpu_estimate", spec, *k))  # noqa: E731
    head += ["decode step here, s", "decode step, one GPU (estimate), s", "paper budget, one GPU (estimate), s"]
    for spec, row in zip(specs, rows):
        row += [gpu(spec, "cpu_forward_s"), f"{gpu(spec, 'gpu_forward_s', 0)}–{gpu(spec, 'gpu_forward_s', 1)}",
                f"{gpu(spec, 'paper_seconds_estimate', 0)}–{gpu(spec, 'paper_seconds_estimate', 1)}"]
    first = specs[0]
    cal = result["provenance"]["gpu_estimate"][first]["calibration"]
    return _table(head, rows) + f"\n\nA step's GPU bound: {bound_words(lambda *k: gpu(first, 'calibration', *k), cal)}."


def _command(b: dict[str, Any], models: list[str], budgets: dict[str, dict[str, Any]], default_models: Sequence[str]) -> str:
    """The command that made a result: its budget and every value that differs from that budget's default."""
    sets = [f"--set {k}={json.dumps(v).replace(' ', '')}" for k, v in b["values"].items() if budgets[b["name"]].get(k) != v]
    picked = [] if models == list(default_models) else [f"--model {m}" for m in models]
    return "```bash\n" + " ".join(["interp repro steering", f"--budget {b['name']}", *picked, *sets,
                                     "--out docs/steering_repro.json"]) + "\n```"


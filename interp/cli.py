"""The `interp` command: info, demo, zoo, sweep, repro, doc, steer, circuit.

An error is one line on stderr, `interp: error: ...`, and an exit code: 2 when the input was refused
(a bad argument, a missing or malformed file, an output that cannot be written: fix the command),
1 when the run itself failed (anything else, e.g. out of memory: a bug to report). `--debug` shows
the traceback instead. Outputs are checked writable before any work starts.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Callable

from interp.errors import InterpError

__all__ = ["build_parser", "main"]


def _hook_label(name: str, aliases: list[str], prefix: str = "") -> str:
    short = [a[len(prefix):] if a.startswith(prefix) else a for a in aliases]
    return name[len(prefix):] + (f" (= {', '.join(short)})" if short else "")


def _info(args: argparse.Namespace) -> int:
    from interp.hooks import hook_groups, hook_names
    from interp.model import describe, load

    from interp.model.gguf import REAL_MODELS

    model = load(args.spec)
    groups = hook_groups(model)
    # hook_names: every name the model accepts (aliases and never-firing hooks included);
    # hooks: the hook points a forward reaches, canonical name -> aliases
    info = {"spec": args.spec, **describe(model), "hook_names": hook_names(model), "hooks": groups}
    if args.spec in REAL_MODELS:
        info = {"card": REAL_MODELS[args.spec].card, **info}
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    for key, value in info.items():
        if key == "placement":  # where the weights live: dtype, then each part's device
            blocks = "; ".join(f"blocks {r} on {dev}" for dev, r in value["blocks"].items())
            print(f"placement: {value['dtype']}; embed on {value.get('embed')}; {blocks}; unembed on {value.get('unembed')}")
        elif key not in ("hook_names", "hooks"):
            print(f"{key}: {value}")
    others = [_hook_label(n, a) for n, a in groups.items() if not n.startswith("blocks.")]
    block0 = [_hook_label(n, a, "blocks.0.") for n, a in groups.items() if n.startswith("blocks.0.")]
    n_quiet = len({id(p) for p in model.hook_dict.values()}) - len(groups)
    print(f"hooks: {len(groups)} hook points fire in a forward pass (aliases in parentheses)")
    print(f"  outside blocks: {', '.join(others)}")
    print(f"  per block (blocks.0. shown): {', '.join(block0)}")
    if n_quiet:
        print(f"  ({n_quiet} more are gated off or unused by this architecture; --json lists every name)")
    return 0


def _demo(args: argparse.Namespace) -> int:
    from interp.demo import run_demo
    from interp.files.storage import check_writable

    check_writable(args.out, folder=True)
    path = run_demo(Path(args.out))
    print(f"wrote {path}")
    return 0


def _zoo_list(args: argparse.Namespace) -> int:
    from interp.zoo import entries, table

    if args.json:
        print(json.dumps(entries(), indent=2))
        return 0
    rows = table()
    if not rows:
        print("no zoo models shipped; train one with `interp zoo train NAME`")
        return 0
    # Each task has its own splits: they share one column ("split score, ..."), so a row shows
    # only the splits that apply to it; a column no model fills (e.g. "zoo") is left out.
    fixed = ("name", "family", "task", "layers", "d_model", "heads", "kv_heads", "train_s", "zoo")
    for row in rows:
        splits = {k: row.pop(k) for k in list(row) if k not in fixed}
        row["scores"] = ", ".join(f"{k} {v:g}" for k, v in splits.items())
    columns = [c for c in dict.fromkeys(k for row in rows for k in row) if any(row.get(c) not in (None, "") for row in rows)]
    cells = [[("" if row.get(c) is None else f"{row[c]:g}" if isinstance(row[c], float) else str(row[c])) for c in columns]
             for row in rows]
    numeric = [all(isinstance(row.get(c), (int, float)) for row in rows) for c in columns]
    width = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    for line in [columns, *cells]:
        print("  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(line, width, numeric)).rstrip())
    return 0


def _zoo_train(args: argparse.Namespace) -> int:
    from interp.zoo.train import RECIPES, train

    if args.name not in RECIPES:
        raise InterpError(f"no recipe {args.name!r}; recipes: {', '.join(RECIPES)}")
    if args.out is not None:
        from interp.files.storage import check_writable

        check_writable(args.out, folder=True)
    card = train(RECIPES[args.name], args.out, steps=args.steps, progress=not args.json)
    print(json.dumps({"name": card["name"], "seconds": card["training"]["seconds"], "accuracy": card.get("accuracy")}, indent=2))
    return 0


def _sweep(args: argparse.Namespace) -> int:
    from interp.sweep import run

    kw = {}
    if args.executor == "ray":
        kw = {k: v for k, v in dict(address=args.address, num_cpus=args.num_cpus, worker_cpus=args.worker_cpus,
                                    worker_gpus=args.worker_gpus, retries=args.retries).items() if v is not None}
    elif any(v is not None for v in (args.address, args.num_cpus, args.worker_cpus, args.worker_gpus, args.retries)):
        raise InterpError("--address, --num-cpus, --worker-cpus, --worker-gpus and --retries need --executor ray")
    from interp.files.storage import check_writable

    check_writable(args.out, folder=True)
    summary = run(args.config, args.out, progress=not args.json, executor=args.executor, **kw)
    if args.json:
        print(json.dumps(summary))
    else:
        for line in summary.get("recomputed", []):
            print(f"recomputed {line}")
        print(f"{len(summary['jobs'])} jobs done; results in {args.out}/results.json and {args.out}/report.html")
    return 0


def _seeds(text: str) -> int | list[int]:
    """`--seeds 3` (seeds 0, 1, 2) or `--seeds 0,4,7`."""
    try:
        return int(text) if "," not in text else [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give a count (3) or a comma-separated list of seeds (0,4,7)") from None


def _finite(value: object) -> bool:
    """Every number in a JSON value is finite and fits 64 bits (1e999 reads as inf, 10**400 as an int
    that no tensor or count holds)."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, int):
        return abs(value) < 2**63
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    return True


def _setting(text: str) -> tuple[str, object]:
    """`--set key=value`: the value read as JSON (0.5, 3, true, [1, 2]), else kept as a string."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: write --set KEY=VALUE, e.g. --set boot=200")
    try:
        parsed = json.loads(value, parse_constant=lambda word: math.nan)  # NaN, Infinity: refused below
    except json.JSONDecodeError:
        return key.strip(), value
    if not _finite(parsed):
        raise argparse.ArgumentTypeError(f"{text!r}: {value} is not a finite number that fits 64 bits; "
                                         f"give a finite value, e.g. --set {key.strip()}=1e9")
    return key.strip(), parsed


def _overrides(args: argparse.Namespace) -> dict[str, object]:
    """The budget overrides of an `interp repro` command line (the named flags, then each --set)."""
    named = {"steps": args.steps, "seeds": args.seeds, "rows": args.rows, "lr": args.lr}
    out = {k: v for k, v in named.items() if v is not None}
    for key, value in args.set or []:
        if key in out:
            raise InterpError(f"budget key {key!r} given twice (--{key} and --set {key}=...); give it once")
        out[key] = value
    return out


def _repro(args: argparse.Namespace) -> int:
    from interp.files.storage import check_writable, write_text_atomic
    from interp.studies import protocol

    if args.out:  # refused now, not after the run
        check_writable(args.out)
    if args.units:
        check_writable(args.units, folder=True)
    result = protocol.get(args.name).repro(progress=not args.json, models=args.model, budget=args.budget,
                                             overrides=_overrides(args), units=args.units)
    if args.out:  # the study's one JSON, whole or not at all
        write_text_atomic(args.out, json.dumps(result, indent=2) + "\n")
    if args.json:
        print(json.dumps(result))
    elif args.out:
        budget = result.get("budget", {})
        units = f", {budget['units_done']}/{budget['units_total']} units" if "units_done" in budget else ""
        print(f"wrote {args.out} (budget {budget.get('name', args.budget)}{units})")
    else:
        print(json.dumps(result, indent=2))
    return 0


def _doc(args: argparse.Namespace) -> int:
    from interp.studies import protocol

    for path, flag in ((args.json_path, "--json"), (args.doc, "--doc")):
        if not Path(path).is_file():
            raise InterpError(f"{flag} {path}: {'a folder, not a file' if Path(path).is_dir() else 'no such file'}; give the study's JSON (from `interp repro {args.name} --out`) "
                              "and the markdown whose <!-- gen:NAME --> regions it refills")
    from interp.files.storage import check_writable

    check_writable(args.doc)
    print(f"wrote {protocol.get(args.name).write_doc(args.json_path, args.doc)}")
    return 0


def _steer(args: argparse.Namespace) -> int:
    from interp.model import load
    from interp.steering import Axis, Steer, generate

    axis = Axis.load(args.axis)
    model = load(args.model)
    kw = dict(max_new_tokens=args.max_new_tokens, positions=args.positions, record=False)
    plain = generate(model, args.prompts, (), **kw)
    steered = generate(model, args.prompts, Steer(axis, args.mode, args.strength), **kw)
    rows = [{"prompt": p, "unsteered": a, "steered": b}
            for p, a, b in zip(args.prompts, plain.completions, steered.completions)]
    if args.json:
        print(json.dumps({"site": axis.site, "mode": args.mode, "strength": args.strength, "rows": rows}))
        return 0
    print(f"{args.mode}({args.strength:g}) at {axis.site}")
    for row in rows:
        print(f"{row['prompt']}\n  unsteered: {row['unsteered']}\n  steered:   {row['steered']}")
    return 0


def _circuit(args: argparse.Namespace) -> int:
    from interp.views.circuit import circuit_html
    from interp.circuits import faithfulness_curve
    from interp.circuits.pipeline import scores, summary, task_for, with_example
    from interp.model import load
    from contextlib import ExitStack

    from interp.files.storage import atomic_path, check_writable

    if args.steps < 1:
        raise InterpError(f"--steps {args.steps} must be >= 1")
    if args.n < 2:
        raise InterpError(f"--n {args.n} must be >= 2 examples")
    out, progress = Path(args.out), not args.json
    check_writable(out, folder=True)
    model = load(args.model)
    task = task_for(model, args.task, n=args.n, seed=args.seed)
    graph = scores(model, task, args.method, steps=args.steps, progress=progress)
    graph = with_example(model, task, replace(graph, meta={**graph.meta, "model": args.model}))
    curve = faithfulness_curve(model, task, graph, ablation=args.ablation, order=args.order, progress=progress)
    digest, page = summary(graph, curve), circuit_html(graph)  # everything computed before anything is written
    # the four files replace earlier ones together, once all are written: an interrupted write leaves
    # the folder as it was, never a new graph beside an old circuit.html
    with ExitStack() as stack:
        graph_at, curve_at, digest_at, page_at = (
            stack.enter_context(atomic_path(out / name))
            for name in ("graph.safetensors", "faithfulness.safetensors", "faithfulness.json", "circuit.html"))
        graph.save(graph_at)
        curve.save(curve_at)
        Path(digest_at).write_text(json.dumps(digest, indent=2), encoding="utf-8")
        Path(page_at).write_text(page, encoding="utf-8")
    if args.json:
        print(json.dumps({**digest, "out": str(out)}))
        return 0
    f = digest["faithfulness"]
    print(f"{args.method} on {args.model}, {task.name}/{task.split} n={len(task)}: clean {graph.meta['clean_metric']:.4g}, "
          f"corrupt {graph.meta['corrupt_metric']:.4g}; {len(graph)} edges")
    print(f"top heads: {', '.join(h['head'] for h in digest['top_heads'][:5])}")
    area = lambda k: "–" if f[k] is None else f"{f[k]:.3f}"  # noqa: E731
    print(f"{args.ablation} ablation, {args.order} order: area under f {area('area_under')} (MIB's CPR with --order signed), "
          f"between f and 1 {area('area_from_1')} (MIB's CMD with --order top)")
    print(f"wrote {out}/graph.safetensors, faithfulness.safetensors, faithfulness.json, circuit.html")
    return 0


def _add_model_commands(sub) -> None:
    """info, demo, zoo list, zoo train: one model, the demo and the zoo."""
    p = sub.add_parser("info", help="family, sizes and hook names of a model")
    p.add_argument("spec", help="hub name, local HF directory, or zoo:NAME")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_info)
    p = sub.add_parser("demo", help="run the offline demo and write report.html")
    p.add_argument("--out", default="out", help="output folder (default: out)")
    p.set_defaults(func=_demo)
    zoo = sub.add_parser("zoo", help="list or retrain the shipped models").add_subparsers(dest="zoo_command", required=True)
    p = zoo.add_parser("list", help="the shipped models with their recorded accuracies")
    p.add_argument("--json", action="store_true", help="print the model cards as JSON")
    p.set_defaults(func=_zoo_list)
    p = zoo.add_parser("train", help="retrain one zoo model from scratch on the CPU")
    p.add_argument("name", help="recipe name, e.g. lm-gpt2 (see `interp zoo list`)")
    p.add_argument("--out", default=None,
                   help="output directory (default: NAME in the user zoo, $INTERP_CACHE/zoo or ~/.cache/interp/zoo, "
                        "which zoo:NAME searches before the shipped models)")
    p.add_argument("--steps", type=int, default=None, help="override the step count (smoke runs)")
    p.add_argument("--json", action="store_true", help="no progress bar (the summary is JSON either way)")
    p.set_defaults(func=_zoo_train)


def _add_sweep(sub) -> None:
    """sweep: a TOML list of experiments, locally or on Ray (interp.sweep)."""
    p = sub.add_parser("sweep", help="run a TOML list of patching / ablation experiments, resumably (locally or on Ray)")
    p.add_argument("config", help="TOML config with [[experiment]] tables (see examples/)")
    p.add_argument("--out", required=True, help="output folder (rerun with the same folder to resume)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON, no progress bars")
    p.add_argument("--executor", default="local", choices=["local", "ray"],
                   help="local (default): run here; ray: one Ray actor per model (pip install 'interp[ray]')")
    p.add_argument("--address", default=None,
                   help="Ray cluster to join: 'auto' (the one `ray start` runs here) or HOST:PORT; "
                        "default: start a local cluster for this command and stop it after")
    p.add_argument("--num-cpus", type=int, default=None, help="CPUs of the local cluster (default: all)")
    p.add_argument("--worker-cpus", type=float, default=None, help="CPUs per model actor (default 1)")
    p.add_argument("--worker-gpus", type=float, default=None, help="GPUs per model actor (default 0)")
    p.add_argument("--retries", type=int, default=None,
                   help="times a job reruns after its worker dies (default 3; exceptions are not retried)")
    p.set_defaults(func=_sweep)


def _add_repro(sub) -> None:
    """repro: a paper's study with its budget and overrides (interp.studies)."""
    p = sub.add_parser("repro", help="reproduce a paper's study (resumable units; --budget quick or paper)",
                       studies=_runnable)
    p.add_argument("name", help="which study (listed below)")
    p.add_argument("--budget", default="quick",
                   help="the study's budget: quick (default; what the tests run) or paper (the paper's schedule)")
    p.add_argument("--steps", type=int, default=None, help="override the budget's steps")
    p.add_argument("--seeds", type=_seeds, default=None, metavar="N|a,b,c",
                   help="override the budget's seeds: a count (seeds 0..N-1) or a list")
    p.add_argument("--rows", type=int, default=None, help="override the budget's rows (examples per split / task)")
    p.add_argument("--lr", type=float, default=None, help="override the budget's learning rate")
    p.add_argument("--set", type=_setting, action="append", default=None, metavar="KEY=VALUE",
                   help="override any other budget key (value read as JSON); repeat for several")
    p.add_argument("--units", default=None, metavar="DIR",
                   help="where the study's finished units are stored (default $INTERP_CACHE/studies/NAME); "
                        "a rerun computes only the missing ones")
    p.add_argument("--out", default=None, metavar="FILE.json", help="write the study's JSON here (atomically)")
    p.add_argument("--model", action="append", default=None, metavar="SPEC",
                   help="run the study on this model (zoo:NAME, a real model name, a local HF dir); "
                        "repeat for several; default: the study's own models")
    p.add_argument("--json", action="store_true", help="print one JSON object and no progress bars")
    p.set_defaults(func=_repro)
    p = sub.add_parser("doc", help="refill a study doc's generated regions from its JSON (no runs)", studies=_registered)
    p.add_argument("name", help="which study or bound doc (listed below)")
    p.add_argument("--json", dest="json_path", required=True, metavar="FILE.json", help="the study's JSON (`interp repro --out`)")
    p.add_argument("--doc", required=True, metavar="FILE.md", help="the markdown whose <!-- gen:NAME --> regions are rewritten")
    p.set_defaults(func=_doc)


def _add_circuit_and_steer(sub) -> None:
    """circuit and steer: the two capabilities with a command of their own."""
    p = sub.add_parser("circuit", help="edge scores (EAP, EAP-IG, exact), faithfulness curve and circuit.html")
    p.add_argument("model", help="zoo:NAME, a real model name, or a local HF directory")
    p.add_argument("--task", default="ioi", choices=["ioi", "sva"],
                   help="the zoo's own task for zoo models, interp.tasks.bpe's for real ones (default ioi)")
    p.add_argument("--method", default="eap-ig", choices=["eap", "eap-ig", "exact"])
    p.add_argument("--steps", type=int, default=5, help="EAP-IG interpolation steps (default 5)")
    p.add_argument("--ablation", default="mean", choices=["mean", "resample"],
                   help="what an edge outside the circuit carries (default mean)")
    p.add_argument("--order", default="top", choices=["top", "signed", "greedy"], help="how circuits grow (default top: by |score|)")
    p.add_argument("--n", type=int, default=64, help="examples (default 64)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--json", action="store_true", help="print one JSON object and no progress bars")
    p.set_defaults(func=_circuit)
    p = sub.add_parser("steer", help="generate with an axis added, flipped, removed or set (interp.steering)")
    p.add_argument("prompts", nargs="+", help="one or more prompts")
    p.add_argument("--model", required=True, help="hub name, local HF directory, or zoo:NAME")
    p.add_argument("--axis", required=True, help="an Axis file written by interp.steering.Axis.save")
    p.add_argument("--mode", default="flip", choices=["add", "flip", "project_out", "set"])
    p.add_argument("--strength", type=float, default=1.0, help="see interp.steering (default 1)")
    p.add_argument("--max-new-tokens", type=int, default=10)
    p.add_argument("--positions", default="all", choices=["all", "prompt", "generated"])
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_steer)


def _runnable() -> list[str]:
    from interp.studies.protocol import runnable

    return runnable()


def _registered() -> list[str]:
    from interp.studies.protocol import REGISTRY

    return list(REGISTRY)


class _Parser(argparse.ArgumentParser):
    """argparse with every command's `--debug` and usage errors on one line (exit 2). `studies` lists the
    names a command takes under its help; it is read only when the help is shown, so parsing a command
    line imports no study (a name not registered is refused by `interp.studies.protocol.get`)."""

    def __init__(self, *args, studies: Callable[[], list[str]] | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._studies = studies
        self.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                          help="on an error, show its traceback instead of one line")

    def format_help(self) -> str:
        if self._studies is not None:
            self.epilog = f"studies: {', '.join(self._studies())}"
        return super().format_help()

    def error(self, message: str):
        self.exit(2, f"interp: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="interp",
        description="Mechanistic interpretability on TransformerLens 4.x bridges.",
    )
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    _add_model_commands(sub)
    _add_sweep(sub)
    _add_repro(sub)
    _add_circuit_and_steer(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:  # a bare `interp`: the help, and success
        parser.print_help()
        return 0
    try:
        code = args.func(args)
        sys.stdout.flush()  # a closed pipe fails here, not in the interpreter's flush at exit
        return code
    except BrokenPipeError:  # the reader left (`interp zoo list | head`): no error line, and none at exit either
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # what a shell reports for a writer stopped by SIGPIPE
    except (Exception, KeyboardInterrupt) as err:
        if getattr(args, "debug", False):
            raise
        return _failed(err)


def _failed(err: BaseException) -> int:
    """One line on stderr for `err` and the exit code: 2 refused input, 1 a failed run, 130 interrupted."""
    text = " ".join(str(err).split())
    if isinstance(err, KeyboardInterrupt):
        print("interp: interrupted", file=sys.stderr)
        return 130
    if isinstance(err, (InterpError, FileNotFoundError)):  # bad input: the command needs fixing
        print(f"interp: error: {text}", file=sys.stderr)
        return 2
    print(f"interp: error: the run failed: {type(err).__name__}: {text} (rerun with --debug for the traceback)",
          file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())

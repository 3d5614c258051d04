# Two entry points: `make demo` (figures, figures/REPORT.md, executed notebooks) and `make test` (full suite).
# Both create .venv on first use; each installs only what it needs.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# CPU build of torch for the numpy/torch parity tests; set TORCH_SPEC= to skip torch.
TORCH_SPEC ?= torch==2.13.0
BASE_STAMP := $(VENV)/.base
DEMO_STAMP := $(VENV)/.demo
TEST_STAMP := $(VENV)/.test

.PHONY: demo test bench lint venv clean

venv: $(BASE_STAMP)

$(BASE_STAMP):
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	touch $(BASE_STAMP)

# the main job: otspec and the notebook runner (no test tools, no torch)
$(DEMO_STAMP): pyproject.toml Makefile $(BASE_STAMP)
	$(BIN)/python -m pip install --quiet -e ".[notebooks]"
	touch $(DEMO_STAMP)

# the test suite: otspec, the test tools and a CPU build of torch for the parity tests
$(TEST_STAMP): pyproject.toml Makefile $(BASE_STAMP)
	@if [ -n "$(TORCH_SPEC)" ]; then \
	  $(BIN)/python -m pip install --quiet "$(TORCH_SPEC)" \
	  || echo "otspec: could not install $(TORCH_SPEC); torch tests will be skipped"; fi
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(TEST_STAMP)

demo: $(DEMO_STAMP)
	MPLBACKEND=Agg $(BIN)/python -m otspec.report
	MPLBACKEND=Agg $(BIN)/python notebooks/execute.py

test: $(TEST_STAMP)
	MPLBACKEND=Agg $(BIN)/python -m pytest

lint: $(TEST_STAMP)
	$(BIN)/ruff check otspec llm_bridge tests benchmarks simulations notebooks/execute.py

bench: $(TEST_STAMP)
	$(BIN)/python benchmarks/bench_token_mc.py
	$(BIN)/python benchmarks/bench_block_ot.py
	$(BIN)/python benchmarks/bench_otm.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis

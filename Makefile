# Two entry points: `make demo` (figures + figures/REPORT.md) and `make test` (full suite).
# Both create .venv on first use and install otspec with what it needs.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# CPU build of torch for the numpy/torch parity tests; set TORCH_SPEC= to skip torch.
TORCH_SPEC ?= torch==2.13.0
STAMP  := $(VENV)/.installed

.PHONY: demo test bench lint venv clean

venv: $(STAMP)

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	@if [ -n "$(TORCH_SPEC)" ]; then \
	  $(BIN)/python -m pip install --quiet "$(TORCH_SPEC)" \
	  || echo "otspec: could not install $(TORCH_SPEC); torch tests will be skipped"; fi
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

demo: $(STAMP)
	MPLBACKEND=Agg $(BIN)/python -m otspec.report

test: $(STAMP)
	MPLBACKEND=Agg $(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check otspec llm_bridge tests benchmarks simulations

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_token_mc.py
	$(BIN)/python benchmarks/bench_block_ot.py
	$(BIN)/python benchmarks/bench_otm.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis

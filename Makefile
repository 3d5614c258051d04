# Two entry points: `make demo` (a short validation, every figure, REPORT.md and the executed notebooks, all under
# build/demo; nothing committed changes) and `make test` (full suite). `make figures` and `make records` remake what is
# committed (figures/, the notebooks' outputs, the real-pair records).
# Both create .venv on first use; each installs only what it needs.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# CPU build of torch for the numpy/torch parity tests; set TORCH_SPEC= to skip torch.
TORCH_SPEC ?= torch==2.13.0
BASE_STAMP := $(VENV)/.base
DEMO_STAMP := $(VENV)/.demo
TEST_STAMP := $(VENV)/.test

.PHONY: demo demo-validate-notebooks demo-report figures test test-long bench gpu heads head-curve records lint venv clean

venv: $(BASE_STAMP)

$(BASE_STAMP):
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	touch $(BASE_STAMP)

# the main job: otspec, the notebook runner, a CPU build of torch and transformers for the real pair, and the sweep's
# tables and Dask engine (the README's sweep commands run after it)
$(DEMO_STAMP): pyproject.toml Makefile $(BASE_STAMP)
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -e ".[notebooks,llm,sweep]"
	touch $(DEMO_STAMP)

# the test suite: otspec, the test tools, a CPU build of torch and transformers (tiny models, the real pair)
$(TEST_STAMP): pyproject.toml Makefile $(BASE_STAMP)
	@if [ -n "$(TORCH_SPEC)" ]; then \
	  $(BIN)/python -m pip install --quiet "$(TORCH_SPEC)" \
	  || echo "otspec: could not install $(TORCH_SPEC); torch tests will be skipped"; fi
	$(BIN)/python -m pip install --quiet -e ".[dev,llm]"
	touch $(TEST_STAMP)

# the short real-model validation of the main job (default pair, cached after its first run): into a scratch
# folder, never over a committed record; the report and notebooks read the committed records in figures/
LLM_DEMO := --name demo --out-dir build/demo --draft distilled --verifiers token,block,block_v1 --L 4 \
            --prompts 4 --batch-size 4 --max-new-tokens 24 --prediction-sequences 8 --no-hf \
            --lossless-verifiers block --lossless-samples 0

# two lanes on two cores: the validation (one torch thread) then the notebooks, and the report
demo: $(DEMO_STAMP)
	$(MAKE) --no-print-directory -j2 demo-validate-notebooks demo-report

demo-validate-notebooks: $(DEMO_STAMP)
	OMP_NUM_THREADS=1 MPLBACKEND=Agg $(BIN)/python -m llm_bridge.validate $(LLM_DEMO)
	MPLBACKEND=Agg $(BIN)/python -m otspec.plot record build/demo/llm_demo.json
	MPLBACKEND=Agg $(BIN)/python notebooks/execute.py --out build/demo/notebooks

demo-report: $(DEMO_STAMP)
	MPLBACKEND=Agg $(BIN)/python -m otspec.report --out-dir build/demo/figures

# the maintainers' regeneration of what is committed: every toy-source figure and figures/REPORT.md (the real-pair
# records read as they are), and the notebooks executed in place; a checkout stays clean otherwise
figures: $(DEMO_STAMP)
	MPLBACKEND=Agg $(BIN)/python -m otspec.report --out-dir figures
	MPLBACKEND=Agg $(BIN)/python notebooks/execute.py

# one worker per core (pytest-xdist), each test file on one worker (its module fixtures built once)
test: $(TEST_STAMP)
	MPLBACKEND=Agg $(BIN)/python -m pytest -n auto --dist loadfile

test-long: $(TEST_STAMP)
	MPLBACKEND=Agg $(BIN)/python -m pytest -m audit_long tests/test_audit.py

lint: $(TEST_STAMP)
	$(BIN)/ruff check otspec llm_bridge tests benchmarks simulations notebooks/execute.py

bench: $(TEST_STAMP)
	$(BIN)/python benchmarks/bench_token_mc.py
	$(BIN)/python benchmarks/bench_block_ot.py
	$(BIN)/python benchmarks/bench_otm.py
	$(BIN)/python benchmarks/bench_verifiers_torch.py
	$(BIN)/python benchmarks/bench_loop_overhead.py
	$(BIN)/python benchmarks/bench_llm_vocab_mc.py --device auto --log figures/llm_distilled_rows.npz
	$(BIN)/python benchmarks/bench_vocab_goals.py
	$(BIN)/python benchmarks/bench_sweep.py

# every committed real-pair record on CPU (about six hours on 2 quiet cores): run it on a quiet machine, nothing else
# running, then commit figures/llm_*; records measured on a busy machine mark themselves unreliable_timing. Each record
# is its own target (`make record-eagle` remakes figures/llm_eagle.json alone); `make records` runs them one after
# another (never in parallel: a record times its runs) and then the report. The two-sample losslessness tests of
# token / block / block_v1 run once (llm_distilled); the exact laws run everywhere
RECORD := MPLBACKEND=Agg $(BIN)/python -m llm_bridge.validate --prompts 32 --batch-size 8 --max-new-tokens 64 --timing-attempts 2 \
          --out-dir figures
ADAPTIVE := MPLBACKEND=Agg $(BIN)/python -m llm_bridge.adaptive --timing-attempts 2 --out-dir figures
RECORDS := distilled default int8 otm trees ngram adaptive_distilled eagle eagle_greedy adaptive_eagle \
           eagle_specdecpp medusa eagle2_trees eagle_heldout
.PHONY: $(addprefix record-,$(RECORDS))
records: $(DEMO_STAMP)
	for r in $(RECORDS); do $(MAKE) --no-print-directory record-$$r || exit 1; done
	MPLBACKEND=Agg $(BIN)/python -m otspec.report --out-dir figures

record-distilled: $(DEMO_STAMP)
	$(RECORD) --draft distilled --L 2,4,8 --log-rows figures/llm_distilled_rows.npz
record-default: $(DEMO_STAMP)
	$(RECORD) --draft distilled --L 2,4 --name default --log-rows figures/llm_default_rows.npz --lossless-samples 0
record-int8: $(DEMO_STAMP)
	$(RECORD) --draft int8 --L 2,4 --lossless-samples 0
record-otm: $(DEMO_STAMP)
	$(RECORD) --draft distilled --verifiers token --L 2 --top-k 8 --trees 2x1,iid:3:2 \
	    --multi-verifiers otm,kseq,multiround --name otm
record-trees: $(DEMO_STAMP)
	$(RECORD) --draft distilled --verifiers token --L 2,4 --trees iid:2:3,2x2x1,4x2x2x1 \
	    --multi-verifiers kseq,multiround,multiround_without_replacement --name trees
record-ngram: $(DEMO_STAMP)
	$(RECORD) --draft ngram --L 2,4,8 --name ngram
record-adaptive_distilled: $(DEMO_STAMP)
	$(ADAPTIVE) --draft distilled --head llm_bridge/weights/distilled/head.json --thresholds 0.2,0.4,0.6,0.8 --fixed 1,2,3,4,6
# the feature-level heads at batch 1 (the latency setting), temperature 1 and 0, and the confidence rule; at
# temperature 1 their predictions read 3 plain paths of each prediction prompt (one path is a lucky or unlucky draw)
record-eagle: $(DEMO_STAMP)
	$(RECORD) --draft eagle --L 1,2,3 --batch-size 1 --prediction-paths 3
record-eagle_greedy: $(DEMO_STAMP)
	$(RECORD) --draft eagle --verifiers token --L 1,2,3 --temperature 0 --batch-size 1 --name eagle_greedy
# the model card's recommended sampling (SmolLM2-135M-Instruct: temperature 0.2, top-p 0.9); joins RECORDS when its
# record is committed (the packaging test pairs committed records with RECORDS)
record-eagle_card: $(DEMO_STAMP)
	$(RECORD) --draft eagle --verifiers token --L 1,2,3 --temperature 0.2 --top-p 0.9 --batch-size 1 \
	    --prediction-paths 3 --name eagle_card
record-adaptive_eagle: $(DEMO_STAMP)
	$(ADAPTIVE) --draft eagle --fixed 1,2,3,4 --thresholds 0.05,0.1,0.2,0.3,0.5 --max-length 6 --batch-size 1 \
	    --prediction-paths 3
record-eagle_specdecpp: $(DEMO_STAMP)
	$(ADAPTIVE) --draft eagle --rule specdecpp --fixed 1,2,3 --thresholds 0.3,0.5,0.7,0.9 --batch-size 1 \
	    --name eagle_specdecpp --prediction-paths 3
record-medusa: $(DEMO_STAMP)
	$(RECORD) --draft medusa --verifiers token,block --L 1,2,3 --batch-size 1
# EAGLE-2's confidence-ordered trees drafted by the EAGLE head, beside its chain at L = 1
record-eagle2_trees: $(DEMO_STAMP)
	$(RECORD) --draft eagle --verifiers token --L 1 --trees eagle2:2:2:3,eagle2:3:3:6 --multi-verifiers naive \
	    --batch-size 1 --lossless-samples 100 --name eagle2_trees --prediction-paths 3
# the held-out test: a configuration no other record measures, forecast from the cost profile alone, written
# down, then measured (the report puts the forecast beside the measurement)
record-eagle_heldout: $(DEMO_STAMP)
	MPLBACKEND=Agg $(BIN)/python -m llm_bridge.forecast --draft eagle --verifiers token --L 4 --batch-size 1 \
	    --name eagle_heldout --prediction-paths 3 --out-dir figures
	$(RECORD) --draft eagle --verifiers token --L 4 --batch-size 1 --name eagle_heldout --lossless-samples 0 \
	    --prediction-paths 3

# the shipped feature-level draft heads (llm_bridge/weights/eagle, medusa), remade from the target's own text: the
# EAGLE head on the whole corpus (2,400 steps of 8 sequences: 3.7 hours on 2 cores; resumable, rerun to continue)
heads: $(DEMO_STAMP)
	$(BIN)/python -m llm_bridge.train_head --kind eagle --corpus default --steps 2400 --score-fraction 0.25 \
	    --log-every 300 --out llm_bridge/weights/eagle
	$(BIN)/python -m llm_bridge.train_head --kind medusa

# the heads' learning curve on the corpus (figures/head_curve.json and .png; each point about an hour on 2 cores,
# resumed point by point): held-out acceptance per draft position against training tokens
head-curve: $(DEMO_STAMP)
	$(BIN)/python -m llm_bridge.head_curve --heads eagle,eagle3 --train-tokens 250000,1000000 \
	    --out figures/head_curve.json --heads-dir build/heads

# every GPU record of the README (llm_bridge.validate per draft family, trees, the verifier benchmark) on CUDA
gpu: $(DEMO_STAMP)
	MPLBACKEND=Agg $(BIN)/python -m llm_bridge.gpu_suite --device cuda --out-dir figures

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis

# Both targets set up .venv on a fresh machine (only python3 needed), then do their job.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint bench clean-venv

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	@# Optional extras for the torch-backed tests (pipeline device helpers, torchrun
	@# comparison, bench --real): the CPU build of torch where this machine has one.
	@# Never the multi-GB CUDA build: without the local +cpu wheel those tests are skipped.
	-$(BIN)/python -m pip install --quiet 'torch==2.13.0+cpu' 'tokenizers>=0.15,<1' \
		|| echo "note: torch (CPU) not installed; the torch-backed tests will be skipped"
	touch $(STAMP)

run: $(STAMP)
	@echo "== plan of the bundled A3 example (640 CPUs, 16 NPUs)"
	$(BIN)/accelhost plan --snapshot example:a3-640cpu-16npu
	@echo
	@echo "== topology of this machine"
	$(BIN)/accelhost topo

test: $(STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy src

bench: $(STAMP)
	$(BIN)/python benchmarks/plan.py

clean-venv:
	rm -rf $(VENV)

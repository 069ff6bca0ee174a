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

.PHONY: help venv bins system-deps test demo crds lock bench lint typecheck clean cluster-deps cluster-bins test-cluster

help:
	@echo "make test   - set up everything from nothing and run the suite"
	@echo "make demo   - run rollouts on the embedded default (no cluster, no Docker)"
	@echo "make bench  - benchmarks with ratios against in-run baselines"
	@echo "make crds   - regenerate crds/*.yaml from the API models"
	@echo "make lock   - re-resolve requirements.lock and requirements-runtime.lock from pyproject.toml"
	@echo "make test-cluster - (root) only the real-node tests: kubelet + containerd (docs/real-node.md)"

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

venv: $(STAMP)

bins:
	@hack/k8s-bin/build.sh >/dev/null

system-deps:
	@hack/install-system-deps.sh

# The real node (`swerollout cluster up`): Debian's containerd/runc/CNI/buildah and
# the kubelet, kube-proxy, scheduler and controller-manager from Go modules.
cluster-deps:
	@hack/install-cluster-deps.sh

cluster-bins: bins
	@hack/k8s-bin/build.sh node >/dev/null

# requirements.lock: everything, for the venv and the tests. requirements-runtime.lock: only
# what the image installs (the `image` extra), constrained by the first so that every pin
# in it is the one the tests ran with; the Dockerfile installs it with --no-deps.
lock:
	$(BIN)/uv pip compile -q --python-version 3.11 --all-extras pyproject.toml -o requirements.lock
	$(BIN)/uv pip compile -q --python-version 3.11 --extra image -c requirements.lock pyproject.toml -o requirements-runtime.lock

crds: venv
	$(BIN)/python -m swerollout.api.crdgen --out crds/ --chart helm/swerollout
	$(BIN)/python -m swerollout.api.docgen

# tests/cluster (the real node), tests/e2e (a dev stack) and the rest run side by side:
# see hack/run-tests.sh. The images are built by tests/cluster's session fixture
# (`cluster up`), while the other two run. PYTEST_ARGS: options for all three.
test: venv bins system-deps cluster-deps cluster-bins
	hack/run-tests.sh $(PYTEST_ARGS)

# Only the real-node tests (docs/real-node.md).
test-cluster: venv bins system-deps cluster-deps cluster-bins
	@# The session fixture builds the image and brings the node up: minutes cold, beyond the per-test timeout.
	$(BIN)/python -m pytest -o timeout=3600 tests/cluster $(PYTEST_ARGS)

lint: venv
	$(BIN)/lint-imports
	$(BIN)/mypy

demo: venv bins system-deps
	$(BIN)/python -m swerollout_dev.demo

bench: venv bins system-deps
	$(BIN)/python -m bench $(BENCH)

clean:
	rm -rf $(VENV) .swerollout .pytest_cache

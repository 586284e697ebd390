# The developer loop. CI runs `make test` verbatim (.ci/run).
#   make test   lint, types, layer contracts, unit + integration tests and the e2e suite on a real
#               single-node Kubernetes (needs root; builds the rig's binaries once, about 8 min cold on 2 cores,
#               beside helm and `check`; warm, `check` runs beside e2e: about 10-11 min in all)
#   make check  the same without e2e (any user, about 3 minutes)
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test check unit lint typecheck integration e2e bench proto clean install-runtime

$(STAMP): pyproject.toml
	@echo "[setup] creating $(VENV) with kubegpu and its development tools (first time: a few minutes)"
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	@echo "[setup] installing kubegpu and its test, lint and type-check tools into $(VENV)"
	$(BIN)/pip install --quiet --progress-bar off -e '.[dev]'
	touch $(STAMP)
	@echo "[setup] done: $(BIN)/kubegpu"

## kubegpu alone, without the development tools (for using it, not for working on it).
install-runtime:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install .
	@echo "kubegpu installed: $(BIN)/kubegpu (make test needs the development tools: make check installs them)"

## Set up everything and run the main job on the embedded default.
demo: $(STAMP)
	$(BIN)/kubegpu demo

## The whole test command: the Debian packages it needs (`rig-packages`), helm (for the chart checks),
## everything in `check`, the e2e suite (docs/testing.md), then the image's reproducibility check
## (docs/deploy.md). Three things overlap on
## the two cores: the rig's binaries build (niced, log in build/rig-build.log) while helm is built; the
## e2e suite starts as soon as the rig is built, and `check` as soon as helm is (log in build/check.log,
## its summary printed when it ends). Cold, `check` runs beside the Go build; warm, beside e2e. The
## tests that prove the e2e session refuses a host whose ports are held run just before e2e, in its
## lane, since holding the kubelet's port would break e2e's kubelet restarts.
RIG_SESSION_TESTS := tests/integration/rig/test_e2e_session.py

test:
	$(MAKE) --no-print-directory rig-packages
	$(MAKE) --no-print-directory -j3 test-parallel
	$(MAKE) --no-print-directory image-reproducible

.PHONY: test-parallel rig-build-background e2e-after-rig check-after-helm test-rig-session
test-parallel: e2e-after-rig check-after-helm

rig-build-background:
	@mkdir -p build
	@echo "[test] building the rig's binaries beside the other checks (log: build/rig-build.log)"
	@if tests/e2e/rig/build.sh all >build/rig-build.log 2>&1; then \
		echo "[test] $$(tail -n 1 build/rig-build.log)"; \
	else \
		tail -n 40 build/rig-build.log; echo "[test] the rig build failed (build/rig-build.log)"; exit 1; \
	fi

e2e-after-rig: rig-build-background $(STAMP)
	$(MAKE) --no-print-directory test-rig-session
	$(MAKE) --no-print-directory e2e

## `check` needs helm for the chart checks, so it starts once helm is built.
check-after-helm: helm $(STAMP)
	@mkdir -p build
	@echo "[test] make check beside the rig build or e2e (log: build/check.log)"
	@start=$$(date +%s); \
	if $(MAKE) --no-print-directory check CHECK_ARGS="--deselect $(RIG_SESSION_TESTS)" >build/check.log 2>&1; then \
		echo "[test] check: $$(tail -n 1 build/check.log) (wall $$(( $$(date +%s) - start )) s)"; \
	else \
		tail -n 80 build/check.log; echo "[test] make check failed (build/check.log)"; exit 1; \
	fi

test-rig-session: $(STAMP)
	$(BIN)/python -m pytest -q $(RIG_SESSION_TESTS)

## Lint, types, layer contracts, unit and integration tests: no root, no cluster. CHECK_ARGS: more
## pytest arguments (`make test` deselects the tests it runs in e2e's lane).
CHECK_ARGS ?=
check: $(STAMP) lint typecheck
	$(BIN)/python -m pytest -q tests $(CHECK_ARGS)

## Fast loop: the pure core and adapters' unit tests only.
unit: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python bench/allocate_bench.py
	$(BIN)/python bench/deviceplugin_bench.py
	$(BIN)/python bench/agent_soak.py

## Mutation testing of the code that decides GPUs (bench/mutation.py, docs/testing.md): the allocator, the
## extender's ledger, the share hand-out and the health policy; 80 sampled mutants a module, one at a
## time (about 15 minutes on 2 cores). Not part of `test`.
.PHONY: mutation
mutation: $(STAMP)
	$(BIN)/python bench/mutation.py --max-mutants 80 --workers 1

## NVIDIA's GFD v0.17.4 (built for the oracle test, tests/oracle/build.sh, cached in the rig cache) copied
## to build/oracle, where bench/gpu_smoke.sh finds it: the device tool carries build/oracle (docs/gpu-smoke.md).
.PHONY: gpu-smoke-prep
gpu-smoke-prep:
	@mkdir -p build/oracle
	@bin="$$(tests/oracle/build.sh | tail -n 1)" && cp "$$bin/gpu-feature-discovery" build/oracle/ && \
		echo "build/oracle/gpu-feature-discovery (from $$bin)"

## Regenerate the kubelet API stubs from the hand-written protos: Device Plugin v1beta1
## (src/kubegpu/deviceplugin/api/) and PodResources v1 (src/kubegpu/podresources/api/).
proto: $(STAMP)
	$(BIN)/python -m grpc_tools.protoc -I src --python_out=src --pyi_out=src --grpc_python_out=src \
		src/kubegpu/deviceplugin/api/v1beta1.proto src/kubegpu/podresources/api/v1.proto \
		src/kubegpu/dra/api/dra_v1.proto src/kubegpu/dra/api/dra_v1beta1.proto src/kubegpu/dra/api/registration_v1.proto \
		src/kubegpu/dra/api/health_v1alpha1.proto src/kubegpu/dra/api/health_v1.proto

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache

## End-to-end: a real single-node Kubernetes (tests/e2e/rig, docs/testing.md). Needs root.
.PHONY: rig-packages rig-build rig-up rig-down
## The Debian packages the rig, the image build and the tests need (runc, CNI plugins, busybox, ...),
## installed with apt-get where missing. `make test` runs it first: on a fresh machine `check` runs
## beside the rig build, and the simulated nvidia-smi's busybox tests need busybox then.
rig-packages:
	$(PY) -m tests.e2e.rig packages

rig-build:
	$(PY) -m tests.e2e.rig build

rig-up:
	$(PY) -m tests.e2e.rig up

rig-down:
	$(PY) -m tests.e2e.rig down

## The e2e suite (starts the rig if `make rig-up` has not; KUBEGPU_RIG_KEEP=1 leaves it running).
e2e: $(STAMP)
	$(BIN)/python -m pytest -q -m e2e --durations=15 tests/e2e

## Deployment (deploy/, docs/deploy.md). `test` runs `helm` and `image-reproducible`; the e2e suite
## builds and imports the image; `check` runs the manifests' staleness and lint check once helm is built.
.PHONY: image image-reproducible helm manifests manifests-check helm-lint
IMAGE_OUT ?= build/image/kubegpu.tar
HELM_BUILD := deploy/tools/build-helm.sh

## The container image as a docker-archive, without Docker (deploy/image/build.py; needs mmdebstrap).
image: $(STAMP)
	$(BIN)/python deploy/image/build.py --out $(IMAGE_OUT)

## Build the image twice and fail unless both archives are byte-identical.
image-reproducible: $(STAMP)
	$(BIN)/python deploy/image/build.py --check-reproducible

## helm, built from Go modules into the rig cache (deploy/tools/build-helm.sh).
helm:
	$(HELM_BUILD)

## Render deploy/kubegpu.yaml from the chart (checked in).
manifests: $(STAMP)
	$(BIN)/python deploy/tools/manifests.py render --helm "$$($(HELM_BUILD))"

## Fail when deploy/kubegpu.yaml is not what the chart renders, or when `helm lint` complains.
manifests-check: $(STAMP)
	$(BIN)/python deploy/tools/manifests.py check --helm "$$($(HELM_BUILD))"

# The two commands a newcomer needs: `make demo` and `make test`.
# Both start from nothing but Python >= 3.11; npm is used when it is installed.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
RUN_STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev
NPM := $(shell command -v npm 2>/dev/null)
NPM_CI := npm ci --no-audit --no-fund --loglevel=error
WEB_STAMP := api/static/graphiql/manifest.json
MAP_STAMP := api/static/map/manifest.json
MAP_SOURCES := web/map/build.mjs web/map/map.css $(wildcard web/map/src/*.js)
FEDERATION_STAMP := tests/federation/node_modules/.package-lock.json
DEMO_ARGS ?=
# -c pins what is installed; the variables pin the isolated build environment
# (setuptools) too: older pip reads PIP_CONSTRAINT there, pip >= 25.3 PIP_BUILD_CONSTRAINT.
PIP_INSTALL := PIP_CONSTRAINT=$(CURDIR)/constraints.txt \
	PIP_BUILD_CONSTRAINT=$(CURDIR)/constraints.txt $(PY) -m pip install -q -c constraints.txt

.PHONY: demo test install install-dev lint typecheck proto proto-check web web-if-npm \
	npm-if-npm bench-small bench gpu-check clean release-check release-image release-krew \
	local-image

# Debian's python3 without python3-venv leaves a $(VENV) without pip behind; remove
# it, so the next run starts over, and say what to install.
$(PY):
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11) and "gpugraph needs Python >= 3.11; set PYTHON=python3.11")'
	$(PYTHON) -m venv $(VENV) || true
	@$(PY) -m pip --version >/dev/null 2>&1 || { rm -rf $(VENV); \
		echo "error: '$(PYTHON) -m venv' made no working pip (on Debian/Ubuntu:" \
			"apt-get install python3-venv), then run make again" >&2; exit 1; }

# Runtime only: what `make demo` needs. pip -q prints nothing for a minute or so: say so.
$(RUN_STAMP): $(PY) pyproject.toml constraints.txt
	@echo "Installing gpugraph and its dependencies into $(VENV) (pinned by constraints.txt);" \
		"the first time takes a minute or so"
	$(PIP_INSTALL) -e .
	touch $@

# Runtime plus the dev extras (tests, lint, type checking).
$(DEV_STAMP): $(PY) pyproject.toml constraints.txt
	@echo "Installing gpugraph and its dev extras into $(VENV) (pinned by constraints.txt);" \
		"the first time takes a few minutes"
	$(PIP_INSTALL) -e '.[dev]'
	touch $@ $(RUN_STAMP)

install: $(RUN_STAMP)

install-dev: $(DEV_STAMP)

# GraphiQL's browser bundles, copied from npm packages into api/static/graphiql/,
# and the cluster map's, bundled by esbuild into api/static/map/.
web: $(WEB_STAMP) $(MAP_STAMP)

$(WEB_STAMP): web/package.json web/package-lock.json web/build.mjs
	@echo "Building GraphiQL's and the map's browser assets (npm ci, then esbuild)"
	cd web && $(NPM_CI) && npm run build

# `npm run build` above builds the map too; this rebuilds it after an edit of its sources.
$(MAP_STAMP): $(WEB_STAMP) $(MAP_SOURCES)
	cd web && node map/build.mjs

$(FEDERATION_STAMP): tests/federation/package.json tests/federation/package-lock.json
	cd tests/federation && $(NPM_CI)

# Without npm the server still runs; GraphiQL then says how to build its assets.
web-if-npm:
ifeq ($(NPM),)
	@echo "npm not found: skipping the GraphiQL and map builds (their pages explain how to build them)"
else
	@$(MAKE) --no-print-directory $(WEB_STAMP) $(MAP_STAMP)
endif

# Everything npm the tests use: the web build and the federation gateway.
npm-if-npm:
ifeq ($(NPM),)
	@echo "npm not found: the browser and federation tests will be skipped"
else
	@$(MAKE) --no-print-directory $(WEB_STAMP) $(MAP_STAMP) $(FEDERATION_STAMP)
endif

demo: install web-if-npm
	$(VENV)/bin/gpugraph demo $(DEMO_ARGS)

lint: install-dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: install-dev
	$(VENV)/bin/mypy

proto: install-dev
	$(PY) tools/gen_proto.py

proto-check: install-dev
	$(PY) tools/gen_proto.py --check

test: install-dev npm-if-npm lint typecheck proto-check
	$(PY) -m pytest

# Every benchmark at a size that finishes in CI; the full sizes are their defaults.
bench-small: install-dev web-if-npm
	$(PY) bench/agent_bench.py --sizes 3 --nvml-scans 50
	$(PY) bench/agent_bench.py --verdicts --verdict-rounds 2
	$(PY) bench/cache_bench.py --pods 2000
	$(PY) bench/cluster_bench.py --small
	$(PY) bench/hostile.py --small
	$(PY) bench/kubectl_bench.py --pods 1000 --repeat 3
	$(PY) bench/auth_bench.py --small
	$(PY) bench/metrics_bench.py --small
	$(PY) bench/map_bench.py --small
	$(PY) bench/top_bench.py --small
	$(PY) bench/scale_bench.py --small
	$(PY) bench/request_cost_bench.py --small
	$(PY) bench/keep_warm_bench.py --small
	$(PY) bench/keep_warm_plan_bench.py --small
	$(PY) bench/fresh_read_bench.py --small
	$(PY) bench/occupancy_log_bench.py --small
	$(PY) bench/allocation_bench.py --small
	$(PY) bench/idle_allocations_bench.py --small
	$(PY) bench/agent_metrics_bench.py --small
	$(PY) bench/gpu_events_bench.py --seconds 2
	$(PY) bench/query_path.py --runs 2

# Every benchmark at full size (the agent bench needs root and containerd); see bench/README.md.
bench: install-dev web-if-npm
	$(PY) bench/cluster_bench.py
	$(PY) bench/hostile.py
	$(PY) bench/cache_bench.py
	$(PY) bench/agent_bench.py --sizes 10,50,100
	$(PY) bench/agent_bench.py --verdicts
	$(PY) bench/kubectl_bench.py
	$(PY) bench/auth_bench.py
	$(PY) bench/metrics_bench.py
	$(PY) bench/map_bench.py
	$(PY) bench/top_bench.py
	$(PY) bench/scale_bench.py
	$(PY) bench/request_cost_bench.py
	$(PY) bench/keep_warm_bench.py
	$(PY) bench/keep_warm_plan_bench.py
	$(PY) bench/fresh_read_bench.py
	$(PY) bench/occupancy_log_bench.py
	$(PY) bench/allocation_bench.py
	$(PY) bench/idle_allocations_bench.py
	$(PY) bench/agent_metrics_bench.py
	$(PY) bench/gpu_events_bench.py
	$(PY) bench/query_path.py

# On a machine with an NVIDIA GPU and driver: does the agent report a GPU process's PID and
# memory? Fails clearly (exit 2) where there is no GPU; see tools/gpu_check.py.
gpu-check: install
	$(PY) tools/gpu_check.py $(GPU_CHECK_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache .pytest_cache api/static/graphiql \
		api/static/map \
		web/node_modules tests/federation/node_modules

# Releases, run by a maintainer (README, "Install on a cluster"); the version is pyproject.toml's.
VERSION = $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
IMAGE ?= ghcr.io/gpugraph/gpugraph
PLATFORMS ?= linux/amd64,linux/arm64

# The wheel and sdist into dist/ (python -m build), checked by twine check; see tools/release/.
release-check: install-dev web-if-npm
	$(PY) tools/release/dist.py

# One image for every platform, pushed: log in to the registry first (docker login).
release-image:
	docker buildx build --platform $(PLATFORMS) --tag $(IMAGE):$(VERSION) --push .

# One image for this machine's platform, built into the local Docker engine and pushed
# nowhere public: for a cluster without the published image (README, "Install on a
# cluster"). KIND_CLUSTER=NAME loads it into that kind cluster's nodes; PUSH=1 pushes it
# to the registry LOCAL_IMAGE names (a local one: LOCAL_IMAGE=localhost:5001/gpugraph:dev).
LOCAL_IMAGE ?= gpugraph:dev
KIND_CLUSTER ?=
PUSH ?=
local-image:
	DOCKER_BUILDKIT=1 docker build --tag $(LOCAL_IMAGE) .
ifneq ($(KIND_CLUSTER),)
	kind load docker-image $(LOCAL_IMAGE) --name $(KIND_CLUSTER)
endif
ifneq ($(PUSH),)
	docker push $(LOCAL_IMAGE)
endif

# The krew archive and manifest of this version into dist/krew/.
release-krew: install-dev
	$(PY) tools/krew/package.py --out dist/krew

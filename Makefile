# Set-up and everyday commands. Only Python 3.11 and pip are assumed.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
SAMPLE := data/sample/cells_hourly.csv.gz
DEMO_DIR := artifacts/demo

.PHONY: demo test deps docs schemas bench bench-peers gpu-check lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# Bytecode is compiled at install: where PYTHONDONTWRITEBYTECODE is set (as on the CI machines),
# nothing written later is kept, and every process would compile torch anew. pip compiles one
# file at a time (two thirds of a fresh install's time); compileall takes every core. Left out:
# aws_cdk (the dev extra's kubectl layer, read as a file and never imported) and pycrate's ASN.1
# modules other than E2AP and F1AP (an E2 node's F1 setup names its cells). A file that does not compile (torch ships a Python 3.12 test helper)
# stays source, as pip leaves it; hence the status is not checked.
INSTALL := $(BIN)/pip install --quiet --no-compile
COMPILE = $(BIN)/python -m compileall -qq -j 0 \
	-x '/(aws_cdk|pycrate_asn1dir/(?!E2AP\.py$$|F1AP\.py$$|__init__\.py$$))' \
	"$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" || true

$(VENV)/.installed-train: $(BIN)/python pyproject.toml
	$(INSTALL) -e ".[train,serve]"
	$(COMPILE)
	touch $@

# One resolution for everything make test needs, rather than one per extra. KServe's
# time-series types are the contract its API's answers are tested against: the package's own
# files, without its dependencies (it pins pandas below 3 and pulls a Kubernetes client).
$(VENV)/.installed-dev: $(BIN)/python pyproject.toml
	$(INSTALL) -e ".[train,serve,ops,dev]"
	$(INSTALL) --no-deps --target $(VENV)/kserve kserve==0.21.0
	$(COMPILE)
	touch $@ $(VENV)/.installed-train

# The examples' environment (examples/requirements.txt): O-RAN SC's Python xApp framework, whose
# pins (redis 4, protobuf 3) are an xApp's of its own, apart from this project's.
$(VENV)/examples/.installed: examples/requirements.txt | $(BIN)/python
	$(PYTHON) -m venv $(VENV)/examples
	$(VENV)/examples/bin/pip install --quiet -r examples/requirements.txt
	touch $@

# Two KPIs of the sample, a model each in one repository, served together.
demo: $(VENV)/.installed-train
	$(BIN)/kpi-forecast train --data $(SAMPLE) --target traffic_mb,prb_util --tz Europe/Paris \
		--holidays FR --out $(DEMO_DIR) --max-minutes 1
	$(BIN)/kpi-forecast predict --model $(DEMO_DIR) --data $(SAMPLE) --out $(DEMO_DIR)/forecast.csv
	$(BIN)/python -m kpi_forecast.cli.smoke $(DEMO_DIR) $(SAMPLE)
	@echo "artifacts: $(DEMO_DIR)/traffic_mb/, $(DEMO_DIR)/prb_util/ (model.onnx, metadata.json, weights.pt)"
	@echo "reports:   $(DEMO_DIR)/traffic_mb/report.md, $(DEMO_DIR)/prb_util/report.md"
	@echo "forecasts: $(DEMO_DIR)/forecast.csv"

test: $(VENV)/.installed-dev $(VENV)/examples/.installed
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(MAKE) --no-print-directory deps
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir $(VENV)/site
	$(BIN)/pytest -q

# The documentation site (mkdocs.yml, docs/), served at http://127.0.0.1:8000 with live reload.
docs: $(VENV)/.installed-dev
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

# The descriptor's schema.json, the chart's copy and the controls of the chart's
# values.schema.json, generated from the pydantic models of xapp/descriptor/controls.py, and the site's
# reference pages, generated from the models, the metrics registry, the app's OpenAPI
# document and the chart's alerts and dashboard (a test fails when a checked-in one differs).
schemas: $(VENV)/.installed-dev
	$(BIN)/python -m kpi_forecast.cli.schema_files
	$(BIN)/python -m kpi_forecast.cli.reference

# Declared dependencies equal imported ones: for the project as a whole, then for each extra
# where its modules live (the serving path with base + serve, the training with base + train;
# the other extras count as not installed, so importing from them fails). The command line's
# tools (cli/) use several extras and are checked with the whole project.
deps: $(VENV)/.installed-dev
	$(BIN)/deptry .
	$(BIN)/deptry data model xapp --optional-dependencies-dev-groups dev,bench,train,ops \
		--ignore DEP002 --extend-exclude 'model/(network|export)\.py'
	$(BIN)/deptry training --optional-dependencies-dev-groups dev,bench,serve,ops --ignore DEP002

# The bench extra: the generalisation suite scores statsforecast's MSTL beside every case.
bench: $(VENV)/.installed-bench
	$(BIN)/python -m benchmarks.milan_accuracy
	$(BIN)/python -m benchmarks.generalisation
	$(BIN)/python -m benchmarks.runtime
	$(BIN)/python -m benchmarks.long_context
	$(BIN)/python -m benchmarks.serving
	$(BIN)/python -m benchmarks.e2_ingest
	$(BIN)/python -m benchmarks.e2_scale
	$(BIN)/python -m benchmarks.scale_out
	$(BIN)/python -m benchmarks.shared_history
	$(BIN)/python -m benchmarks.history_writes
	$(BIN)/python -m benchmarks.background_work
	$(BIN)/python -m benchmarks.soak
	$(BIN)/python -m benchmarks.scoring_cost
	$(BIN)/python -m benchmarks.publication_cost
	$(BIN)/python -m benchmarks.influx_read
	$(BIN)/python -m benchmarks.profiles
	$(BIN)/python -m benchmarks.regime_change
	$(BIN)/python -m benchmarks.repository
	$(BIN)/python -m benchmarks.images
	$(BIN)/python -m benchmarks.reliability
	$(BIN)/python -m benchmarks.suite_time

$(VENV)/.installed-bench: $(VENV)/.installed-train
	$(INSTALL) -e ".[train,serve,bench]"
	$(COMPILE)
	touch $@

# Side by side with neuralforecast and statsforecast on Milan and the sample (it trains every
# peer: the longest benchmark; resumable: kept results in artifacts/bench-peers are reused,
# --fresh recomputes them).
bench-peers: $(VENV)/.installed-bench
	$(BIN)/python -m benchmarks.peers

# On a node with an NVIDIA GPU and network: CUDA parity, fused attention, the float16 graph.
# An air-gapped node runs the same check with its own python3 (docs/performance.md, "GPU nodes").
gpu-check: $(VENV)/.installed-train
	$(BIN)/python -m benchmarks.gpu_check --prepare artifacts/gpu-bundle
	$(BIN)/python -m benchmarks.gpu_check --model artifacts/gpu-bundle/model \
		--out artifacts/gpu-check

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) artifacts

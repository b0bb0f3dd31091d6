# One entry point per job. `make demo` and `make test` work as the first command on a fresh clone.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install demo test test-slow test-all test-unit test-contract test-integration test-spark lint bench docs lock dist clean

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "error: $(PYTHON) not found (Python 3.11 is required)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/processor demo

# Three pytest-xdist workers, each with a stack of its own; one module (or one group sharing an
# expensive fixture) is one unit of work, handed out slowest folder first (tests/conftest.py). Most of
# an integration test's time is spent waiting (worker starts, group joins, fault windows): with two
# workers the two cores stayed below 1.7 busy on average, three finish 10:48 -> 7:58 here.
PARALLEL := -n 3 --dist loadscope --no-loadscope-reorder

# The suite without the slow soaks (what CI runs; pyproject's addopts: -m 'not slow', --durations=20).
test: $(STAMP)
	$(BIN)/pytest -q $(PARALLEL)

# Only the slow soaks and full-scale runs.
test-slow: $(STAMP)
	$(BIN)/pytest -q $(PARALLEL) -m slow

# Everything, the slow soaks at full count included.
test-all: $(STAMP)
	$(BIN)/pytest -q $(PARALLEL) -m ''

test-unit: $(STAMP)
	$(BIN)/pytest -q tests/unit

test-contract: $(STAMP)
	$(BIN)/pytest -q tests/contract

# By mark, not by folder (tests/conftest.py marks tests/integration and tests/spark): Spark's
# integration tests are in.
test-integration: $(STAMP)
	$(BIN)/pytest -q $(PARALLEL) -m 'integration and not slow'

test-spark: $(STAMP)
	$(BIN)/pytest -q -m 'spark and not slow'

lint: $(STAMP)
	$(BIN)/ruff check processor tests $(wildcard benchmarks)
	$(BIN)/ruff format --check processor tests $(wildcard benchmarks)
	$(BIN)/mypy
	$(BIN)/lint-imports

bench: $(STAMP)
	$(BIN)/python -m benchmarks

# The settings table of docs/configuration.md, rendered from the settings model
# (processor/commands/config_reference.py); tests/unit/test_docs.py checks it is up to date.
docs: $(STAMP)
	$(BIN)/python -m processor.commands.config_reference docs/configuration.md

# The container image installs from these hash-pinned locks (see the Dockerfile): worker.txt for the
# default image, spark.txt for EXTRAS=spark, build.txt for the build backend. Both images carry the
# msk extra (the MSK IAM token signer), so kafka.sasl.oauthTokenProvider=aws-msk-iam works with
# either, and what requirements/image.in adds (see there). Re-run after changing the dependencies in pyproject.toml; tests/deploy/test_dockerfile.py
# checks they still agree.
LOCK := $(BIN)/uv pip compile --quiet --no-config --index-url https://pypi.org/simple \
	--python-version 3.11 --python-platform linux --generate-hashes --custom-compile-command "make lock"
lock: $(STAMP)
	$(LOCK) pyproject.toml requirements/image.in --extra msk --extra gcs --extra azure -o requirements/worker.txt
	$(LOCK) pyproject.toml requirements/image.in --extra msk --extra gcs --extra azure --extra spark -o requirements/spark.txt
	$(LOCK) requirements/build.in -o requirements/build.txt

# The sdist and the wheel (built from that sdist, so the sdist is checked too) in $(DIST)/, with the
# locked build backend (requirements/build.txt, as the image builds). Until a release is on an index,
# install from them: pip install dist/kafka_tiered_processor-*.whl (extras: "$$(ls dist/*.whl)[msk]").
# tests/integration/test_dist.py installs the wheel into a clean venv and runs `processor --version`.
DIST ?= dist
dist: $(STAMP)
	rm -f $(DIST)/kafka_tiered_processor-*.whl $(DIST)/kafka_tiered_processor-*.tar.gz
	$(BIN)/uv build --quiet --no-config --index-url https://pypi.org/simple --python $(BIN)/python \
		--build-constraints requirements/build.txt --require-hashes --out-dir $(DIST) .
	@ls -1 $(DIST)/kafka_tiered_processor-*

clean:
	rm -rf $(VENV) .stack .pytest_cache .mypy_cache .ruff_cache dist

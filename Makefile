# tally: `make help` lists the targets. Everything runs from the project-local .venv.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
JARS := .cache/jars
KAFKA_JARS := .cache/kafka
FLINK := .cache/flink
STAMP := $(VENV)/.installed
export PYSPARK_PYTHON := $(abspath $(BIN)/python)
export PYSPARK_DRIVER_PYTHON := $(abspath $(BIN)/python)
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: help install jars flink kafka s3 cluster lint typecheck floors check test test-fast docs demo bench bench-quick airflow clean

help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e '.[dev,bench]'
	$(BIN)/pip check
	scripts/install-browser.sh
	touch $(STAMP)

$(JARS)/.fetched: jars/pom.xml jars/kafka-connector.pom.xml jars/kafka-broker.pom.xml jars/s3.pom.xml \
		jvm/pom.xml $(wildcard jvm/src/main/java/tally/jvm/*.java)
	scripts/fetch-jars.sh $(JARS) $(KAFKA_JARS)
	touch $@

install: $(STAMP) $(JARS)/.fetched ## virtualenv, pinned packages, Delta + Kafka + S3A jars, tally's scanner jar (once; offline afterwards)

jars: $(JARS)/.fetched ## fetch Delta's, Spark's Kafka and S3A jars, build tally's (.cache/jars); a Kafka broker (.cache/kafka)

# The benchmark's Flink peer in its own virtualenv (PyFlink pins py4j, pandas and pyarrow below
# tally's): never part of `install`.
$(FLINK)/.installed: scripts/flink.sh constraints-flink.txt jars/flink-kafka.pom.xml
	scripts/flink.sh $(FLINK)
	touch $@

flink: $(FLINK)/.installed ## PyFlink and Flink's Kafka SQL connector for the benchmark (.cache/flink, ~850 MB)

lint: install ## ruff lint + format check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: install ## mypy on the packages
	$(BIN)/mypy

floors: install ## import-linter: the floors (tally < layers < tally_app < dags, bench) hold
	$(BIN)/lint-imports

check: lint typecheck floors ## all static checks

test: install check ## install everything, then lint, type-check, check the floors, run every test
	$(BIN)/pytest -q --durations=30

test-fast: install ## pytest without the slow end-to-end tests
	$(BIN)/pytest -q -m 'not slow'

docs: install ## regenerate docs/configuration.md from the settings and the command line
	$(BIN)/python -m tally_app.config_doc --out docs/configuration.md

demo: install ## generate a day of events, stream it, reconcile, print the summary
	scripts/demo.sh

airflow: install ## start Airflow locally with tally's DAGs (prints the URL and how to log in)
	scripts/airflow.sh

bench: install flink ## full benchmarks into docs/benchmarks.md (Flink beside Spark on Kafka)
	$(BIN)/tally bench

kafka: install ## start a single-node Kafka broker on 127.0.0.1:19092 (scripts/kafka.sh stop|status)
	scripts/kafka.sh start

s3: install ## start an in-memory S3 endpoint on 127.0.0.1:19000 (scripts/s3.sh stop|status|bucket NAME)
	scripts/s3.sh start

cluster: install ## start a Spark standalone master + worker on spark://127.0.0.1:7077 (scripts/cluster.sh stop|status)
	scripts/cluster.sh start

bench-quick: install flink ## a few-minute benchmark smoke run
	$(BIN)/tally bench --quick

clean: ## remove generated data (keeps .venv and jars)
	rm -rf demo warehouse artifacts spark-warehouse

# spottrain — run `make help` for the targets.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
OUT ?= out

.DEFAULT_GOAL := help

help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

venv: $(STAMP) ## Create .venv and install the package with test extras

$(STAMP): setup.py
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	@touch $(STAMP)

test: venv ## Run the whole test suite (what CI runs)
	$(PY) -m pytest -q tests

lint: venv ## ruff (lint + format check) and hadolint on the Dockerfile
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/hadolint Dockerfile

format: venv ## Format and auto-fix with ruff
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

data: venv ## Write scikit-learn's digits as an image folder under $(OUT)/digits
	$(PY) -m spottrain.datasets digits $(OUT)/digits

run: venv ## The main job, locally end to end with one injected preemption
	$(PY) -m spottrain.demo --out $(OUT)

bench: venv ## Benchmarks (ratios measured side by side)
	$(PY) bench/trainer_overhead.py

clean: ## Remove outputs (keeps .venv)
	rm -rf $(OUT) .pytest_cache

.PHONY: help venv test lint format data run bench clean

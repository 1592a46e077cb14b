# Each target bootstraps .venv on first use (or when pyproject.toml changes); a second run reinstalls nothing.
# editable_mode=compat puts the checkout on sys.path with a plain .pth line: setuptools' default editable
# finder costs every interpreter start ~10 ms of imports (pathlib, re, importlib.util), shellper's included.
# setuptools calls compat mode transitional: should a release drop it, the default mode is installed instead.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit bench soak clean compile

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,lint]' --config-settings editable_mode=compat \
		|| $(BIN)/python -m pip install --quiet -e '.[test,lint]'
	touch $(STAMP)

# Bytecode ahead of time: with PYTHONDONTWRITEBYTECODE set, every shellper start would otherwise
# recompile the package (most of its launch time). Stale files are recompiled in memory, never wrong.
# -f: compileall judges freshness by the source's mtime in whole seconds, the importer also by its size,
# so an edit within the same second left a .pyc that every start recompiled in memory (~0.1 s to redo all).
compile: $(STAMP)
	$(BIN)/python -m compileall -f -q shellper tower_client

demo: compile
	$(BIN)/python -m shellper.cli.demo

lint: $(STAMP)
	$(BIN)/ruff check shellper tower_client tests bench
	$(BIN)/mypy

unit: compile
	$(BIN)/python -m pytest -q -m "not slow" -p no:cacheprovider

test: lint unit

bench: compile
	command -v dtach >/dev/null || (apt-get update -qq && apt-get install -y -qq dtach) || echo "dtach unavailable: its column will be empty"
	$(BIN)/python -m bench.run

# The long versions of the fault, hostile-input and soak tests (RELIABILITY.md). SOAK_SECONDS sets the
# soak's length (default 600; CI: SOAK_SECONDS=120); SOAK_REPORT=file.json keeps its figures.
# KILLSOAK_TRIALS sets the random-moment kill trials per containment mode (default 200), KILLSOAK_SEED
# their seed (default: a fresh one, printed); KILLSOAK_REPORT=file.json keeps their figures.
soak: $(STAMP)
	$(BIN)/python -m pytest -q -s -m slow -p no:cacheprovider

clean:
	rm -rf $(VENV) build *.egg-info

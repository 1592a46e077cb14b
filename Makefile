# Each target bootstraps .venv on first use (or when pyproject.toml changes); a second run reinstalls nothing.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit bench soak clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m shellper.demo

lint: $(STAMP)
	$(BIN)/ruff check shellper tower_client tests bench
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow" -p no:cacheprovider

test: lint unit

bench: $(STAMP)
	command -v dtach >/dev/null || (apt-get update -qq && apt-get install -y -qq dtach) || echo "dtach unavailable: its column will be empty"
	$(BIN)/python -m bench.run

soak: $(STAMP)
	$(BIN)/python -m pytest -q -m slow -p no:cacheprovider

clean:
	rm -rf $(VENV) build *.egg-info

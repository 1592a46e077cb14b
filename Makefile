# Each target bootstraps .venv on first use (or when pyproject.toml changes); a second run reinstalls nothing.
# editable_mode=compat puts the checkout on sys.path with a plain .pth line: setuptools' default editable
# finder costs every interpreter start ~10 ms of imports (pathlib, re, importlib.util), shellper's included.
# setuptools calls compat mode transitional: should a release drop it, the default mode is installed instead.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo tower-demo docs test check lint typecheck unit bench soak clean compile test-versions completions test-ts \
	web-client

$(STAMP): pyproject.toml setup.cfg tools/bootstrap-venv
	@# the distribution was named "shellper" before it became "shellper-pty": one checkout, one install
	-@test -x $(BIN)/python && $(BIN)/python -m pip uninstall --quiet --yes shellper >/dev/null 2>&1; rm -rf shellper.egg-info
	tools/bootstrap-venv $(PY) $(VENV) '.[test,lint,build,web]'
	@# The full-screen programs tests/test_screens.py reattaches; as root, apt installs the missing ones
	@# (the tests skip, saying why, where they are still missing).
	-@command -v vim >/dev/null && command -v less >/dev/null && command -v htop >/dev/null \
		|| { test "$$(id -u)" = 0 && command -v apt-get >/dev/null \
		     && apt-get install -y -qq vim less htop >/dev/null 2>&1; } || true
	@# The browser tests/test_web.py drives (Debian's headless Chromium and its WebDriver), the same way.
	-@command -v chromium >/dev/null && command -v chromedriver >/dev/null \
		|| { test "$$(id -u)" = 0 && command -v apt-get >/dev/null \
		     && { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver || { apt-get update -qq \
		          && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; }; } >/dev/null 2>&1; } || true
	touch $(STAMP)

# Bytecode ahead of time: with PYTHONDONTWRITEBYTECODE set, every shellper start would otherwise
# recompile the package (most of its launch time). Stale files are recompiled in memory, never wrong.
# -f: compileall judges freshness by the source's mtime in whole seconds, the importer also by its size,
# so an edit within the same second left a .pyc that every start recompiled in memory (~0.1 s to redo all).
compile: $(STAMP)
	$(BIN)/python -m compileall -f -q shellper tower_client

demo: compile
	$(BIN)/python -m shellper.cli.demo

# The example Tower (examples/tower.py): 20 sessions (floods, a crash loop, SPAWN, input, stop), a kill -9 of the
# Tower mid-flood, a restart, every kept stream compared with its ring, the figures.
tower-demo: compile
	$(BIN)/python examples/tower_demo.py

lint: $(STAMP)
	$(BIN)/ruff check shellper tower_client tests bench examples tools
	$(BIN)/mypy

# The suite runs in parallel (pytest-xdist): most of a test's time is spent waiting on processes, terminals
# and sockets, not on the CPU, so more workers than cores keep the cores busy (bench/NOTES.md: 2, 4 and 6
# workers on 2 cores). worksteal: a worker that runs out takes tests queued on a busy one, so a few long
# terminal tests do not leave one worker finishing alone. TEST_WORKERS=0 runs the suite in one process.
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); echo $$((n * 2 > 4 ? n * 2 : 4)))
PYTEST := $(BIN)/python -m pytest -q -p no:cacheprovider
PARALLEL := $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist worksteal)

# pytest caches the test modules with their asserts rewritten (tests/conftest.py lets it despite
# PYTHONDONTWRITEBYTECODE); on a fresh clone the workers, starting together, would each rewrite all of them
# (~9 s of CPU each), so one collection fills the cache first.
unit: compile web-client
	@ls tests/__pycache__/test_*-pytest-*.pyc >/dev/null 2>&1 || $(PYTEST) --collect-only tests >/dev/null 2>&1 || true
	$(PYTEST) -m "not slow" $(PARALLEL) --durations=25

# Every edit: lint, types and the pure tests (tests/unit: no session, no terminal), in well under a minute;
# the tests are CPU-bound, so one worker per core.
check: compile
	$(BIN)/ruff check shellper tower_client tests bench examples tools
	$(BIN)/mypy
	$(PYTEST) -m "not slow" -n logical tests/unit

# What CI runs: ruff first (seconds), then mypy and the TypeScript suites alongside the Python tests, whose
# workers mostly wait (their output held back and shown after pytest's). Fails if any of them did.
test: compile
	$(BIN)/ruff check shellper tower_client tests bench examples tools
	@log=$$(mktemp -d); trap 'rm -rf "$$log"' EXIT; \
	$(BIN)/mypy > "$$log/mypy" 2>&1 & mypy=$$!; \
	$(MAKE) --no-print-directory test-ts > "$$log/ts" 2>&1 & ts=$$!; \
	$(MAKE) --no-print-directory unit; unit=$$?; \
	wait $$mypy; mypy_rc=$$?; \
	echo "== mypy (exit $$mypy_rc)"; cat "$$log/mypy"; \
	wait $$ts; ts_rc=$$?; \
	echo "== the TypeScript client (exit $$ts_rc)"; cat "$$log/ts"; \
	test $$unit = 0 && test $$mypy_rc = 0 && test $$ts_rc = 0

# The TypeScript client (clients/typescript): its dependencies from the lock file on first use (and when
# the lock changes; --omit=optional leaves out msgpackr's native addon, which only its benchmark
# compares against), then the vector and live-shellper suites, against this checkout's shellper.
# Without node 20 or newer the suites are skipped with a note.
TS := clients/typescript
TS_STAMP := $(TS)/node_modules/.installed
$(TS_STAMP): $(TS)/package-lock.json
	cd $(TS) && npm ci --omit=optional --ignore-scripts --no-audit --no-fund --loglevel=error
	touch $(TS_STAMP)

# The browser terminal's page (clients/web: xterm.js, for examples/web.py and tests/test_web.py), from its lock
# file on first use and when the lock changes. Without npm the browser tests skip, saying so.
WEB := clients/web
WEB_STAMP := $(WEB)/node_modules/.installed
$(WEB_STAMP): $(WEB)/package-lock.json
	cd $(WEB) && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	touch $(WEB_STAMP)

web-client:
	@if command -v npm >/dev/null 2>&1; then $(MAKE) --no-print-directory $(WEB_STAMP); \
	else echo "web-client: skipped: npm is not installed (the browser tests will skip)"; fi

# The cgroup v2 mount (empty without one): test-ts and bench make a cgroup parent of their own under it.
CGROUP_MOUNT = $(BIN)/python -c 'from shellper.host.cgroup import find_mount; print(find_mount() or "")'

# The TypeScript client's tests start sessions outside pytest: as root they get a cgroup parent of their own,
# made and removed here, not the default MOUNT/shellper, which would be left behind.
test-ts: $(STAMP)
	@if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then \
		echo "test-ts: skipped: node and npm are not installed (the TypeScript client needs Node 20 or newer)"; \
	elif [ "$$(node -p 'process.versions.node.split(".")[0]')" -lt 20 ]; then \
		echo "test-ts: skipped: node $$(node --version) is older than 20"; \
	else \
		mount=$$($(CGROUP_MOUNT)); \
		parent=; if [ -n "$$mount" ] && mkdir "$$mount/shellper-ts-$$$$" 2>/dev/null; then parent="$$mount/shellper-ts-$$$$"; fi; \
		$(MAKE) --no-print-directory $(TS_STAMP) && cd $(TS) && rm -rf dist && node_modules/.bin/tsc -p . \
		&& SHELLPER=$(abspath $(BIN))/shellper SHELLPER_CGROUP_PARENT=$$parent \
		node --test --test-concurrency=1 --test-reporter=dot dist/test/*.test.js; rc=$$?; \
		if [ -n "$$parent" ]; then rmdir "$$parent" || { echo "test-ts: left $$parent"; rc=1; }; fi; exit $$rc; \
	fi

bench: compile
	command -v dtach >/dev/null || (apt-get update -qq && apt-get install -y -qq dtach) || echo "dtach unavailable: its column will be empty"
	@# Each exits 1 when a figure misses its target beyond its measured noise; all three run, then make fails if
	@# any did. bench.run: ingest, attach flood, echo (issue 29); bench.launcher: launch and PSS (issue 29);
	@# bench.scale: 200 sessions on a Fleet, the Tower killed with -9 and adopted (issue 30).
	@# As root, the sessions and launchers get a cgroup parent of their own, removed after, not the machine's
	@# default MOUNT/shellper, which would be left behind (as in test-ts).
	@rc=0; mount=$$($(CGROUP_MOUNT)); \
	parent=; if [ -n "$$mount" ] && mkdir "$$mount/shellper-bench-$$$$" 2>/dev/null; then parent="$$mount/shellper-bench-$$$$"; fi; \
	export SHELLPER_CGROUP_PARENT=$$parent; \
	$(BIN)/python -m bench.run --check || rc=1; \
	$(BIN)/python -m bench.launcher --check || rc=1; \
	$(BIN)/python -m bench.scale --check || rc=1; \
	if [ -n "$$parent" ]; then find "$$parent" -depth -type d -exec rmdir {} + || { echo "bench: left $$parent"; rc=1; }; fi; \
	exit $$rc

# The long versions of the fault, hostile-input and soak tests (RELIABILITY.md). SOAK_SECONDS sets the
# soak's length (default 600; CI: SOAK_SECONDS=120); SOAK_REPORT=file.json keeps its figures.
# KILLSOAK_TRIALS sets the random-moment kill trials per containment mode (default 200), KILLSOAK_SEED
# their seed (default: a fresh one, printed); KILLSOAK_REPORT=file.json keeps their figures.
soak: $(STAMP)
	$(BIN)/python -m pytest -q -s -m slow -p no:cacheprovider

# The unit tests on each supported Python, one venv per version (.venv-3.X), from pyenv's installs or
# python3.X on PATH; VERSIONS picks them, SUITE=tests runs the whole suite instead. 3.13's new REPL
# reads keys its own way: PYTHON_BASIC_REPL=1 keeps the plain one the tests drive.
VERSIONS ?= 3.11 3.12 3.13
SUITE ?= tests/unit
test-versions:
	@set -e; for v in $(VERSIONS); do \
		py=$$(ls -d $${PYENV_ROOT:-$$HOME/.pyenv}/versions/$$v.*/bin/python3 2>/dev/null | sort -V | tail -1); \
		test -n "$$py" || py=$$(command -v python$$v) || { echo "python$$v: not found"; exit 1; }; \
		venv=.venv-$$v; \
		test -x $$venv/bin/python || $$py -m venv $$venv; \
		test $$venv/.installed -nt pyproject.toml || { $$venv/bin/python -m pip install --quiet -e '.[test]' \
			--config-settings editable_mode=compat && touch $$venv/.installed; }; \
		echo "== $$($$venv/bin/python --version) ($$py): $(SUITE)"; \
		PYTHON_BASIC_REPL=1 $$venv/bin/python -m pytest -q -m "not slow" -p no:cacheprovider $(SUITE); \
	done

# The API reference of tower_client (the facade: every name it exports, from its docstrings) into build/docs,
# with pdoc from the docs extra (installed on first use). A warning fails it, and so does a docstring
# cross-reference that names nothing (pdoc would leave it as plain text): tests/unit/test_api_docs.py, which
# make check and make test run too.
DOCS := build/docs
DOCS_STAMP := $(VENV)/.docs-installed
$(DOCS_STAMP): pyproject.toml $(STAMP)
	tools/bootstrap-venv $(PY) $(VENV) '.[docs]'
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	rm -rf $(DOCS)
	$(BIN)/python -W error -m pdoc --docformat restructuredtext -o $(DOCS) tower_client
	$(PYTEST) tests/unit/test_api_docs.py
	@echo "the API reference: $(DOCS)/index.html"

# Shell completion (bash, zsh, fish; shtab) and man pages (argparse-manpage), generated from the argparse
# parsers into build/: nothing of this runs, or is imported, when shellper does.
COMPLETIONS := build/completions
SHARE := shellper/share
completions: $(STAMP)
	@# shellper's ship in the package (shellper completions SHELL, shellper man); tower-client's go to build/
	$(BIN)/python tools/completions.py $(SHARE) $(COMPLETIONS)
	@echo "shellper's completions and man page in $(SHARE), tower-client's in $(COMPLETIONS)"

clean:
	rm -rf $(VENV) .venv-3.* build *.egg-info

# make run: outbox on the embedded defaults; make check: the quick tests (unit and http, on
# SQLite alone, no server needed); make test: the whole test suite; make docs: the site.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The demo's ports: make run PORT=5001 SMTP_PORT=8026 when these are taken.
PORT ?= 5000
SMTP_PORT ?= 8025
# Test processes side by side (pytest-xdist), a test file each at a time: most tests wait
# on servers, so two on two cores took 13 minutes where one took 18 to 25. The files
# start in the order tests/support/ordering.py gives them, the longest first.
TEST_PROCESSES ?= 2
UV := $(BIN)/uv
INSTALL := $(UV) pip install --quiet --python $(BIN)/python
# Three stamps: what running needs (make run), the test tools on top (make test, which
# builds the docs too), and the docs tools (make docs).
RUN_STAMP := $(VENV)/.installed-run
DEV_STAMP := $(VENV)/.installed-dev
DOCS_STAMP := $(VENV)/.installed-docs

.PHONY: run check test soak lint docs clean

# uv installs what outbox needs in a third of pip's time (a first make run: 4 s against
# 12), so pip only puts uv into a venv made without pip of its own. uv reads the index
# from UV_INDEX_URL or uv.toml, not from pip.conf.
$(UV):
	$(PYTHON) -m venv --without-pip $(VENV)
	$(PYTHON) -m pip --python $(BIN)/python install --quiet --disable-pip-version-check \
		--no-compile uv

$(RUN_STAMP): pyproject.toml setup.py | $(UV)
	$(INSTALL) -e .
	touch $@

# pip too: tests/e2e/test_wheel.py builds the wheel with it. Compiled now, every module of the
# venv: the tests start outbox in many processes, and with PYTHONDONTWRITEBYTECODE set
# each would compile what it imports again (2.5 s a start).
$(DEV_STAMP): $(RUN_STAMP)
	$(INSTALL) --compile-bytecode -e '.[dev,docs]' pip
	touch $@

$(DOCS_STAMP): $(RUN_STAMP)
	$(INSTALL) -e '.[docs]'
	touch $@

run: $(RUN_STAMP)
	$(BIN)/outbox demo --port $(PORT) --smtp-port $(SMTP_PORT)

check: $(DEV_STAMP)
	OUTBOX_TEST_DATABASES=sqlite $(BIN)/python -m pytest -n $(TEST_PROCESSES) tests/unit tests/http

# outbox compiled first: the tests start it as a process hundreds of times, and where
# PYTHONDONTWRITEBYTECODE is set (CI) each start would compile every module again.
test: $(DEV_STAMP)
	$(BIN)/python -m compileall -q outbox
	$(BIN)/python -m pytest -n $(TEST_PROCESSES) --dist loadfile --no-loadscope-reorder

# The soak tests at full size (minutes); -s shows each scenario's summary line as it ends.
soak: $(DEV_STAMP)
	OUTBOX_SOAK=1 $(BIN)/python -m pytest -m soak -p no:randomly -s

lint: $(DEV_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy outbox

# The docs site in build/site, its reference pages made from the code (docs/hooks/); strict:
# a broken link or anchor fails the build.
docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet -d build/site

clean:
	rm -rf $(VENV) build *.egg-info

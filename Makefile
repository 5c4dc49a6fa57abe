# make run: outbox on the embedded defaults; make check: the quick tests (unit and http, on
# SQLite alone, no server needed); make test: the whole test suite; make docs: the site.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The demo's ports: make run PORT=5001 SMTP_PORT=8026 when these are taken.
PORT ?= 5000
SMTP_PORT ?= 8025
# Test processes side by side (pytest-xdist), a test file each at a time: most tests wait
# on servers and processes they start. On a quiet two-core machine, in a fresh clone, 2,841
# tests took 747 s with two (12.5 minutes) and 642 s with three. The files start in the
# order tests/support/ordering.py gives them, the longest first.
TEST_PROCESSES ?= 3
UV := $(BIN)/uv
INSTALL := $(UV) pip install --quiet --python $(BIN)/python
# Three stamps: what running needs (make run), the test tools on top (make test, which
# builds the docs too), and the docs tools (make docs).
RUN_STAMP := $(VENV)/.installed-run
DEV_STAMP := $(VENV)/.installed-dev
DOCS_STAMP := $(VENV)/.installed-docs

.PHONY: run check test soak lint docs clean mutate

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

# pip too: tests/e2e/test_wheel.py builds the wheel with it. Then every module of the venv
# compiled: the tests start outbox in hundreds of processes, and where PYTHONDONTWRITEBYTECODE
# is set (CI) each would compile what it imports again (3.5 s of CPU a start against 1.5 on
# a busy machine). compileall, not uv's --compile-bytecode, which compiles only what that
# one command installs and so left SQLAlchemy, Flask and the rest of make run's uncompiled.
$(DEV_STAMP): $(RUN_STAMP)
	$(INSTALL) -e '.[dev,docs]' pip
	$(BIN)/python -m compileall -q -j 0 $(VENV)/lib
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

# Mutation testing (mutmut, settings in pyproject.toml's [tool.mutmut]) of the state machines
# and the queue: each mutant of MUTATE_MODULES runs, one at a time on one core, against the
# tests that call the function it changes, on SQLite. Prints, per module, the mutants and how
# many were killed, survived or timed out; MUTATE_REPORT lists each one not killed, with its
# diff, named by function and not by module: the listings of a module before and after it
# moves compare with diff; another set: make mutate MUTATE_MODULES="outbox/queue/claims.py
# ...". These three make 438 mutants, at 3 to 17 s each on a shared machine: about an hour;
# outbox/queue/claims.py adds 235 more.
MUTATE_MODULES ?= outbox/core/status.py outbox/core/deliveries.py outbox/queue/moves.py
MUTATE_REPORT ?= mutants/report.txt

# mutmut reads its settings from pyproject.toml alone: the modules to mutate are set here.
define MUTATE_RUN
import sys
from mutmut.configuration import config
from mutmut.__main__ import cli
config().only_mutate[:] = sys.argv[1:]
cli(["run", "--max-children", "1"])
endef

define MUTATE_SUMMARY
import sys
from collections import Counter
from pathlib import Path
from mutmut.mutation.data import SourceFileMutationData
from mutmut.mutation.diff_apply import get_diff_for_mutant
from mutmut.stats import status_by_exit_code
report, modules = Path(sys.argv[1]), sys.argv[2:]
columns = ("killed", "survived", "timeout")
print(f"{'module':32} {'mutants':>8}" + "".join(f" {c:>9}" for c in columns) + "  other")
listing = []
for module in modules:
    data = SourceFileMutationData(path=module)
    data.load()
    def order(key):
        function, _, number = key.rpartition("__mutmut_")
        return function, int(number)
    status = {key: status_by_exit_code[data.exit_code_by_key[key]] for key in sorted(data.exit_code_by_key, key=order)}
    counts = Counter(status.values())
    other = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()) if s not in columns)
    print(f"{module:32} {len(status):8}" + "".join(f" {counts[c]:9}" for c in columns) + f"  {other}")
    listing.append(f"# {module}: {len(status)} mutants, " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    for key, s in status.items():
        if s != "killed":
            diff = get_diff_for_mutant(key, path=module).split("\n", 2)[2]
            listing += [f"## {key.rpartition('.')[2]}: {s}", diff, ""]
report.write_text("\n".join(listing) + "\n")
print(f"mutants not killed, with their diffs: {report}")
endef
export MUTATE_RUN MUTATE_SUMMARY

mutate: $(DEV_STAMP)
	rm -rf mutants
	OUTBOX_TEST_DATABASES=sqlite $(BIN)/python -c "$$MUTATE_RUN" $(MUTATE_MODULES)
	$(BIN)/python -c "$$MUTATE_SUMMARY" $(MUTATE_REPORT) $(MUTATE_MODULES)

clean:
	rm -rf $(VENV) build *.egg-info

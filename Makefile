# make run: outbox on the embedded defaults; make test: the whole test suite.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test soak lint clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/outbox demo

test: $(STAMP)
	$(BIN)/python -m pytest

# The soak tests at full size (minutes); -s shows each scenario's summary line as it ends.
soak: $(STAMP)
	OUTBOX_SOAK=1 $(BIN)/python -m pytest -m soak -p no:randomly -s

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy outbox

clean:
	rm -rf $(VENV) build *.egg-info

# tr-mlir: the two commands of the README, and a few helpers.
#   make run   - set up .venv if needed, compile a zoo model and print it
#   make test  - set up .venv if needed, run pytest and lit (fails if either fails)

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: run test pytest lit examples clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/tr-opt examples/resnet50.mlir

test: $(STAMP)
	@status=0; \
	$(BIN)/python -m pytest -q tests || status=1; \
	$(BIN)/lit -sv lit_tests || status=1; \
	exit $$status

pytest: $(STAMP)
	$(BIN)/python -m pytest -q tests

lit: $(STAMP)
	$(BIN)/lit -sv lit_tests

# Regenerate examples/*.mlir from the model zoo (checked by tests/test_examples.py).
examples: $(STAMP)
	$(BIN)/python -m tr_mlir.zoo --write-examples examples

clean:
	rm -rf $(VENV) build lit_out .pytest_cache

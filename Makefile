# tr-mlir: the two commands of the README, and a few helpers.
#   make run   - set up .venv if needed, train a small residual CNN on digits (tr-train)
#   make test  - set up .venv if needed, run pytest and lit (fails if either fails)

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-test
RSTAMP := $(VENV)/.installed-run

.PHONY: run test pytest lit examples clean bench

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

# `make run` needs only the package; `make test` adds the test extra (pytest, lit, torch, ...).
$(RSTAMP): pyproject.toml | $(VENV)/bin/python
	$(BIN)/python -m pip install -q -e .
	touch $(RSTAMP)

$(STAMP): pyproject.toml | $(VENV)/bin/python
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP) $(RSTAMP)

# The README's run command: compile resnet_tiny (fused) and train it on the digits bundled with
# scikit-learn, 30 epochs on the CPU (about 10-60 s on 2 cores; >= 97% val top-1).
run: $(RSTAMP)
	$(BIN)/tr-train --model resnet_tiny --dataset digits --epochs 30 --fuse

test: $(STAMP)
	@status=0; \
	$(BIN)/python -m pytest tests || status=1; \
	$(BIN)/lit -sv lit_tests || status=1; \
	exit $$status

pytest: $(STAMP)
	$(BIN)/python -m pytest tests

lit: $(STAMP)
	$(BIN)/lit -sv lit_tests

# Regenerate examples/*.mlir from the model zoo (checked by tests/test_examples.py).
examples: $(STAMP)
	$(BIN)/python -m tr_mlir.zoo --write-examples examples

# Benchmarks (bench/README.md): quick mode, writes bench/results/<date>.json and .md.
bench: $(STAMP)
	$(BIN)/python -m bench --quick

clean:
	rm -rf $(VENV) build lit_out .pytest_cache

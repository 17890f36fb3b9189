# The two commands of the README. Both run the (idempotent, cached) set-up first.
#   make demo   set-up, then the pipeline end to end on MovieLens-1M (local Spark + Delta)
#   make test   set-up, then the static checks (make lint: ruff + mypy), then the whole test suite
#               (scripts/test.sh: two shards side by side; SOLARIS_TEST_SHARDS=1 for one process)
.PHONY: setup demo lint test test-unit clean-warehouse

PYTHON_BIN := .venv/bin/python

setup:
	@bash scripts/setup.sh

demo: setup
	@bash scripts/demo.sh

lint: setup
	@bash scripts/lint.sh

test: setup lint
	@bash scripts/test.sh

test-unit: setup
	@$(PYTHON_BIN) -m pytest -q -p no:cacheprovider tests/unit

clean-warehouse:
	rm -rf warehouse

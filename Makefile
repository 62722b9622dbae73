# The course's commands. Each one sets up .venv/ first (only when requirements changed).
#   make lab      start JupyterLab on the course
#   make test     run every test (helpers, notebooks with nbval, release sync, grading end to end)
#   make release  regenerate notebooks/ (student versions) from solutions/
#   make grade    autograde submitted/<student>/<lesson>/ -> autograded/, feedback/, grades.csv
#   make bench    print each notebook's execution time and the grading time per notebook

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
LAB_ARGS ?=
PYTEST_ARGS ?=
NBVAL_CELL_TIMEOUT ?= 300

.PHONY: setup lab test release grade bench

setup: $(STAMP)

$(STAMP): requirements.txt requirements.lock pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.txt -c requirements.lock
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps -e .
	@touch $@

# Jupyter refuses to start as root unless told; containers and CI often are root.
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root)

lab: setup
	$(BIN)/jupyter lab --ServerApp.root_dir="$(CURDIR)" $(ROOT_FLAG) $(LAB_ARGS)

test: setup
	$(BIN)/python -m pytest tests solutions --nbval-lax --nbval-current-env \
		--nbval-cell-timeout=$(NBVAL_CELL_TIMEOUT) -p no:cacheprovider $(PYTEST_ARGS)

release: setup
	$(BIN)/python -m graders.pipeline release

grade: setup
	$(BIN)/python -m graders.pipeline grade

bench: setup
	$(BIN)/python tests/bench.py

# The course's commands. Each one sets up .venv/ first (only when requirements changed).
#   make lab      start JupyterLab on the course
#   make test     run every test (helpers, notebooks with nbval, release sync, grading end to end)
#   make release  regenerate notebooks/ (student versions) from solutions/
#   make site     build the course website into build/site/ (runs the student notebooks for their outputs)
#   make grade    autograde submitted/<student>/<lesson>/ in the sandbox -> autograded/, feedback/,
#                 grades.csv, reports/ (JOBS=N grades N at a time; SCHEDULER=tls://host:8786 on a Dask cluster,
#                 with the certificates of `make certs`, INSECURE_TCP=1 to allow plain tcp://;
#                 UNSANDBOXED=1 runs student code unsandboxed)
#   make certs    the Dask grading cluster's CA, certificate and key -> certs/ (CERTS=DIR), kept if they exist
#   make bench    print each notebook's execution time and grading times, sequential and parallel
#                 (BENCH_ARGS="--workers 1 2 4": on Dask worker processes, with a 1,000-student projection)
#   make hw-check run the solution notebooks, measure the key figures here -> reports/hw-check.md (HW_CHECK_ARGS="--lessons 01-dataparallel")

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
LAB_ARGS ?=
PYTEST_ARGS ?=
TEST_PATHS ?= solutions tests
NBVAL_CELL_TIMEOUT ?= 300
JOBS ?= 1
SCHEDULER ?=
CERTS ?= certs
INSECURE_TCP ?=
UNSANDBOXED ?=

.PHONY: setup sandbox browser lab test release grade bench site

setup: $(STAMP)

# The grading sandbox needs bubblewrap (and util-linux's prlimit and setpriv); install it where we can.
sandbox:
	@command -v bwrap >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap util-linux >/dev/null; }; } || \
		echo "bubblewrap is missing: install it (apt-get install bubblewrap) or grade with UNSANDBOXED=1" >&2

# make test opens the course website in a real headless browser: Debian's Chromium, installed where we can.
browser:
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }; } || \
		echo "chromium is missing: install it (apt-get install chromium) for the website's browser test" >&2

$(STAMP): requirements.txt requirements.lock pyproject.toml
	@echo "Setting up $(VENV)/ (torch with CUDA, torch_xla, Jupyter, nbgrader, Dask): the first time downloads"
	@echo "several GB (7.6 GB installed) and takes about 5 minutes on a fast connection; later runs reinstall"
	@echo "only when requirements.txt, requirements.lock or pyproject.toml change."
	@if test -x $(BIN)/python; then echo "[1/3] using the existing $(VENV)/"; \
		else echo "[1/3] creating the virtual environment $(VENV)/"; $(PYTHON) -m venv $(VENV); fi
	@echo "[2/3] installing the pinned packages of requirements.txt (pip's own output follows only on errors)..."
	@start=$$(date +%s); $(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.txt -c requirements.lock \
		&& echo "      done in $$(( $$(date +%s) - start )) s"
	@echo "[3/3] installing the course's helpers package (editable)"
	@$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps -e .
	@touch $@

# Jupyter refuses to start as root unless told; containers and CI often are root.
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root)

# The venv's bin first on PATH (nbgrader runs `alembic` from PATH when it creates a gradebook); the course's
# nbgrader config (graders/nbgrader_config.py) found by the formgrader and the Validate button through
# JUPYTER_CONFIG_PATH; the file browser without the package's build leftovers.
LAB_HIDE := ["__pycache__", "*.pyc", "*.egg-info", "build", "dask-scratch-space"]
# JupyterLab saves the widgets' state in the notebook (the progress bars of training show again when it is reopened,
# instead of "Error displaying widget: model not found").
LAB_OVERRIDES := $(VENV)/share/jupyter/lab/settings/overrides.json
$(LAB_OVERRIDES):
	@mkdir -p $(dir $@)
	@printf '{\n  "@jupyter-widgets/jupyterlab-manager:plugin": {"saveState": true}\n}\n' > $@

lab: setup $(LAB_OVERRIDES)
	$(BIN)/python -m graders.pipeline gradebook  # the formgrader lists the lessons from gradebook.db
	PATH="$(CURDIR)/$(BIN):$$PATH" JUPYTER_CONFIG_PATH="$(CURDIR)/graders$(if $(JUPYTER_CONFIG_PATH),:$(JUPYTER_CONFIG_PATH))" \
		$(BIN)/jupyter lab --ServerApp.root_dir="$(CURDIR)" '--ContentsManager.hide_globs=$(LAB_HIDE)' $(ROOT_FLAG) $(LAB_ARGS)

# pytest-xdist: two workers, one grading the session's class, one running everything else in order
# (tests/conftest.py). TEST_WORKERS=0 runs all in this process. Three or four lessons run at once on a small
# machine: GNU OpenMP's idle threads sleep instead of spinning on the CPU the others need (as graded kernels
# do, graders/pipeline.py); the fork-safety test runs with the default.
TEST_WORKERS ?= 2
test: setup sandbox browser
	OMP_WAIT_POLICY=$${OMP_WAIT_POLICY:-PASSIVE} $(BIN)/python -m pytest $(TEST_PATHS) --nbval-lax --nbval-current-env \
		--nbval-cell-timeout=$(NBVAL_CELL_TIMEOUT) -p no:cacheprovider \
		-n $(TEST_WORKERS) --dist loadscope $(PYTEST_ARGS)

release: setup
	$(BIN)/python -m graders.pipeline release

# The course website: the student notebooks with the outputs of their explanation cells -> build/site/index.html
site: setup
	$(BIN)/python -m website.build --out build/site

grade: setup sandbox
	$(BIN)/python -m graders.pipeline grade --jobs $(JOBS) $(if $(SCHEDULER),--scheduler $(SCHEDULER) --certs $(CERTS)) \
		$(if $(INSECURE_TCP),--insecure-tcp) $(if $(UNSANDBOXED),--unsandboxed)

# The grading cluster's mutual TLS (website/pages/cluster.md): a CA and the certificate its machines share.
.PHONY: certs
certs: setup
	$(BIN)/python -m graders.cluster certs $(CERTS)

BENCH_ARGS ?=
bench: setup sandbox
	$(BIN)/python tests/bench.py $(BENCH_ARGS)

HW_CHECK_ARGS ?=
.PHONY: hw-check
hw-check: setup
	$(BIN)/python -m helpers.hw_check $(HW_CHECK_ARGS)

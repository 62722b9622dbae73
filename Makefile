# The course's commands. Each one sets up .venv/ first (only when requirements changed).
#   make lab      start JupyterLab on your copies of the lessons (workspace/), lesson 1 open (the student's view)
#   make instructor  JupyterLab on the whole course folder, with nbgrader's formgrader
#   make test     run every test (helpers, notebooks with nbval, release sync, grading end to end)
#   make release  regenerate notebooks/ (student versions) and solutions-py/ (the lessons as Python, for review)
#                 from solutions/
#   make site     build the course website into build/site/ (runs the student notebooks for their outputs)
#   make grade    autograde submitted/<student>/<lesson>/ in the sandbox -> autograded/, feedback/,
#                 grades.csv, reports/ (JOBS=N grades N at a time; SCHEDULER=tls://host:8786 on a Dask cluster,
#                 with the certificates of `make certs`, INSECURE_TCP=1 to allow plain tcp://;
#                 UNSANDBOXED=1 runs student code unsandboxed; DEMONSTRATIONS=1 runs the lessons' demonstration cells,
#                 which grading otherwise leaves out; STUDENT=id and LESSON=name grade those only, several
#                 separated by spaces, and grades.csv keeps the other rows)
#   make check NOTEBOOK=path  a student's self-check: their saved notebook graded as `make grade` grades it (the
#                 sandbox where there is one, hidden tests, judge) -> points per exercise, reports/self-check/LESSON.html
#   make certs    the Dask grading cluster's CA, certificate and key -> certs/ (CERTS=DIR), kept if they exist
#   make bench    print each notebook's execution time and grading times, sequential and parallel
#                 (BENCH_ARGS="--workers 1 2 4": on Dask worker processes, with a 1,000-student projection)
#   make hw-check run the student notebooks' explanation cells, measure the key figures here, with this machine's own
#                 torch where its python has one -> reports/hw-check.md (HW_CHECK_ARGS="--lessons 01-dataparallel")
#   make test-versions  the solutions and their hidden tests on each torch of helpers/versions.py's TESTED (the
#                 oldest and newest supported, and the runtimes' own: Kaggle TPU's 2.8 + torch_xla 2.8, Colab's and
#                 Kaggle's 2.10), each in its own .venv-torch<minor>/ (GBs and minutes; not part of make test)

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
HEAP_HOOK := $(VENV)/.import-heap
LAB_ARGS ?=
PYTEST_ARGS ?=
TEST_PATHS ?= solutions tests
NBVAL_CELL_TIMEOUT ?= 300
JOBS ?= 1
SCHEDULER ?=
CERTS ?= certs
INSECURE_TCP ?=
UNSANDBOXED ?=
DEMONSTRATIONS ?=
STUDENT ?=
LESSON ?=

.PHONY: setup sandbox browser lab instructor test release grade bench site check

setup: $(STAMP) $(HEAP_HOOK)

# The grading sandbox needs bubblewrap (and util-linux's prlimit and setpriv); install it where we can.
sandbox:
	@command -v bwrap >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap util-linux >/dev/null; }; } || \
		echo "bubblewrap is missing: install it (apt-get install bubblewrap) or grade with UNSANDBOXED=1" >&2

# make test opens the course website and the formgrader in a real headless browser: Debian's Chromium, installed
# here as root. apt-get waits up to 5 minutes for another apt or dpkg (DPkg::Lock::Timeout; apt 2.6's update ignores
# it, so an update is retried while another holds the package lists). A failed install stops make. Without root or
# apt-get, make goes on and the browser tests skip, except in CI (CI=true), where both fail.
browser:
	@command -v chromium >/dev/null && exit 0; \
	case "$$(echo "$${CI:-}" | tr A-Z a-z)" in ""|0|false|no) ci=;; *) ci=1;; esac; \
	if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then \
		echo "make browser: chromium is missing and only root with apt-get installs it here: apt-get install chromium" >&2; \
		[ -z "$$ci" ] || { echo "make browser: in CI the browser tests must run: failing" >&2; exit 1; }; \
		echo "make browser: the browser tests (tests/test_site.py, tests/test_formgrader.py) will skip" >&2; exit 0; \
	fi; \
	apt_get() { waited=0; \
		until out=$$(DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 -qq "$$@" 2>&1 >/dev/null); do \
			case "$$out" in *"Could not get lock"*) [ $$waited -lt 300 ] || { echo "$$out" >&2; return 1; };; \
				*) echo "$$out" >&2; return 1;; esac; \
			[ $$waited -gt 0 ] || echo "make browser: waiting for another apt-get to finish (up to 5 minutes)..." >&2; \
			sleep 5; waited=$$((waited + 5)); \
		done; }; \
	echo "make browser: installing Debian's chromium for the browser tests"; \
	apt_get update || echo "make browser: apt-get update failed (above); trying the package lists already here" >&2; \
	{ apt_get install -y chromium && command -v chromium >/dev/null; } || { \
		echo "make browser: could not install chromium (apt-get install chromium, above); the browser tests need it" >&2; \
		exit 1; }

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

# Every interpreter of the environment imports torch and the other heavy libraries with the garbage collector off and
# freezes what they made (helpers/import_heap.py: about a fifth less CPU for a torchrun rank)
$(HEAP_HOOK): helpers/import_heap.py $(STAMP)
	@$(BIN)/python -m helpers.import_heap install >/dev/null && touch $@

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

# make lab: the student's view: their own copies of the lessons (workspace/, which git ignores: graders/workspace.py)
# with lesson 1 open and nbgrader's instructor tools off (graders/student/). make instructor: the whole course folder
# with the formgrader.
LESSON_ONE := 01-dataparallel/01-dataparallel.ipynb
WORKSPACE ?= $(CURDIR)/workspace
lab: setup $(LAB_OVERRIDES)
	@$(BIN)/python -m graders.workspace --folder "$(WORKSPACE)"
	PATH="$(CURDIR)/$(BIN):$$PATH" JUPYTER_CONFIG_PATH="$(CURDIR)/graders/student$(if $(JUPYTER_CONFIG_PATH),:$(JUPYTER_CONFIG_PATH))" \
		$(BIN)/jupyter lab --ServerApp.root_dir="$(WORKSPACE)" --LabApp.default_url=/lab/tree/$(LESSON_ONE) \
		'--ContentsManager.hide_globs=$(LAB_HIDE)' $(ROOT_FLAG) $(LAB_ARGS)

instructor: setup $(LAB_OVERRIDES)
	$(BIN)/python -m graders.pipeline gradebook  # the formgrader lists the lessons from gradebook.db
	PATH="$(CURDIR)/$(BIN):$$PATH" JUPYTER_CONFIG_PATH="$(CURDIR)/graders$(if $(JUPYTER_CONFIG_PATH),:$(JUPYTER_CONFIG_PATH))" \
		$(BIN)/jupyter lab --ServerApp.root_dir="$(CURDIR)" '--ContentsManager.hide_globs=$(LAB_HIDE)' $(ROOT_FLAG) $(LAB_ARGS)

# pytest-xdist: three workers, one grading the session's class, one running in order the tests that start processes
# on this machine's network, one (then all) taking the rest (tests/conftest.py): on two cores too, as the second's
# tests often wait. TEST_WORKERS=0 runs all in this process. Three or four lessons run at once on a small
# machine: GNU OpenMP's idle threads sleep instead of spinning on the CPU the others need (as graded kernels
# do, graders/pipeline.py); the fork-safety test runs with the default.
TEST_WORKERS ?= 3
test: setup sandbox browser
	OMP_WAIT_POLICY=$${OMP_WAIT_POLICY:-PASSIVE} $(BIN)/python -m pytest $(TEST_PATHS) --nbval-lax --nbval-current-env \
		--nbval-cell-timeout=$(NBVAL_CELL_TIMEOUT) -p no:cacheprovider \
		-n $(TEST_WORKERS) --dist loadscope $(PYTEST_ARGS)

# test-seeds: the hidden inputs of the exercises that launch processes drawn on SEEDS seeds each (make test draws the
# others on 8 and these on the two seeds of tests/test_hidden_grading.py's gradings): minutes, so a job of its own.
SEEDS ?= 24
.PHONY: test-seeds
test-seeds: setup
	OMP_WAIT_POLICY=$${OMP_WAIT_POLICY:-PASSIVE} $(BIN)/python -m pytest tests/test_hidden_seeds.py -k launching \
		--launching-seeds=$(SEEDS) -p no:cacheprovider -n $(TEST_WORKERS) --dist load $(PYTEST_ARGS)

release: setup
	$(BIN)/python -m graders.pipeline release

# A student's self-check of their own notebook (graders/selfcheck.py); NOTEBOOK relative to the course folder, or absolute
NOTEBOOK ?=
check: setup sandbox
	@test -n "$(NOTEBOOK)" || { echo "usage: make check NOTEBOOK=workspace/01-dataparallel/01-dataparallel.ipynb" >&2; exit 2; }
	$(BIN)/python -m graders.selfcheck "$(NOTEBOOK)"

# The course website: the student notebooks with the outputs of their explanation cells -> build/site/index.html
site: setup
	$(BIN)/python -m website.build --out build/site

grade: setup sandbox
	$(BIN)/python -m graders.pipeline grade --jobs $(JOBS) $(if $(SCHEDULER),--scheduler $(SCHEDULER) --certs $(CERTS)) \
		$(if $(INSECURE_TCP),--insecure-tcp) $(if $(UNSANDBOXED),--unsandboxed) $(if $(DEMONSTRATIONS),--run-demonstrations) \
		$(foreach s,$(STUDENT),--student $(s)) $(foreach l,$(LESSON),--lesson $(l))

# The grading cluster's mutual TLS (website/pages/cluster.md): a CA and the certificate its machines share.
.PHONY: certs
certs: setup
	$(BIN)/python -m graders.cluster certs $(CERTS)

BENCH_ARGS ?=
bench: setup sandbox
	$(BIN)/python tests/bench.py $(BENCH_ARGS)

# hw-check checks what students run: where $(PYTHON) already has torch (Colab, Kaggle, a GPU or TPU image) it runs
# with that python and its own torch, never installing the pinned stack over it; elsewhere it sets up $(VENV)/.
# HW_CHECK_PYTHON=... names the python. On a TPU VM that python needs torch_xla[tpu] (libtpu comes with the extra).
HW_CHECK_ARGS ?=
HW_CHECK_PYTHON ?=
.PHONY: hw-check
hw-check:
	$(eval HW_CHECK_USE := $(or $(HW_CHECK_PYTHON),$(shell $(PYTHON) -c "import torch, nbclient, helpers.hw_check" >/dev/null 2>&1 && command -v $(PYTHON))))
	$(if $(HW_CHECK_USE),@echo "hw-check with $(HW_CHECK_USE) and its own torch",@$(MAKE) --no-print-directory setup)
	$(or $(HW_CHECK_USE),$(BIN)/python) -m helpers.hw_check $(HW_CHECK_ARGS)

# test-versions: each lesson's solution, every cell with its hidden tests in the kernel (nbval), then as the grader
# runs it and judges it (graders.judge --check), on each torch of helpers/versions.py's TESTED (the oldest and the
# newest supported, and the pairs Colab's and Kaggle's images bring; a lesson that stops on a torch, as lesson 5 does
# before 2.9 on CPU processes, is said and skipped there), in a virtual environment of its own,
# .venv-torch<minor>/: torch (and torch_xla) at that version, with the lessons' and the grading's pins of
# requirements.txt and requirements.lock. TORCH_VERSIONS=2.14 picks versions, VERSIONS_LESSONS lessons.
# tests/test_dependencies.py checks that what the judge and the helpers import is installed here.
TORCH_VERSIONS ?= $(shell $(PYTHON) -m helpers.versions | cut -d" " -f1)
VERSIONS_LESSONS ?= 01-dataparallel 02-ddp 03-amp 04-accelerate-tpu 05-sharding
# what the versions' environments leave out of requirements.txt: torch itself, the lab and the formgrader, grading's
# cluster, the site
VERSIONS_SKIP := ^(torch|torch_xla|jupyterlab|jupyter_server|nbgrader|dask|distributed|jupytext|pytest-xdist|sphinx|myst-nb|sphinx-book-theme|playwright)[=;]
VERSIONS_LOCK_SKIP := ^(torch|torch-xla|triton|nvidia-|sympy)
# the judge's verdicts: every judged cell must pass; its flags for review (none for a solution) are shown
VERSIONS_JUDGED := import json, sys; r = json.load(open(sys.argv[1])); bad = {k: v["message"] for k, v in r["cells"].items() if not v["passed"]}; print("   judged", len(r["cells"]), "cells:", len(bad), "failed", bad or ""); [print("   flagged for review:", f) for f in r["flags"]]; sys.exit(bool(bad) or not r["cells"])
.PHONY: test-versions
test-versions:
	@for v in $(TORCH_VERSIONS); do $(MAKE) --no-print-directory .venv-torch$$v/.installed || exit 1; done
	@failed=""; for v in $(TORCH_VERSIONS); do for lesson in $(VERSIONS_LESSONS); do \
		echo "== torch $$(.venv-torch$$v/bin/python -c 'import torch; print(torch.__version__)'): $$lesson"; \
		why=$$(.venv-torch$$v/bin/python -m helpers.versions --lesson-runs $$lesson) || { \
			echo "   stops, as it says: $$why"; continue; }; \
		start=$$(date +%s); \
		OMP_WAIT_POLICY=$${OMP_WAIT_POLICY:-PASSIVE} .venv-torch$$v/bin/python -m pytest solutions/$$lesson --nbval-lax \
			--nbval-current-env --nbval-cell-timeout=$(NBVAL_CELL_TIMEOUT) -p no:cacheprovider -q \
			|| failed="$$failed torch$$v:$$lesson(nbval)"; \
		.venv-torch$$v/bin/python -m graders.judge --check solutions/$$lesson/$$lesson.ipynb > .venv-torch$$v/judge-$$lesson.json; \
		.venv-torch$$v/bin/python -c '$(VERSIONS_JUDGED)' .venv-torch$$v/judge-$$lesson.json || failed="$$failed torch$$v:$$lesson(judge)"; \
		echo "   $$(( $$(date +%s) - start )) s"; \
	done; done; \
	if [ -n "$$failed" ]; then echo "test-versions FAILED:$$failed"; exit 1; fi; echo "test-versions: all passed"

.venv-torch%/.installed: requirements.txt requirements.lock pyproject.toml helpers/versions.py helpers/import_heap.py
	@pins=$$($(PYTHON) -m helpers.versions | awk '$$1 == "$*" { print "torch==" $$2; if ($$3) print "torch_xla==" $$3 }'); \
	test -n "$$pins" || { echo "torch $* is not one of helpers/versions.py's TESTED" >&2; exit 1; }; \
	echo "Setting up .venv-torch$*/ ($$(echo $$pins)): several GB, minutes the first time"; \
	test -x .venv-torch$*/bin/python || $(PYTHON) -m venv .venv-torch$*; \
	grep -E '^[A-Za-z]' requirements.txt | grep -v -E '$(VERSIONS_SKIP)' > .venv-torch$*/requirements.txt; \
	grep -E '^[A-Za-z]' requirements.lock | grep -v -i -E '$(VERSIONS_LOCK_SKIP)' > .venv-torch$*/constraints.txt; \
	.venv-torch$*/bin/python -m pip install --quiet --disable-pip-version-check $$pins \
		-r .venv-torch$*/requirements.txt -c .venv-torch$*/constraints.txt && \
	.venv-torch$*/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -e . && \
	.venv-torch$*/bin/python -m helpers.import_heap install >/dev/null && touch $@

# The two commands: `make lab` (set up, then JupyterLab on the course) and `make test`.
# Set-up is idempotent: a second run checks what is installed and takes seconds.
# `make lab PYTHON=/path/to/python3.11` (or `make setup PYTHON=...`) names the Python .venv is made from; without it
# set-up looks for a Python 3.11 on PATH, then asks uv for one (scripts/python-choice.sh). HUB_PYTHON: the hub's.
PY := .venv/bin/python
# System packages the test suite needs beyond `make lab`'s (installed when root, named otherwise).
# (ruby: tests/test_hub.py renders the Open OnDemand app's ERB files with it, as OnDemand does.)
TEST_APT := openmpi-bin libopenmpi-dev slurm-wlm munge chromium nodejs python3.11-venv ruby
PYTEST_ARGS ?=
# The suite runs in this many pytest-xdist workers side by side; tests/conftest.py keeps the tests that share this
# machine's Slurm, virtual cluster and hub in one of them, in file order. Three on two cores: that one mostly waits.
TEST_WORKERS ?= 3

.PHONY: setup lab test clean student format docs publish

# `make setup HUB=1` (as root) also builds the environment a JupyterHub serves the course from (scripts/setup-hub.sh).
# Debian's python3.11 needs python3.11-venv for it; a host without python3.11 (Ubuntu 24.04) has no such package, and
# setup-hub.sh gets a Python 3.11 from uv there.
HUB_APT := $(if $(wildcard /usr/bin/python3.11),python3.11-venv)
setup:
	@bash scripts/setup-system.sh
	@PYTHON="$(PYTHON)" bash scripts/setup-python.sh
	@if [ -n "$(HUB)" ] && [ "$(HUB)" != 0 ]; then bash scripts/setup-system.sh nodejs $(HUB_APT) && \
		bash scripts/setup-proxy.sh && bash scripts/setup-hub.sh; fi

lab: setup
	@$(PY) -m course lab $(LAB_ARGS)

# As root, the hub tests' shared environment too (tests/test_hub.py; a normal user cannot create Unix accounts).
test: setup
	@bash scripts/setup-system.sh $(TEST_APT)
	@if [ "$$(id -u)" = 0 ]; then bash scripts/setup-proxy.sh && bash scripts/setup-hub.sh; fi
	@$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder $(PYTEST_ARGS)

# One layout for the code (tests/test_lint.py checks it): run before committing
format:
	@$(PY) -m ruff format .
	@$(PY) -m ruff check .

# The course as a website (website/build.py): the notebooks from the student copy, the instructor guide, the command
# line's reference; offline, warnings are errors. DOCS_REPOSITORY_URL, DOCS_HUB_URL, DOCS_BINDER_URL and DOCS_BRANCH
# (environment or make variables) say where its launch links point: make docs DOCS_HUB_URL=https://hub.example.org;
# DOCS_RUN=DIR, a recorded run (python -m course run --out DIR), gives the notebook pages their outputs
docs: setup
	@bash scripts/setup-mathjax.sh
	@$(PY) -m website.build $(or $(OUT),build/site)

# Publishes the site `make docs` built as the gh-pages branch of REMOTE (a git remote's name; default origin), which
# GitHub Pages serves, with ghp-import: one commit per publication on top of the branch's history (fetched first).
SITE = $(or $(OUT),build/site)
REMOTE ?= origin
publish:
	@test -f $(SITE)/index.html || { echo "make publish: no site in $(SITE): run make docs first" >&2; exit 2; }
	@git fetch -q $(REMOTE) gh-pages 2>/dev/null || true  # none yet: the first publication
	@$(PY) -m ghp_import --no-jekyll --push --remote $(REMOTE) \
		--message "The course's website, built from $$(git rev-parse --short HEAD)" $(SITE)

# The course as learners get it (no solutions/ or hidden tests), for a `student` branch: make student OUT=DIR
student:
	@$(PY) -m course student-copy $(or $(OUT),build/student)

# Removes what set-up and the tests build. Never nbgrader's course folder (build/nbgrader: its gradebook,
# submissions and feedback) nor grades, submissions or class results: it says which of those it kept.
clean:
	rm -rf .venv .tools .pytest_cache *.egg-info
	@if [ -d build ]; then find build -mindepth 1 -maxdepth 1 ! -name nbgrader -exec rm -rf {} +; fi
	@kept="$$(ls -d build/nbgrader SUBMISSIONS submissions grades dry-run run-output class-results class.csv results.csv 2>/dev/null | tr '\n' ' ')"; \
	if [ -n "$$kept" ]; then echo "kept (student data and grades; delete by hand when done): $$kept"; fi

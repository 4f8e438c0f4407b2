# Two commands do all set-up on a fresh machine:
#   make lab    create .venv, install the pinned packages, register the Jupyter kernel, open JupyterLab on course/
#   make test   the same set-up, then the whole test suite
# A GPU machine whose Python already has a CUDA build of torch (and triton) keeps it with
#   make lab PYTHON=/path/to/that/python SYSTEM_TORCH=1
# which makes the venv see that Python's packages and installs everything else pinned.
# Which build of torch: TORCH_INDEX=auto (the default) takes PyTorch's CPU build where no NVIDIA driver is
# installed (no nvidia-smi), else PyPI's CUDA build; TORCH_INDEX=cpu or TORCH_INDEX=pypi chooses, and any other
# value is a package index URL to take torch from. The CPU build is a fifth of the download (docs/students.md).
# Linux only (WSL2 on Windows): triton publishes no wheel for macOS.

PYTHON ?= python3
VENV ?= .venv
SYSTEM_TORCH ?= 0
TORCH_INDEX ?= auto
CPU_TORCH_INDEX := https://download.pytorch.org/whl/cpu
ifeq ($(TORCH_INDEX),auto)
TORCH_INDEX_URL := $(if $(shell command -v nvidia-smi 2>/dev/null),,$(CPU_TORCH_INDEX))
else ifeq ($(TORCH_INDEX),cpu)
TORCH_INDEX_URL := $(CPU_TORCH_INDEX)
else ifeq ($(TORCH_INDEX),pypi)
TORCH_INDEX_URL :=
else
TORCH_INDEX_URL := $(TORCH_INDEX)
endif
TORCH_PIN := $(shell grep -E '^torch==' constraints.txt)
PYTEST_ARGS ?=
LAB_ARGS ?=
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(SYSTEM_TORCH)
KERNEL_NAME := fusion-course
NBGRADER_INSTRUCTOR_UI := @jupyter/nbgrader:formgrader @jupyter/nbgrader:create-assignment \
	@jupyter/nbgrader:course-list @jupyter/nbgrader:assignment-list @jupyter/nbgrader:menu

ifeq ($(SYSTEM_TORCH),1)
VENV_FLAGS := --system-site-packages
endif

.PHONY: lab test corpus course handout bench device check grade clean browser sandbox slurm screenshots docs

$(STAMP): pyproject.toml constraints.txt
	@if [ "$$(uname -s)" = Darwin ]; then echo "macOS is not supported: triton has no macOS wheel (use Linux, or WSL2 on Windows)"; exit 1; fi
	@echo "==> creating $(VENV) with $(PYTHON)"
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV_FLAGS) $(VENV)
ifeq ($(SYSTEM_TORCH),1)
	grep -v -E '^(torch|triton)==' constraints.txt > $(VENV)/constraints.txt
else
	cp constraints.txt $(VENV)/constraints.txt
ifneq ($(TORCH_INDEX_URL),)
	@echo "==> $(TORCH_PIN) from $(TORCH_INDEX_URL) (TORCH_INDEX=$(TORCH_INDEX); TORCH_INDEX=pypi takes PyPI's CUDA build)"
	$(BIN)/python -m pip install --quiet --progress-bar off --retries 1 --timeout 20 --no-deps --index-url $(TORCH_INDEX_URL) '$(TORCH_PIN)'
endif
endif
	@echo "==> installing pinned packages (about a minute)"
	$(BIN)/python -m pip install --quiet --progress-bar off -c $(VENV)/constraints.txt -e '.[course,test,docs]'
	$(BIN)/python -m ipykernel install --sys-prefix --name $(KERNEL_NAME) --display-name "Python 3 (fusion course)"
	# A student's JupyterLab shows nbgrader's Validate button, not the instructor's menus and panels (an
	# instructor grades from the command line; `jupyter labextension enable` brings them back).
	$(BIN)/jupyter labextension disable --level=sys_prefix $(NBGRADER_INSTRUCTOR_UI) >/dev/null
	$(BIN)/python -c "import torch, triton; print('torch', torch.__version__, '| triton', triton.__version__, '| CUDA', torch.cuda.is_available())"
	# matplotlib's font list, built once here rather than in a student's first check (12 s of a cold check of 07)
	$(BIN)/python -c "import matplotlib.font_manager"
	touch $@

# Containers and cloud GPU machines run as root, where JupyterLab refuses to start without --allow-root.
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)

# LAB_DIR: the folder JupyterLab opens (the browser tests open a copy of course/).
LAB_DIR ?= course

lab: $(STAMP)
	cd $(LAB_DIR) && $(abspath $(BIN))/jupyter lab $(ROOT_FLAG) $(LAB_ARGS)

# Every core (pytest-xdist; tests/conftest.py groups the tests that share a fixture and starts the longest
# first), and the 20 slowest tests listed at the end, so that the next slow test is seen when it lands.
# One thread per process: a worker per core, and thread pools that spin against each other cost 3-4x (conftest).
# pytest's exit code 5 (no test collected) fails the target like any other failure.
TEST_JOBS ?= auto
# The browser tests drive Debian's chromium: installed here when missing and this is root on Debian (CI, containers);
# otherwise tests/notebooks/test_browser.py is skipped with its reason.
browser:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "==> installing chromium and chromium-driver for the browser tests"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null) \
	    || echo "could not install chromium: the browser tests will be skipped"; \
	else echo "no chromium here (and not root on Debian): the browser tests will be skipped"; fi

# grade-class runs each student's notebook in a bubblewrap sandbox (autograder/guard/sandbox.py): Debian's bubblewrap,
# installed here when missing and this is root on Debian; otherwise grade-class says why and grades without it.
sandbox:
	@if command -v bwrap >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "==> installing bubblewrap, the students' sandbox in grade-class"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null) \
	    || echo "could not install bubblewrap: grade-class will grade without its sandbox"; \
	else echo "no bwrap here (and not root on Debian): grade-class will grade without its sandbox"; fi

# tests/classroom/test_slurm.py grades a class on a one-node Slurm cluster it starts itself
# (tests/slurm_cluster.py): Debian's slurm-wlm and munge (without the recommended plugins: the basic ones serve),
# installed here when missing and this is root on Debian; otherwise that test is skipped.
slurm:
	@if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null \
	  && command -v munged >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "==> installing slurm-wlm and munge for the Slurm test"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	     apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null) \
	    || echo "could not install slurm-wlm and munge: the Slurm test will be skipped"; \
	else echo "no Slurm here (and not root on Debian): the Slurm test will be skipped"; fi

test: $(STAMP) browser sandbox slurm
	OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/python -m pytest -n $(TEST_JOBS) --durations=20 $(PYTEST_ARGS)

# Only the corpus of bad submissions (tests/corpus/), graded the three ways; `make test` includes it.
corpus: $(STAMP)
	$(BIN)/python -m pytest -n $(TEST_JOBS) tests/hostile/test_corpus.py tests/hostile/test_corpus_class.py $(PYTEST_ARGS)

# Regenerate the solution notebooks from their text sources, then the release (course/) with nbgrader; give the
# course a secret seed of its own the first time (.grading-secret.toml beside grading.toml, git-ignored).
course: $(STAMP)
	$(BIN)/python -m autograder.publish.build
	$(BIN)/python -m autograder.classroom.secret grading.toml

# What an instructor hands out, in dist/handout/: the release notebooks and the grader as a wheel, with none of
# the reference solutions (only the teaching modules of kernels/). Its README says how students install it.
handout: $(STAMP)
	$(BIN)/python -m autograder.publish.handout

# The benchmark's peer column needs Liger-Kernel (the optional `bench` extra), installed pinned here. The run is
# saved in bench/results/; docs/benchmarks.md is then written from the newest committed runs.
bench: $(STAMP)
	$(BIN)/python -m pip install --quiet --progress-bar off -c constraints.txt -e '.[bench]'
	$(BIN)/python -m bench
	$(BIN)/python -m bench.report

device: $(STAMP)
	$(BIN)/python -m autograder device

# Grade every submission of one assignment, each student in a process of its own: make grade ASSIGNMENT=01_hbm_cost_model
# [GRADE_ARGS="--gpus all --anonymous"]. Results go to grading/; exit 0 once every student is recorded.
GRADE_ARGS ?=
grade: $(STAMP) sandbox
	@test -n "$(ASSIGNMENT)" || (echo "usage: make grade ASSIGNMENT=<name> [GRADE_ARGS=...]"; exit 2)
	$(BIN)/python -m autograder grade-class $(ASSIGNMENT) $(GRADE_ARGS)

# The README's pictures of what a student and an instructor see, taken by the browser tests.
screenshots: $(STAMP) browser
	FUSION_COURSE_SCREENSHOTS=1 $(BIN)/python -m pytest -p no:xdist -q tests/notebooks/test_browser.py

check: $(STAMP)
	$(BIN)/python -m autograder check solutions/[0-9][0-9]_*/[0-9][0-9]_*.ipynb

# The documentation site (mkdocs.yml): docs/ and the release notebooks of course/, rendered without running
# them (docs/hooks.py), into build/site. Strict: a broken link or a missing image fails the build.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

clean:
	rm -rf $(VENV) .pytest_cache gradebook.db dist

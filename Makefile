# Two commands do all set-up on a fresh machine:
#   make lab    create .venv, install the pinned packages, register the Jupyter kernel, open JupyterLab on course/
#   make test   the same set-up, then the whole test suite
# A GPU machine whose Python already has a CUDA build of torch (and triton) keeps it with
#   make lab PYTHON=/path/to/that/python SYSTEM_TORCH=1
# which makes the venv see that Python's packages and installs everything else pinned.

PYTHON ?= python3
VENV ?= .venv
SYSTEM_TORCH ?= 0
PYTEST_ARGS ?=
LAB_ARGS ?=
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(SYSTEM_TORCH)
KERNEL_NAME := fusion-course

ifeq ($(SYSTEM_TORCH),1)
VENV_FLAGS := --system-site-packages
endif

.PHONY: lab test corpus course bench device check grade clean

$(STAMP): pyproject.toml constraints.txt
	@echo "==> creating $(VENV) with $(PYTHON)"
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV_FLAGS) $(VENV)
ifeq ($(SYSTEM_TORCH),1)
	grep -v -E '^(torch|triton)==' constraints.txt > $(VENV)/constraints.txt
else
	cp constraints.txt $(VENV)/constraints.txt
endif
	@echo "==> installing pinned packages (about a minute)"
	$(BIN)/python -m pip install --quiet --progress-bar off -c $(VENV)/constraints.txt -e '.[course,test]'
	$(BIN)/python -m ipykernel install --sys-prefix --name $(KERNEL_NAME) --display-name "Python 3 (fusion course)"
	$(BIN)/python -c "import torch, triton; print('torch', torch.__version__, '| triton', triton.__version__, '| CUDA', torch.cuda.is_available())"
	touch $@

lab: $(STAMP)
	cd course && ../$(BIN)/jupyter lab $(LAB_ARGS)

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# Only the corpus of bad submissions (tests/corpus/), graded the three ways; `make test` includes it.
corpus: $(STAMP)
	$(BIN)/python -m pytest tests/test_corpus.py tests/test_corpus_class.py $(PYTEST_ARGS)

# Regenerate the solution notebooks from their text sources, then the release (course/) with nbgrader.
course: $(STAMP)
	$(BIN)/python -m autograder.build

bench: $(STAMP)
	$(BIN)/python -m kernels.bench

device: $(STAMP)
	$(BIN)/python -m autograder device

# Grade every submission of one assignment, each student in a process of its own: make grade ASSIGNMENT=01_hbm_cost_model
grade: $(STAMP)
	@test -n "$(ASSIGNMENT)" || (echo "usage: make grade ASSIGNMENT=<name>"; exit 2)
	$(BIN)/python -m autograder grade-class $(ASSIGNMENT)

check: $(STAMP)
	$(BIN)/python -m autograder check solutions/[0-9][0-9]_*/[0-9][0-9]_*.ipynb

clean:
	rm -rf $(VENV) .pytest_cache gradebook.db

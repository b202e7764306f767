# Every target sets itself up: a missing .venv is created and filled from requirements.lock.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CORES ?= 8

.PHONY: setup run results paper mamujoco test lint bench clean

$(STAMP): pyproject.toml requirements.lock requirements-nodeps.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip==26.3"
	$(BIN)/python -m pip install --quiet -c requirements.lock -r requirements.lock
	$(BIN)/python -m pip install --quiet --no-deps -r requirements-nodeps.txt
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

setup: $(STAMP)

run: $(STAMP)
	$(BIN)/snakemake --cores $(CORES) --configfile config/config.yaml

# docs/results.md and docs/results/*.png from the default experiment (run first if needed).
results: run
	$(BIN)/python -m src.analysis.results_doc config/config.yaml docs

# The paper: config/paper.yaml end to end (resumes where it stopped), then docs/paper.md with
# its figures and tables in docs/paper/.
paper: $(STAMP)
	$(BIN)/snakemake --cores $(CORES) --configfile config/paper.yaml
	$(BIN)/python -m src.analysis.results_doc config/paper.yaml docs --name paper

# Safe Multi-Agent MuJoCo: config/mamujoco.yaml end to end (about 45 minutes on 2 cores), then
# docs/mamujoco.md with its figures and tables in docs/mamujoco/.
mamujoco: $(STAMP)
	$(BIN)/snakemake --cores $(CORES) --configfile config/mamujoco.yaml
	$(BIN)/python -m src.analysis.results_doc config/mamujoco.yaml docs --name mamujoco

test: $(STAMP)
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks workflow/scripts examples
	$(BIN)/snakemake --lint
	$(BIN)/snakefmt --check Snakefile workflow/rules

bench: $(STAMP)
	$(BIN)/python -m benchmarks.run_all

clean:
	rm -rf .snakemake results

# The README's two commands: `make demo` (main job) and `make test` (the test suite).
# Each creates .venv and installs the pinned requirement groups it needs (requirements/*.txt).

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install --disable-pip-version-check -q

.PHONY: demo finetune-demo test lint format bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)

# One stamp per installed group, redone when its pins change.
$(VENV)/.deps-%: requirements/%.txt | $(PY)
	$(PIP) -r $<
	touch $@

$(VENV)/.package: setup.py setup.cfg $(VENV)/.deps-build | $(PY)
	$(PIP) --no-deps --no-build-isolation -e .
	touch $@

DEPLOY := $(VENV)/.deps-deploy $(VENV)/.deps-sim $(VENV)/.package
ALL := $(DEPLOY) $(VENV)/.deps-train $(VENV)/.deps-tools $(VENV)/.deps-test $(VENV)/.deps-bench

# The deployment stack on the simulated ANYmal: loco-launch (sim_robot on MuJoCo, policy_node,
# recorder), driven through policy_node's services; table, PNG and one JSON line in runs/demo_*/.
demo: $(DEPLOY) $(VENV)/.deps-tools
	$(PY) -m loco_policy.tools.demo $(DEMO_ARGS)

# Online SAC fine-tuning on a perturbed simulated ANYmal (weaker drives): loco-launch with
# sac_finetune, then frozen against fine-tuned tracking, paired; table, PNG, one JSON line.
# FINETUNE_MINUTES of robot data (3 for a first look; the measurement in docs/ used 20).
FINETUNE_MINUTES ?= 3
finetune-demo: $(DEPLOY) $(VENV)/.deps-train $(VENV)/.deps-tools
	$(PY) -m loco_train.experiments.finetune_demo --minutes $(FINETUNE_MINUTES) $(FINETUNE_ARGS)

test: $(ALL)
	$(PY) -m pytest test

lint: $(VENV)/.deps-test
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(VENV)/.deps-test
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

clean:
	rm -rf $(VENV) build install log .pytest_cache

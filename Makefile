# tfcnn: one-command setup, tests, demo and benchmarks.
#   make install   create .venv, install TensorFlow, build Horovod against it, install tfcnn
#   make test      install if needed, then run the test suite
#   make demo      install if needed, then generate, convert, train, evaluate and export end to end
# Two lanes (TF=2.15 | TF=2.17, README "Install"): 2.15 is the default on Python 3.10/3.11, 2.17 on 3.12
# and wherever asked for (make install TF=2.17); each lane has its own venv.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 >/dev/null && echo python3.11 || \
                  { command -v python3.12 >/dev/null && echo python3.12; } || echo python3.11)
PY_VERSION := $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
TF ?= $(if $(filter 3.12,$(PY_VERSION)),2.17,2.15)
ifeq ($(TF),2.15)
  # The newest TensorFlow Horovod 0.28.1 builds against unpatched, with tensorflow-addons and Keras 2 built in.
  TF_VERSION := 2.15.1
  LANE_PYTHONS := 3.9 3.10 3.11
  LANE_PACKAGES := tensorflow-addons==0.23.0
  LANE_ENV :=
  VENV ?= .venv
else ifeq ($(TF),2.17)
  # Keras 2 is tf_keras there, switched on by TF_USE_LEGACY_KERAS=1 (tfcnn-env.pth below); no tensorflow-addons.
  TF_VERSION := 2.17.1
  LANE_PYTHONS := 3.9 3.10 3.11 3.12
  LANE_PACKAGES := tf_keras~=2.17.0
  # Not on 2.15: there the switch makes TensorFlow look for tf_keras, which that lane does not have.
  LANE_ENV := os.environ.setdefault("TF_USE_LEGACY_KERAS", "1");
  VENV ?= .venv-tf2.17
else
  $(error TF must be 2.15 or 2.17, received: $(TF))
endif
OTHER_TF := $(if $(filter 2.15,$(TF)),2.17,2.15)
WRONG_PYTHON := tfcnn: TensorFlow $(TF) has no wheels for Python $(PY_VERSION) ($(PYTHON)); it supports Python \
  $(LANE_PYTHONS). Use the other lane (make install TF=$(OTHER_TF)) or another Python (PYTHON=python3.11)
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check -q
STAMP := $(VENV)/.tfcnn-installed
HOROVOD_VERSION := 0.28.1
TESTS ?= tests
PYTEST_ARGS ?=
# Test processes: most tests are single-threaded Python (model building, process start-up), so two
# workers per machine roughly halve the suite's time; more than 4 would mostly add memory.
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); echo $$(( n < 2 ? 2 : n > 4 ? 4 : n )))
# An MPI compiler wrapper that runs (not merely one on the PATH) decides whether Horovod gets MPI.
HAS_MPI := $(shell mpicxx --version >/dev/null 2>&1 && echo 1 || echo 0)
# An NVIDIA GPU decides between tensorflow-cpu and tensorflow[and-cuda] (with NCCL in Horovod).
HAS_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo 1 || echo 0)

.PHONY: install test demo bench clean
BENCH_RESULTS ?= bench/results

install: $(STAMP)
	@# OpenMPI installed after Horovod was built: build it again, now with MPI.
	@if [ "$(HAS_MPI)" = 1 ] && ! TF_CPP_MIN_LOG_LEVEL=2 $(PY) -c "import sys, horovod.tensorflow as h; \
	   sys.exit(0 if h.mpi_built() else 1)" 2>/dev/null; then rm -f $(STAMP); $(MAKE) --no-print-directory $(STAMP); fi
	@TF_CPP_MIN_LOG_LEVEL=3 $(VENV)/bin/horovodrun --check-build

# The stamp depends on what decides the install; a second `make install` only prints the build check.
$(STAMP): setup.py Makefile
	@test -n "$(PY_VERSION)" || { echo "tfcnn: $(PYTHON) not found or does not run: install Python 3.11 (e.g. 'apt-get install python3.11 python3.11-venv python3.11-dev' or 'pyenv install 3.11'), or name one with PYTHON=..."; exit 1; }
	@# Refused before anything is downloaded: a lane the Python cannot install.
	@case " $(LANE_PYTHONS) " in *" $(PY_VERSION) "*) ;; *) echo "$(WRONG_PYTHON)"; exit 1;; esac
	@command -v g++ >/dev/null || { echo "tfcnn: no C++ compiler (g++) found, needed to build Horovod: install it (e.g. 'apt-get install g++')"; exit 1; }
	@command -v cmake >/dev/null || { echo "tfcnn: cmake not found, needed to build Horovod: install it (e.g. 'apt-get install cmake' or 'pip install cmake')"; exit 1; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade "pip>=23" "setuptools>=65,<70" wheel
	@# TensorFlow first: Horovod compiles against the installed TF. tensorflow[and-cuda] only where a GPU is present.
	@if [ "$(HAS_GPU)" = 1 ]; then tf="tensorflow[and-cuda]==$(TF_VERSION)"; else tf="tensorflow-cpu==$(TF_VERSION)"; fi; \
	 echo "tfcnn: installing $$tf $(LANE_PACKAGES)"; $(PIP) install "$$tf" $(LANE_PACKAGES) "numpy>=1.26,<2"
	@# Horovod from source; Gloo always, MPI when mpicxx runs, NCCL when a GPU exists. Built wheels are cached
	@# per lane (a wheel fits only the TensorFlow it was built against); one that lacks a controller this
	@# machine now has (built before OpenMPI was installed) is rebuilt.
	@want_mpi=$(HAS_MPI); \
	 check="import sys, horovod.tensorflow as h; sys.exit(0 if h.gloo_built() and (h.mpi_built() or not $$want_mpi) else 1)"; \
	 flags="HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1"; \
	 if [ $$want_mpi = 1 ]; then flags="$$flags HOROVOD_WITH_MPI=1"; else flags="$$flags HOROVOD_WITHOUT_MPI=1"; fi; \
	 if [ "$(HAS_GPU)" = 1 ]; then flags="$$flags HOROVOD_GPU_OPERATIONS=NCCL"; fi; \
	 cache="$${XDG_CACHE_HOME:-$$HOME/.cache}/tfcnn/pip-tf$(TF)-$(if $(filter 1,$(HAS_GPU)),gpu,cpu)"; \
	 build="env $$flags $(PIP) install --cache-dir $$cache --no-build-isolation --force-reinstall --no-deps horovod==$(HOROVOD_VERSION)"; \
	 if $(PY) -c "$$check" 2>/dev/null; then echo "tfcnn: horovod already built"; else \
	   echo "tfcnn: building horovod $(HOROVOD_VERSION) against TensorFlow ($$flags; about 6 minutes on 2 cores)"; \
	   $(PIP) install cloudpickle psutil pyyaml packaging cffi && $$build || exit 1; \
	   TF_CPP_MIN_LOG_LEVEL=$${TF_CPP_MIN_LOG_LEVEL:-2} $(PY) -c "$$check" || { echo "tfcnn: the cached horovod wheel does not fit (built before OpenMPI was installed?); rebuilding it"; \
	     $(PIP) --cache-dir $$cache cache remove horovod >/dev/null 2>&1; $$build; } || exit 1; \
	 fi
	$(PIP) install -e ".[dev]"
	@# Every Python of the venv, also those horovodrun and mpiexec start (and horovodrun's own build check,
	@# which loads TensorFlow), starts with TensorFlow's C++ INFO lines off and, on TF 2.17, with Keras 2
	@# (tf_keras), unless the user set the variable.
	@echo 'import os; os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1"); $(LANE_ENV)' \
	  > "$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/tfcnn-env.pth"
	@touch $(STAMP)

test: install
	$(VENV)/bin/python -m pytest $(TESTS) -n $(TEST_WORKERS) $(PYTEST_ARGS)

demo: install
	VENV_BIN=$(VENV)/bin examples/demo.sh

# Side-by-side benchmarks against baselines measured in the same run (CPU-sized defaults; ~10 min on 2 cores).
bench: install
	@mkdir -p $(BENCH_RESULTS)
	$(PY) bench/train_step.py --output $(BENCH_RESULTS)/train_step.json
	$(PY) bench/input_pipeline.py --output $(BENCH_RESULTS)/input_pipeline.json
	$(PY) bench/prep_conversion.py --output $(BENCH_RESULTS)/prep_conversion.json
	$(PY) bench/inference.py --output $(BENCH_RESULTS)/inference.json
	$(PY) bench/memory.py --output $(BENCH_RESULTS)/memory.json

clean:
	rm -rf .venv .venv-tf2.17 build *.egg-info .pytest_cache

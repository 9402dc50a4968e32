# tfcnn: one-command setup, tests, demo and benchmarks.
#   make install   create the lane's venv, install TensorFlow, build Horovod against it, install tfcnn
#   make test      install if needed, then run the test suite
#   make demo      install if needed, then generate, convert, train, evaluate and export end to end
#   make docs      install if needed, then build the documentation site (site/) strictly
# Optional extras, added to a lane's venv by `make install DALI=1 ONNX=1` (README "DALI" and "Export"):
# NVIDIA DALI with its TensorFlow plugin (--data_backend dali_cpu|dali_gpu); tf2onnx and ONNX Runtime
# (python -m tfcnn.export --format onnx).
# Two lanes (README "Install"): TF=2.21, the default on every Python it supports (3.10-3.13), in .venv/;
# TF=2.15 (Python 3.9-3.11, tensorflow-addons) in .venv-tf2.15/. Each has its own venv.
SHELL := /bin/bash
# The first of these that runs (a pyenv shim of a version not selected exists but does not run).
PYTHON ?= $(shell for p in python3.11 python3.12 python3.13 python3.10; do $$p -c '' 2>/dev/null && { echo $$p; break; }; done)
PY_VERSION := $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
TF ?= 2.21
ifeq ($(TF),2.21)
  # Keras 2 is tf_keras, switched on by TF_USE_LEGACY_KERAS=1 (tfcnn-env.pth below). tf_keras asks for the
  # `tensorflow` package, which would pull the CUDA build over tensorflow-cpu: it is installed --no-deps
  # (it needs nothing else). TensorBoard no longer comes with TensorFlow; tf.summary needs it.
  TF_VERSION := 2.21.0
  LANE_PYTHONS := 3.10 3.11 3.12 3.13
  # ml_dtypes 0.7.0 (which TensorFlow accepts) takes 1.3 s to import, registering its NumPy loops one by one
  # against all earlier ones; 0.6.0 takes 10 ms. Every process that imports TensorFlow pays it (a quarter
  # of `import tensorflow`), and the tests start a few hundred.
  LANE_PACKAGES := tensorboard~=2.21.0 "numpy>=1.26,<3" "ml_dtypes>=0.5.1,<0.7"
  LANE_NO_DEPS := tf_keras==2.21.0
  LANE_ENV := os.environ.setdefault("TF_USE_LEGACY_KERAS", "1");
  # onnxruntime 1.32 has wheels for Python >= 3.11; 1.23 is the last for 3.10.
  LANE_ONNX := tf2onnx==1.17.0 onnx==1.23.2 "onnxruntime==1.32.0; python_version >= '3.11'" \
    "onnxruntime==1.23.2; python_version < '3.11'"
  VENV ?= .venv
else ifeq ($(TF),2.15)
  # The newest TensorFlow Horovod 0.28.1 builds against unpatched, with Keras 2 built in and
  # tensorflow-addons (the reference tfcnn's own LAMB is tested against).
  TF_VERSION := 2.15.1
  LANE_PYTHONS := 3.9 3.10 3.11
  LANE_PACKAGES := tensorflow-addons==0.23.0 "numpy>=1.26,<2"
  LANE_NO_DEPS :=
  # No legacy-Keras switch here: it makes TensorFlow 2.15 look for tf_keras, which this lane does not have.
  LANE_ENV :=
  # TensorFlow 2.15 needs protobuf < 5 and numpy < 2, which onnx <= 1.18 still accepts.
  LANE_ONNX := tf2onnx==1.17.0 onnx==1.18.0 "protobuf>=4.25,<5" "numpy>=1.26,<2" \
    "onnxruntime==1.32.0; python_version >= '3.11'" "onnxruntime<1.24; python_version < '3.11'"
  VENV ?= .venv-tf2.15
else ifeq ($(TF),2.17)
  $(error tfcnn: the TF 2.17 lane was retired: TF 2.21 (the default, Python 3.10-3.13) replaces it; run 'make install' (or 'make install TF=2.15' for TensorFlow 2.15 and tensorflow-addons))
else
  $(error tfcnn: TF must be 2.21 (the default) or 2.15, received: $(TF))
endif
WRONG_PYTHON := tfcnn: TensorFlow $(TF) has no wheels for Python $(PY_VERSION) ($(PYTHON)); it supports Python \
  $(LANE_PYTHONS). Use another Python (PYTHON=python3.11)$(if $(filter 2.15,$(TF)), or the default lane (make install))
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check -q
STAMP := $(VENV)/.tfcnn-installed
HOROVOD_VERSION := 0.28.1
# horovodrun's default grace for its workers to stop: the step under way and the checkpoint. Measured on a
# 2-core AVX2-class run (Eigen kernels): a training step of the zoo's largest model at the default batch
# (VGG-19, 256 images) 224 s, the save of its 1.15 GB checkpoint 2.7 s to a local disk (about 25 s at
# 50 MB/s); twice that, rounded. Workers that have stopped exit at once, so the grace costs nothing then.
STOP_GRACE_S := 600
HOROVOD_PATCHES := $(sort $(wildcard patches/horovod-$(HOROVOD_VERSION)/*.patch))
DALI ?= 0
ONNX ?= 0
# DALI 2.4.0's TensorFlow plugin builds against both lanes' TensorFlow (README "DALI").
DALI_VERSION := 2.4.0
EXTRAS := $(if $(filter 1,$(DALI)),$(VENV)/.tfcnn-dali) $(if $(filter 1,$(ONNX)),$(VENV)/.tfcnn-onnx)
TESTS ?= tests
# The slowest tests are listed at the end of every run: where the suite's time goes.
PYTEST_ARGS ?= --durations=15
# Test processes: most tests are single-threaded Python (model building, process start-up), so two
# workers per machine roughly halve the suite's time; more than 4 would mostly add memory.
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); echo $$(( n < 2 ? 2 : n > 4 ? 4 : n )))
# Each worker's TensorFlow takes its share of the cores, as tfcnn.distributed gives each local rank: workers
# that each size their thread pools to the whole machine oversubscribe it (measured on 2 cores, 2 workers:
# the training and recipe tests 8% slower, the family training 5%). A user's own TF_NUM_* settings win.
TEST_THREADS := $(shell n=$$(nproc 2>/dev/null || echo 2); t=$$(( n / $(TEST_WORKERS) )); echo $$(( t < 1 ? 1 : t )))
TEST_INTEROP_THREADS := $(shell echo $$(( $(TEST_THREADS) < 2 ? $(TEST_THREADS) : 2 )))
# An MPI compiler wrapper that runs (not merely one on the PATH) decides whether Horovod gets MPI.
HAS_MPI := $(shell mpicxx --version >/dev/null 2>&1 && echo 1 || echo 0)
# An NVIDIA GPU decides between tensorflow-cpu and tensorflow[and-cuda]; HAS_GPU=1 forces the GPU stack (a
# Docker build, a build node). With it, Horovod gets its GPU operations (NCCL), compiled by a CUDA 12 toolkit
# (CUDA_HOME, /usr/local/cuda or nvcc on the PATH: patches/find_cuda.sh); NCCL=0 builds Horovod without them
# (GPU tensors then reduced through host memory) where no CUDA 12 toolkit is at hand.
HAS_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo 1 || echo 0)
NCCL ?= 1
WANT_GPU_OPS := $(if $(and $(filter 1,$(HAS_GPU)),$(filter 1,$(NCCL))),1,0)
TF_PACKAGE := $(if $(filter 1,$(HAS_GPU)),tensorflow[and-cuda],tensorflow-cpu)==$(TF_VERSION)
# The disk a new venv needs (MiB), measured from a fresh clone (TF 2.21, Python 3.11): the venv, and pip's
# downloads, which it holds until they are unpacked. The GPU stack: a 6,527 MiB venv (4,227 of it NVIDIA's CUDA
# libraries) and 3,115 MiB of downloads; the CPU one with both extras: 2,807 and 356 MiB. Horovod's build
# directory (under 100 MiB) comes after the downloads are gone.
INSTALL_SPACE_MIB := $(if $(filter 1,$(HAS_GPU)),6600 3200,2900 500)
LANE_ID := TensorFlow $(TF_VERSION)$(if $(filter 1,$(HAS_GPU)), with CUDA), Python $(PY_VERSION)
# horovodrun --check-build's report on the venv's Horovod.
BUILD_REPORT := $(VENV)/.tfcnn-horovod-report
# Built Horovod wheels, each under a name that says what it fits (patches/build_horovod.sh).
HOROVOD_CACHE := $${XDG_CACHE_HOME:-$$HOME/.cache}/tfcnn
BUILD_HOROVOD := HOROVOD_VERSION=$(HOROVOD_VERSION) WANT_MPI=$(HAS_MPI) WANT_GPU=$(WANT_GPU_OPS) \
  bash patches/build_horovod.sh $(PY) "$(HOROVOD_CACHE)"

.PHONY: install test demo bench docs check-gpu-build clean
# The GPU stack's venv for check-gpu-build (make install HAS_GPU=1 on a machine without a GPU).
GPU_VENV ?= .venv-gpu
BENCH_RESULTS ?= bench/results

install: $(STAMP) $(EXTRAS)
	@# Nothing to do when the venv's Horovod fits; another build when it does not (OpenMPI installed since).
	@$(BUILD_HOROVOD)
	@# horovodrun's build report, run again only when the venv or its Horovod is new: the check loads TensorFlow
	@# in five processes (8 s, which every make test and make demo paid). Written whole or not at all.
	@if [ ! -s $(BUILD_REPORT) ] || [ $(VENV)/.tfcnn-horovod -nt $(BUILD_REPORT) ] || [ $(STAMP) -nt $(BUILD_REPORT) ]; \
	 then TF_CPP_MIN_LOG_LEVEL=3 $(VENV)/bin/horovodrun --check-build > $(BUILD_REPORT).tmp && \
	   mv $(BUILD_REPORT).tmp $(BUILD_REPORT); fi
	@cat $(BUILD_REPORT)
	@# Where PYTHONDONTWRITEBYTECODE is set, no process caches tfcnn's compiled modules and each compiles them
	@# again (0.15-0.2 CPU-s a process; the tests start a few hundred): compiled here once, as pip compiles
	@# what it installs. Python reads them with the variable set; stale ones are made again. A file that does not
	@# compile fails where it is imported, as before, not here.
	@$(PY) -m compileall -q tfcnn examples imagenet_prep bench tests > /dev/null || true

# The stamp depends on what decides the install; a second `make install` only prints the build report.
$(STAMP): setup.py Makefile $(HOROVOD_PATCHES) patches/build_horovod.sh patches/find_cuda.sh
	@test -n "$(PY_VERSION)" || { echo "tfcnn: $(or $(PYTHON),no python3.10-3.13) not found or does not run: install Python 3.11 (e.g. 'apt-get install python3.11 python3.11-venv python3.11-dev' or 'pyenv install 3.11'), or name one with PYTHON=..."; exit 1; }
	@# Refused before anything is downloaded: a lane the Python cannot install.
	@case " $(LANE_PYTHONS) " in *" $(PY_VERSION) "*) ;; *) echo "$(WRONG_PYTHON)"; exit 1;; esac
	@command -v g++ >/dev/null || { echo "tfcnn: no C++ compiler (g++) found, needed to build Horovod: install it (e.g. 'apt-get install g++')"; exit 1; }
	@command -v cmake >/dev/null || { echo "tfcnn: cmake not found, needed to build Horovod: install it (e.g. 'apt-get install cmake' or 'pip install cmake')"; exit 1; }
	@command -v patch >/dev/null || { echo "tfcnn: patch not found, needed to patch Horovod's sources: install it (e.g. 'apt-get install patch')"; exit 1; }
	@# Horovod's GPU operations need a CUDA 12 compiler: said before the GPU stack's gigabytes are downloaded.
	@if [ "$(WANT_GPU_OPS)" = 1 ]; then toolkit=$$(bash patches/find_cuda.sh) || exit 1; \
	   echo "tfcnn: CUDA $${toolkit#* } in $${toolkit% *} compiles Horovod's GPU operations (NCCL)"; fi
	@# A venv of another lane or Python (an older tfcnn's .venv, say) is made anew, never mixed.
	@if [ -d $(VENV) ] && [ "$$(cat $(VENV)/.tfcnn-lane 2>/dev/null)" != "$(LANE_ID)" ]; then \
	   echo "tfcnn: $(VENV) holds $$(cat $(VENV)/.tfcnn-lane 2>/dev/null || echo 'another install'), not $(LANE_ID): making it anew"; \
	   rm -rf $(VENV); fi
	@# A disk too full for the new venv and pip's downloads is said before the first download.
	@test -x $(PY) || PYTHON=$(PYTHON) bash patches/check_space.sh $(VENV) $(INSTALL_SPACE_MIB)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "$(LANE_ID)" > $(VENV)/.tfcnn-lane
	$(PIP) install --upgrade "pip>=23" "setuptools>=65,<70" wheel
	@# TensorFlow first: Horovod compiles against the installed TF. tensorflow[and-cuda] only where a GPU is present.
	@echo "tfcnn: installing $(TF_PACKAGE)" '$(LANE_PACKAGES) $(LANE_NO_DEPS)'
	$(PIP) install "$(TF_PACKAGE)" $(LANE_PACKAGES)
	$(if $(LANE_NO_DEPS),$(PIP) install --no-deps $(LANE_NO_DEPS))
	@# Horovod from its sdist with tfcnn's patches; Gloo always, MPI when mpicxx runs, NCCL with HAS_GPU=1.
	$(BUILD_HOROVOD)
	$(PIP) install -e ".[dev]"
	@# Every Python of the venv, also those horovodrun and mpiexec start (and horovodrun's own build check,
	@# which loads TensorFlow), starts with TensorFlow's C++ INFO lines off, on TF 2.21 with Keras 2
	@# (tf_keras), and with horovodrun's grace between its SIGTERM and SIGKILL to the workers at
	@# $(STOP_GRACE_S) s (patch 09; Horovod's own is 5 s), and with oneDNN's CPU kernels (TensorFlow's default
	@# only on AVX-512-class CPUs; on AVX2 ones 0.9-3.5x as fast as Eigen's, slower only in VGG-16's training:
	@# bench/kernels.py),
	@# unless the user set the variable; TFCNN_ONEDNN_DEFAULT tells the start-up note who chose.
	@echo 'import os; os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1"); $(LANE_ENV)' \
	  'os.environ.setdefault("HOROVOD_GRACEFUL_TERMINATION_TIME_S", "$(STOP_GRACE_S)");' \
	  '"TF_ENABLE_ONEDNN_OPTS" in os.environ or os.environ.update(TF_ENABLE_ONEDNN_OPTS="1", TFCNN_ONEDNN_DEFAULT="1")' \
	  > "$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/tfcnn-env.pth"
	@touch $(STAMP)

# The extras: each its own stamp in the venv, made again when the lane's install is.
$(VENV)/.tfcnn-onnx: $(STAMP)
	$(PIP) install $(LANE_ONNX)
	@touch $@

$(VENV)/.tfcnn-dali: $(STAMP) patches/install_dali.sh
	bash patches/install_dali.sh $(PY) $(DALI_VERSION)
	@touch $@

test: install
	TF_NUM_INTRAOP_THREADS=$${TF_NUM_INTRAOP_THREADS:-$(TEST_THREADS)} \
	  TF_NUM_INTEROP_THREADS=$${TF_NUM_INTEROP_THREADS:-$(TEST_INTEROP_THREADS)} \
	  $(VENV)/bin/python -m pytest $(TESTS) -n $(TEST_WORKERS) $(PYTEST_ARGS)

# The install is timed for the demo's closing table of stage times.
demo:
	@start=$$(date +%s); $(MAKE) --no-print-directory install && \
	  DEMO_INSTALL_S=$$(( $$(date +%s) - start )) VENV_BIN=$(VENV)/bin examples/demo.sh

# The documentation site, built strictly (a broken link or a missing page fails), into site/; the generated
# pages (flags, models, recipes, benchmark figures) are written from their sources first.
$(VENV)/.tfcnn-docs: $(STAMP)
	$(PIP) install -e ".[docs]"
	@touch $@

docs: install $(VENV)/.tfcnn-docs
	$(PY) docs/generate.py
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet
	@echo "tfcnn: the site is in site/ (open site/index.html, or serve it: $(VENV)/bin/mkdocs serve)"

# The GPU install, built and exercised without a GPU (CI runs it; docs/install.md): tensorflow[and-cuda] and
# Horovod with its NCCL operations (compiled by the CUDA 12 toolkit in CUDA_HOME or found as make install
# finds it) into $(GPU_VENV), then tests/test_gpu_build.py in that venv (Horovod's build report, a 2-rank
# horovodrun training on CPU tensors); then the same with NCCL=0, Horovod without GPU operations.
check-gpu-build:
	$(MAKE) --no-print-directory install HAS_GPU=1 VENV=$(GPU_VENV)
	$(GPU_VENV)/bin/python -m pytest tests/test_gpu_build.py $(PYTEST_ARGS)
	$(MAKE) --no-print-directory install HAS_GPU=1 NCCL=0 VENV=$(GPU_VENV)
	$(GPU_VENV)/bin/python -m pytest tests/test_gpu_build.py $(PYTEST_ARGS)

# Side-by-side benchmarks against baselines measured in the same run (CPU-sized defaults; ~20 min on 2 cores).
bench: install
	@mkdir -p $(BENCH_RESULTS)
	$(PY) bench/train_step.py --output $(BENCH_RESULTS)/train_step.json
	$(PY) bench/input_pipeline.py --output $(BENCH_RESULTS)/input_pipeline.json
	$(PY) bench/prep_conversion.py --output $(BENCH_RESULTS)/prep_conversion.json
	$(PY) bench/inference.py --output $(BENCH_RESULTS)/inference.json
	$(PY) bench/memory.py --output $(BENCH_RESULTS)/memory.json
	$(PY) bench/stop_agreement.py --output $(BENCH_RESULTS)/stop_agreement.json
	$(PY) bench/kernels.py --output $(BENCH_RESULTS)/kernels.json
	$(PY) bench/roofline.py --output $(BENCH_RESULTS)/roofline.json
	$(PY) bench/grouped_conv.py --output $(BENCH_RESULTS)/grouped_conv.json

clean:
	rm -rf .venv .venv-tf2.15 $(GPU_VENV) build site *.egg-info .pytest_cache tests/.pytest_cache

# tfring: `make demo` and `make test` work on a fresh machine (Python 3.11, g++, network to PyPI).
# `make test TF=2.21` runs the suite against the newest TensorFlow instead of the reference 2.17.
# `make check` is the fast inner loop (< 1 min): the layer contracts, the C++ core without
# sanitizers, and the tests not marked `multiprocess`. `make test` is the whole suite.
PYTHON ?= python3.11
TF ?= 2.17
VENV := $(if $(filter 2.17,$(TF)),.venv,.venv-tf$(TF))
REQS := requirements/tf$(TF).txt
PY := $(VENV)/bin/python
STAMP := $(VENV)/.tfring-installed
PYTEST_ARGS ?=
CORE := tfring/native/cc/core
# The core's rooms (its top level, rendezvous/, transport/, algorithms/, engine/; tests/ apart), as
# build.py lists them once for the op library and setup.py (standard library only: any python3).
CORE_ROOMS := $(shell python3 tfring/native/build.py --core-rooms)
CORE_LIB_SRCS := $(sort $(foreach room,$(CORE_ROOMS),$(wildcard tfring/native/cc/$(room)/*.cc)))
CORE_SRCS := $(CORE_LIB_SRCS) $(wildcard $(CORE)/tests/*.cc)
CORE_HDRS := $(sort $(foreach room,$(CORE_ROOMS) core/tests,$(wildcard tfring/native/cc/$(room)/*.h)))
CXX ?= g++
# Core headers are included by their path under core/ ("rendezvous/store.h"), as in build.py.
CXXFLAGS_CORE := -std=c++17 -g -Wall -Wextra -pthread -iquote $(CORE)
BUILD := .build

.PHONY: env demo check lint test test-extended test-newest-tf test-keras-floor test-horovod-suite test-slurm test-spark test-core test-core-tsan-sweeps test-python build-core-tests cuda-harness test-cuda test-gpu-build bench bench-multihost bench-horovod bench-deps docs test-docs wheel test-install clean

env: $(STAMP)

$(STAMP): $(REQS) setup.py
	@test -f $(REQS) || (echo "no requirements for TF=$(TF): use TF=2.17 or TF=2.21" && exit 2)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel
	$(PY) -m pip install -q -r $(REQS)
	$(PY) -m pip install -q --no-build-isolation -e .
	@# tfring_dev (the test rig, not in the wheel) is found from this checkout, by every process of the env
	$(PY) -c "import sysconfig; open(sysconfig.get_path('purelib') + '/tfring_dev.pth', 'w').write('$(CURDIR)\n')"
	touch $(STAMP)

demo: env
	TF_CPP_MIN_LOG_LEVEL=2 $(VENV)/bin/tfring run -np 2 $(PY) examples/allreduce_demo.py
	TF_CPP_MIN_LOG_LEVEL=2 $(VENV)/bin/tfring run -np 2 $(PY) examples/digits.py

# The framework-free core, plain and under AddressSanitizer (+UBSan) and ThreadSanitizer: each
# variant's objects in .build/<variant>/ (compiled in parallel with -j, rebuilt when a source or
# header changes), linked into one test binary.
CORE_FLAGS_plain := -O2
CORE_FLAGS_asan := -O1 -fsanitize=address,undefined -fno-omit-frame-pointer
CORE_FLAGS_tsan := -O1 -fsanitize=thread
core_objects = $(patsubst %.cc,$(BUILD)/$(1)/%.o,$(CORE_SRCS))
define CORE_VARIANT
$(BUILD)/$(1)/%.o: %.cc $(CORE_HDRS)
	@mkdir -p $$(dir $$@)
	@echo "  CXX ($(1)) $$<"
	@$(CXX) $(CXXFLAGS_CORE) $(CORE_FLAGS_$(1)) -c $$< -o $$@
$(BUILD)/core_tests$(2): $(call core_objects,$(1))
	$(CXX) $(CXXFLAGS_CORE) $(CORE_FLAGS_$(1)) $$^ -o $$@ -lrt
endef
$(eval $(call CORE_VARIANT,plain,))
$(eval $(call CORE_VARIANT,asan,_asan))
$(eval $(call CORE_VARIANT,tsan,_tsan))

build-core-tests: $(BUILD)/core_tests $(BUILD)/core_tests_asan $(BUILD)/core_tests_tsan

# `make test` runs the core under both sanitizers (the plain build runs in `make check`); TSan
# leaves out the sweeps (every dtype x op x size x transport: arithmetic on the threads and links
# of the smaller cases, 80% of its time), which run plain and under ASan; `make test-core-tsan-sweeps`
# runs them under TSan too.
test-core:
	$(MAKE) -j2 $(BUILD)/core_tests_asan $(BUILD)/core_tests_tsan
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 $(BUILD)/core_tests_asan
	TSAN_OPTIONS=halt_on_error=1 setarch $$(uname -m) -R $(BUILD)/core_tests_tsan --no-sweeps
test-core-tsan-sweeps:
	$(MAKE) -j2 $(BUILD)/core_tests_tsan
	TSAN_OPTIONS=halt_on_error=1 setarch $$(uname -m) -R $(BUILD)/core_tests_tsan

test-python: env
	$(PY) -m pytest -q -m "not extended and not slurm and not spark and not install and not docs" $(PYTEST_ARGS)

# The variants `make test` leaves out (marked `extended`: more layouts, signals and engines of paths
# it covers), to run before a release or after touching the launcher, transports or engines.
test-extended: env
	$(PY) -m pytest -q -m extended $(PYTEST_ARGS)

# The layer rules (.importlinter): layers only point down, no TensorFlow under the runtime, no cycles.
lint: env
	$(VENV)/bin/lint-imports

check: lint
	$(MAKE) -j2 $(BUILD)/core_tests
	$(BUILD)/core_tests
	$(PY) -m pytest -q -m "not multiprocess" $(PYTEST_ARGS)

test: lint docs test-core test-python

# The newest TensorFlow (CI: TF=2.21), where what changes is TensorFlow itself (its ops, tf.data,
# tf.function, the op library's ABI; Keras is the same version): the single-process tests of the
# packages that use TensorFlow, and the multi-process tests of the collective ops, of fit (every
# data and optimizer path, custom loops, loss scaling, batch norm) and of saving, loading and the
# on-batch calls. The launcher, rendezvous and engine suites (no TensorFlow in them) and the
# variants of the same fit paths (the optimizer door, buckets, uneven batches...) run on the
# reference stack only, to keep CI inside its time.
TF_FACING_PACKAGES := tfring/ops tfring/compression tfring/native tfring/data tfring/strategy tfring/optimizers tfring/callbacks \
	tfring/schedules tfring/horovod
# Of the collectives' tests, every op and dtype on 3 ranks and the mismatch errors: the transports,
# faults and timeouts under them do not depend on TensorFlow.
TF_FACING := tests/collectives_test.py tests/ring_strategy_test.py tests/keras_calls_test.py \
	tests/optimizer_sharding_test.py -k "3-shm or \
	mismatched_shapes or two_ranks_equal_one_process or custom_loops or mixed_float16 or batch_norm or statistics_read or \
	saved_models_loadable or on_batch or adam-2"
test-newest-tf:
	$(MAKE) env TF=2.21
	.venv-tf2.21/bin/python -m pytest -q -m "not multiprocess and not emulated_hosts and not slurm and not spark" \
	  $(TF_FACING_PACKAGES)
	.venv-tf2.21/bin/python -m pytest -q -m "multiprocess and not extended and not emulated_hosts and not slurm and not spark" \
	  $(TF_FACING)

# The oldest Keras tfring supports (KERAS_FLOOR in tfring/version.py) on the reference TensorFlow,
# where what changes is Keras (the functions tfring wraps and calls, their parameters): the
# single-process tests of the Keras-facing packages, and fit and Keras' own calls multi-process.
# That Keras goes into .keras-floor without dependencies (the env's serve it); PYTHONPATH puts it
# before the env's Keras for pytest and every process a test starts (the ranks of a job too).
KERAS_FLOOR := $(shell sed -n 's/^KERAS_FLOOR = "\(.*\)"/\1/p' tfring/version.py)
KERAS_FLOOR_DIR := $(CURDIR)/.keras-floor
KERAS_FACING := tfring/strategy tfring/optimizers tfring/callbacks tfring/schedules
KERAS_FACING_JOBS := tests/keras_calls_test.py tests/ring_strategy_test.py tests/optimizer_sharding_test.py \
	-k "keras_calls_test or two_ranks_equal_one_process or mixed_float16 or custom_loops or adam-2"
test-keras-floor: env
	@test -f $(KERAS_FLOOR_DIR)/keras-$(KERAS_FLOOR).dist-info/METADATA || { rm -rf $(KERAS_FLOOR_DIR) && \
	  $(PY) -m pip install -q --no-deps --target $(KERAS_FLOOR_DIR) keras==$(KERAS_FLOOR); }
	PYTHONPATH=$(KERAS_FLOOR_DIR) $(PY) -c "import keras; assert keras.__version__ == '$(KERAS_FLOOR)', keras.__file__"
	PYTHONPATH=$(KERAS_FLOOR_DIR) $(PY) -m pytest -q -m "not multiprocess" $(KERAS_FACING)
	PYTHONPATH=$(KERAS_FLOOR_DIR) $(PY) -m pytest -q -m multiprocess $(KERAS_FACING_JOBS)

# Horovod's own TensorFlow tests against tfring.horovod (tests/peers/horovod: the files, unchanged but
# for their import lines, on every rank of a tfring run job), on 2 and 3 ranks, and its TF2 examples
# (run_examples.py: offline MNIST, 200 steps; the elastic one losing a rank); `make test` runs a
# representative part of them (tests/horovod_suite_test.py). Their own dependencies (mock,
# parameterized, cloudpickle) are in the test requirements.
test-horovod-suite: env
	$(PY) tests/peers/horovod/run_suite.py --np 2
	$(PY) tests/peers/horovod/run_suite.py --np 3
	$(PY) tests/peers/horovod/run_examples.py --np 2 --max-steps 100 --elastic 150
	$(PY) tests/peers/horovod/run_examples.py --max-steps 100 --only --elastic 50 --elastic-change grow

# tfring under a real SLURM (tests/slurm_test.py: srun on one node and across two emulated hosts,
# sbatch): installs Debian's SLURM daemons and munge (root), then runs the tests marked `slurm`.
SLURM_PACKAGES := slurmctld slurmd slurm-client munge
test-slurm: env
	@command -v slurmd >/dev/null 2>&1 && command -v munged >/dev/null 2>&1 || (apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(SLURM_PACKAGES) >/dev/null)
	$(PY) -m pytest -q -m slurm $(PYTEST_ARGS)

# tfring.spark.run in a real Spark (local mode): installs a Java runtime (Debian) and PySpark into
# the env, then runs the tests marked `spark` (skipped by `make test` where PySpark is absent).
test-spark: env
	@command -v java >/dev/null 2>&1 || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq default-jre-headless >/dev/null)
	$(PY) -m pip install -q "pyspark>=3.5,<5"
	$(PY) -m pytest -q -m spark $(PYTEST_ARGS)

# The CUDA kernels (tfring/native/cc/cuda) in their framework-free harness, built wherever nvcc is;
# run (plain and under compute-sanitizer memcheck) only where a GPU is visible.
NVCC ?= nvcc
CUDA_ARCH ?= sm_90
CUDA_SRCS := $(wildcard tfring/native/cc/cuda/*.cu) tfring/native/cc/cuda/tests/cuda_harness.cu \
	$(CORE)/algorithms/reduce.cc $(CORE)/algorithms/lars.cc $(CORE)/data_type.cc
$(BUILD)/cuda_harness: $(CUDA_SRCS) $(wildcard tfring/native/cc/cuda/*.h tfring/native/cc/cuda/*.cuh) $(CORE_HDRS)
	@mkdir -p $(BUILD)
	$(NVCC) -std=c++17 -O3 -lineinfo -arch=$(CUDA_ARCH) -Xcompiler -Wall -I $(CORE) $(CUDA_SRCS) -o $@
# The ring over GPU tensors (pinned staging) with the real engine and ring on thread-ranks.
STAGING_SRCS := tfring/native/cc/cuda/pinned_staging.cu tfring/native/cc/cuda/tests/staging_test.cu \
	$(filter-out $(CORE)/c_api.cc,$(CORE_LIB_SRCS)) $(CORE)/tests/test_main.cc
$(BUILD)/staging_test: $(STAGING_SRCS) $(wildcard tfring/native/cc/cuda/*.h) $(CORE_HDRS)
	@mkdir -p $(BUILD)
	$(NVCC) -std=c++17 -O2 -lineinfo -arch=$(CUDA_ARCH) -Xcompiler -Wall,-pthread -I $(CORE) $(STAGING_SRCS) -o $@ -lrt
cuda-harness: $(BUILD)/cuda_harness $(BUILD)/staging_test
test-cuda:
	@if ! command -v $(NVCC) >/dev/null 2>&1; then echo "test-cuda: no nvcc here: the CUDA kernels were not built"; exit 0; fi; \
	$(MAKE) cuda-harness && \
	if nvidia-smi -L >/dev/null 2>&1; then \
	  $(BUILD)/cuda_harness && compute-sanitizer --tool memcheck --error-exitcode 1 $(BUILD)/cuda_harness --quick && \
	  $(BUILD)/staging_test && compute-sanitizer --tool memcheck --error-exitcode 1 $(BUILD)/staging_test staging_; \
	else echo "test-cuda: no GPU here: the CUDA kernels and their harnesses were compiled, not run"; fi

# The op library as built by a GPU build of TensorFlow: nvcc compiles the CUDA kernels, the
# GOOGLE_CUDA kernels register on DEVICE_GPU, the library links and loads, and the single-process
# op and LARS tests pass against it (on the CPU: no GPU needed; the multi-process collective tests
# run on the CPU build in make test). Skipped where there is no nvcc.
GPU_VENV := .venv-gpu-build
test-gpu-build:
	@if ! command -v $(NVCC) >/dev/null 2>&1; then echo "test-gpu-build: no nvcc here: skipped"; exit 0; fi; \
	set -e; test -x $(GPU_VENV)/bin/python || $(PYTHON) -m venv $(GPU_VENV); \
	$(GPU_VENV)/bin/python -m pip install -q --upgrade pip setuptools wheel; \
	$(GPU_VENV)/bin/python -m pip install -q -r requirements/tf2.17-gpu-build.txt; \
	$(GPU_VENV)/bin/python -m pip install -q --no-build-isolation --no-deps -e .; \
	TF_CPP_MIN_LOG_LEVEL=3 $(GPU_VENV)/bin/python -c "import tensorflow as tf; from tfring.native import library as _library; \
	from tensorflow.python.framework import kernels as k; assert _library.has_gpu_kernels(), 'no GPU kernels built'; \
	print('GPU kernels:', {op: sorted({d.device_type for d in k.get_registered_kernels_for_op(op).kernel}) \
	for op in ('TfringAllreduce', 'TfringBroadcast', 'TfringLarsUpdate')})"; \
	TF_CPP_MIN_LOG_LEVEL=3 $(GPU_VENV)/bin/python -m pytest -q -m "not multiprocess" tfring/ops tfring/optimizers

# The package as users install it: `make wheel` puts the sdist and the wheel in dist/ (the wheel
# carries the op library built here for each tested TensorFlow: the reference env's and
# .venv-tf2.21's); `make test-install` installs both into fresh environments with TensorFlow 2.17.1
# and 2.21 and runs a 2-rank job and `tfring doctor` in each (tests/install_test.py).
wheel: env
	$(MAKE) env TF=2.21
	rm -rf dist && $(PY) -m build --sdist --outdir dist && $(PY) -m build --wheel --outdir dist && rm -rf build
test-install: env
	$(MAKE) env TF=2.21
	$(PY) -m pytest -q -m install tests/install_test.py $(PYTEST_ARGS)

# Benchmarks are not tests: they print measured tables (see docs/benchmarks.md).
bench-deps: env
	apt-get update -qq && apt-get install -y -qq openmpi-bin libopenmpi-dev
	$(PY) -m pip install -q mpi4py matplotlib mnist1d  # mnist1d: benchmarks/compression_accuracy.py's offline data

bench: env
	$(PY) benchmarks/allreduce.py
	$(PY) benchmarks/step_patterns.py

# Horovod 0.28.1 itself, for `benchmarks/horovod_step.py --horovod-python .venv-horovod/bin/python`
# (`make bench-horovod`): TensorFlow 2.16.2, the newest it builds against, with Gloo and without MPI;
# cmake < 4 and CMAKE_POLICY_VERSION_MINIMUM for its old CMake files. About 6 minutes on 2 cores.
HOROVOD_VENV := .venv-horovod
$(HOROVOD_VENV)/bin/horovodrun:
	test -x $(HOROVOD_VENV)/bin/python || $(PYTHON) -m venv $(HOROVOD_VENV)
	$(HOROVOD_VENV)/bin/pip install -q --upgrade pip wheel
	$(HOROVOD_VENV)/bin/pip install -q "tensorflow-cpu==2.16.2" "cmake<4" packaging psutil pyyaml cloudpickle
	PATH=$(CURDIR)/$(HOROVOD_VENV)/bin:$$PATH CMAKE_POLICY_VERSION_MINIMUM=3.5 HOROVOD_WITH_TENSORFLOW=1 \
	  HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 \
	  $(HOROVOD_VENV)/bin/pip install -q --no-cache-dir --no-build-isolation "horovod==0.28.1"
bench-horovod: env $(HOROVOD_VENV)/bin/horovodrun
	$(PY) benchmarks/horovod_step.py --np 2 --rounds 3 --horovod-python $(HOROVOD_VENV)/bin/python

# Allreduce across two emulated hosts (network namespaces, shaped links; needs root and openssh-server),
# beside OpenMPI and MWMS. BENCH_ARGS=--quick for a smoke run of a minute.
BENCH_ARGS ?=
bench-multihost: env
	$(PY) benchmarks/multihost.py $(BENCH_ARGS)

# The documentation site (mkdocs.yml, docs/): its own environment, .venv-docs, from requirements/docs.txt
# (MkDocs, Material, mkdocstrings; no TensorFlow: the API reference is read from the source), built
# strictly (a broken link, a missing page or a docstring warning fails) into site/. `make test-docs`
# runs the tests marked `docs` in that environment: the strict build, the front page's links,
# and the site in headless Chromium (Debian's chromium and chromium-driver, installed where missing;
# apt-get needs root). tests/docs_api_test.py (every public name in the reference) runs in the main
# environment against site/.
DOCS_VENV := .venv-docs
DOCS_STAMP := $(DOCS_VENV)/.tfring-docs-installed
$(DOCS_STAMP): requirements/docs.txt
	test -x $(DOCS_VENV)/bin/python || $(PYTHON) -m venv $(DOCS_VENV)
	$(DOCS_VENV)/bin/python -m pip install -q -r requirements/docs.txt
	touch $(DOCS_STAMP)
docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(DOCS_VENV)/bin/mkdocs build --strict -d site
test-docs: $(DOCS_STAMP)  # the test builds the site itself, strictly, into a folder of its own
	@test -x /usr/bin/chromium && test -x /usr/bin/chromedriver || (apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium chromium-driver fonts-dejavu-core >/dev/null)
	$(DOCS_VENV)/bin/python -m pytest -q -m docs $(PYTEST_ARGS) tests/docs_site_test.py

clean:
	rm -rf $(BUILD) tfring/native/lib

#!/usr/bin/env bash
# The GPU checklist in one run, for a machine with an NVIDIA GPU and nvcc (no TensorFlow needed):
# correctness of every CUDA kernel against the CPU core and the ring over GPU tensors
# (`make test-cuda`: plain and under compute-sanitizer memcheck), then the figures: each kernel's
# bandwidth as a fraction of the device's copy bandwidth, and the pinned staging's throughput.
#
#   benchmarks/cuda_device_check.sh [LOG]     LOG defaults to cuda_device_check.log
# Harnesses built elsewhere may be put in .gpu/ (cuda_harness, staging_test): they are used as
# they are; otherwise they are built here.
set -u
log=${1:-cuda_device_check.log}
exec > >(tee "$log") 2>&1
step() { echo; echo "== $* ($(date -u +%T))"; }
step machine
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem --format=csv
nvcc --version | tail -1
mkdir -p .build
if [ -x .gpu/cuda_harness ] && [ -x .gpu/staging_test ]
then cp .gpu/cuda_harness .gpu/staging_test .build/; echo "using the harnesses in .gpu/"
else step build; make -j8 cuda-harness || exit 1; fi
step "cuda_harness --quick"; time .build/cuda_harness --quick | tail -3
step "staging_test (ring on thread-ranks with GPU tensors, and the staging bench)"; time .build/staging_test
step "make test-cuda (10^8 cases, bandwidth, memcheck)"
time make -o .build/cuda_harness -o .build/staging_test test-cuda
echo "test-cuda exit: $?"

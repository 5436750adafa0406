"""A real multi-process allreduce: `tfring run -np 2 python examples/allreduce_demo.py`.

Every rank contributes a ResNet-50-sized list of gradients filled with its rank number; after the
fused allreduce every rank checks it holds the mean, and rank 0 reports the time it took.
"""

import time

import numpy as np
import tensorflow as tf

import tfring

tf.config.threading.set_intra_op_parallelism_threads(1)
tfring.init()
rank, size = tfring.rank(), tfring.size()

# The shapes of a few ResNet-50 layers (conv kernels, batch-norm vectors, the dense head).
shapes = [(7, 7, 3, 64), (64,), (1, 1, 64, 256), (3, 3, 128, 128), (256,), (1, 1, 1024, 2048), (2048, 1000), (1000,)]
grads = [tf.fill(s, float(rank)) for s in shapes]
nbytes = sum(int(np.prod(s)) * 4 for s in shapes)


@tf.function
def step(gs):
    return tfring.ops.allreduce(gs, op="mean")


step(grads)  # trace and warm up
times = []
for _ in range(10):
    start = time.perf_counter()
    out = step(grads)
    times.append(time.perf_counter() - start)

expected = (size - 1) / 2.0
assert all(np.allclose(o.numpy(), expected) for o in out), "allreduce returned a wrong mean"
if rank == 0:
    print(f"tfring demo: {size} ranks over {tfring.transport_name()}: allreduce of {len(shapes)} tensors "
          f"({nbytes / 1e6:.1f} MB), median {1e3 * float(np.median(times)):.2f} ms; every rank holds the mean "
          f"{expected}")

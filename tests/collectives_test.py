"""Collectives across real processes started by `tfring run`, checked against NumPy."""

import time

import pytest

from tfring_dev.testing import rank_lines
from tfring_dev.testing import run_job

pytestmark = pytest.mark.multiprocess

CHECK_EVERYTHING = r'''
import numpy as np
import tensorflow as tf
import tfring

tfring.init()
rank, size = tfring.rank(), tfring.size()
DTYPES = [np.float16, tf.bfloat16.as_numpy_dtype, np.float32, np.float64, np.int32, np.int64]
OPS = ["sum", "mean", "min", "max", "product"]
SIZES = [0, 1, 7, 4099]
failures = []

def value(r, n, op):
    i = np.arange(n)
    if op == "product":
        k = (i + r) % 3
        return np.where(k == 2, 2, np.where(k == 1, -1, 1)).astype(np.float64)
    return (((r + 1) * (i % 13)) % 17 - 8).astype(np.float64)

def expected(n, op, dtype):
    vals = np.stack([value(r, n, op) for r in range(size)])
    if op in ("sum", "mean"):
        out = vals.sum(0)
    elif op == "product":
        out = vals.prod(0)
    elif op == "min":
        out = vals.min(0)
    else:
        out = vals.max(0)
    if op == "mean":
        out = np.trunc(out / size) if np.issubdtype(dtype, np.integer) else out / size
    return out

def check(name, got, want, dtype):
    got = np.asarray(got, dtype=np.float64)
    tol = {np.float16: 1e-2, np.float32: 1e-6, np.float64: 1e-12}.get(dtype, 5e-2 if dtype == tf.bfloat16.as_numpy_dtype else 0)
    if got.shape != want.shape or not np.allclose(got, want, rtol=tol, atol=tol):
        failures.append(f"{name}: got {got[:5]} want {want[:5]}")

@tf.function
def fused(tensors, op):
    return tfring.ops.allreduce(tensors, op=op)

for dtype in DTYPES:
    for op in OPS:
        tensors = [tf.constant(value(rank, n, op).astype(dtype)) for n in SIZES]
        eager = tfring.ops.allreduce(tensors, op=op)
        graph = fused(tensors, op)
        for n, e, g in zip(SIZES, eager, graph):
            want = expected(n, op, dtype)
            check(f"eager {np.dtype(dtype).name} {op} n={n}", e.numpy(), want, dtype)
            check(f"graph {np.dtype(dtype).name} {op} n={n}", g.numpy(), want, dtype)

if size == 2:
    big = tfring.ops.allreduce(tf.fill([10**7], float(rank + 1)))
    check("10^7 floats", big.numpy()[::99991], np.full(len(range(0, 10**7, 99991)), 3.0), np.float32)

# 1000 tensors in one op.
many = [tf.fill([1 + (k * 37) % 300], float(rank * 1000 + k)) for k in range(1000)]
reduced = tfring.ops.allreduce(many, op="sum")
for k in (0, 1, 500, 999):
    want = np.full(1 + (k * 37) % 300, sum(r * 1000 + k for r in range(size)), dtype=np.float64)
    check(f"1000 tensors [{k}]", reduced[k].numpy(), want, np.float32)

# Small outputs are carved from shared blocks (output_blocks.h): every piece exact, across the
# size at which a tensor gets its own output and over several blocks, in a function too.
carved_sizes = [1 + (k * 997) % 5000 for k in range(300)] + [16383, 16384, 16385, 0, 3]
carved = [tf.fill([n], float(rank * 7 + k)) for k, n in enumerate(carved_sizes)]
for how, out in (("eager", tfring.ops.allreduce(carved)), ("graph", fused(carved, "sum"))):
    for k, (n, o) in enumerate(zip(carved_sizes, out)):
        check(f"carved {how} [{k}] n={n}", o.numpy(), np.full(n, sum(r * 7 + k for r in range(size)), np.float64),
              np.float32)
kept = tfring.ops.allreduce(carved[:50])
first_piece = kept[1]

def address(t):  # where the tensor's data starts (.numpy() may copy; a DLPack capsule does not)
    import ctypes
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    return ctypes.c_void_p.from_address(get(tf.experimental.dlpack.to_dlpack(t), b"dltensor")).value

# These 50 (under 1 MiB in all) share one block, each piece on the next 64-byte boundary.
starts = [address(o) for o in kept]
steps = [b - a for a, b in zip(starts, starts[1:])]
if any(p % 64 for p in starts) or steps != [-(-4 * n // 64) * 64 for n in carved_sizes[:49]]:
    failures.append(f"carved outputs: offsets mod 64 {[p % 64 for p in starts][:8]}, steps {steps[:8]}")
# Writing into one piece leaves its neighbours alone; a piece kept alone outlives its block's others.
bumped = tf.tensor_scatter_nd_update(kept[0], [[0]], [-1.0])
del kept
_ = tfring.ops.allreduce([tf.fill([n], 9.0) for n in carved_sizes[:50]])
check("carved piece kept", first_piece.numpy(), np.full(carved_sizes[1], sum(r * 7 + 1 for r in range(size)), np.float64),
      np.float32)
check("carved piece written", bumped.numpy()[:1], np.full(1, -1.0), np.float32)

# Floats whose sum depends on the order of additions: every rank must still hold the same bits.
noisy = tf.constant(np.random.default_rng(rank).standard_normal(100003).astype(np.float32))
summed = tfring.ops.allreduce(noisy, op="sum")
bits = tfring.ops.allgather(tf.reshape(tf.bitcast(summed, tf.int32), [1, -1])).numpy()
if not (bits == bits[0]).all():
    failures.append("float32 sums differ between ranks in the last bits")
want = sum(np.random.default_rng(r).standard_normal(100003).astype(np.float64) for r in range(size))
check("float32 sum of noise", summed.numpy(), want.astype(np.float64), np.float32)

# Broadcast from every root, a list of mixed dtypes.
for root in range(size):
    out = tfring.ops.broadcast([tf.fill([5], float(rank)), tf.fill([3, 2], rank * 10), tf.constant(rank == root)], root_rank=root)
    check(f"broadcast root {root}", out[0].numpy(), np.full(5, root, np.float64), np.float64)
    check(f"broadcast root {root} int", out[1].numpy(), np.full((3, 2), root * 10, np.float64), np.float64)
    if not bool(out[2].numpy()):
        failures.append(f"broadcast root {root}: bool not taken from the root")

# Allgather with a first dimension that differs per rank (rank 0 contributes nothing).
g = tfring.ops.allgather(tf.fill([rank, 3], rank))
want = np.concatenate([np.full((r, 3), r) for r in range(size)])
check("allgather", g.numpy(), want.astype(np.float64), np.float64)

# Reducescatter: Horovod's split of rows (R // size each, one more for the first R % size ranks),
# every dtype and op, rows fewer than ranks, empty, a fused list, eagerly and in a function.
@tf.function
def scattered(tensors, op):
    return tfring.ops.reducescatter(tensors, op=op)

def my_rows(rows):
    first = rows // size * rank + min(rank, rows % size)
    return slice(first, first + rows // size + (1 if rank < rows % size else 0))

ROWS = [0, 1, 7, 9]
for dtype in DTYPES:
    for op in OPS:
        tensors = [tf.constant(value(rank, rows * 3, op).astype(dtype).reshape(rows, 3)) for rows in ROWS]
        runs = [("eager", tfring.ops.reducescatter(tensors, op=op))]
        if dtype in (np.float32, np.int32):  # a function traces once per dtype and op: two dtypes suffice
            runs.append(("graph", scattered(tensors, op)))
        for how, out in runs:
            for rows, o in zip(ROWS, out):
                want = expected(rows * 3, op, dtype).reshape(rows, 3)[my_rows(rows)]
                check(f"reducescatter {how} {np.dtype(dtype).name} {op} rows={rows}", o.numpy(), want, dtype)

# Alltoall: rank r sends (r + d) % 3 rows to rank d (none at times), every row tagged with its
# origin, destination and index; the received splits say how many came from each rank.
def sent_rows(r, d):
    return (r + d) % 3

for dtype in (np.float32, np.int32, np.int64, np.float16, np.uint8, np.bool_):
    splits = [sent_rows(rank, d) for d in range(size)]
    rows = np.concatenate([np.stack([np.full(2, rank * 100 + d * 10 + i) for i in range(n)]) if n else
                           np.zeros((0, 2)) for d, n in enumerate(splits)])
    rows = (rows % 2).astype(dtype) if dtype == np.bool_ else (rows % 250).astype(dtype)
    got, counts = tfring.ops.alltoall(tf.constant(rows), splits=splits)
    want = np.concatenate([np.stack([np.full(2, o * 100 + rank * 10 + i) for i in range(sent_rows(o, rank))])
                           if sent_rows(o, rank) else np.zeros((0, 2)) for o in range(size)])
    want = want % 2 if dtype == np.bool_ else want % 250
    check(f"alltoall {np.dtype(dtype).name}", got.numpy().astype(np.float64), want.astype(np.float64), np.float64)
    if counts.numpy().tolist() != [sent_rows(o, rank) for o in range(size)]:
        failures.append(f"alltoall received splits {counts.numpy().tolist()}")
even, _ = tf.function(lambda t: tfring.ops.alltoall(t))(tf.fill([2 * size, 1], float(rank)))
check("alltoall even in a function", even.numpy(), np.repeat(np.arange(size, dtype=np.float64), 2).reshape(-1, 1),
      np.float64)

# Gradients.
x = tf.Variable([1.0, 2.0])
with tf.GradientTape(persistent=True) as tape:
    y = tf.reduce_sum(tfring.ops.allreduce(x * float(rank + 1), op="sum"))
    z = tf.reduce_sum(tfring.ops.allgather(tf.reshape(x, [1, 2]) * float(rank + 1)))
    b = tf.reduce_sum(tfring.ops.broadcast(x * 2.0, root_rank=0))
check("grad allreduce", tape.gradient(y, x).numpy(), np.full(2, size * (rank + 1.0)), np.float64)
check("grad allgather", tape.gradient(z, x).numpy(), np.full(2, size * (rank + 1.0)), np.float64)
check("grad broadcast", tape.gradient(b, x).numpy(), np.full(2, 2.0 * size if rank == 0 else 0.0), np.float64)
w = tf.Variable(tf.ones([5, 2]))
with tf.GradientTape(persistent=True) as tape:
    # d(sum of every rank's sum of its rows * (rank + 1)) / dw: rows of rank q weigh q + 1.
    s = tf.reduce_sum(tfring.ops.reducescatter(w * 2.0, op="sum") * float(rank + 1))
    m = tf.reduce_sum(tfring.ops.reducescatter(w * 2.0, op="mean") * float(rank + 1))
    routed, _ = tfring.ops.alltoall(w * float(rank + 1), splits=[5 if d == 0 else 0 for d in range(size)])
    a = tf.reduce_sum(routed * tf.reshape(tf.range(tf.shape(routed)[0], dtype=tf.float32), [-1, 1]))
weights = np.concatenate([np.full(5 // size + (1 if q < 5 % size else 0), q + 1.0) for q in range(size)])
check("grad reducescatter sum", tape.gradient(s, w).numpy(), 2.0 * np.repeat(weights, 2).reshape(5, 2), np.float64)
check("grad reducescatter mean", tape.gradient(m, w).numpy(), 2.0 / size * np.repeat(weights, 2).reshape(5, 2),
      np.float32)
# Rank 0 receives every rank's 5 rows (origin q at rows 5q..5q+4) and weighs row i by i; the
# gradient takes each row back to its origin.
check("grad alltoall", tape.gradient(a, w).numpy(), np.repeat((np.arange(5) + 5 * rank) * (rank + 1.0), 2).reshape(5, 2),
      np.float64)

tfring.ops.barrier()
print("TRANSPORT", tfring.transport_name())
print("FAILURES", len(failures))
for f in failures[:20]:
    print("FAIL", f)
'''


# TCP carries every op and dtype in the multihost test (2 hosts x 2 ranks, ring links across hosts).
@pytest.mark.parametrize("num_processes,transport", [(2, "shm"), pytest.param(2, "tcp", marks=pytest.mark.extended),
                                                       (3, "shm"),
                                                       pytest.param(4, "tcp", marks=pytest.mark.extended)])
def test_every_dtype_op_and_collective_matches_numpy(num_processes, transport):
    proc = run_job(num_processes, CHECK_EVERYTHING, env={"TFRING_TRANSPORT": transport})
    assert proc.returncode == 0, proc.stderr[-3000:]
    for r in range(num_processes):
        lines = rank_lines(proc.stdout, r)
        assert "FAILURES 0" in lines, "\n".join(lines)
        assert any(l.startswith("TRANSPORT " + transport) for l in lines), lines


def test_shm_without_single_copy_is_exact_too():
    script = CHECK_EVERYTHING.replace("SIZES = [0, 1, 7, 4099]", "SIZES = [4099, 100000]")
    proc = run_job(2, script, env={"TFRING_TRANSPORT": "shm", "TFRING_SINGLE_COPY": "0"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    for r in range(2):
        assert "FAILURES 0" in rank_lines(proc.stdout, r)
        assert "TRANSPORT shm" in rank_lines(proc.stdout, r)


HOST_IDS = r'''
import os
os.environ["TFRING_HOST_ID"] = "emulated-host-" + os.environ["TFRING_RANK"]  # read at init()
import tensorflow as tf
import tfring
tfring.init()
print("TRANSPORT", tfring.transport_name(), "SUM", tfring.ops.allreduce(tf.constant([1.0])).numpy()[0])
'''


def test_ranks_of_different_host_ids_count_as_different_hosts():
    # TFRING_HOST_ID replaces detection: two ranks of one machine named as two hosts use TCP
    # (transport=auto across hosts), as ranks in two network namespaces would.
    proc = run_job(2, HOST_IDS)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for r in range(2):
        assert "TRANSPORT tcp SUM 2.0" in rank_lines(proc.stdout, r), proc.stdout[-2000:]

MISMATCH = r'''
import tensorflow as tf
import tfring
tfring.init()
rank = tfring.rank()
try:
    tfring.ops.allreduce([tf.zeros([2]), tf.zeros([3 + rank, 2])])
    print("NO ERROR")
except tf.errors.FailedPreconditionError as e:
    print("INVALID", e.message.splitlines()[0])
try:
    tfring.ops.allreduce([tf.zeros([2])] * (1 + rank))
    print("NO ERROR")
except tf.errors.FailedPreconditionError as e:
    print("INVALID", e.message.splitlines()[0])
try:
    tfring.ops.allreduce(tf.zeros([2], tf.float32 if rank == 0 else tf.float64))
    print("NO ERROR")
except tf.errors.FailedPreconditionError as e:
    print("INVALID", e.message.splitlines()[0])
# An alltoall's splits are this rank's own input: checked before the exchange.
for t, splits in ((tf.ones([3]), [1, 1]), (tf.ones([2]), [-1, 3]), (tf.ones([2]), [1, 1, 0])):
    try:
        tfring.ops.alltoall(t, splits=splits)
        print("NO ERROR")
    except tf.errors.InvalidArgumentError as e:
        print("SPLITS", e.message)
print("AFTER", tfring.ops.allreduce(tf.ones([3])).numpy().tolist())
'''


def test_mismatched_shapes_counts_and_dtypes_fail_on_every_rank():
    proc = run_job(2, MISMATCH)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for r in range(2):
        lines = rank_lines(proc.stdout, r)
        invalid = [l for l in lines if l.startswith("INVALID")]
        assert len(invalid) == 3, lines
        assert "tensor 1 has shape [3, 2] on rank 0 but [4, 2] on rank 1" in invalid[0]
        assert "tensors=1" in invalid[1] and "tensors=2" in invalid[1]
        assert "dtype=float32" in invalid[2] and "dtype=float64" in invalid[2]
        splits = [l for l in lines if l.startswith("SPLITS")]
        assert len(splits) == 3 and "NO ERROR" not in lines, lines
        assert "the splits add up to 2 rows but the tensor has 3" in splits[0], splits
        assert "splits must not be negative, got -1 for rank 0" in splits[1], splits
        assert "splits must hold one row count per rank (2), got 3" in splits[2], splits
        assert "AFTER [2.0, 2.0, 2.0]" in lines


KILLED = r'''
import os, signal, sys, threading, time
import tensorflow as tf
import tfring
tfring.init()
rank = tfring.rank()
tfring.ops.allreduce(tf.ones([4]))        # everyone is up
if rank == 1:
    # Die with SIGKILL while inside a stream of large collectives.
    threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
else:
    signal.signal(signal.SIGTERM, lambda *a: None)   # stay alive to report what we saw
big = tf.ones([4_000_000])
start = time.monotonic()
try:
    for _ in range(100000):
        tfring.ops.allreduce(big)
    print("NO ERROR")
except tf.errors.UnavailableError as e:
    print(f"UNAVAILABLE after {time.monotonic() - start:.1f}s: {e.message.splitlines()[0]}")
    sys.stdout.flush()
    try:
        tfring.ops.allreduce(tf.ones([1]))
    except tf.errors.UnavailableError:
        print("LATER OPS FAIL TOO")
'''


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_killed_rank_fails_the_others_fast_and_the_launcher_exits_nonzero(transport):
    start = time.monotonic()
    proc = run_job(3, KILLED, env={"TFRING_TRANSPORT": transport, "TFRING_TIMEOUT": "60"}, timeout=120)
    took = time.monotonic() - start
    assert proc.returncode == 128 + 9, (proc.returncode, proc.stderr[-2000:])
    assert took < 60
    for r in (0, 2):
        lines = rank_lines(proc.stdout, r)
        seen = [l for l in lines if l.startswith("UNAVAILABLE")]
        assert seen, (lines, proc.stderr[-2000:])
        assert "rank 1" in seen[0]
        assert "LATER OPS FAIL TOO" in lines
    assert "rank 1 was killed by SIGKILL" in proc.stderr


STALLED = r'''
import time
import tensorflow as tf
import tfring
tfring.init()
tfring.ops.allreduce(tf.ones([4]))
if tfring.rank() == 1:
    time.sleep(6)    # alive but never joins the next collective
else:
    try:
        tfring.ops.allreduce(tf.ones([4]))
        print("NO ERROR")
    except tf.errors.UnavailableError as e:
        print("UNAVAILABLE", e.message.splitlines()[0])
'''


def test_stalled_rank_times_out_with_tfring_timeout():
    proc = run_job(2, STALLED, env={"TFRING_TIMEOUT": "2"}, timeout=120)
    lines = rank_lines(proc.stdout, 0)
    assert any("rank 1 stopped answering for 2 s" in l for l in lines), (lines, proc.stderr[-2000:])


STARTED = r'''
import numpy as np
import tensorflow as tf
import tfring
from tfring.ops import started

tf.config.threading.set_intra_op_parallelism_threads(1)
tfring.init()
rank, size = tfring.rank(), tfring.size()
x = tf.constant(np.arange(6 * size * 2, dtype=np.float32).reshape(6 * size, 2) + 100 * rank)
bits = tf.constant(np.arange(4 * size, dtype=np.uint8) + rank)


@tf.function
def overlapped():
    # Three collectives started before any is waited for, as a hook does with a bucket.
    gathered = started.allgather_start(x)
    exchanged = started.alltoall_start(bits)
    scattered = started.reducescatter_start([x, tf.cast(x, tf.float64)], op="sum")
    return gathered.wait()[0], exchanged.wait()[0], scattered.wait()


gathered, exchanged, scattered = overlapped()
ok = (np.array_equal(gathered, tfring.ops.allgather(x)) and
      np.array_equal(exchanged, tfring.ops.alltoall(bits)[0]) and
      all(np.array_equal(s, r) for s, r in zip(scattered, tfring.ops.reducescatter([x, tf.cast(x, tf.float64)]))))
print("STARTED", ok, gathered.shape.as_list(), exchanged.dtype.name)
try:
    tf.function(lambda: started.allgather_start(tf.ones([rank + 1, 2])).wait()[0])()
except tf.errors.OpError as e:
    print("UNEQUAL", type(e).__name__, "every rank must start it with the same shape" in e.message)
'''


def test_started_allgather_alltoall_and_reducescatter_equal_the_plain_ones():
    job = run_job(2, STARTED, timeout=120)
    assert job.returncode == 0, job.stderr[-3000:]
    for rank in range(2):
        lines = rank_lines(job.stdout, rank)
        assert "STARTED True [24, 2] uint8" in lines, lines
        assert any(l.startswith("UNEQUAL") and l.endswith("True") for l in lines), lines

"""Allreduce benchmark: tfring (shm, tcp) beside MultiWorkerMirroredStrategy and OpenMPI, in one run.

    python benchmarks/allreduce.py [--repeats 15] [--rounds 2] [--json results.json]

Two workloads, two ranks on this machine: ResNet-50's gradient list (the trainable tensors of
`keras.applications.ResNet50(weights=None)`, about 102 MB in 214 tensors) and 1000 tensors of
256 floats. Each peer runs as its own 2-process job; the rounds interleave the peers so machine
noise hits them alike. Printed: median milliseconds per allreduce and the ratio to tfring (shm).
OpenMPI's column appears when `mpirun` and mpi4py are installed (`make bench-deps`).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

from tfring.launch.addresses import free_port

HERE = os.path.abspath(__file__)
WORKLOADS = ("resnet50", "small1000")


def shapes(workload):
    """The tensor shapes of a workload; ResNet-50's are built once and cached beside this file."""
    if workload == "small1000":
        return [(256,)] * 1000
    cache = os.path.join(os.path.dirname(HERE), ".resnet50_shapes.json")
    if os.path.exists(cache):
        return [tuple(s) for s in json.load(open(cache))]
    import keras

    found = [tuple(w.shape) for w in keras.applications.ResNet50(weights=None).trainable_weights]
    with open(cache, "w") as f:
        json.dump(found, f)
    return found


def tensors(workload, seed):
    """One rank's float32 arrays for a workload, random with the rank as the seed."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for s in shapes(workload)]


def time_calls(fn, barrier, repeats):
    """Seconds of `repeats` calls of `fn`, after two untimed ones, each call behind a `barrier()`."""
    return paired_calls({"fn": fn}, barrier, repeats)["fn"]


def cpu_calls(fn, barrier, repeats):
    """`time_calls`, and this process's CPU seconds (user + system, every thread) per timed call.

    The CPU is counted over the timed calls and their barriers, after a first call (tracing,
    connections) left out: what each call costs the machine, beside what it takes on the clock.
    """
    fn()
    start = time.process_time()
    samples = time_calls(fn, barrier, repeats)
    return samples, (time.process_time() - start) / (repeats + 2)


def paired_calls(calls, barrier, repeats):
    """Seconds of `repeats` calls of each of `calls` (a dict of functions), taken in turns so that
    the machine's slow spells fall on every one alike, the order reversed every other round; two
    untimed calls of each first (warm-up and tracing), each timed call behind a `barrier()`."""
    for call in calls.values():
        call()
        call()
    samples = {name: [] for name in calls}
    names = list(calls)
    for round_ in range(repeats):
        for name in names if round_ % 2 == 0 else names[::-1]:  # no peer always first after the barrier
            call = calls[name]
            barrier()
            start = time.perf_counter()
            call()
            samples[name].append(time.perf_counter() - start)
    return samples


# ---- workers: each runs inside a 2-process job and prints one RESULT line on rank 0 ----

def tfring_step(arrays, at_the_boundary=False, op="sum"):
    """Returns a callable that reduces `arrays` across the ranks with tfring's TF op once and waits.

    As in a training step, the op's inputs are made inside the `tf.function` and its results are
    used there (one is returned). With `at_the_boundary` the tensors are captured by the function
    instead and every result is returned to Python, as in `mwms_step`: TensorFlow's own cost of
    passing 1000 tensors into and out of a function is then part of the time (`identity_step`).

    Args:
        arrays: this rank's NumPy arrays; `tfring.init()` has run.
        at_the_boundary: capture the inputs and return every result.
        op: the reduction ("sum"; `benchmarks/adasum.py` passes "adasum").

    Returns:
        A function of no arguments; it returns when the last result is on the host.
    """
    import tensorflow as tf

    import tfring

    if at_the_boundary:
        grads = [tf.constant(a) for a in arrays]
        step = tf.function(lambda: tfring.ops.allreduce(grads, op=op))
    else:
        step = tf.function(lambda: tfring.ops.allreduce([tf.constant(a) for a in arrays], op=op)[-1:])

    def run():
        step()[-1].numpy()  # wait for the result
    return run


def identity_step(arrays):
    """TensorFlow alone, no collective: `tf.identity_n` over the same captured tensors, every
    result returned, which is what a function with 1000 inputs and outputs costs by itself."""
    import tensorflow as tf

    grads = [tf.constant(a) for a in arrays]
    step = tf.function(lambda: tf.identity_n(grads))

    def run():
        step()[-1].numpy()
    return run


def report(peer, samples, note="", cpu=None):
    """Prints the RESULT line the orchestrator parses (`_parse`): seconds per sample and workload,
    and, where given, this process's CPU seconds per call by workload (`cpu_calls`)."""
    result = {"peer": peer, "samples": samples}
    if note:
        result["note"] = note
    if cpu:
        result["cpu"] = cpu
    print("RESULT " + json.dumps(result), flush=True)


def worker_tfring(args):
    import tensorflow as tf

    import tfring

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tfring.init()
    results, boundary, identity, core, copies = {}, {}, {}, {}, {}
    for workload in WORKLOADS:
        arrays = tensors(workload, tfring.rank())
        results[workload] = time_calls(tfring_step(arrays), tfring.ops.barrier, args.repeats)
        core[workload] = time_calls(core_step(arrays), tfring.ops.barrier, args.repeats)
        if tfring.transport_name().startswith("shm"):  # once, not per transport
            boundary[workload] = time_calls(tfring_step(arrays, at_the_boundary=True), tfring.ops.barrier,
                                            args.repeats)
            copies[workload] = time_calls(copy_step(arrays), tfring.ops.barrier, args.repeats)
            if workload == "small1000":
                identity[workload] = time_calls(identity_step(arrays), tfring.ops.barrier, args.repeats)
    if tfring.rank() == 0:
        name = tfring.transport_name()
        report(f"tfring ({name})", results, "one op in a tf.function, its results used inside it")
        report(f"tfring core, no TF ({name})", core, "the same engine called through its C API on NumPy buffers")
        if boundary:
            report(f"tfring ({name}), captured inputs, all results returned", boundary,
                   "the op's tensors passed into and out of the tf.function")
            report("TF alone: identity_n, captured inputs, all returned", identity,
                   "no collective: TensorFlow's cost of 1000 tensors in and out of a function")
            report("a copy of the same bytes, both ranks at once (NumPy)", copies,
                   "no collective: each rank copies its arrays into buffers it keeps, the two at once")


def copy_step(arrays):
    """A copy of `arrays` into buffers kept across calls (NumPy), the floor a collective that must
    read every input and write every output sits on: the ranks run it at once, as they would an
    allreduce, so they share the memory bandwidth as they do then."""
    import numpy as np

    outs = [np.empty_like(a) for a in arrays]

    def run():
        for a, o in zip(arrays, outs):
            np.copyto(o, a)
    return run


def core_step(arrays):
    """The core alone: one collective over the NumPy buffers through the C API (no TensorFlow)."""
    import ctypes

    from tfring.native import library as _library

    lib = _library.load()[1]
    n = len(arrays)
    outs = [a.copy() for a in arrays]
    ins = (ctypes.c_void_p * n)(*[a.ctypes.data for a in arrays])
    out_ptrs = (ctypes.c_void_p * n)(*[o.ctypes.data for o in outs])
    counts = (ctypes.c_int64 * n)(*[a.size for a in arrays])
    err = ctypes.create_string_buffer(1024)

    def run():
        # `arrays` and `outs` are referenced here so they outlive every call.
        rc = lib.tfring_allreduce_raw(len(arrays), ins, out_ptrs, counts, 2, 0, err, len(err))
        if rc != 0 or not outs:  # 0 is OK; any other code is named by the core
            raise RuntimeError(f"{_library.error_name(rc)}: {err.value.decode()}")
    return run


def mwms_strategy():
    """MultiWorkerMirroredStrategy with its RING collective, from TF_CONFIG, one intra-op thread."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=tf.distribute.experimental.CommunicationImplementation.RING)
    return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)


def mwms_step(strategy, arrays):
    """Returns `(run, barrier)`: one sum of `arrays` across the workers, and a 1-float all-reduce.

    Args:
        strategy: from `mwms_strategy()`.
        arrays: this worker's NumPy arrays.

    Returns:
        Two functions of no arguments that return when their result is on the host.
    """
    import tensorflow as tf

    grads = [tf.constant(a) for a in arrays]
    barrier_value = tf.constant([1.0])

    def all_reduce(values):
        return strategy.run(lambda: tf.distribute.get_replica_context().all_reduce("sum", values))
    step = tf.function(lambda: all_reduce(grads))
    barrier_step = tf.function(lambda: all_reduce(barrier_value))

    def run():
        strategy.experimental_local_results(step())[0][-1].numpy()
    return run, lambda: barrier_step().numpy()


def worker_mwms(args):
    strategy = mwms_strategy()
    rank = strategy.cluster_resolver.task_id
    results = {}
    for workload in WORKLOADS:
        run, barrier = mwms_step(strategy, tensors(workload, rank))
        results[workload] = time_calls(run, barrier, args.repeats)
    if rank == 0:
        report("MultiWorkerMirroredStrategy (RING)", results)


def mpi_steps(comm, arrays):
    """Returns `(per_tensor, packed)`: `MPI_Allreduce` once per array, or once on a packed copy.

    Args:
        comm: an mpi4py communicator.
        arrays: this rank's NumPy arrays.

    Returns:
        Two functions of no arguments (MPI_Allreduce is blocking).
    """
    import numpy as np
    from mpi4py import MPI

    outs = [np.empty_like(a) for a in arrays]
    flat = np.concatenate([a.ravel() for a in arrays])
    flat_out = np.empty_like(flat)

    def per_tensor():
        for a, o in zip(arrays, outs):
            comm.Allreduce(a, o, op=MPI.SUM)

    def packed():
        comm.Allreduce(flat, flat_out, op=MPI.SUM)
    return per_tensor, packed


def worker_mpi(args):
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    results = {}
    for workload in WORKLOADS:
        per_tensor, packed = mpi_steps(comm, tensors(workload, comm.rank))
        results[workload + " per-tensor"] = time_calls(per_tensor, comm.Barrier, args.repeats)
        results[workload] = time_calls(packed, comm.Barrier, args.repeats)
    if comm.rank == 0:
        report("OpenMPI MPI_Allreduce", results,
               "one call on the pre-packed buffer; per-tensor: one call per tensor")


# ---- the orchestrator ----


def _quiet_env(**extra):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1",
               TF_NUM_INTRAOP_THREADS="1")
    env.update(extra)
    return env


def parse_results(out):
    """The RESULT lines a job printed (`report`), as dicts; a launcher's `[rank] ` prefix is dropped."""
    results = []
    for line in out.splitlines():
        line = line.split("] ", 1)[-1] if line.startswith("[") else line
        if line.startswith("RESULT "):
            results.append(json.loads(line[len("RESULT "):]))
    return results


def _run_tfring(transport, repeats):
    cmd = [sys.executable, "-m", "tfring", "run", "-np", "2", sys.executable, HERE, "--worker", "tfring",
           "--repeats", str(repeats)]
    return subprocess.run(cmd, capture_output=True, text=True, env=_quiet_env(TFRING_TRANSPORT=transport), timeout=900)


def _run_mwms(repeats):
    ports = [free_port(), free_port()]
    procs = []
    for i in range(2):
        tf_config = {"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]}, "task": {"type": "worker", "index": i}}
        procs.append(subprocess.Popen([sys.executable, HERE, "--worker", "mwms", "--repeats", str(repeats)],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      env=_quiet_env(TF_CONFIG=json.dumps(tf_config))))
    outs = [p.communicate(timeout=1800) for p in procs]
    return subprocess.CompletedProcess(procs[0].args, procs[0].returncode, outs[0][0], outs[0][1] + outs[1][1])


def _run_mpi(repeats):
    cmd = ["mpirun", "-np", "2", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
           sys.executable, HERE, "--worker", "mpi", "--repeats", str(repeats)]
    return subprocess.run(cmd, capture_output=True, text=True, env=_quiet_env(), timeout=900)


def _mpi_available():
    if shutil.which("mpirun") is None:
        return False
    return subprocess.run([sys.executable, "-c", "import mpi4py.MPI"], capture_output=True).returncode == 0


def print_captured_summary(rows):
    """ResNet-50's list captured and every result returned, against a copy of its bytes by both
    ranks at once and against OpenMPI one call per tensor (issue 49's goals: <= 1.8x, <= 1x)."""
    def ms(workload, peer_start):
        found = [r["median_ms"] for r in rows if r["workload"] == workload and r["peer"].startswith(peer_start)]
        return found[0] if found else None

    captured = ms("resnet50", "tfring (shm (single-copy)), captured") or ms("resnet50", "tfring (shm), captured")
    copy = ms("resnet50", "a copy of the same bytes")
    mpi = ms("resnet50 per-tensor", "OpenMPI")
    if captured is None or copy is None:
        return
    against_mpi = f", {captured / mpi:.2f}x OpenMPI one call per tensor ({mpi:.2f} ms)" if mpi else ""
    print(f"ResNet-50's list captured, every result returned: {captured:.2f} ms, {captured / copy:.2f}x a copy of "
          f"its bytes by both ranks at once ({copy:.2f} ms){against_mpi}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", choices=["tfring", "mwms", "mpi"])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", default="benchmarks/allreduce_results.json")
    parser.add_argument("--skip-mwms", action="store_true", help="leave out MultiWorkerMirroredStrategy (slow)")
    args = parser.parse_args()
    if args.repeats < 10:
        parser.error("--repeats must be at least 10 (medians of fewer are noise here)")
    if args.worker:
        {"tfring": worker_tfring, "mwms": worker_mwms, "mpi": worker_mpi}[args.worker](args)
        return 0

    import numpy as np

    shapes("resnet50")  # build the shape cache once, outside the timed jobs
    runners = [("tfring shm", lambda: _run_tfring("shm", args.repeats)),
               ("tfring tcp", lambda: _run_tfring("tcp", args.repeats))]
    if not args.skip_mwms:
        runners.append(("mwms", lambda: _run_mwms(args.repeats)))
    if _mpi_available():
        runners.append(("mpi", lambda: _run_mpi(args.repeats)))
    else:
        print("(OpenMPI column skipped: mpirun or mpi4py is not installed; see `make bench-deps`)")
    samples, labels, notes, order = {}, {}, {}, []
    for round_ in range(args.rounds):
        for key, runner in runners:
            proc = runner()
            results = parse_results(proc.stdout)
            if not results:
                print(f"{key} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}", file=sys.stderr)
            for i, result in enumerate(results):
                sub = key if i == 0 else f"{key} #{i}"
                if sub not in order:
                    order.append(sub)
                labels[sub] = result["peer"]
                notes[sub] = result.get("note", "")
                for workload, s in result["samples"].items():
                    samples.setdefault((sub, workload), []).extend(s)
    rows = []
    workloads = sorted({w for (_, w) in samples}, key=lambda w: (w.split()[0] != "resnet50", w))
    for workload in workloads:
        base = samples.get(("tfring shm", workload))
        base_ms = 1e3 * float(np.median(base)) if base else None
        for key in order:
            s = samples.get((key, workload))
            if not s:
                continue
            ms = 1e3 * float(np.median(s))
            rows.append({"workload": workload, "peer": labels[key], "median_ms": ms, "samples": len(s),
                         "vs_tfring_shm": ms / base_ms if base_ms else None})
    nbytes = sum(int(np.prod(s)) * 4 for s in shapes("resnet50"))
    print(f"\nAllreduce, 2 ranks on {os.cpu_count()} cores; resnet50 = {len(shapes('resnet50'))} tensors, "
          f"{nbytes / 1e6:.1f} MB; small1000 = 1000 x 256 float32")
    print(f"| {'workload':<20} | {'peer':<44} | {'median ms':>9} | {'x tfring shm':>12} | {'n':>3} |")
    print(f"|{'-' * 22}|{'-' * 46}|{'-' * 10}:|{'-' * 13}:|{'-' * 4}:|")
    for r in rows:
        ratio = f"{r['vs_tfring_shm']:.2f}" if r["vs_tfring_shm"] else "-"
        print(f"| {r['workload']:<20} | {r['peer']:<44} | {r['median_ms']:>9.2f} | {ratio:>12} | {r['samples']:>3} |")
    for key, note in notes.items():
        if note:
            print(f"note: {labels[key]}: {note}")
    print_captured_summary(rows)
    with open(args.json, "w") as f:
        json.dump({"rows": rows, "cores": os.cpu_count(), "resnet50_bytes": nbytes}, f, indent=1)
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Horovod's process queries (`hvd.init`, `hvd.rank`, `hvd.size`, ...) and reduce-op constants on tfring.

Build queries are answered truthfully for tfring: there is no MPI or Gloo inside it (`mpi_built()`
and `gloo_built()` are False), and its CUDA kernels are reported by `cuda_built()`.
"""

from tfring import runtime

# Horovod's ReduceOp values, so that scripts comparing `op == hvd.Average` keep working.
Average, Sum, Adasum, Min, Max, Product = 0, 1, 2, 3, 4, 5
"""Horovod's reduce ops (`op=hvd.Sum`, ...), with Horovod's values."""
_TFRING_OPS = {Average: "mean", Sum: "sum", Adasum: "adasum", Min: "min", Max: "max", Product: "product"}


def init(comm=None, process_sets=None):
    """Starts tfring in this process (`tfring.init()`): Horovod's `hvd.init()`.

    Args:
        comm: Horovod's MPI communicator or list of ranks: only None (every rank of the job) is
            supported.
        process_sets: Horovod's process sets to register (a list of `hvd.ProcessSet`; every
            rank passes the same), or "dynamic" (accepted: sets may always be added later).

    Raises:
        NotImplementedError: `comm` given.
        ValueError: ranks passed different process sets (on every rank).

    Example:

    >>> import tfring.horovod.tensorflow.keras as hvd
    >>> hvd.init()
    """
    if comm is not None:
        raise NotImplementedError("tfring.horovod.init: `comm` is not supported: tfring has no MPI inside it; the "
                                  "job is every rank the launcher started (use process_sets=[hvd.ProcessSet(ranks)] "
                                  "for collectives over some of them)")
    runtime.init()
    from tfring.horovod import process_sets as sets  # noqa: PLC0415 (process_sets imports the ops layer)

    sets.register(process_sets)


def shutdown():
    """Stops tfring in this process (`tfring.shutdown()`)."""
    runtime.shutdown()


def is_initialized():
    """Returns True between `init()` and `shutdown()`."""
    return runtime.is_initialized()


def rank():
    """Returns this process's rank in the job."""
    return runtime.rank()


def size():
    """Returns the number of processes in the job."""
    return runtime.size()


def local_rank():
    """Returns this process's rank among the processes on its host."""
    return runtime.local_rank()


def local_size():
    """Returns how many processes of the job run on this host."""
    return runtime.local_size()


def cross_size():
    """Returns the number of hosts (Horovod's cross size), when every host runs as many ranks."""
    return size() // local_size()


def cross_rank():
    """Returns the index of this process's host (Horovod's cross rank), when hosts are homogeneous."""
    return rank() // local_size()


def is_homogeneous():
    """Returns True when every host runs as many ranks (Horovod's question): size is a multiple of local size."""
    return size() % local_size() == 0


def mpi_threads_supported():
    """Returns False: tfring does not run on MPI (MPI launchers may still start its ranks)."""
    return False


def mpi_enabled():
    """Returns False: tfring's collectives do not use MPI."""
    return False


def mpi_built():
    """Returns False: tfring is not built with MPI."""
    return False


def gloo_enabled():
    """Returns False: tfring's collectives are its own ring, not Gloo."""
    return False


def gloo_built():
    """Returns False: tfring is not built with Gloo."""
    return False


def nccl_built():
    """Returns 0: tfring does not use NCCL (Horovod returns its NCCL version or 0)."""
    return 0


def ddl_built():
    """Returns False: tfring has no IBM DDL."""
    return False


def ccl_built():
    """Returns False: tfring has no oneCCL."""
    return False


def cuda_built():
    """Returns True when tfring's op library has its CUDA kernels."""
    from tfring.native import library

    return bool(library.has_gpu_kernels())


def rocm_built():
    """Returns False: tfring has no ROCm kernels."""
    return False


def start_timeline(file_path, mark_cycles=False):
    """Horovod's timeline: tfring writes one with `tfring run --timeline-filename` (or TFRING_TIMELINE).

    Raises:
        NotImplementedError: always; the message says how to record one.
    """
    raise NotImplementedError("tfring.horovod.start_timeline: start the job with `tfring run --timeline-filename "
                              f"{file_path}` (or TFRING_TIMELINE) instead")


def stop_timeline():
    """See `start_timeline`."""
    raise NotImplementedError("tfring.horovod.stop_timeline: tfring's timeline runs for the whole job")


def tfring_op(op, where, set_size=None):
    """The `tfring.ops` reduce op for Horovod's `op`.

    Args:
        op: one of `Average`, `Sum`, `Adasum`, `Min`, `Max`, `Product`.
        where: the public name called, for the message.
        set_size: the number of ranks reduced over, checked for `Adasum` (None: not checked).

    Returns:
        "mean", "sum", "adasum", "min", "max" or "product".

    Raises:
        ValueError: another value.
        NotImplementedError: `Adasum` over a number of ranks that is not a power of two
            (Horovod's error and message).
    """
    if op not in _TFRING_OPS:
        raise ValueError(f"{where}: op must be hvd.Average, hvd.Sum, hvd.Adasum, hvd.Min, hvd.Max or hvd.Product, "
                         f"got {op!r}")
    if op == Adasum and set_size is not None and set_size & (set_size - 1):
        raise NotImplementedError(f"{where}: Running Adasum with non-power of 2 ranks is not supported yet "
                                  f"({set_size} ranks; Adasum combines them pairwise)")
    return _TFRING_OPS[op]


def handle_average_backwards_compatibility(op, average):
    """Horovod's rule for its deprecated `average=` argument: returns the op to use.

    Raises:
        ValueError: both `op` and `average` given.
    """
    if op is not None:
        if average is not None:
            raise ValueError("The op parameter supersedes average. Please provide only one of them.")
        return op
    if average is not None:
        return Average if average else Sum
    return Average

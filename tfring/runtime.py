"""The process's tfring runtime: `init()`, `shutdown()` and who-am-I queries.

There is exactly one runtime per process, held by the op library; these functions create,
query and destroy it.
"""

import atexit
import ctypes
import os
import queue
import stat
import sys
import threading
import time

from tfring.launch import cluster as _cluster
from tfring.launch import membership as _membership
from tfring.launch import variables as _variables
from tfring.launch.engines import address_exchange as _address_exchange
from tfring.config import Config
from tfring.native import library as _library

# The core's error names (tfring.native.library.error_name) -> the exception raised here.
_ERRORS = {"INVALID_ARGUMENT": ValueError, "UNAVAILABLE": ConnectionError, "DEADLINE_EXCEEDED": TimeoutError,
           "FAILED_PRECONDITION": RuntimeError, "INTERNAL": RuntimeError}
_atexit_registered = []
_grow_notice = threading.Event()  # set when the launcher says the elastic job may grow
_commits = threading.Event()  # set once this rank commits (tfring.elastic): it answers a grow notice
_memberships = queue.Queue()  # the launcher's memberships for this process (launch.membership), in order
_config = []  # the Config of the last init(): a re-formed job (`reform`) keeps its settings
_joining = []  # (rank, size, local_rank, local_size) of a rank that joins a running job, until it does


def _c():
    return _library.load()[1]


def init(config=None, **options):
    """Starts tfring in this process: finds the job, meets the other ranks, starts the engine.

    Idempotent: later calls return at once. Under `tfring run`, `mpirun` or `srun` the job is
    discovered from the launcher's environment; without a launcher the job has one rank and
    every collective is an identity.

    Args:
        config: a `tfring.config.Config`; when None one is built from `options` and the
            environment (see the configuration table, docs/configuration.md).
        **options: fields of `Config`, e.g. `timeout=30`, `transport="tcp"`.

    Raises:
        TimeoutError: the other ranks did not show up within `rendezvous_timeout`.
        ValueError: bad options or launcher variables.

    Example:

    >>> import tfring
    >>> tfring.init()
    >>> tfring.rank(), tfring.size()
    (0, 1)
    """
    c = _c()
    if c.tfring_initialized():
        return
    config = config or Config.resolve(**options)
    _config[:] = [config]
    place = _membership.joining_place(os.environ)
    _joining[:] = [place] if place else []
    # A rank started into a running elastic job starts alone; it meets the job's ranks at `reform`.
    info = _cluster.ClusterInfo() if _joining else _cluster.find_store(_cluster.discover(), config.rendezvous_timeout)
    err = ctypes.create_string_buffer(4096)
    rc = c.tfring_init(config.record(info).encode(), err, len(err))
    if rc != 0:
        error = _ERRORS.get(_library.error_name(rc), RuntimeError)
        raise error(f"tfring.init() failed on rank {info.rank}: {err.value.decode()}")
    _address_exchange.remove_published()  # every rank has joined: a published address is no longer needed
    if not _atexit_registered:
        atexit.register(shutdown)
        _atexit_registered.append(True)
        _exit_with_launcher()


def _exit_with_launcher():
    """Under `tfring run`: exits this process when the launcher dies (its pipe reads EOF), and
    passes on what the launcher writes there (`launch.membership`)."""
    text = os.environ.get(_cluster.LAUNCHER_FD, "")
    try:
        fd = int(text)
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return
    except (ValueError, OSError):
        return  # not started by `tfring run`, or the descriptor was not passed down to us

    def watch():
        reader = _membership.Reader()
        try:
            while data := os.read(fd, 4096):
                for message in _messages(reader, data):
                    if isinstance(message, dict):
                        _memberships.put(message)
                    elif not _grow_notice.is_set():
                        _grow_notice.set()
                        if _commits.is_set():
                            _acknowledge(_rank_now())
        except OSError:
            return
        try:  # the launcher relayed our output: nobody may be reading it any more
            sys.stderr.write(f"tfring: rank {_rank_now()}: the launcher (tfring run) is gone; exiting\n")
            sys.stderr.flush()
        finally:
            os._exit(1)

    threading.Thread(target=watch, name="tfring-launcher-watch", daemon=True).start()


def _messages(reader, data):
    """The launcher's messages in `data`; bytes that are none are named on stderr and dropped."""
    try:
        return reader.feed(data)
    except ValueError as e:
        sys.stderr.write(f"{e}; ignored\n")
        return []


def _rank_now():
    """This process's rank as its launcher last said (read without touching the runtime, which a
    re-forming job may be between two memberships of)."""
    return os.environ.get(_cluster.RANK, "0")


def _acknowledge(rank):
    """Tells the launcher (on stderr, which it reads) that this rank stops at its next commit."""
    sys.stderr.write(f"tfring: rank {rank}: the job may grow: {_variables.GROW_ACK.decode()}\n")
    sys.stderr.flush()


def expect_commits():
    """Says that this rank commits its state (`tfring.elastic.State` in an elastic job): told that
    the job may grow, it answers the launcher that it stops at its next commit, and the launcher
    waits for that commit instead of ending the ranks at once."""
    if not _commits.is_set():
        _commits.set()
        if _grow_notice.is_set():
            _acknowledge(rank())


def hosts_updated():
    """Whether `tfring run` has told this elastic job that it may grow (more slots are offered).

    The ranks then stop together at their next commit (`tfring.elastic.State.commit`), and the
    launcher starts the job again on every slot.

    Returns:
        bool; False outside an elastic job.
    """
    return _grow_notice.is_set()


def next_membership(timeout):
    """Waits for the job's next membership from `tfring run` (`launch.membership`): the variables
    of this process's new place in the job, after ranks were lost or added.

    Args:
        timeout: the most seconds to wait.

    Returns:
        A dict of variables, or None when none came in time.
    """
    try:
        return _memberships.get(timeout=timeout)
    except queue.Empty:
        return None


def reform(env):
    """Leaves the job this process is in and joins its next membership, in the same process.

    The engine and every connection of the old membership are closed; the variables `env` (from
    `next_membership`) become this process's job identity, and `init()` meets the new membership's
    ranks with the settings of the last `init()`.

    Args:
        env: the membership's variables.

    Returns:
        The seconds the new rendezvous took.

    Raises:
        TimeoutError: the new membership's ranks did not all show up within `rendezvous_timeout`.
    """
    shutdown()
    os.environ.pop(_membership.JOINING, None)
    os.environ.update(env)
    _grow_notice.clear()
    started = time.monotonic()
    init(_config[0] if _config else None)
    return time.monotonic() - started


def shutdown():
    """Stops the engine and closes every connection. Safe to call more than once.

    Example:

    >>> tfring.shutdown()
    """
    c = _c()
    c.tfring_shutdown()


def is_initialized():
    """Returns True between `init()` and `shutdown()`."""
    return bool(_c().tfring_initialized())


def _topology():
    c = _c()
    if not c.tfring_initialized():
        init()
    if _joining:
        return list(_joining[0])
    vals = [ctypes.c_int() for _ in range(4)]
    c.tfring_topology(*[ctypes.byref(v) for v in vals])
    return [v.value for v in vals]


def joining():
    """Whether this process is a rank started into a running elastic job that has not joined it
    yet (`launch.membership.JOINING`): until `reform` it runs alone, so its collectives answer
    with its own values, while `rank()` and `size()` already give its place in the job it joins.

    Returns:
        bool.
    """
    _topology()
    return bool(_joining)


def rank():
    """Returns this process's rank in the job (0 … size()-1); calls `init()` if needed.

    Example:

    >>> tfring.rank()
    0
    """
    return _topology()[0]


def size():
    """Returns the number of processes (replicas) in the job; calls `init()` if needed."""
    return _topology()[1]


def local_rank():
    """Returns this process's rank among the processes on its host."""
    return _topology()[2]


def local_size():
    """Returns how many processes of the job run on this host."""
    return _topology()[3]


# OpKind's order in the core (engine/request.h): the index of each kind in tfring_traffic's arrays.
_KINDS = ("allreduce", "broadcast", "allgather", "barrier", "reducescatter", "alltoall", "join")


def traffic():
    """Returns what this rank's collectives have carried since `init()`, per kind.

    Counts collectives that finished without error, and the bytes of their inputs on this rank
    (an allreduce of 1 MiB of gradients counts 1 MiB, whatever the ring sent to do it), and the
    seconds this rank spent in the agreement step every collective starts with, mostly waiting
    for the other ranks to arrive (for small allreduces and allgathers that step also carries
    the data; a rank that waits least is the one the others wait for: see
    `tfring.callbacks.StragglerReport`). A
    job of one rank runs no collectives: every count stays 0.

    Returns:
        A dict: {"allreduce": {"calls": int, "bytes": int, "waited_seconds": float},
        "broadcast": ..., "allgather": ..., "barrier": ...}.

    Example:

    >>> before = tfring.traffic()["allreduce"]["bytes"]
    >>> model.fit(x, y, epochs=1)
    >>> print(tfring.traffic()["allreduce"]["bytes"] - before, "bytes all-reduced")
    """
    _topology()
    calls, sent, waited = ((ctypes.c_int64 * len(_KINDS))() for _ in range(3))
    _c().tfring_traffic(calls, sent, waited, len(_KINDS))
    return {kind: {"calls": calls[k], "bytes": sent[k], "waited_seconds": waited[k] / 1e9}
            for k, kind in enumerate(_KINDS)}


def transport_name():
    """Returns the transport in use: "shm (single-copy)", "shm", "tcp" or "none (1 rank)".

    A ring that mixes link kinds names both ("shm (single-copy) to rank 1, tcp from rank 3"); when
    allreduces go hierarchical, "; allreduce hierarchical: ... inside a host, tcp across N hosts"
    follows.
    """
    _topology()
    buf = ctypes.create_string_buffer(512)
    _c().tfring_transport_name(buf, len(buf))
    return buf.value.decode()


def sign_object(data):
    """The job's signature of `data` (bytes): HMAC-SHA256 with the job secret, which never leaves the core.

    The object collectives sign what they pickle and check the signature before they unpickle,
    so nothing that a process outside the job sends is ever unpickled.

    Args:
        data: bytes.

    Returns:
        32 bytes, the same on every rank of the job for the same `data`.

    Raises:
        RuntimeError: before `init()`.

    Example:

    >>> tag = tfring.runtime.sign_object(b"payload")
    """
    out = ctypes.create_string_buffer(32)
    if _c().tfring_sign_object(data, len(data), out) != 0:
        raise RuntimeError("tfring.runtime.sign_object: call tfring.init() first")
    return out.raw


def _raise_failure(rc, err, what):
    raise _ERRORS.get(_library.error_name(rc), RuntimeError)(f"{what}: {err.value.decode()}")


def link_process_set(ranks):
    """Registers the process set of `ranks` in the core and, on its members, links its ring.

    The low half of `tfring.ops.add_process_set`, which first checks that every rank passes the
    same ranks: call that instead.

    Args:
        ranks: job ranks.

    Returns:
        The set's id (int, 1 and up; the same on every rank that registers the same sets in the same order).

    Raises:
        ValueError: ranks out of range, repeated or none, or the ranks of a set that exists.
        TimeoutError: the other members did not come within the rendezvous timeout.
    """
    _topology()
    ranks = [int(r) for r in ranks]
    err = ctypes.create_string_buffer(4096)
    set_id = ctypes.c_int()
    rc = _c().tfring_add_process_set((ctypes.c_int * len(ranks))(*ranks), len(ranks), ctypes.byref(set_id),
                                     err, len(err))
    if rc != 0:
        _raise_failure(rc, err, "tfring.add_process_set")
    return set_id.value


def process_set_id(ranks):
    """Returns the id of the process set of `ranks` (job ranks, any order), or None when there is none."""
    _topology()
    ranks = [int(r) for r in ranks]
    found = _c().tfring_process_set_id((ctypes.c_int * len(ranks))(*ranks), len(ranks))
    return None if found < 0 else found


def unlink_process_set(set_id):
    """Forgets process set `set_id` (not 0) and closes its ring; True when it existed."""
    return bool(_c().tfring_remove_process_set(int(set_id))) if is_initialized() else False


def process_set_ranks(set_id):
    """Returns the job ranks of process set `set_id` (0: every rank), ascending.

    Raises:
        ValueError: there is no process set `set_id`.
    """
    size_ = _topology()[1]
    ranks = (ctypes.c_int * size_)()
    count = ctypes.c_int()
    err = ctypes.create_string_buffer(1024)
    rc = _c().tfring_process_set_ranks(int(set_id), ranks, size_, ctypes.byref(count), err, len(err))
    if rc != 0:
        _raise_failure(rc, err, "tfring")
    return list(ranks[:count.value])

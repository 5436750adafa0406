"""Horovod's launcher habits in `tfring run`: horovodrun's flags and the `HOROVOD_*` variables.

`tfring run` takes horovodrun's common flags (`-np`, `-H`, `--hostfile`, `-p`, `-i`,
`--start-timeout`, `--timeline-filename`, `--verbose`; `--gloo` and `--mpi` are accepted and
ignored, saying why). A `HOROVOD_*` variable that has a tfring meaning becomes its `TFRING_*`
variable on every rank (unless that one is set too, or the value is 0, Horovod's "off": tfring's own
default then stays), with one note; the others are named in one warning, since tfring does nothing
with them. Every rank also gets the identity variables `horovodrun` sets (`HOROVOD_RANK`, `_SIZE`,
`_LOCAL_RANK`, `_LOCAL_SIZE`, `_CROSS_RANK`, `_CROSS_SIZE`): scripts and tests written for
Horovod read them.
"""

# HOROVOD_* -> (TFRING_*, what it means in tfring)
TRANSLATED = {
    "HOROVOD_FUSION_THRESHOLD": ("TFRING_FUSION_THRESHOLD", "bytes per fused allreduce pass"),
    "HOROVOD_TIMELINE": ("TFRING_TIMELINE", "each rank's Chrome-trace timeline"),
    "HOROVOD_STALL_CHECK_TIME_SECONDS": ("TFRING_STALL_WARNING", "seconds before a stalled collective is reported"),
    "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": ("TFRING_TIMEOUT", "seconds before a stalled collective fails"),
}
# Variables a Horovod user sets that tfring has no use for, and why (the warning says it).
WHY_IGNORED = {
    "HOROVOD_CYCLE_TIME": "tfring has no background cycle: ranks submit collectives in program order",
    "HOROVOD_CACHE_CAPACITY": "tfring needs no response cache: there is no per-step negotiation",
    "HOROVOD_HIERARCHICAL_ALLREDUCE": "use TFRING_ALLREDUCE=hierarchical",
}
# What `identity` sets on every rank (a `tfring run` inside a rank inherits them: not the user's settings).
IDENTITY = ("HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE", "HOROVOD_CROSS_RANK",
            "HOROVOD_CROSS_SIZE")
IGNORED_FLAGS = {
    "gloo": "--gloo ignored: tfring's ranks always talk over tfring's own ring (shared memory or TCP)",
    "mpi": "--mpi ignored: tfring's ranks always talk over tfring's own ring; MPI launchers (mpirun) "
           "may still start them",
}


def translate(environ):
    """The `TFRING_*` variables Horovod's variables in `environ` stand for, and the lines to print.

    Args:
        environ: the launcher's environment.

    Returns:
        `(exports, notes)`: a dict of variables to set on every rank, and the messages (one note
        for the translated ones, one warning for the ignored ones), possibly empty.

    Example:

    >>> translate({"HOROVOD_FUSION_THRESHOLD": "67108864"})
    ({'TFRING_FUSION_THRESHOLD': '67108864'}, ['tfring run: HOROVOD_FUSION_THRESHOLD=67108864 is taken as TFRING_FUSION_THRESHOLD (bytes per fused allreduce pass)'])
    """
    exports, taken = {}, []
    for name, (tfring_name, meaning) in TRANSLATED.items():
        if name in environ and tfring_name not in environ and environ[name].strip() not in ("", "0"):
            exports[tfring_name] = environ[name]
            taken.append(f"{name}={environ[name]} is taken as {tfring_name} ({meaning})")
    ignored = sorted(n for n in environ if n.startswith("HOROVOD_") and n not in TRANSLATED and n not in IDENTITY)
    notes = [f"tfring run: {'; '.join(taken)}"] if taken else []
    if ignored:
        reasons = [f"{n} ({WHY_IGNORED[n]})" if n in WHY_IGNORED else n for n in ignored]
        notes.append(f"tfring run: warning: these variables mean nothing to tfring and are ignored: "
                     f"{', '.join(reasons)}")
    return exports, notes


def identity(slot, slots):
    """The `HOROVOD_*` identity variables of one rank, as `horovodrun` sets them.

    Horovod's cross rank is the index of the rank's host among the hosts that run a rank of the
    same local rank, and the cross size is how many hosts do (the number of hosts, when every host
    runs as many ranks).

    Args:
        slot: the rank's `hosts.Slot`.
        slots: every `hosts.Slot` of the job.

    Returns:
        A dict of variable names to values.

    Example:

    >>> identity(slots[3], slots)   # 2 hosts of 2 slots
    {'HOROVOD_RANK': '3', 'HOROVOD_SIZE': '4', 'HOROVOD_LOCAL_RANK': '1', 'HOROVOD_LOCAL_SIZE': '2', 'HOROVOD_CROSS_RANK': '1', 'HOROVOD_CROSS_SIZE': '2'}
    """
    peers = sorted(s.rank for s in slots if s.local_rank == slot.local_rank)
    values = (slot.rank, len(slots), slot.local_rank, slot.local_size, peers.index(slot.rank), len(peers))
    return {name: str(value) for name, value in zip(IDENTITY, values)}

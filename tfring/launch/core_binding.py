"""`tfring run --bind-to core`: each rank on a host gets its own share of that host's cores.

The cores are the ones the starter itself may use (its CPU affinity: all of them, or what
`taskset`, a cgroup or a scheduler left it), cut into `local_size` contiguous blocks as evenly as
they go: 2 ranks on 8 cores get 0-3 and 4-7, 3 ranks get 3, 3 and 2 cores. TensorFlow sizes its
thread pools by the cores a process may use, so a bound rank also runs as many threads as it has
cores. As mpirun does, binding refuses more ranks than cores rather than stacking ranks on one.
"""

import os

MODES = ("none", "core")


def cores_for(local_rank, local_size, available):
    """The cores of the rank with local rank `local_rank` of `local_size` on a host.

    Args:
        local_rank: the rank's index on its host, 0 .. local_size - 1.
        local_size: the number of ranks on the host.
        available: the host's usable cores (a set of CPU numbers).

    Returns:
        A sorted list of CPU numbers, never empty.

    Raises:
        ValueError: there are more ranks on the host than cores.

    Example:

    >>> cores_for(1, 3, {0, 1, 2, 3, 4, 5, 6, 7})
    [3, 4, 5]
    """
    cores = sorted(available)
    if local_size > len(cores):
        raise ValueError(f"--bind-to core: {local_size} ranks on this host but only {len(cores)} usable "
                         f"core(s) ({_ranges(cores)}); start fewer ranks here or use --bind-to none")
    base, extra = divmod(len(cores), local_size)
    start = local_rank * base + min(local_rank, extra)
    return cores[start:start + base + (1 if local_rank < extra else 0)]


def plan(mode, local_rank, local_size):
    """The cores a rank is bound to under `mode`, or None for no binding.

    Args:
        mode: one of `MODES`.
        local_rank, local_size: as for `cores_for`.

    Returns:
        A list of CPU numbers, or None when `mode` is "none".

    Raises:
        ValueError: an unknown mode, or more ranks than usable cores.
    """
    if mode not in MODES:
        raise ValueError(f"--bind-to must be one of {', '.join(MODES)}, got {mode!r}")
    if mode == "none":
        return None
    return cores_for(local_rank, local_size, os.sched_getaffinity(0))


def _ranges(cores):
    """[0, 1, 2, 5] -> '0-2,5'."""
    spans, start = [], None
    for i, c in enumerate(cores):
        if start is None:
            start = c
        if i + 1 == len(cores) or cores[i + 1] != c + 1:
            spans.append(f"{start}-{c}" if c != start else str(c))
            start = None
    return ",".join(spans)

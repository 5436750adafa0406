"""The hosts of the batch allocation `tfring run` runs in, when no -H or --hostfile is given.

PBS/Torque lists the allocation's hosts once per slot in the file `$PBS_NODEFILE`; LSF gives
`LSB_MCPU_HOSTS` ("hostA 4 hostB 2") and `LSB_HOSTS` ("hostA hostA hostB"). Inside such a job
`tfring run python train.py` starts one rank per slot over ssh, as `mpirun` does there.
"""

from tfring.launch import hosts


def _lsf_pairs(text):
    words = text.split()
    if len(words) % 2:
        raise ValueError(f"LSB_MCPU_HOSTS must be 'host count' pairs, got {text!r}")
    return [hosts.make_host(name, count, "LSB_MCPU_HOSTS") for name, count in zip(words[::2], words[1::2])]


def _lsf_words(text):
    counts = {}
    for name in text.split():
        counts[name] = counts.get(name, 0) + 1
    return [hosts.make_host(name, str(n), "LSB_HOSTS") for name, n in counts.items()]


def allocation_hosts(environ):
    """The hosts of the PBS or LSF allocation described by `environ`, or None outside one.

    Args:
        environ: the launcher's environment.

    Returns:
        (list of `hosts.Host`, the variable it came from), or (None, None).

    Raises:
        ValueError: the variable is malformed or the file unreadable (the message names it).

    Example:

    >>> allocation_hosts({"LSB_MCPU_HOSTS": "node1 4 node2 4"})
    ([Host(name='node1', slots=4), Host(name='node2', slots=4)], 'LSB_MCPU_HOSTS')
    """
    if environ.get("PBS_NODEFILE"):
        return hosts.read_hostfile(environ["PBS_NODEFILE"]), "PBS_NODEFILE"
    if environ.get("LSB_MCPU_HOSTS", "").strip():
        return hosts.no_duplicates(_lsf_pairs(environ["LSB_MCPU_HOSTS"]), "LSB_MCPU_HOSTS"), "LSB_MCPU_HOSTS"
    if environ.get("LSB_HOSTS", "").strip():
        return _lsf_words(environ["LSB_HOSTS"]), "LSB_HOSTS"
    return None, None

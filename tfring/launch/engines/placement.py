"""What an engine's variables say about one process: its place in the job and how to find rank 0."""

import dataclasses


@dataclasses.dataclass
class Placement:
    """One process's place in a job, as read from the variables of the engine that started it.

    Args:
        engine: which engine's variables were read ("tfring", "openmpi", "slurm", ...).
        rank, size, local_rank, local_size: position in the job and on this host.
        job_key: a text every rank of this job (and no other) reads alike: names the job's
            shared-memory segments (mixed with the secret) and derives a store port.
        store: rank 0's store as (host, port) when the engine says where it is, else None.
        rank0_host: the host rank 0 runs on when the engine says only that (the port is then
            derived from `job_key`), else None. With neither `store` nor `rank0_host` across
            hosts, rank 0 publishes its address (see `address_exchange`).
    """

    engine: str
    rank: int
    size: int
    local_rank: int = 0
    local_size: int = 1
    job_key: str = ""
    store: tuple = None
    rank0_host: str = None


def integer(environ, name, default=None):
    """The whole number in variable `name` (or `default` when it is unset).

    Raises:
        ValueError: the variable is not a whole number; the message names it and its value.
    """
    if name not in environ:
        if default is None:
            raise ValueError(f"{name} is not set")
        return default
    text = environ[name]
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {text!r}") from None


def host_port(text, name):
    """Splits "HOST:PORT" read from variable `name` into (host, port).

    Raises:
        ValueError: it is not of that form; the message names the variable.
    """
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{name} must look like HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)

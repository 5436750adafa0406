"""Which environment variables travel to the ranks on other hosts.

The ranks on another host start in the environment sshd gives them, not the launcher's: tfring
passes on what a training script needs to run the same way there (as `mpirun -x` and horovodrun
do) - every TFRING_* setting, the paths that find the interpreter, packages, libraries and
devices - and whatever `-x NAME[=VALUE]` adds. Everything travels on the ssh channel, not on the
remote command line.
"""

import re

from tfring.launch import cluster

FORWARDED = ("PATH", "PYTHONPATH", "VIRTUAL_ENV", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES")
# Facts about one host: rank 0's host's values would be wrong on the others.
PER_HOST = (cluster.ADVERTISE_HOST, cluster.HOST_ID)
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def parse_exports(specs, environ):
    """Reads `-x NAME` (this environment's value) and `-x NAME=VALUE` options.

    Args:
        specs: the option values, in order.
        environ: the launcher's environment.

    Returns:
        A dict of the variables to set on every rank.

    Raises:
        ValueError: a bad name, or `-x NAME` for a variable that is not set here.

    Example:

    >>> parse_exports(["OMP_NUM_THREADS=2", "HOME"], {"HOME": "/root"})
    {'OMP_NUM_THREADS': '2', 'HOME': '/root'}
    """
    exports = {}
    for spec in specs:
        name, has_value, value = spec.partition("=")
        if not _NAME.match(name):
            raise ValueError(f"-x {spec!r}: {name!r} is not an environment variable name")
        if not has_value:
            if name not in environ:
                raise ValueError(f"-x {name}: {name} is not set here (give it a value: -x {name}=VALUE)")
            value = environ[name]
        exports[name] = value
    return exports


def forwarded(environ, exports):
    """The environment a rank on another host gets on top of its own.

    Args:
        environ: the launcher's environment.
        exports: the `-x` variables (`parse_exports`).

    Returns:
        A dict.
    """
    env = {k: v for k, v in environ.items()
           if (k.startswith("TFRING_") and k not in PER_HOST) or k in FORWARDED}
    env.update(exports)
    return env

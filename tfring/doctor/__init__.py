"""`tfring doctor`: can tfring work here, and if not, what to install or change.

What it looks at, in order (`checks.py`): the versions (Python, TensorFlow, Keras, tfring); the op
library (what it was built for, CPU and GPU kernels) and the compilers that build it; the
transports of this host (shared memory, single-copy reads between processes, TCP interfaces);
the launchers (ssh, mpirun, srun) and the allocation of a scheduler; the job secret. With
`--self-test` it runs a 2-rank job on this host (`selftest.py`): allreduces of every common dtype
checked against NumPy, and the allreduce bandwidth. With `-H` it checks that ssh reaches each host.

Each finding is `ok`, `warn` (works, but something named is missing or slower) or `fail` (tfring
cannot work here until it is fixed; the finding says how). The exit code is 0 when nothing fails.

Example:

    $ tfring doctor --self-test
    $ tfring doctor --json            # for machines: {"ok": ..., "checks": [...]}
"""

"""tfring's test rig: what its tests and benchmarks use, and no part of the tfring wheel.

- `tfring_dev.testing`: run a script as a multi-process job under `tfring run` (`run_job`,
  `run_alone`, `rank_lines`, `QUIET_ENV`...).
- `tfring_dev.warm_job` (with its rank, `tfring_dev.warm_worker`): jobs started once that run many
  test scripts (the `warm` fixture of tests/conftest.py).
- `tfring_dev.emulated_hosts`: several hosts on one machine (network namespaces, an sshd and a
  hostname each, tc shaping) for the multi-host tests and benchmarks. No TensorFlow.
- `tfring_dev.slurm_cluster`: a real SLURM on this machine for the SLURM tests. No TensorFlow.

setup.py does not install it: it is found from a checkout of the repository (pytest puts the
repository root on sys.path; `make env` adds it to the virtualenv with a .pth file, so benchmarks
and every process that virtualenv's Python starts, inside the emulated hosts too, find it).
tfring never imports it (a contract in .importlinter); this file imports nothing, so that
`import tfring_dev.emulated_hosts` loads no TensorFlow.
"""

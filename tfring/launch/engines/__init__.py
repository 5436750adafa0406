"""The engines that can start a tfring job, one module each, and what their variables say.

Each module has `NAME`, `detect(environ)` (are these its variables?) and `read(environ)` (the
process's `placement.Placement`); `tfring.launch.cluster` asks them in order. `slurm_hostlist`
expands SLURM's compressed lists; `address_exchange` lets rank 0 of an MPI job publish its store.
"""

"""Starting a job and finding it again: the `tfring run` launcher and job discovery.

`launcher` starts and supervises the ranks of a job, on this host (`local_rank`) and over ssh on
others (`remote_rank` here, `remote` at the far end), placed by `hosts` (-H, --hostfile), with
their output routed by `output`, the environment they get on other hosts chosen by `forwarding`,
the addresses they advertise by `addresses`, and what each host runs compared by `versions`.
`cluster` is the contract between a launcher (tfring run, mpirun, srun) and a rank: which
variables describe the job. This package never imports TensorFlow (the launcher must start in
milliseconds, before any rank).
"""

"""Starting a job and finding it again: the `tfring run` launcher and job discovery.

`launcher` starts the ranks of a job, on this host (`local_rank`) and over ssh on others
(`remote_rank` here, `remote` at the far end), placed by `hosts` (-H, --hostfile), and
`supervision` watches them and ends the job (`first_failure`: which rank to blame), with
their output routed by `output`, the environment they get on other hosts chosen by `forwarding`,
the addresses they advertise by `addresses`, and what each host runs compared by `versions`.
With no host list, `allocation` reads the hosts of a PBS or LSF job. `cluster` is the contract
between whatever started a rank (tfring run, mpirun, srun, a Kubernetes operator) and the rank:
it asks the `engines`, one module each, which variables describe the job, and lets rank 0 of an
MPI job publish its address. `function_launcher` is `tfring.run(fn)`: a function as a local job. This package never imports TensorFlow (the launcher must start in
milliseconds, before any rank).
"""

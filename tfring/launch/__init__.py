"""Starting a job and finding it again: the `tfring run` launcher and job discovery.

`launcher` starts and supervises the processes of a job on this host; `cluster` is the contract
between a launcher (tfring run, mpirun, srun) and a rank: which variables describe the job. This
package never imports TensorFlow (the launcher must start in milliseconds, before any rank).
"""

"""The environment variables that tell a rank about its job, by who sets them.

The settings (timeouts, transport, ...) live in `tfring.config`'s one table; these are the
job's identity, read by `cluster` and its `engines`, written by `launcher`.
"""

# Set by `tfring run` for each process it starts.
RANK, SIZE = "TFRING_RANK", "TFRING_SIZE"
LOCAL_RANK, LOCAL_SIZE = "TFRING_LOCAL_RANK", "TFRING_LOCAL_SIZE"
STORE_ADDR, SECRET, JOB_ID = "TFRING_STORE_ADDR", "TFRING_SECRET", "TFRING_JOB_ID"
# How many times an elastic job (`tfring run --min-np`) has started again: 0 at its first start.
RESTART = "TFRING_RESTART"
# The same for every start of one elastic job: names the folder on each host its commits are kept in.
ELASTIC_ID = "TFRING_ELASTIC_ID"
# What the launcher writes on a rank's TFRING_LAUNCHER_FD pipe when an elastic job may grow. A rank
# that commits (tfring.elastic) says so on stderr in a line holding GROW_ACK, and the ranks stop
# together at their next commit, exiting with LEFT_AT_COMMIT.
GROW_NOTICE = b"G"
GROW_ACK = b"stopping at the next commit (tfring.elastic)"
LEFT_AT_COMMIT = 75
# The read end of a pipe only `tfring run` writes to: EOF means the launcher is gone.
LAUNCHER_FD = "TFRING_LAUNCHER_FD"
# Settings the launcher sets for ranks (declared in tfring.config; config_test checks the names agree).
ADVERTISE_HOST, HOST_ID, TIMEOUT = "TFRING_HOST", "TFRING_HOST_ID", "TFRING_TIMEOUT"
# Set by the user for jobs started by other engines (mpirun, srun, Kubernetes): the secret, or a file holding it.
SECRET_FILE = "TFRING_SECRET_FILE"
# Where rank 0 of an MPI job across hosts writes its address when mpi4py is not installed.
RENDEZVOUS_FILE = "TFRING_RENDEZVOUS_FILE"

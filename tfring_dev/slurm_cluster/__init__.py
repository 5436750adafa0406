"""A real SLURM on this machine for tests: `SlurmCluster` (one node, or one per emulated host).

Needs root and Debian's `slurmctld slurmd slurm-client munge` (`make test-slurm` installs them).
"""

from tfring_dev.slurm_cluster.cluster import PACKAGES, SlurmCluster, SlurmUnavailable
from tfring_dev.slurm_cluster.leftovers import cleanup_stale, stray_processes

__all__ = ["SlurmCluster", "SlurmUnavailable", "PACKAGES", "cleanup_stale", "stray_processes"]

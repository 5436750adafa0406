"""Ranks started with different settings: every rank, not only rank 0, says which and how."""

import pytest

from tfring_dev.testing import rank_lines
from tfring_dev.testing import run_job

pytestmark = pytest.mark.multiprocess

# As mpirun or srun would start ranks whose environments differ: rank 1 alone gets another
# TFRING_FUSION_THRESHOLD. Each rank prints why init failed and exits 0, so that the launcher
# does not stop a rank before it has printed (what is checked is the message, not the exit).
SCRIPT = r'''
import os
import sys

if os.environ["TFRING_RANK"] == "1":
    os.environ["TFRING_FUSION_THRESHOLD"] = "4096"
import tfring

try:
    tfring.init()
    print("JOINED", file=sys.stderr)
except Exception as e:
    print("INIT FAILED", type(e).__name__, e, file=sys.stderr)
'''


def test_every_rank_names_the_setting_that_differs_and_both_values():
    proc = run_job(2, SCRIPT, env={"TFRING_FUSION_THRESHOLD": "1048576", "TFRING_RENDEZVOUS_TIMEOUT": "30"},
                   timeout=120)
    want = "rank 1 runs with fusion_threshold_bytes=4096 but rank 0 with fusion_threshold_bytes=1048576"
    for rank in range(2):
        failed = [line for line in rank_lines(proc.stderr, rank) if line.startswith("INIT FAILED")]
        assert failed and want in failed[0], (rank, proc.stderr[-3000:])

"""Fixtures shared by tfring's tests."""

import os

import pytest

from tfring_dev.warm_job import WarmJobs


@pytest.fixture(scope="session")
def warm():
    """Warm jobs (tfring_dev/warm_job.py): `warm.run_job(2, script)`, `warm.run_alone(script)` and
    `warm.run_alone_then_jobs(script)` run a script in ranks started once per session, for the
    tests whose scripts need no fresh process. With TESTS_FRESH_JOBS=1 each script gets processes
    of its own instead, to check that no test depends on what an earlier one left behind."""
    jobs = WarmJobs(fresh=os.environ.get("TESTS_FRESH_JOBS") == "1")
    yield jobs
    jobs.close()

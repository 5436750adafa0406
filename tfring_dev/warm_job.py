"""Warm jobs: a job started once that runs many test scripts, so a test pays for its own work only.

A multi-process test spends most of its time starting: every rank imports TensorFlow and the ranks
meet, about 10 s for 2 ranks on a 2-core machine, before the first line of the test's script. A
`WarmJob` starts its ranks once (`tfring_dev.warm_worker`) and then runs each script it is given in
them, one after another, as `__main__`, after `keras.backend.clear_session()`. Horovod's suite gets
the same from running pytest itself under its launcher; tfring's tests keep one pytest process and
start the ranks beside it.

Why not the ranks as threads of one process, as Gloo's tests do: a process holds one tfring
runtime (the op library's), and TensorFlow runs the collective ops on its own thread pool, so an op
cannot tell which of two ranks in the process it belongs to.

What a warm job cannot give a script: a fresh process. Configuration read at start (`TFRING_*`
variables, TensorFlow's threading), warnings printed once per process, a script that must fail or
kill a rank: those tests use `tfring_dev.testing.run_job`. A script that fails ends its warm job
(the next script starts a new one), so a failure never leaks into the next test.

Example (pytest, with the `warm` fixture of tests/conftest.py):

>>> def test_sum(warm):
...     proc = warm.run_job(2, "import tfring; print(tfring.size())")
...     assert rank_lines(proc.stdout, 1) == ["2"]
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

from tfring_dev import testing
from tfring_dev import warm_worker
from tfring_dev.testing import QUIET_ENV

_START_SECONDS = 120  # the ranks' start-up (import, rendezvous) counts against the first script's timeout


class WarmJob:
    """A job of `size` ranks (or, with `size=None`, one plain process outside any job, the
    single-process reference `run_alone` gives) that runs scripts until `close()`.

    Args:
        size: the number of ranks; None for one process with no `TFRING_*` variable.
        env: environment variables for the whole job (read once, at start).
        launcher_args: more `tfring run` options.
    """

    def __init__(self, size, env=None, launcher_args=()):
        self.size, self._env, self._launcher_args = size, dict(env or {}), tuple(launcher_args)
        self._process, self._folder, self._next = None, None, 0

    def run(self, script, env=None, timeout=300):
        """Runs `script` (Python source, dedented) on every rank and waits for all of them.

        Args:
            script: Python source.
            env: variables set while the script runs; not `TFRING_*` (those are read at start).
            timeout: seconds the script (and, the first time, the job's start) may take.

        Returns:
            `subprocess.CompletedProcess`: the largest return code of the ranks, and their output
            as `tfring run --all-output` prints it (each line prefixed "[rank] ") for a job, or
            unprefixed for one process.

        Raises:
            ValueError: `env` names a `TFRING_*` variable.
            subprocess.TimeoutExpired: a rank did not finish within `timeout` (the job is stopped).
        """
        late = sorted(k for k in (env or {}) if k.startswith("TFRING_"))
        if late:
            raise ValueError(f"a warm job reads {', '.join(late)} once, at start: use run_job for these")
        if self._process is None or self._process.poll() is not None:
            self._start()
            timeout += _START_SECONDS
        n, self._next = self._next, self._next + 1
        request = {"script": textwrap.dedent(script), "env": {k: str(v) for k, v in (env or {}).items()}}
        self._write(f"{n}.json", request)
        codes = self._wait(n, timeout)
        proc = subprocess.CompletedProcess(["warm", str(n)], max(codes), *self._outputs(n))
        if proc.returncode != 0:
            self.close()
        return proc

    def close(self):
        """Stops the ranks (asks, then kills after a few seconds) and removes the job's folder."""
        if self._process is not None:
            if self._process.poll() is None:
                self._write(f"{self._next}.json", {"stop": True})
                try:
                    self._process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    _kill(self._process)
            self._process = None
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None

    def _start(self):
        self.close()
        self._folder = tempfile.mkdtemp(prefix="tfring-warm-")  # 0700: no other user reads or plants requests
        self._next = 0
        worker = [sys.executable, "-m", "tfring_dev.warm_worker", self._folder]
        env = dict(os.environ, **QUIET_ENV, **self._env)
        if self.size is None:
            cmd, env = worker, {k: v for k, v in env.items() if not k.startswith("TFRING_")}
        else:
            cmd = [sys.executable, "-m", "tfring", "run", "-np", str(self.size), "--all-output",
                   *self._launcher_args, *worker]
        log = open(os.path.join(self._folder, "job.log"), "w")
        with log:
            self._process = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                             start_new_session=True)

    def _ranks(self):
        return range(self.size or 1)

    def _wait(self, n, timeout):
        deadline = time.monotonic() + timeout
        paths = [os.path.join(self._folder, f"{n}-{r}.json") for r in self._ranks()]
        while not all(os.path.exists(p) for p in paths):
            if self._process.poll() is not None:  # the job ended (a rank failed): its ranks' results are final
                break
            if time.monotonic() > deadline:
                output = self._outputs(n)
                self.close()
                raise subprocess.TimeoutExpired(["warm", str(n)], timeout, *output)
            time.sleep(0.01)
        return [_read_json(p, {"returncode": 1})["returncode"] for p in paths]

    def _outputs(self, n):
        streams = []
        for suffix in (".out", ".err"):
            texts = [(r, _read_text(os.path.join(self._folder, f"{n}-{r}{suffix}"))) for r in self._ranks()]
            if self.size is None:
                streams.append(texts[0][1])
            else:
                streams.append("".join(f"[{r}] {line}\n" for r, text in texts for line in text.splitlines()))
        streams[1] += _read_text(os.path.join(self._folder, "job.log")) if self._process.poll() is not None else ""
        return streams

    def _write(self, name, record):
        warm_worker.write_json_atomically(os.path.join(self._folder, name), record)


class WarmJobs:
    """The warm jobs of a test session, one per job size, started on first use; the same calls as
    `tfring_dev.testing`'s `run_job`, `run_alone` and `run_alone_then_jobs`.

    Args:
        fresh: run every script in processes of its own instead (`tfring_dev.testing`'s calls), to
            check that no test passes only because of what an earlier script left in a warm job.

    Example:

    >>> jobs = WarmJobs()
    >>> jobs.run_job(2, SCRIPT, env={"OUT": str(out)}).returncode
    0
    >>> jobs.close()
    """

    def __init__(self, fresh=False):
        self._jobs, self._fresh = {}, fresh

    def run_job(self, num_processes, script, env=None, timeout=300, pool="ring"):
        """`tfring_dev.testing.run_job` (with `--all-output`) in a warm job of `num_processes` ranks.

        `pool` names a separate set of warm jobs, for scripts that must not share a process with
        another kind (a `RingStrategy` installs its Keras wraps for the life of the process: scripts
        that train without one, as tfring.horovod's do, use `pool="horovod"`).
        """
        if self._fresh:
            return testing.run_job(num_processes, script, env=env, timeout=timeout)
        return self._job(num_processes, pool).run(script, env=env, timeout=timeout)

    def run_alone(self, script, env=None, timeout=300, pool="ring"):
        """`tfring_dev.testing.run_alone` in a warm process outside any job (`pool`: see `run_job`)."""
        if self._fresh:
            return testing.run_alone(script, env=env, timeout=timeout)
        return self._job(None, pool).run(script, env=env, timeout=timeout)

    def run_alone_then_jobs(self, script, env=None, sizes=(2,), timeout=300, pool="ring"):
        """`tfring_dev.testing.run_alone_then_jobs` in warm processes: checks every run succeeded.

        Returns:
            The finished job runs, one per size.
        """
        proc = self.run_alone(script, env=env, timeout=timeout, pool=pool)
        assert proc.returncode == 0, proc.stderr[-3000:]
        jobs = []
        for size in sizes:
            jobs.append(self.run_job(size, script, env=env, timeout=timeout, pool=pool))
            assert jobs[-1].returncode == 0, jobs[-1].stderr[-3000:]
        return jobs

    def close(self):
        """Stops every warm job."""
        for job in self._jobs.values():
            job.close()
        self._jobs.clear()

    def _job(self, size, pool):
        if (size, pool) not in self._jobs:
            self._jobs[(size, pool)] = WarmJob(size)
        return self._jobs[(size, pool)]


def _kill(process):
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(timeout=30)


def _read_text(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def _read_json(path, default):
    try:
        with open(path) as f:
            return json.load(f)
    except (FileNotFoundError, json.JSONDecodeError):
        return default

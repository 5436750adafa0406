"""Helpers for tfring's own tests: run a script as a multi-process job under `tfring run`."""

import os
import subprocess
import sys
import tempfile
import textwrap

# Multi-process tests oversubscribe small machines: one intra-op thread per rank, few inter-op.
QUIET_ENV = {
    "TF_CPP_MIN_LOG_LEVEL": "2",
    "TF_NUM_INTRAOP_THREADS": "1",
    "TF_NUM_INTEROP_THREADS": "2",
    "OMP_NUM_THREADS": "1",
    "PYTHONUNBUFFERED": "1",
}


def run_job(num_processes, script, env=None, timeout=300, all_output=True, launcher_args=()):
    """Runs `script` (Python source) as `num_processes` ranks and returns the finished process.

    Args:
        num_processes: the job size.
        script: Python source; dedented before it is written to a temporary file.
        env: extra environment variables for every rank.
        timeout: seconds before the whole job is killed (the test then fails).
        all_output: pass `--all-output` so every rank's stdout is captured.
        launcher_args: more `tfring run` options.

    Returns:
        `subprocess.CompletedProcess` with `stdout` / `stderr` as text.

    Example:

    >>> run_job(2, "import tfring; print(tfring.size())").stdout
    '[0] 2\\n[1] 2\\n'
    """
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(textwrap.dedent(script))
        path = f.name
    full_env = dict(os.environ)
    full_env.update(QUIET_ENV)
    full_env.update(env or {})
    cmd = [sys.executable, "-m", "tfring", "run", "-np", str(num_processes)]
    cmd += ["--all-output"] if all_output else []
    cmd += list(launcher_args) + [sys.executable, path]
    try:
        return subprocess.run(cmd, env=full_env, capture_output=True, text=True, timeout=timeout)
    finally:
        os.unlink(path)


def run_alone(script, env=None, timeout=300):
    """Runs `script` (Python source) as one plain process, outside any tfring job (no `TFRING_*`
    variable reaches it): the single-process run a job's results are compared with.

    Args:
        script: Python source.
        env: extra environment variables.
        timeout: seconds before the process is killed (the test then fails).

    Returns:
        `subprocess.CompletedProcess` with `stdout` / `stderr` as text.

    Example:

    >>> run_alone("import tfring; print(tfring.size())").stdout
    '1\\n'
    """
    full = dict(os.environ, **QUIET_ENV, **(env or {}))
    full = {k: v for k, v in full.items() if not k.startswith("TFRING_")}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=full, capture_output=True,
                          text=True, timeout=timeout)


def run_alone_then_jobs(script, env=None, sizes=(2,), timeout=300):
    """Runs `script` alone (`run_alone`), then as a job of each of `sizes` ranks, and checks
    that every run succeeded: the runs an "equals one process" test compares.

    Args:
        script: Python source; it writes its results where `env` tells it to.
        env: extra environment variables for every run.
        sizes: the job sizes to run, in order.
        timeout: seconds each run may take.

    Returns:
        The finished job processes, one per size.

    Example:

    >>> run_alone_then_jobs(SCRIPT, env={"OUT": str(out)})
    """
    proc = run_alone(script, env=env, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = []
    for size in sizes:
        jobs.append(run_job(size, script, env=env, timeout=timeout))
        assert jobs[-1].returncode == 0, jobs[-1].stderr[-3000:]
    return jobs


def assert_ranks_equal_one_process(folder, name, size, tol=1e-5):
    """Checks `<name>-<r>of<size>.npy` (each rank's weights) against `<name>-0of1.npy` (one
    process's): finite, bit-identical across ranks, within `tol` of one process.

    Args:
        folder: a `pathlib.Path` holding the files.
        name: the case's name.
        size: the job size.
        tol: the largest absolute difference from one process.

    Example:

    >>> assert_ranks_equal_one_process(results, "k4", 2)
    """
    import numpy as np

    one = np.load(folder / f"{name}-0of1.npy")
    ranks = [np.load(folder / f"{name}-{r}of{size}.npy") for r in range(size)]
    assert np.all(np.isfinite(ranks[0])), "a rank without rows added NaN"
    for w in ranks[1:]:
        assert np.array_equal(ranks[0], w), "ranks' weights differ"
    assert np.max(np.abs(ranks[0] - one)) <= tol, np.max(np.abs(ranks[0] - one))


def rank_lines(output, rank):
    """The lines of `output` printed by `rank`, without the `[rank] ` prefix."""
    prefix = f"[{rank}] "
    return [line[len(prefix):] for line in output.splitlines() if line.startswith(prefix)]


def path_without(folder, programs):
    """A PATH on which `programs` are not found but everything else on today's PATH is: a folder
    of links to every other executable, for tests of what happens where a program is missing.

    Args:
        folder: an empty folder to fill with the links (a test's tmp_path).
        programs: names to hide, e.g. ("g++", "ssh").

    Returns:
        str, the PATH value (the one folder).

    Example:

    >>> env = dict(os.environ, PATH=path_without(tmp_path, ["g++"]))
    """
    os.makedirs(folder, exist_ok=True)
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        if not os.path.isdir(directory):
            continue
        for name in os.listdir(directory):
            target, link = os.path.join(directory, name), os.path.join(folder, name)
            if name in programs or os.path.lexists(link) or not os.access(target, os.X_OK):
                continue
            os.symlink(target, link)
    return str(folder)
